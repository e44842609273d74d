//! Q8 (GGUF's Q8_0): signed levels -127..=127, one `d` per 32 values and no base.

use hearth_quant::formats::q8::BlockQ8;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ8 = bytemuck::from_bytes(block);
    out.levels.copy_from_slice(&b.qs);
    out.d.fill(b.d.to_f32());
    out.m.fill(-0.0);
}
