//! Q6_K: signed levels -32..=31, `d = d * scale` per 16 values and no base.

use hearth_quant::formats::q6_k::BlockQ6_K;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ6_K = bytemuck::from_bytes(block);
    let d = b.d.to_f32();
    // The dequantization's `d * scale * q` is `(d * scale) * q`, left to right.
    for (ds, &sc) in out.d.iter_mut().zip(&b.scales) {
        *ds = d * f32::from(sc);
    }
    // -0.0, not 0.0: `x + -0.0 == x` for every x, keeping the sign of a zero product.
    out.m.fill(-0.0);
    let halves = b.ql.chunks_exact(64).zip(b.qh.chunks_exact(32));
    for ((ql, qh), levels) in halves.zip(out.levels.chunks_exact_mut(128)) {
        // Quarter k of a half: low nibbles (k / 2 picks the nibble) of bytes 32 (k % 2)..,
        // high pair at bit 2 k of `qh`.
        for (k, levels) in levels.chunks_exact_mut(32).enumerate() {
            let ql = &ql[32 * (k % 2)..][..32];
            let nibble = 4 * (k / 2);
            for ((&lo, &hi), l) in ql.iter().zip(qh).zip(levels) {
                *l = (((lo >> nibble) & 0xF) | ((hi >> (2 * k)) & 3) << 4) as i8 - 32;
            }
        }
    }
}
