//! IQ4_XS: IQ4_NL's sixteen signed levels, each 32 of the 256 scaled by the super-block's `d`
//! times its own 6-bit scale less 32; no base.

use hearth_quant::formats::iq4_nl::LEVELS;
use hearth_quant::formats::iq4_xs::BlockIq4Xs;

use super::{nibble_levels, BlockOut, GROUP};

pub(super) fn unpack(block: &[u8], out: BlockOut) {
    let b: &BlockIq4Xs = bytemuck::from_bytes(block);
    let d = b.d.to_f32();
    let per32 = 32 / GROUP;
    let chunks = out.levels.chunks_exact_mut(32).zip(b.qs.chunks_exact(16));
    let scales = out.d.chunks_exact_mut(per32);
    for (ib, ((levels, qs), scale)) in chunks.zip(scales).enumerate() {
        nibble_levels(qs, levels, |q| LEVELS[usize::from(q)]);
        // As the format's dequantization rounds it: d * (scale - 32) in f32.
        scale.fill(d * f32::from(b.scale(ib) as i8 - 32));
    }
    // -0.0, not 0.0: `x + -0.0 == x` for every x, keeping the sign of a zero product.
    out.m.fill(-0.0);
}
