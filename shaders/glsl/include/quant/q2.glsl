// Q2: blocks of 32 values in 12 bytes (3 words): d and m as f16 in word 0, then 8 bytes of
// 2-bit levels; value i is bits 2(i / 8) .. +2 of byte i % 8.
// Interface: see f32.glsl. Mirrors quant/src/formats/q2.rs.
const uint QK = 32;
const bool HAS_BASE = true;
#define BLOCK_WORDS 3
#define LAYOUT_WORDS
#define DM_HALVES
#include "quant/layout.glsl"

// Chunk j is the bit pair 2j of all 8 bytes.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    lo = vec4(bytes_field(blk[1], 2 * j, 3u));
    hi = vec4(bytes_field(blk[2], 2 * j, 3u));
}

#include "quant/block.glsl"
