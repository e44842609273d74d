// Q6_K (ggml's): super-blocks of 256 values in 210 bytes: 128 bytes of low four bits, 64 of
// bits 4-5, sixteen signed 8-bit scales, d as f16. Each half of 128 values has 64 low-bit
// bytes (value l + 32k of the half, k < 4: nibble k / 2 of byte 32(k % 2) + l) and 32 high-bit
// bytes (bits 2k of byte l). value = (d * scale) * (q - 32), a scale per 16 values, so a
// kernel block (kquant.glsl) has two groups of 16 with (d * scale, 0) each. Super-blocks are
// only 2-byte aligned.
// Interface: see f32.glsl. Mirrors quant/src/formats/q6_k.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define HAS_GROUPS
const uint GROUP = 16;
#define BLOCK_WORDS 9
#include "quant/kquant.glsl"

// Words 0-7 the levels q (0..63), 8 d (bits 0-15) and the two groups' scales (bytes 2, 3).
void block_load(uint b, out Block blk) {
    uint base = 210u * (b >> 3);
    uint s = b & 7u;
    uint half_ = s >> 2;
    uint k = s & 3u;
    uint ql[8];
    uint qh[8];
    kq_words8_at_byte(base + 64u * half_ + 32u * (k & 1u), ql);
    kq_words8_at_byte(base + 128u + 32u * half_, qh);
    uint nibble = 4u * (k >> 1);
    uint pair = 2u * k;
    for (uint i = 0; i < 8; ++i) {
        blk[i] = ((ql[i] >> nibble) & 0x0F0F0F0Fu) | (((qh[i] >> pair) & 0x03030303u) << 4);
    }
    blk[8] = kq_half(base + 208u) | (kq_half(base + 192u + 2u * s) << 16);
}

vec2 group_dm(Block blk, uint g) {
    float d = unpackHalf2x16(blk[8]).x;
    int sc = int(blk[8] << (8u - 8u * g)) >> 24;   // byte 2 + g, sign-extended
    return vec2(d * float(sc), 0.0);
}

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    kq_levels8(blk[2 * j], blk[2 * j + 1], lo, hi);
    lo -= 32.0;
    hi -= 32.0;
}

// The levels as signed bytes: block_load's bytes less 32 (ilevels.glsl).
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    lo = bytes_minus(blk[2 * j], 32u);
    hi = bytes_minus(blk[2 * j + 1], 32u);
}

#include "quant/block.glsl"
