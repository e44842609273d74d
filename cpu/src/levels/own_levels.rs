//! The formats whose blocks give their own levels: the lattice i-quants (IQ1_S to IQ3_S), each
//! group's grid row with its signs (IQ1's as `8 * grid ± 1` over an eighth of the scale), and
//! the ternary TQ1_0 and TQ2_0 (-1, 0, 1), as the quant crate's `levels` give them, with a
//! scale per 16 values; no base. One unpacker per format.

use hearth_quant::formats::kquant::QK_K;
use hearth_quant::formats::{iq1_m, iq1_s, iq2_s, iq2_xs, iq2_xxs, iq3_s, iq3_xxs, tq1_0, tq2_0};

use super::BlockOut;

/// Fills `out` from a block's levels and per-16 scales, as `levels` writes them.
fn fill(out: BlockOut, levels: impl FnOnce(&mut [i8; QK_K], &mut [f32; QK_K / 16])) {
    let (Ok(l), Ok(d)) = (
        <&mut [i8; QK_K]>::try_from(out.levels),
        <&mut [f32; QK_K / 16]>::try_from(out.d),
    ) else {
        unreachable!("BlockOut holds one super-block");
    };
    levels(l, d);
    // -0.0, not 0.0: `x + -0.0 == x` for every x, keeping the sign of a zero product.
    out.m.fill(-0.0);
}

macro_rules! unpackers {
    ($($name:ident: $block:ty;)*) => {
        $(pub(super) fn $name(block: &[u8], out: BlockOut) {
            let b: &$block = bytemuck::from_bytes(block);
            fill(out, |l, d| b.levels(l, d));
        })*
    };
}

unpackers! {
    iq2_xxs: iq2_xxs::BlockIq2Xxs;
    iq2_xs: iq2_xs::BlockIq2Xs;
    iq2_s: iq2_s::BlockIq2S;
    iq3_xxs: iq3_xxs::BlockIq3Xxs;
    iq3_s: iq3_s::BlockIq3S;
    iq1_s: iq1_s::BlockIq1S;
    iq1_m: iq1_m::BlockIq1M;
    tq1_0: tq1_0::BlockTq1_0;
    tq2_0: tq2_0::BlockTq2_0;
}
