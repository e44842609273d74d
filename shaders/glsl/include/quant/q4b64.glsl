// Q4B64: blocks of 64 values in 36 bytes (9 words): d and m as f16 in word 0, then 32 bytes of
// nibbles; value i < 32 is the low nibble of byte i, value i + 32 the high nibble.
// Interface: see f32.glsl. Mirrors quant/src/formats/q4b64.rs.
const uint QK = 64;
const bool HAS_BASE = true;
#define BLOCK_WORDS 9
#define LAYOUT_WORDS
#define DM_HALVES
#include "quant/layout.glsl"

// Chunk j: bytes 8(j % 4) .. +8, low nibbles for j < 4, high nibbles after.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 1 + 2 * (j & 3);
    uint shift = 4 * (j >> 2);
    lo = vec4(bytes_field(blk[at], shift, 0xFu));
    hi = vec4(bytes_field(blk[at + 1], shift, 0xFu));
}

#include "quant/block.glsl"
