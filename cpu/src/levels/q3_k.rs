//! Q3_K: signed levels -4..=3, `d = d * (scale - 32)` per 16 values and no base.

use hearth_quant::formats::q3_k::BlockQ3_K;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ3_K = bytemuck::from_bytes(block);
    let d_all = b.d.to_f32();
    let subs = out.levels.chunks_exact_mut(16).zip(out.d.iter_mut());
    for (s, (levels, ds)) in subs.enumerate() {
        *ds = d_all * f32::from(b.scale(s));
        // Sub-block s: half s / 8, bit plane (s % 8) / 2, first or second 16 bytes by s % 2;
        // its high bits are bit s / 2 of the matching 16 mask bytes (clear: level - 4).
        let qs = &b.qs[32 * (s / 8) + 16 * (s % 2)..][..16];
        let hm = &b.hmask[16 * (s % 2)..][..16];
        let shift = 2 * (s % 8 / 2);
        let m = 1u8 << (s / 2);
        for ((&q, &h), l) in qs.iter().zip(hm).zip(levels) {
            *l = ((q >> shift) & 3) as i8 - if h & m != 0 { 0 } else { 4 };
        }
    }
    // -0.0, not 0.0: `x + -0.0 == x` for every x, keeping the sign of a zero product.
    out.m.fill(-0.0);
}
