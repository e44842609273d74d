// TQ2_0 (ggml's): super-blocks of 256 ternary values in 66 bytes: 64 bytes of 2-bit digits
// (value 128g + 32l + m in bits 2l of byte 32g + m), then d as f16. value = (digit - 1) * d.
// A kernel block (kquant.glsl) is one 32: digit l of the 32 bytes of half g. Super-blocks are
// only 2-byte aligned.
// Interface: see f32.glsl. Mirrors quant/src/formats/ternary.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 9
#include "quant/kquant.glsl"

// Words 0-7 the digits (0..2), word 8 d (bits 0-15).
void block_load(uint b, out Block blk) {
    uint sb = 66u * (b >> 3);
    uint s = b & 7u;
    uint q[8];
    kq_words8_at_byte(sb + 32u * (s >> 2), q);
    uint shift = 2u * (s & 3u);
    for (uint i = 0u; i < 8u; ++i) {
        blk[i] = (q[i] >> shift) & 0x03030303u;
    }
    blk[8] = kq_half(sb + 64u);
}

vec2 block_dm(Block blk) {
    return vec2(unpackHalf2x16(blk[8]).x, 0.0);
}

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    kq_levels8(blk[2 * j], blk[2 * j + 1], lo, hi);
    lo -= 1.0;
    hi -= 1.0;
}

// The levels as signed bytes: the digits less one (ilevels.glsl).
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    lo = bytes_minus(blk[2 * j], 1u);
    hi = bytes_minus(blk[2 * j + 1], 1u);
}

#include "quant/block.glsl"
