// IQ2_S (ggml's): super-blocks of 256 values in 82 bytes: d as f16, per 8 values the low 8 bits
// of an index into a grid of 1024 rows of magnitudes 8, 25, 43 (32 bytes), then per 8 values
// 8 sign bits (32 bytes), the indices' top 2 bits (four 8s a byte), and per 32 a byte of two
// 4-bit scales. value = (d * (0.5 + s) * 0.25) * grid * sign, a scale per 16. Super-blocks
// are only 2-byte aligned.
// Interface: see f32.glsl; layout as lattice.glsl. Mirrors quant/src/formats/iq/iq2.rs.
#define BLOCK_WORDS 10
#define LATTICE_GROUP16
#include "quant/lattice.glsl"
#include "quant/grids/iq2s.glsl"

void block_load(uint b, out Block blk) {
    uint sb = 82u * (b >> 3);
    uint s = b & 7u;
    uint high = lat_byte(sb + 66u + s);
    for (uint l = 0u; l < 4u; ++l) {
        uint g = 4u * s + l;
        uint index = lat_byte(sb + 2u + g) | (((high >> (2u * l)) & 3u) << 8);
        uint row = iq2s_row(index);
        uint signs = lat_byte(sb + 34u + g);
        blk[2u * l] = lat_signed4(iq2s_values4(row, 0u), signs);
        blk[2u * l + 1u] = lat_signed4(iq2s_values4(row, 4u), signs >> 4);
    }
    float d = unpackHalf2x16(kq_half(sb)).x;
    uint scales = lat_byte(sb + 74u + s);
    blk[8] = floatBitsToUint(d * (0.5 + float(scales & 15u)) * 0.25);
    blk[9] = floatBitsToUint(d * (0.5 + float(scales >> 4)) * 0.25);
}

#include "quant/block.glsl"
