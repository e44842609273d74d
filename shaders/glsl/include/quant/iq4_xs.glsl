// IQ4_XS (ggml's): super-blocks of 256 values in 136 bytes (34 words): d as f16 and the
// scales' high bits (two per 32, a u16) in word 0, their low nibbles in word 1 (32 2i in the
// low nibble of byte i, 2i + 1 in the high), then each 32's 16 bytes of 4-bit indices as
// IQ4_NL packs a block's. value = (d * (scale - 32)) * LEVELS[q], scale 6 bits. One kernel
// block is one 32 (kquant.glsl), with (d * (scale - 32), 0) as its (d, m), so q * d rounds as
// ggml's dl * level.
// Interface: see f32.glsl. Mirrors quant/src/formats/iq4_xs.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 5
#include "quant/kquant.glsl"
#include "quant/iq4_levels.glsl"

// Words 0-3 the 32's indices as stored, 4 its scale d * (scale - 32) as f32 bits.
void block_load(uint b, out Block blk) {
    uint base = 34u * (b >> 3);
    uint s = b & 7u;
    for (uint i = 0; i < 4; ++i) {
        blk[i] = kq_word(base + 2u + 4u * s + i);
    }
    uint head = kq_word(base);
    uint low = (kq_word(base + 1u) >> (4u * s)) & 0xFu;
    uint high = (head >> (16u + 2u * s)) & 3u;
    float d = unpackHalf2x16(head).x;
    blk[4] = floatBitsToUint(d * float(int(low | (high << 4)) - 32));
}

vec2 block_dm(Block blk) {
    return vec2(uintBitsToFloat(blk[4]), 0.0);
}

// Chunk j: bytes 8(j % 2) .. +8 of the 32's indices, low nibbles for j < 2, high after.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 2u * (j & 1u);
    uint shift = 4u * (j >> 1);
    lo = iq4_levels4(bytes_field(blk[at], shift, 0xFu));
    hi = iq4_levels4(bytes_field(blk[at + 1u], shift, 0xFu));
}

#include "quant/block.glsl"
