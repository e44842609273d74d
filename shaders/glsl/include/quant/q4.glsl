// Q4: blocks of 32 values in 20 bytes (5 words): d and m as f16 in word 0, then 16 bytes of
// nibbles; value i < 16 is the low nibble of byte i, value i + 16 the high nibble (GGUF Q4_1).
// Interface: see f32.glsl. Mirrors quant/src/formats/q4.rs.
const uint QK = 32;
const bool HAS_BASE = true;
#define BLOCK_WORDS 5
#define LAYOUT_WORDS
#define DM_HALVES
#include "quant/layout.glsl"

// Chunk j: bytes 8(j % 2) .. +8, low nibbles for j < 2, high nibbles after.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 1 + 2 * (j & 1);
    uint shift = 4 * (j >> 1);
    lo = vec4(bytes_field(blk[at], shift, 0xFu));
    hi = vec4(bytes_field(blk[at + 1], shift, 0xFu));
}

// The same levels as bytes (ilevels.glsl).
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    uint at = 1 + 2 * (j & 1);
    uint shift = 4 * (j >> 1);
    lo = (blk[at] >> shift) & 0x0F0F0F0Fu;
    hi = (blk[at + 1] >> shift) & 0x0F0F0F0Fu;
}

#include "quant/block.glsl"
