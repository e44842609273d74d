// MXFP4 (GGUF's): blocks of 32 values in 17 bytes: the scale's exponent e (e8m0, biased by
// 127), then 16 bytes of 4-bit e2m1 codes packed as Q4_0's (value i < 16 the low nibble of
// byte i, value i + 16 the high). value = LEVELS[q] * 2^(e - 128), the levels the e2m1
// values doubled (ggml's kvalues_mxfp4), so q * d rounds as ggml's level * d. Blocks are only
// byte-aligned.
// Interface: see f32.glsl. Mirrors quant/src/formats/mxfp4.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 6
#define LAYOUT_BYTES 17
#define LAYOUT_ODD_BYTES
#include "quant/layout.glsl"

const float MXFP4_LEVELS[16] = float[16](
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);

vec4 mxfp4_levels4(uvec4 q) {
    return vec4(MXFP4_LEVELS[q.x], MXFP4_LEVELS[q.y], MXFP4_LEVELS[q.z], MXFP4_LEVELS[q.w]);
}

// Half of 2^(e - 127) (ggml's ggml_e8m0_to_fp32_half), subnormal for e < 2.
vec2 block_dm(Block blk) {
    uint e = block_bytes4(blk, 0) & 0xFFu;
    uint bits = e < 2u ? (0x00200000u << e) : ((e - 1u) << 23);
    return vec2(uintBitsToFloat(bits), 0.0);
}

// Chunk j: bytes 1 + 8(j % 2) .. +8, low nibbles for j < 2, high nibbles after.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 1u + 8u * (j & 1u);
    uint shift = 4u * (j >> 1);
    lo = mxfp4_levels4(bytes_field(block_bytes4(blk, at), shift, 0xFu));
    hi = mxfp4_levels4(bytes_field(block_bytes4(blk, at + 4u), shift, 0xFu));
}

#include "quant/block.glsl"
