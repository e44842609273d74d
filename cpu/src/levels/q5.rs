//! Q5: levels 0..=31, one `d` and `m` per 64 values.

use hearth_quant::formats::q5::BlockQ5;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ5 = bytemuck::from_bytes(block);
    let qh = u64::from_le_bytes(b.qh);
    // Nibbles as in Q4B64 (values j and j + 32 share a byte), fifth bit j of `qh`.
    let (lo, hi) = out.levels.split_at_mut(32);
    for (j, ((&q, lo), hi)) in b.qs.iter().zip(lo).zip(hi).enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 32)) & 1) as u8;
        *lo = ((q & 0x0F) | h0 << 4) as i8;
        *hi = ((q >> 4) | h1 << 4) as i8;
    }
    out.d.fill(b.d.to_f32());
    out.m.fill(b.m.to_f32());
}
