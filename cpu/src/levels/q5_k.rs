//! Q5_K: levels 0..=31, `d = d * scale` and `m = -(dmin * min)` per 32 values.

use hearth_quant::formats::kquant::scale_min_k4;
use hearth_quant::formats::q5_k::BlockQ5_K;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ5_K = bytemuck::from_bytes(block);
    let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
    // The dequantization's `d1 * q - m1` is `q * d1 + -m1` exactly.
    let scales = out.d.chunks_exact_mut(2).zip(out.m.chunks_exact_mut(2));
    for (s, (ds, ms)) in scales.enumerate() {
        let (sc, m) = scale_min_k4(s, &b.scales);
        ds.fill(d * f32::from(sc));
        ms.fill(-(min * f32::from(m)));
    }
    // Nibbles as in Q4_K; the fifth bit of sub-block s's values is bit s of `qh`.
    let groups = b.qs.chunks_exact(32).zip(out.levels.chunks_exact_mut(64));
    for (g, (qs, levels)) in groups.enumerate() {
        let (lo, hi) = levels.split_at_mut(32);
        for (((&q, &h), lo), hi) in qs.iter().zip(&b.qh).zip(lo).zip(hi) {
            *lo = ((q & 0x0F) | ((h >> (2 * g)) & 1) << 4) as i8;
            *hi = ((q >> 4) | ((h >> (2 * g + 1)) & 1) << 4) as i8;
        }
    }
}
