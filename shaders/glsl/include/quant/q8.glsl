// Q8: blocks of 32 values in 34 bytes: d as f16, then 32 signed bytes; value = q * d
// (GGUF Q8_0). Blocks are only 2-byte aligned: a block is loaded as the 9 words that cover
// it, and word 9 of `Block` records whether it starts halfway into the first (then every
// field is shifted down 16 bits).
// Interface: see f32.glsl. Mirrors quant/src/formats/q8.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 10
#define LAYOUT_BYTES 34
#include "quant/layout.glsl"

vec2 block_dm(Block blk) {
    return vec2(unpackHalf2x16(block_word(blk, 0)).x, 0.0);
}

// The signed bytes of a word, as floats.
vec4 signed_bytes(uint v) {
    ivec4 s = ivec4(uvec4(v << 24, v << 16, v << 8, v)) >> 24;
    return vec4(s);
}

// Chunk j is bytes 2 + 8j .. +8 of the block: the high half of word 2j, word 2j + 1 and the
// low half of word 2j + 2. The bytes are the levels as signed bytes already.
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    uint a = block_word(blk, 2 * j);
    uint c = block_word(blk, 2 * j + 1);
    uint e = block_word(blk, 2 * j + 2);
    lo = (a >> 16) | (c << 16);
    hi = (c >> 16) | (e << 16);
}

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint a;
    uint b;
    block_ilevels8(blk, j, a, b);
    lo = signed_bytes(a);
    hi = signed_bytes(b);
}

#include "quant/block.glsl"
