//! Q4B64: levels 0..=15, one `d` and `m` per 64 values.

use hearth_quant::formats::q4b64::BlockQ4B64;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ4B64 = bytemuck::from_bytes(block);
    let (lo, hi) = out.levels.split_at_mut(32);
    for ((&q, lo), hi) in b.qs.iter().zip(lo).zip(hi) {
        *lo = (q & 0x0F) as i8;
        *hi = (q >> 4) as i8;
    }
    out.d.fill(b.d.to_f32());
    out.m.fill(b.m.to_f32());
}
