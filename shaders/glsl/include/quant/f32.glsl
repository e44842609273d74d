// F32: plain floats, read in blocks of 32 so every format shares one interface:
//   QK, HAS_BASE          values per block; whether blocks carry a base m besides a scale d
//   BLOCK_WORDS           32-bit words a block is loaded into (`Block`)
//   block_load(b, blk)    loads block b once; each lane then unpacks it from registers
//   block_dm(blk)         (d, m); value = q * d + m (m = 0 without a base)
//   GROUP, group_dm(blk, g)   values per (d, m) pair and the pair of group g (GROUP = QK and
//                         group_dm = block_dm unless the format defines HAS_GROUPS, as the
//                         k-quants with a scale per 16 values do; GROUPS = QK / GROUP)
//   block_levels8(blk, j, lo, hi)   stored levels q of values [8j, 8j + 8), as floats
//   levels8(b, j, lo, hi), dequant8(b, j, lo, hi)   the same straight from memory; dequant8
//                         rounds q * d + m exactly as quant/ does
// The including kernel defines W_BINDING. Mirrors quant/src/formats/f32.rs.
layout(binding = W_BINDING) readonly buffer Weights { vec4 w[]; };

const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 32
#define Block uint[BLOCK_WORDS]

#ifdef WIDE_LOADS
#include "quant/wide.glsl"

void block_load(uint b, out Block blk) {
    WIDE_UVEC4S(8 * b, 8, blk)
}
#else
void block_load(uint b, out Block blk) {
    for (uint i = 0; i < 8; ++i) {
        uvec4 v = floatBitsToUint(w[8 * b + i]);
        blk[4 * i] = v.x;
        blk[4 * i + 1] = v.y;
        blk[4 * i + 2] = v.z;
        blk[4 * i + 3] = v.w;
    }
}
#endif

vec2 block_dm(Block blk) {
    return vec2(1.0, 0.0);
}

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    lo = uintBitsToFloat(uvec4(blk[8 * j], blk[8 * j + 1], blk[8 * j + 2], blk[8 * j + 3]));
    hi = uintBitsToFloat(uvec4(blk[8 * j + 4], blk[8 * j + 5], blk[8 * j + 6], blk[8 * j + 7]));
}

#include "quant/block.glsl"
