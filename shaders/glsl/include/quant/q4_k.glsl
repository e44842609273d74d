// Q4_K (ggml's): super-blocks of 256 values in 144 bytes (36 words): d and dmin as f16 in
// word 0, words 1-3 eight 6-bit scales and mins (kq_scale_min_k4), words 4-35 the levels,
// two per byte: each 32 bytes hold sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles).
// value = (d * scale) * q - (dmin * min). One kernel block is one sub-block (kquant.glsl),
// with one (d, m) pair: (d * scale, -(dmin * min)), so q * d + m rounds as ggml's order does.
// Interface: see f32.glsl. Mirrors quant/src/formats/q4_k.rs.
const uint QK = 32;
const bool HAS_BASE = true;
#define BLOCK_WORDS 10
#include "quant/kquant.glsl"

// Words 0-7 the levels, 8 d and dmin, 9 the sub-block's scale and min (bits 0-5, 8-13).
void block_load(uint b, out Block blk) {
    uint base = 36u * (b >> 3);
    uint s = b & 7u;
    uint q[8];
    kq_words8(base + 4u + 8u * (s >> 1), q);
    uint shift = 4u * (s & 1u);
    for (uint i = 0; i < 8; ++i) {
        blk[i] = (q[i] >> shift) & 0x0F0F0F0Fu;
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
