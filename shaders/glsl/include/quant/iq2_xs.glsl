// IQ2_XS (ggml's): super-blocks of 256 values in 74 bytes: d as f16, per 8 values a u16 (a
// 9-bit index into a grid of 512 rows of magnitudes 8, 25, 43, and a 7-bit sign index), then
// per 32 a byte of two 4-bit scales (the first 16's low). value = (d * (0.5 + s) * 0.25) *
// grid * sign, a scale per 16. Super-blocks are only 2-byte aligned.
// Interface: see f32.glsl; layout as lattice.glsl. Mirrors quant/src/formats/iq/iq2.rs.
#define BLOCK_WORDS 10
#define LATTICE_GROUP16
#include "quant/lattice.glsl"
#include "quant/grids/iq2xs.glsl"

void block_load(uint b, out Block blk) {
    uint sb = 74u * (b >> 3);
    uint s = b & 7u;
    for (uint l = 0u; l < 4u; ++l) {
        uint word = kq_half(sb + 2u + 8u * s + 2u * l);
        uint row = iq2xs_row(word & 511u);
        uint signs = lat_signs7(word >> 9);
        blk[2u * l] = lat_signed4(iq2xs_values4(row, 0u), signs);
        blk[2u * l + 1u] = lat_signed4(iq2xs_values4(row, 4u), signs >> 4);
    }
    float d = unpackHalf2x16(kq_half(sb)).x;
    uint scales = lat_byte(sb + 66u + s);
    blk[8] = floatBitsToUint(d * (0.5 + float(scales & 15u)) * 0.25);
    blk[9] = floatBitsToUint(d * (0.5 + float(scales >> 4)) * 0.25);
}

#include "quant/block.glsl"
