// Q2: blocks of 32 values in 12 bytes (3 words): d and m as f16 in word 0, then 8 bytes of
// 2-bit levels; value i is bits 2(i / 8) .. +2 of byte i % 8.
// Interface: see f32.glsl. Mirrors quant/src/formats/q2.rs.
#include "quant/unpack.glsl"
layout(binding = W_BINDING) readonly buffer Weights { uint w[]; };

const uint QK = 32;
const bool HAS_BASE = true;
#define BLOCK_WORDS 3
#define Block uint[BLOCK_WORDS]

#ifdef WIDE_LOADS
#include "quant/wide.glsl"

void block_load(uint b, out Block blk) {
    WIDE_WORDS(BLOCK_WORDS * b, BLOCK_WORDS, blk)
}
#else
void block_load(uint b, out Block blk) {
    for (uint i = 0; i < BLOCK_WORDS; ++i) {
        blk[i] = w[BLOCK_WORDS * b + i];
    }
}
#endif

vec2 block_dm(Block blk) {
    return unpackHalf2x16(blk[0]);
}

// Chunk j is the bit pair 2j of all 8 bytes.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    lo = vec4(bytes_field(blk[1], 2 * j, 3u));
    hi = vec4(bytes_field(blk[2], 2 * j, 3u));
}

#include "quant/block.glsl"
