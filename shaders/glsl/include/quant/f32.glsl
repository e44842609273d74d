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
// A format defines QK, HAS_BASE, BLOCK_WORDS and its layout, then includes layout.glsl (the
// weights, `Block`, and block_load and block_dm where several formats share them) and ends
// with block.glsl (levels8, dequant8 and the default groups). The including kernel defines
// W_BINDING. Mirrors quant/src/formats/f32.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 32
#define LAYOUT_UVEC4S
#define FLOAT_WEIGHTS
#define PLAIN_VALUES
#include "quant/layout.glsl"

void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    lo = uintBitsToFloat(uvec4(blk[8 * j], blk[8 * j + 1], blk[8 * j + 2], blk[8 * j + 3]));
    hi = uintBitsToFloat(uvec4(blk[8 * j + 4], blk[8 * j + 5], blk[8 * j + 6], blk[8 * j + 7]));
}

#include "quant/block.glsl"
