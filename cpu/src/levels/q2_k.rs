//! Q2_K: levels 0..=3, `d = d * scale` and `m = -(dmin * min)` per 16 values.

use hearth_quant::formats::q2_k::BlockQ2_K;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ2_K = bytemuck::from_bytes(block);
    let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
    let subs = out.levels.chunks_exact_mut(16).zip(&b.scales);
    let scales = out.d.iter_mut().zip(out.m.iter_mut());
    for (s, ((levels, &sc), (ds, ms))) in subs.zip(scales).enumerate() {
        // The dequantization's `dl * q - ml` is `q * dl + -ml` exactly.
        *ds = d * f32::from(sc & 0xF);
        *ms = -(min * f32::from(sc >> 4));
        // Sub-block s: half s / 8, bit plane (s % 8) / 2, first or second 16 bytes by s % 2.
        let qs = &b.qs[32 * (s / 8) + 16 * (s % 2)..][..16];
        let shift = 2 * (s % 8 / 2);
        for (&q, l) in qs.iter().zip(levels) {
            *l = ((q >> shift) & 3) as i8;
        }
    }
}
