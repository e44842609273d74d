//! Q4_0: signed levels -8..=7, one `d` per 32 values and no base.

use hearth_quant::formats::q4_0::BlockQ4_0;

use super::{nibble_levels, BlockOut};

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ4_0 = bytemuck::from_bytes(block);
    nibble_levels(&b.qs, out.levels, |q| q as i8 - 8);
    out.d.fill(b.d.to_f32());
    // -0.0, not 0.0: `x + -0.0 == x` for every x, keeping the sign of a zero product.
    out.m.fill(-0.0);
}
