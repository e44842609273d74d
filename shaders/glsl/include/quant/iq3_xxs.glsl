// IQ3_XXS (ggml's): super-blocks of 256 values in 98 bytes: d as f16, per 4 values an index
// into a grid of 256 rows of magnitudes 4..62 (64 bytes), then per 32 a u32 of four 7-bit
// sign indices (one per 8 values, bits 0..28) and the 32's 4-bit scale s (28..32).
// value = (d * (0.5 + s) * 0.5) * grid * sign. Super-blocks are only 2-byte aligned.
// Interface: see f32.glsl; layout as lattice.glsl. Mirrors quant/src/formats/iq/iq3.rs.
#define BLOCK_WORDS 9
#include "quant/lattice.glsl"
#include "quant/grids/iq3xxs.glsl"

void block_load(uint b, out Block blk) {
    uint sb = 98u * (b >> 3);
    uint s = b & 7u;
    uint aux = lat_u32(sb + 66u + 4u * s);
    for (uint l = 0u; l < 4u; ++l) {
        uint pair = kq_half(sb + 2u + 8u * s + 2u * l);
        uint signs = lat_signs7((aux >> (7u * l)) & 127u);
        blk[2u * l] = lat_signed4(iq3xxs_values4(iq3xxs_row(pair & 0xFFu), 0u), signs);
        blk[2u * l + 1u] = lat_signed4(iq3xxs_values4(iq3xxs_row(pair >> 8), 0u), signs >> 4);
    }
    float d = unpackHalf2x16(kq_half(sb)).x;
    blk[8] = floatBitsToUint(d * (0.5 + float(aux >> 28)) * 0.5);
}

#include "quant/block.glsl"
