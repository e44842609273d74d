// Q5: blocks of 64 values in 44 bytes (11 words): d and m as f16 in word 0; words 1-8 the low
// four bits as Q4B64 (value i < 32 in the low nibble of byte i, i + 32 in the high nibble);
// words 9-10 a 64-bit plane whose bit i is bit 4 of value i.
// Interface: see f32.glsl. Mirrors quant/src/formats/q5.rs.
const uint QK = 64;
const bool HAS_BASE = true;
#define BLOCK_WORDS 11
#define LAYOUT_WORDS
#define DM_HALVES
#include "quant/layout.glsl"

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 1 + 2 * (j & 3);
    uint shift = 4 * (j >> 2);
    uint high = blk[9 + (j >> 2)] >> (8 * (j & 3));
    uvec4 high_lo = (uvec4(high, high >> 1, high >> 2, high >> 3) & 1u) << 4;
    uvec4 high_hi = (uvec4(high >> 4, high >> 5, high >> 6, high >> 7) & 1u) << 4;
    lo = vec4(bytes_field(blk[at], shift, 0xFu) | high_lo);
    hi = vec4(bytes_field(blk[at + 1], shift, 0xFu) | high_hi);
}

#include "quant/block.glsl"
