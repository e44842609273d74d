// Q5_K (ggml's): super-blocks of 256 values in 176 bytes (44 words): d and dmin as f16 in
// word 0, words 1-3 the scales and mins as Q4_K's, words 4-11 the fifth bits (value i at bit
// i / 32 of byte i % 32), words 12-43 the low four bits as Q4_K's levels.
// value = (d * scale) * q - (dmin * min); one kernel block is one sub-block, as in q4_k.glsl.
// Interface: see f32.glsl. Mirrors quant/src/formats/q5_k.rs.
const uint QK = 32;
const bool HAS_BASE = true;
#define BLOCK_WORDS 10
#include "quant/kquant.glsl"

// Words 0-7 the levels, 8 d and dmin, 9 the sub-block's scale and min (bits 0-5, 8-13).
void block_load(uint b, out Block blk) {
    uint base = 44u * (b >> 3);
    uint s = b & 7u;
    uint q[8];
    uint h[8];
    kq_words8(base + 12u + 8u * (s >> 1), q);
    kq_words8(base + 4u, h);
    uint shift = 4u * (s & 1u);
    for (uint i = 0; i < 8; ++i) {
        blk[i] = ((q[i] >> shift) & 0x0F0F0F0Fu) | (((h[i] >> s) & 0x01010101u) << 4);
    }
    blk[8] = kq_word(base);
    uvec2 sm = kq_scale_min_k4(s, kq_word(base + 1u), kq_word(base + 2u), kq_word(base + 3u));
    blk[9] = sm.x | (sm.y << 8);
}

vec2 block_dm(Block blk) {
    vec2 dmin = unpackHalf2x16(blk[8]);
    float sc = float(blk[9] & 0xFFu);
    float m = float(blk[9] >> 8);
    return vec2(dmin.x * sc, -(dmin.y * m));
}

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    kq_levels8(blk[2 * j], blk[2 * j + 1], lo, hi);
}

// The levels as bytes, as block_load left them (ilevels.glsl).
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    lo = blk[2 * j];
    hi = blk[2 * j + 1];
}

#include "quant/block.glsl"
