// What the lattice i-quants' includes (iq1_s.glsl .. iq3_s.glsl) share. Their super-blocks of
// 256 values are seen as 8 kernel blocks of 32 (as the k-quants', kquant.glsl). block_load
// looks each group's grid row up (quant/grids/<grid>.glsl), applies its signs and writes the
// 32 levels as signed bytes into words 0..7 of `Block` (value i in byte i), and the scale of
// the 32 (or of each 16, with LATTICE_GROUP16) as f32 bits into word 8 (and 9). Levels times
// scale is the value bit for bit as quant/src/formats/iq/iq*.rs's `levels` give it. The including
// format defines BLOCK_WORDS (9, or 10 with LATTICE_GROUP16) and block_load.
#ifndef QUANT_LATTICE
#define QUANT_LATTICE
const uint QK = 32;
const bool HAS_BASE = false;
#ifdef LATTICE_GROUP16
#define HAS_GROUPS
const uint GROUP = 16;
#endif
#include "quant/kquant.glsl"

// Byte `byte` of the weights.
uint lat_byte(uint byte) {
    return (kq_word(byte >> 2) >> (8u * (byte & 3u))) & 0xFFu;
}

// The 32 bits at byte `byte`, a multiple of 2.
uint lat_u32(uint byte) {
    return kq_half(byte) | (kq_half(byte + 2u) << 16);
}

// ggml's ksigns_iq2xs: 7 stored sign bits and an eighth that makes the count of set bits even.
uint lat_signs7(uint s) {
    return s | ((uint(bitCount(s)) & 1u) << 7);
}

// The four levels v as signed bytes of a word, each negated where its bit of `signs` (lowest
// first) is set.
uint lat_signed4(ivec4 v, uint signs) {
    ivec4 neg = ivec4((uvec4(signs) >> uvec4(0u, 1u, 2u, 3u)) & 1u);
    uvec4 b = uvec4(v * (1 - 2 * neg)) & 0xFFu;
    return b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
}

// The four signed bytes of a word, as floats.
vec4 lat_bytes4(uint word) {
    return vec4(ivec4(uvec4(word) << uvec4(24u, 16u, 8u, 0u)) >> 24);
}

#ifdef LATTICE_GROUP16
vec2 group_dm(Block blk, uint g) {
    return vec2(uintBitsToFloat(blk[8u + g]), 0.0);
}
#else
vec2 block_dm(Block blk) {
    return vec2(uintBitsToFloat(blk[8]), 0.0);
}
#endif

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    lo = lat_bytes4(blk[2u * j]);
    hi = lat_bytes4(blk[2u * j + 1u]);
}

// The levels are already signed bytes (ilevels.glsl).
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    lo = blk[2u * j];
    hi = blk[2u * j + 1u];
}
#endif
