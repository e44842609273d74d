//! Q2: levels 0..=3, one `d` and `m` per 32 values.

use hearth_quant::formats::q2::BlockQ2;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ2 = bytemuck::from_bytes(block);
    // Value `j` is at bits `2 * (j / 8)` of byte `j % 8`: each 8 values are one bit plane.
    for (plane, levels) in out.levels.chunks_exact_mut(8).enumerate() {
        for (&q, l) in b.qs.iter().zip(levels) {
            *l = ((q >> (2 * plane)) & 3) as i8;
        }
    }
    out.d.fill(b.d.to_f32());
    out.m.fill(b.m.to_f32());
}
