// Q6: blocks of 64 values in 52 bytes (13 words): d and m as f16 in word 0; words 1-8 the low
// four bits as Q4B64; words 9-12 16 bytes holding bits 4-5 of value i at bits 2(i / 16) .. +2
// of byte i % 16.
// Interface: see f32.glsl. Mirrors quant/src/formats/q6.rs.
const uint QK = 64;
const bool HAS_BASE = true;
#define BLOCK_WORDS 13
#define LAYOUT_WORDS
#define DM_HALVES
#include "quant/layout.glsl"

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 1 + 2 * (j & 3);
    uint shift = 4 * (j >> 2);
    uint plane = 9 + 2 * (j & 1);
    uint high_shift = 2 * (j >> 1);
    lo = vec4(bytes_field(blk[at], shift, 0xFu) | (bytes_field(blk[plane], high_shift, 3u) << 4));
    hi = vec4(bytes_field(blk[at + 1], shift, 0xFu) | (bytes_field(blk[plane + 1], high_shift, 3u) << 4));
}

#include "quant/block.glsl"
