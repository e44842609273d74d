// What the k-quants' includes (q2_k.glsl .. q6_k.glsl) share. Mirrors
// quant/src/formats/kquant.rs.
//
// A k-quant super-block holds 256 values; the kernels see it as 8 kernel blocks of 32 values
// (QK = 32), so kernel block b is sub-block b % 8 of super-block b / 8, and rows of whole
// super-blocks are rows of whole kernel blocks. block_load(b) reads the super-block's header
// (re-read by each of its 8 kernel blocks; it stays in cache) and the bytes of its 32 values,
// and unpacks each value's level into a byte of words 0..7 of `Block` (value i in byte i), so
// block_levels8 only reads bytes; words 8 and up hold what the scales need. The including
// format defines BLOCK_WORDS and block_load; layout.glsl declares `w` (uint[]) and `Block`.
#ifndef QUANT_KQUANT
#define QUANT_KQUANT
#include "quant/layout.glsl"

// Weight word i.
uint kq_word(uint i) {
#ifdef WIDE_LOADS
    return WORDS32_AT(W_ADDR, w, i);
#else
    return w[i];
#endif
}

// The 8 words from word `at` on.
void kq_words8(uint at, out uint o[8]) {
#ifdef WIDE_LOADS
    WIDE_WORDS(at, 8, o)
#else
    for (uint i = 0; i < 8; ++i) {
        o[i] = w[at + i];
    }
#endif
}

// The 8 words from byte `byte` on, a multiple of 2: super-blocks of 110 (Q3_K) or 210 (Q6_K)
// bytes leave every other one 2-byte aligned, so 9 words are read and shifted down 16 bits.
void kq_words8_at_byte(uint byte, out uint o[8]) {
    uint raw[9];
#ifdef WIDE_LOADS
    WIDE_WORDS(byte >> 2, 9, raw)
#else
    for (uint i = 0; i < 9; ++i) {
        raw[i] = w[(byte >> 2) + i];
    }
#endif
    bool half_in = (byte & 2u) != 0u;
    for (uint i = 0; i < 8; ++i) {
        o[i] = half_in ? (raw[i] >> 16) | (raw[i + 1] << 16) : raw[i];
    }
}

// The 16 bits at byte `byte`, a multiple of 2.
uint kq_half(uint byte) {
    return (kq_word(byte >> 2) >> ((byte & 2u) * 8u)) & 0xFFFFu;
}

// Byte i (0..12) of the 12 bytes in words w0, w1, w2.
uint kq_byte12(uint w0, uint w1, uint w2, uint i) {
    uint word = i < 4u ? w0 : (i < 8u ? w1 : w2);
    return (word >> (8u * (i & 3u))) & 0xFFu;
}

// The 6-bit scale (x) and min (y) of sub-block s (0..8) from the 12 bytes Q4_K and Q5_K
// pack them in (ggml's get_scale_min_k4), given as three words.
uvec2 kq_scale_min_k4(uint s, uint w0, uint w1, uint w2) {
    uint sh = 8u * (s & 3u);
    uint lo = (w0 >> sh) & 0xFFu;   // byte s % 4
    uint mid = (w1 >> sh) & 0xFFu;  // byte s % 4 + 4
    uint hi = (w2 >> sh) & 0xFFu;   // byte s % 4 + 8
    if (s < 4u) {
        return uvec2(lo & 63u, mid & 63u);
    }
    return uvec2((hi & 0xFu) | ((lo >> 6) << 4), (hi >> 4) | ((mid >> 6) << 4));
}

// The levels of values 8j .. 8j + 8 of a kernel block, unpacked into bytes by block_load.
void kq_levels8(uint lo_word, uint hi_word, out vec4 lo, out vec4 hi) {
    lo = vec4(bytes_field(lo_word, 0u, 0xFFu));
    hi = vec4(bytes_field(hi_word, 0u, 0xFFu));
}
#endif
