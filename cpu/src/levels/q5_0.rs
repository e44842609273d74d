//! Q5_0: signed levels -16..=15, one `d` per 32 values and no base.

use hearth_quant::formats::q5_0::BlockQ5_0;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ5_0 = bytemuck::from_bytes(block);
    let qh = u32::from_le_bytes(b.qh);
    let (lo, hi) = out.levels.split_at_mut(16);
    for (j, ((&q, lo), hi)) in b.qs.iter().zip(lo).zip(hi).enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        *lo = ((q & 0x0F) | h0 << 4) as i8 - 16;
        *hi = ((q >> 4) | h1 << 4) as i8 - 16;
    }
    out.d.fill(b.d.to_f32());
    // -0.0, not 0.0: `x + -0.0 == x` for every x, keeping the sign of a zero product.
    out.m.fill(-0.0);
}
