// Q3H (3.5 bits): blocks of 64 values in 32 bytes (8 words). 11 levels; values 2p and 2p + 1
// share the 7-bit code c_p = q[2p] + 11 q[2p + 1] (< 121). Word 0: d and m as f16; words 1-4:
// the low nibble of c_p (pair p < 16 in the low nibble of byte p, pair p >= 16 in the high
// nibble of byte p - 16); words 5-7: bit planes h0, h1, h2 with bit p of h_k = bit 4 + k of c_p.
// Interface: see f32.glsl. Mirrors quant/src/formats/q3h.rs.
const uint QK = 64;
const bool HAS_BASE = true;
#define BLOCK_WORDS 8
#define LAYOUT_UVEC4S
#define DM_HALVES
#include "quant/layout.glsl"

// Chunk j holds pairs 4j .. 4j + 4.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uvec4 low = bytes_field(blk[1 + (j & 3)], 4 * (j >> 2), 0xFu);
    uint p = 4 * j;
    uvec4 sh = uvec4(p, p + 1, p + 2, p + 3);
    uvec4 high = ((uvec4(blk[5]) >> sh) & 1u)
               | (((uvec4(blk[6]) >> sh) & 1u) << 1)
               | (((uvec4(blk[7]) >> sh) & 1u) << 2);
    uvec4 code = low | (high << 4);
    uvec4 even = code % 11u;
    uvec4 odd = code / 11u;
    lo = vec4(even.x, odd.x, even.y, odd.y);
    hi = vec4(even.z, odd.z, even.w, odd.w);
}

#include "quant/block.glsl"
