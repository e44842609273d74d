//! Q6: levels 0..=63, one `d` and `m` per 64 values.

use hearth_quant::formats::q6::BlockQ6;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ6 = bytemuck::from_bytes(block);
    // Nibbles as in Q4B64 (values j and j + 32 share a byte).
    let (lo, hi) = out.levels.split_at_mut(32);
    for ((&q, lo), hi) in b.qs.iter().zip(lo).zip(hi) {
        *lo = (q & 0x0F) as i8;
        *hi = (q >> 4) as i8;
    }
    // Bits 4-5 of value j at bits `2 * (j / 16)` of `qh[j % 16]`: each 16 values one pair plane.
    for (plane, levels) in out.levels.chunks_exact_mut(16).enumerate() {
        for (&h, l) in b.qh.iter().zip(levels) {
            *l |= (((h >> (2 * plane)) & 3) << 4) as i8;
        }
    }
    out.d.fill(b.d.to_f32());
    out.m.fill(b.m.to_f32());
}
