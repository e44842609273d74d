// IQ1_S (ggml's): super-blocks of 256 values in 50 bytes: d as f16, per 8 values the low 8
// bits of an index into a grid of 2048 rows over {-1, 0, 1} (32 bytes), then per 32 a u16:
// the four 8s' top 3 index bits (bits 0..12), the 3-bit scale s (12..15) and the sign of the
// 1/8 shift (15). value = d * (2s + 1) * (grid ± 1/8), computed as the levels 8 grid ± 1 times
// d * (2s + 1) * 0.125 (the same f32: see quant/src/formats/iq/iq1.rs). Only 2-byte aligned.
// Interface: see f32.glsl; layout as lattice.glsl. Mirrors quant/src/formats/iq/iq1.rs.
#define BLOCK_WORDS 9
#include "quant/lattice.glsl"
#include "quant/grids/iq1s.glsl"

void block_load(uint b, out Block blk) {
    uint sb = 50u * (b >> 3);
    uint s = b & 7u;
    uint word = kq_half(sb + 34u + 2u * s);
    int shift = (word & 0x8000u) != 0u ? -1 : 1;
    for (uint l = 0u; l < 4u; ++l) {
        uint index = lat_byte(sb + 2u + 4u * s + l) | (((word >> (3u * l)) & 7u) << 8);
        uint row = iq1s_row(index);
        blk[2u * l] = lat_signed4(8 * iq1s_values4(row, 0u) + shift, 0u);
        blk[2u * l + 1u] = lat_signed4(8 * iq1s_values4(row, 4u) + shift, 0u);
    }
    float d = unpackHalf2x16(kq_half(sb)).x;
    blk[8] = floatBitsToUint(d * float(2u * ((word >> 12) & 7u) + 1u) * 0.125);
}

#include "quant/block.glsl"
