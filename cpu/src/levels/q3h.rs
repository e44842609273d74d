//! Q3H: levels 0..=10 (two per 7-bit code), one `d` and `m` per 64 values.

use hearth_quant::formats::q3h::BlockQ3H;

use super::BlockOut;

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockQ3H = bytemuck::from_bytes(block);
    let plane = |k: usize| {
        u32::from_le_bytes([
            b.hi[4 * k],
            b.hi[4 * k + 1],
            b.hi[4 * k + 2],
            b.hi[4 * k + 3],
        ])
    };
    let (h0, h1, h2) = (plane(0), plane(1), plane(2));
    for (p, pair) in out.levels.chunks_exact_mut(2).enumerate() {
        let low = (b.lo[p % 16] >> (4 * (p / 16))) & 0x0F;
        let high = ((h0 >> p) & 1) | ((h1 >> p) & 1) << 1 | ((h2 >> p) & 1) << 2;
        let c = low | (high as u8) << 4;
        // Codes above 120 decode as the format's `level` does: at most 11, still an i8.
        pair[0] = (c % 11) as i8;
        pair[1] = (c / 11) as i8;
    }
    out.d.fill(b.d.to_f32());
    out.m.fill(b.m.to_f32());
}
