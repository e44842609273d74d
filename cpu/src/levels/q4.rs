//! Q4 (GGUF's Q4_1): levels 0..=15, one `d` and `m` per 32 values.

use hearth_quant::formats::q4::BlockQ4;

use super::{nibble_levels, BlockOut};

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ4 = bytemuck::from_bytes(block);
    nibble_levels(&b.qs, out.levels, |q| q as i8);
    out.d.fill(b.d.to_f32());
    out.m.fill(b.m.to_f32());
}
