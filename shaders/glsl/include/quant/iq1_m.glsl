// IQ1_M (ggml's): super-blocks of 256 values in 56 bytes: per 8 values the low 8 bits of an
// index into IQ1_S's grid (32 bytes), per 8 values a nibble (the index's top 3 bits and the
// sign of its 1/8 shift, two a byte, 16 bytes), then four u16, each four 3-bit scales of 16
// values (bits 0..12) and a nibble of the super-block's f16 d (12..16, word 0 lowest).
// value = d * (2s + 1) * (grid ± 1/8), computed as IQ1_S's, a scale per 16.
// Interface: see f32.glsl; layout as lattice.glsl. Mirrors quant/src/formats/iq/iq1.rs.
#define BLOCK_WORDS 10
#define LATTICE_GROUP16
#include "quant/lattice.glsl"
#include "quant/grids/iq1s.glsl"

void block_load(uint b, out Block blk) {
    uint sb = 56u * (b >> 3);
    uint s = b & 7u;
    for (uint l = 0u; l < 4u; ++l) {
        uint g = 4u * s + l;
        uint nibble = (lat_byte(sb + 32u + (g >> 1)) >> (4u * (g & 1u))) & 15u;
        uint row = iq1s_row(lat_byte(sb + g) | ((nibble & 7u) << 8));
        int shift = (nibble & 8u) != 0u ? -1 : 1;
        blk[2u * l] = lat_signed4(8 * iq1s_values4(row, 0u) + shift, 0u);
        blk[2u * l + 1u] = lat_signed4(8 * iq1s_values4(row, 4u) + shift, 0u);
    }
    uint d_bits = 0u;
    for (uint i = 0u; i < 4u; ++i) {
        d_bits |= (kq_half(sb + 48u + 2u * i) >> 12) << (4u * i);
    }
    float d = unpackHalf2x16(d_bits).x;
    // Scales 2s and 2s + 1 of the twelve bits of word s / 2.
    uint scales = kq_half(sb + 48u + 2u * (s >> 1));
    for (uint t = 0u; t < 2u; ++t) {
        uint h = 2u * s + t;
        uint sc = (scales >> (3u * (h & 3u))) & 7u;
        blk[8u + t] = floatBitsToUint(d * float(2u * sc + 1u) * 0.125);
    }
}

#include "quant/block.glsl"
