// F16: IEEE halves, two per word (element 2i in the low half of word i), blocks of 32.
// Interface: see f32.glsl. Mirrors quant/src/formats/f16.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 16
#define LAYOUT_UVEC4S
#define PLAIN_VALUES
#include "quant/layout.glsl"

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    lo = vec4(unpackHalf2x16(blk[4 * j]), unpackHalf2x16(blk[4 * j + 1]));
    hi = vec4(unpackHalf2x16(blk[4 * j + 2]), unpackHalf2x16(blk[4 * j + 3]));
}

#include "quant/block.glsl"
