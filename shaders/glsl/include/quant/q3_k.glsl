// Q3_K (ggml's): super-blocks of 256 values in 110 bytes: 32 bytes of high bits (value i at
// bit i / 32 of byte i % 32), 64 of low two bits (value i in byte 32(i / 128) + i % 32 at bit
// 2(i % 128 / 32)), sixteen 6-bit scales in 12 bytes (low four bits in the nibbles of bytes
// 0-7, high two in bytes 8-11), d as f16. value = (d * (scale - 32)) * (q - 4) with q the
// 3-bit level, a scale per 16 values, so a kernel block (kquant.glsl) has two groups of 16
// with (d * (scale - 32), 0) each. Super-blocks are only 2-byte aligned.
// Interface: see f32.glsl. Mirrors quant/src/formats/q3_k.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define HAS_GROUPS
const uint GROUP = 16;
#define BLOCK_WORDS 9
#include "quant/kquant.glsl"

// The 6-bit scale of group t (0..16), offset by 32 as stored, from the 12 scale bytes.
uint q3k_scale(uint w0, uint w1, uint w2, uint t) {
    uint packed_ = kq_byte12(w0, w1, w2, t & 7u);
    uint low = t < 8u ? packed_ & 0xFu : packed_ >> 4;
    uint high = (kq_byte12(w0, w1, w2, 8u + (t & 3u)) >> (2u * (t >> 2))) & 3u;
    return low | (high << 4);
}

// Words 0-7 the levels q (0..7), 8 d (bits 0-15) and the two groups' stored scales (bits
// 16-21, 24-29).
void block_load(uint b, out Block blk) {
    uint base = 110u * (b >> 3);
    uint s = b & 7u;
    uint hm[8];
    uint qs[8];
    kq_words8_at_byte(base, hm);
    kq_words8_at_byte(base + 32u + 32u * (s >> 2), qs);
    uint shift = 2u * (s & 3u);
    for (uint i = 0; i < 8; ++i) {
        blk[i] = ((qs[i] >> shift) & 0x03030303u) | (((hm[i] >> s) & 0x01010101u) << 2);
    }
    uint w0 = kq_half(base + 96u) | (kq_half(base + 98u) << 16);
    uint w1 = kq_half(base + 100u) | (kq_half(base + 102u) << 16);
    uint w2 = kq_half(base + 104u) | (kq_half(base + 106u) << 16);
    blk[8] = kq_half(base + 108u) | (q3k_scale(w0, w1, w2, 2u * s) << 16)
        | (q3k_scale(w0, w1, w2, 2u * s + 1u) << 24);
}

vec2 group_dm(Block blk, uint g) {
    float d = unpackHalf2x16(blk[8]).x;
    int sc = int((blk[8] >> (16u + 8u * g)) & 63u) - 32;
    return vec2(d * float(sc), 0.0);
}

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    kq_levels8(blk[2 * j], blk[2 * j + 1], lo, hi);
    lo -= 4.0;
    hi -= 4.0;
}

// The levels as signed bytes: block_load's bytes less 4 (ilevels.glsl).
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    lo = bytes_minus(blk[2 * j], 4u);
    hi = bytes_minus(blk[2 * j + 1], 4u);
}

#include "quant/block.glsl"
