//! Q3: levels 0..=7, one `d` and `m` per 32 values.

use hearth_quant::formats::q3::BlockQ3;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ3 = bytemuck::from_bytes(block);
    let qh = u32::from_le_bytes(b.qh);
    // Low bits as in Q2 (each 8 values one bit plane of `ql`), the third bit from `qh`.
    for (plane, levels) in out.levels.chunks_exact_mut(8).enumerate() {
        for (i, (&q, l)) in b.ql.iter().zip(levels).enumerate() {
            let high = (qh >> (8 * plane + i)) & 1;
            *l = (((q >> (2 * plane)) & 3) | (high as u8) << 2) as i8;
        }
    }
    out.d.fill(b.d.to_f32());
    out.m.fill(b.m.to_f32());
}
