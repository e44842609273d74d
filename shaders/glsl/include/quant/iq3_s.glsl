// IQ3_S (ggml's): super-blocks of 256 values in 110 bytes: d as f16, per 4 values the low 8
// bits of an index into a grid of 512 rows of odd magnitudes 1..15 (64 bytes), per 32 a byte
// of the indices' ninth bits, per 8 values a byte of signs (32 bytes), and per 32 a 4-bit
// scale s (two a byte, low first). value = (d * (1 + 2s)) * grid * sign. Super-blocks are only
// 2-byte aligned.
// Interface: see f32.glsl; layout as lattice.glsl. Mirrors quant/src/formats/iq/iq3.rs.
#define BLOCK_WORDS 9
#include "quant/lattice.glsl"
#include "quant/grids/iq3s.glsl"

void block_load(uint b, out Block blk) {
    uint sb = 110u * (b >> 3);
    uint s = b & 7u;
    uint high = lat_byte(sb + 66u + s);
    for (uint k = 0u; k < 8u; ++k) {
        uint index = lat_byte(sb + 2u + 8u * s + k) | (((high >> k) & 1u) << 8);
        uint signs = lat_byte(sb + 74u + 4u * s + (k >> 1)) >> (4u * (k & 1u));
        blk[k] = lat_signed4(iq3s_values4(iq3s_row(index), 0u), signs);
    }
    float d = unpackHalf2x16(kq_half(sb)).x;
    uint scale = (lat_byte(sb + 106u + (s >> 1)) >> (4u * (s & 1u))) & 15u;
    blk[8] = floatBitsToUint(d * float(1u + 2u * scale));
}

#include "quant/block.glsl"
