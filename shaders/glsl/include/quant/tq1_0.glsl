// TQ1_0 (ggml's): super-blocks of 256 ternary values in 54 bytes: base-3 digits packed five to
// a byte as a fraction of 3^5 (digit n of byte m of bytes 0..32 is value 32n + m; of byte
// 32 + m, value 160 + 16n + m), then four bytes of four digits (digit n of byte m is value
// 240 + 4n + m), then d as f16. value = (digit - 1) * d; digit n of byte q is
// ((q * 3^n mod 256) * 3) >> 8. A kernel block (lattice.glsl) is one 32 of the values.
// Interface: see f32.glsl; layout as lattice.glsl. Mirrors quant/src/formats/ternary.rs.
#define BLOCK_WORDS 9
#include "quant/lattice.glsl"

// Digit n (0..4) of a byte of base-3 digits, less one.
int tq1_trit(uint byte, uint n) {
    const uint POW3[5] = uint[5](1u, 3u, 9u, 27u, 81u);
    return int((((byte * POW3[n]) & 0xFFu) * 3u) >> 8) - 1;
}

// Value v (0..256) of the super-block at byte sb, as a level.
int tq1_level(uint sb, uint v) {
    if (v < 160u) {
        return tq1_trit(lat_byte(sb + (v & 31u)), v >> 5);
    }
    if (v < 240u) {
        uint r = v - 160u;
        return tq1_trit(lat_byte(sb + 32u + (r & 15u)), r >> 4);
    }
    uint r = v - 240u;
    return tq1_trit(lat_byte(sb + 48u + (r & 3u)), r >> 2);
}

void block_load(uint b, out Block blk) {
    uint sb = 54u * (b >> 3);
    uint first = 32u * (b & 7u);
    for (uint i = 0u; i < 8u; ++i) {
        uint v = first + 4u * i;
        ivec4 l = ivec4(tq1_level(sb, v), tq1_level(sb, v + 1u), tq1_level(sb, v + 2u),
                        tq1_level(sb, v + 3u));
        blk[i] = lat_signed4(l, 0u);
    }
    blk[8] = floatBitsToUint(unpackHalf2x16(kq_half(sb + 52u)).x);
}

#include "quant/block.glsl"
