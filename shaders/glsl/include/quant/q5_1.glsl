// Q5_1: blocks of 32 values in 24 bytes (6 words): d and m as f16 in word 0, a 32-bit mask
// in word 1 whose bit i is bit 4 of value i, then 16 bytes of the low four bits (value i < 16
// in the low nibble of byte i, i + 16 in the high nibble); value = q * d + m (GGUF Q5_1).
// Interface: see f32.glsl. Mirrors quant/src/formats/q5_1.rs.
const uint QK = 32;
const bool HAS_BASE = true;
#define BLOCK_WORDS 6
#define LAYOUT_WORDS
#define DM_HALVES
#include "quant/layout.glsl"

// Chunk j: nibbles from words 2 + 2(j % 2) and the next (low for j < 2, high after), fifth
// bits from byte j of the mask.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 2 + 2 * (j & 1);
    uint shift = 4 * (j >> 1);
    uint high = blk[1] >> (8 * j);
    uvec4 high_lo = (uvec4(high, high >> 1, high >> 2, high >> 3) & 1u) << 4;
    uvec4 high_hi = (uvec4(high >> 4, high >> 5, high >> 6, high >> 7) & 1u) << 4;
    lo = vec4(bytes_field(blk[at], shift, 0xFu) | high_lo);
    hi = vec4(bytes_field(blk[at + 1], shift, 0xFu) | high_hi);
}

// The same levels as bytes (ilevels.glsl).
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    uint at = 2 + 2 * (j & 1);
    uint shift = 4 * (j >> 1);
    uint high = blk[1] >> (8 * j);
    lo = ((blk[at] >> shift) & 0x0F0F0F0Fu) | nibble_high_bits(high);
    hi = ((blk[at + 1] >> shift) & 0x0F0F0F0Fu) | nibble_high_bits(high >> 4);
}

#include "quant/block.glsl"
