// IQ2_XXS (ggml's): super-blocks of 256 values in 66 bytes: d as f16, then per 32 values 8
// bytes: four grid indices (one per 8 values, into a grid of 256 rows of magnitudes 8, 25, 43)
// and a u32 of four 7-bit sign indices (bits 0..28) and the 32's 4-bit scale s (28..32).
// value = (d * (0.5 + s) * 0.25) * grid * sign. Super-blocks are only 2-byte aligned.
// Interface: see f32.glsl; layout as lattice.glsl. Mirrors quant/src/formats/iq/iq2.rs.
#define BLOCK_WORDS 9
#include "quant/lattice.glsl"
#include "quant/grids/iq2xxs.glsl"

void block_load(uint b, out Block blk) {
    uint sb = 66u * (b >> 3);
    uint at = sb + 2u + 8u * (b & 7u);
    uint indices = lat_u32(at);
    uint aux = lat_u32(at + 4u);
    for (uint l = 0u; l < 4u; ++l) {
        uint row = iq2xxs_row((indices >> (8u * l)) & 0xFFu);
        uint signs = lat_signs7((aux >> (7u * l)) & 127u);
        blk[2u * l] = lat_signed4(iq2xxs_values4(row, 0u), signs);
        blk[2u * l + 1u] = lat_signed4(iq2xxs_values4(row, 4u), signs >> 4);
    }
    float d = unpackHalf2x16(kq_half(sb)).x;
    blk[8] = floatBitsToUint(d * (0.5 + float(aux >> 28)) * 0.25);
}

#include "quant/block.glsl"
