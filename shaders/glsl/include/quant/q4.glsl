// Q4: blocks of 32 values in 20 bytes (5 words): d and m as f16 in word 0, then 16 bytes of
// nibbles; value i < 16 is the low nibble of byte i, value i + 16 the high nibble (GGUF Q4_1).
// Interface: see f32.glsl. Mirrors quant/src/formats/q4.rs.
#include "quant/unpack.glsl"
layout(binding = W_BINDING) readonly buffer Weights { uint w[]; };

const uint QK = 32;
const bool HAS_BASE = true;
#define BLOCK_WORDS 5
#define Block uint[BLOCK_WORDS]

#ifdef WIDE_LOADS
// Three 8-byte loads cover the block's five words (a CPU device pays per load and lane, not
// per byte). Buffers are whole 8-byte words, so the last block's third load stays inside.
#extension GL_ARB_gpu_shader_int64 : require
layout(binding = W_BINDING) readonly buffer Weights64 { uint64_t w64[]; };

void block_load(uint b, out Block blk) {
    uint at = BLOCK_WORDS * b;
    uvec2 a0 = unpackUint2x32(w64[at / 2]);
    uvec2 a1 = unpackUint2x32(w64[at / 2 + 1]);
    uvec2 a2 = unpackUint2x32(w64[at / 2 + 2]);
    bool odd = (at & 1u) != 0u;
    blk[0] = odd ? a0.y : a0.x;
    blk[1] = odd ? a1.x : a0.y;
    blk[2] = odd ? a1.y : a1.x;
    blk[3] = odd ? a2.x : a1.y;
    blk[4] = odd ? a2.y : a2.x;
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

// Chunk j: bytes 8(j % 2) .. +8, low nibbles for j < 2, high nibbles after.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 1 + 2 * (j & 1);
    uint shift = 4 * (j >> 1);
    lo = vec4(bytes_field(blk[at], shift, 0xFu));
    hi = vec4(bytes_field(blk[at + 1], shift, 0xFu));
}

#include "quant/block.glsl"
