// Q3: blocks of 32 values in 16 bytes (4 words): d and m as f16 in word 0; 8 bytes holding
// the low two bits of value i at bits 2(i / 8) .. +2 of byte i % 8 (as Q2); then one word
// whose bit i is bit 2 of value i.
// Interface: see f32.glsl. Mirrors quant/src/formats/q3.rs.
const uint QK = 32;
const bool HAS_BASE = true;
#define BLOCK_WORDS 4
#define LAYOUT_UVEC4S
#define DM_HALVES
#include "quant/layout.glsl"

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint high = blk[3] >> (8 * j);
    uvec4 high_lo = (uvec4(high, high >> 1, high >> 2, high >> 3) & 1u) << 2;
    uvec4 high_hi = (uvec4(high >> 4, high >> 5, high >> 6, high >> 7) & 1u) << 2;
    lo = vec4(bytes_field(blk[1], 2 * j, 3u) | high_lo);
    hi = vec4(bytes_field(blk[2], 2 * j, 3u) | high_hi);
}

#include "quant/block.glsl"
