//! Q5_1: levels 0..=31, one `d` and `m` per 32 values.

use hearth_quant::formats::q5_1::BlockQ5_1;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ5_1 = bytemuck::from_bytes(block);
    let qh = u32::from_le_bytes(b.qh);
    let (lo, hi) = out.levels.split_at_mut(16);
    for (j, ((&q, lo), hi)) in b.qs.iter().zip(lo).zip(hi).enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        *lo = ((q & 0x0F) | h0 << 4) as i8;
        *hi = ((q >> 4) | h1 << 4) as i8;
    }
    out.d.fill(b.d.to_f32());
    out.m.fill(b.m.to_f32());
}
