// The memory-level half of every format's interface (see f32.glsl), built on its
// register-level half so each layout is written once. Included at the end of each format.
#include "quant/unpack.glsl"

// One (d, m) pair per block unless the format has several (HAS_GROUPS: it defines GROUP, the
// values per pair, a multiple of 8 dividing QK, and group_dm).
#ifndef HAS_GROUPS
const uint GROUP = QK;

vec2 group_dm(Block blk, uint g) {
    return block_dm(blk);
}
#endif
const uint GROUPS = QK / GROUP;

void levels8(uint b, uint j, out vec4 lo, out vec4 hi) {
    Block blk;
    block_load(b, blk);
    block_levels8(blk, j, lo, hi);
}

void dequant8(uint b, uint j, out vec4 lo, out vec4 hi) {
    Block blk;
    block_load(b, blk);
    vec4 qlo;
    vec4 qhi;
    block_levels8(blk, j, qlo, qhi);
    vec2 dm = group_dm(blk, 8 * j / GROUP);
    if (HAS_BASE) {
        dequant_dm(dm, qlo, qhi, lo, hi);
    } else {
        dequant_d(dm.x, qlo, qhi, lo, hi);
    }
}
