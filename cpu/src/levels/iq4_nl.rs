//! IQ4_NL: each 4-bit index names one of sixteen signed levels (-127..=113), one `d` per 32
//! values and no base, so the levels are the table's entries themselves.

use hearth_quant::formats::iq4_nl::{BlockIq4Nl, LEVELS};

use super::{nibble_levels, BlockOut};

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockIq4Nl = bytemuck::from_bytes(block);
    nibble_levels(&b.qs, out.levels, |q| LEVELS[usize::from(q)]);
    out.d.fill(b.d.to_f32());
    // -0.0, not 0.0: `x + -0.0 == x` for every x, keeping the sign of a zero product.
    out.m.fill(-0.0);
}
