// F16: IEEE halves, two per word (element 2i in the low half of word i), blocks of 32.
// Interface: see f32.glsl. Mirrors quant/src/formats/f16.rs.
layout(binding = W_BINDING) readonly buffer Weights { uvec4 w[]; };

const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 16
#define Block uint[BLOCK_WORDS]

#ifdef WIDE_LOADS
#include "quant/wide.glsl"

void block_load(uint b, out Block blk) {
    WIDE_UVEC4S(4 * b, 4, blk)
}
#else
void block_load(uint b, out Block blk) {
    for (uint i = 0; i < 4; ++i) {
        uvec4 v = w[4 * b + i];
        blk[4 * i] = v.x;
        blk[4 * i + 1] = v.y;
        blk[4 * i + 2] = v.z;
        blk[4 * i + 3] = v.w;
    }
}
#endif

vec2 block_dm(Block blk) {
    return vec2(1.0, 0.0);
}

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    lo = vec4(unpackHalf2x16(blk[4 * j]), unpackHalf2x16(blk[4 * j + 1]));
    hi = vec4(unpackHalf2x16(blk[4 * j + 2]), unpackHalf2x16(blk[4 * j + 3]));
}

#include "quant/block.glsl"
