// IQ4_NL: blocks of 32 values in 18 bytes: d as f16, then 16 bytes of 4-bit indices packed as
// Q4_0's (value i < 16 the low nibble of byte i, value i + 16 the high); value = d * LEVELS[q]
// with ggml's non-linear table of 16 levels (GGUF IQ4_NL). Levels come back as the table's
// integers, so dequant8's q * d rounds exactly as ggml's d * level. Blocks are only 2-byte
// aligned: loaded as Q4_0's are.
// Interface: see f32.glsl. Mirrors quant/src/formats/iq4_nl.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 6
#define LAYOUT_BYTES 18
#include "quant/layout.glsl"

const float IQ4NL_LEVELS[16] = float[16](
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

vec2 block_dm(Block blk) {
    return vec2(unpackHalf2x16(block_bytes4(blk, 0)).x, 0.0);
}

vec4 iq4nl_levels4(uvec4 q) {
    return vec4(IQ4NL_LEVELS[q.x], IQ4NL_LEVELS[q.y], IQ4NL_LEVELS[q.z], IQ4NL_LEVELS[q.w]);
}

// Chunk j: bytes 2 + 8(j % 2) .. +8, low nibbles for j < 2, high nibbles after.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 2 + 8 * (j & 1);
    uint shift = 4 * (j >> 1);
    lo = iq4nl_levels4(bytes_field(block_bytes4(blk, at), shift, 0xFu));
    hi = iq4nl_levels4(bytes_field(block_bytes4(blk, at + 4), shift, 0xFu));
}

#include "quant/block.glsl"
