//! MXFP4: the e2m1 values doubled (-12..=12) as signed levels, one power-of-two `d` per 32
//! values and no base.

use hearth_quant::formats::mxfp4::{e8m0_half, BlockMxfp4, LEVELS};

use super::{nibble_levels, BlockOut};

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockMxfp4 = bytemuck::from_bytes(block);
    nibble_levels(&b.qs, out.levels, |q| LEVELS[usize::from(q)]);
    out.d.fill(e8m0_half(b.e));
    // -0.0, not 0.0: `x + -0.0 == x` for every x, keeping the sign of a zero product.
    out.m.fill(-0.0);
}
