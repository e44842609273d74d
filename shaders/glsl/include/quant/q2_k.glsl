// Q2_K (ggml's): super-blocks of 256 values in 84 bytes (21 words): sixteen bytes of 4-bit
// scales (low nibble) and mins (high nibble), one per 16 values, in words 0-3; words 4-19
// the 2-bit levels (value i in byte 32(i / 128) + i % 32 at bit 2(i % 128 / 32)); d and dmin
// as f16 in word 20. value = (d * scale) * q - (dmin * min), a scale and min per 16 values,
// so a kernel block (kquant.glsl) has two groups of 16 with (d * scale, -(dmin * min)) each.
// Interface: see f32.glsl. Mirrors quant/src/formats/q2_k.rs.
const uint QK = 32;
const bool HAS_BASE = true;
#define HAS_GROUPS
const uint GROUP = 16;
#define BLOCK_WORDS 10
#include "quant/kquant.glsl"

// Words 0-7 the levels, 8 d and dmin, 9 the two groups' scale-and-min bytes.
void block_load(uint b, out Block blk) {
    uint base = 21u * (b >> 3);
    uint s = b & 7u;
    uint q[8];
    kq_words8(base + 4u + 8u * (s >> 2), q);
    uint shift = 2u * (s & 3u);
    for (uint i = 0; i < 8; ++i) {
        blk[i] = (q[i] >> shift) & 0x03030303u;
    }
    blk[8] = kq_word(base + 20u);
    blk[9] = (kq_word(base + (s >> 1)) >> (16u * (s & 1u))) & 0xFFFFu;
}

vec2 group_dm(Block blk, uint g) {
    vec2 dmin = unpackHalf2x16(blk[8]);
    uint sc = (blk[9] >> (8u * g)) & 0xFFu;
    return vec2(dmin.x * float(sc & 0xFu), -(dmin.y * float(sc >> 4)));
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
