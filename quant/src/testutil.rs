//! Helpers shared by the format tests.

use crate::{dequantize, BlockType, Format, Rounding};

/// Dequantizes `bytes` through the public entry point, sized from the byte count.
pub fn dequantize_all(ty: BlockType, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / ty.block_bytes() * ty.block_size();
    let mut out = vec![f32::NAN; n];
    dequantize(ty, bytes, &mut out).unwrap();
    out
}

/// A 64-bit LCG: deterministic variety without a dependency.
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Lcg(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0
    }

    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Deterministic pseudo-random bytes: varied quants and scales.
pub fn bytes<const N: usize>(seed: u64) -> [u8; N] {
    let mut rng = Lcg::new(seed);
    std::array::from_fn(|_| (rng.next_u64() >> 56) as u8)
}

/// `n` values drawn from a normal distribution with mean `mean` and deviation `sigma`.
pub fn normal(seed: u64, n: usize, mean: f64, sigma: f64) -> Vec<f32> {
    let mut rng = Lcg::new(seed);
    (0..n)
        .map(|_| (mean + sigma * rng.normal()) as f32)
        .collect()
}

/// Quantizes `src` (whole blocks), returning the bytes.
pub fn quantize(format: Format, src: &[f32], rounding: Rounding) -> Vec<u8> {
    let mut bytes = vec![0u8; format.bytes_for(src.len()).unwrap()];
    format.quantize_with(src, &mut bytes, rounding).unwrap();
    bytes
}

/// Dequantizes `bytes` of `format`, sized from the byte count.
pub fn dequantize_format(format: Format, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / format.block_bytes() * format.block_size();
    let mut out = vec![f32::NAN; n];
    format.dequantize(bytes, &mut out).unwrap();
    out
}

/// The 12 weights of Table 2 of the Inferflow paper (arXiv 2401.08294), which quantizes them
/// as one block with the min-max rule at 4, 3 and 3.5 bits.
pub const TABLE2_W: [f32; 12] = [
    -1.0, -0.9, -0.6, -0.4, -0.2, 0.0, 0.1, 0.5, 0.7, 1.0, 1.3, 1.5,
];

/// One column group of Table 2: the levels `q`, the dequantized weights `w'` and the errors
/// `delta` as printed (3 decimals), and the printed average error.
pub struct Table2 {
    pub q: [u8; 12],
    pub w: [&'static str; 12],
    pub delta: [&'static str; 12],
    pub average: &'static str,
}

/// Checks `format` against a column group of Table 2. `level(bytes, j)` reads level `j` of the
/// first block.
///
/// The 12 weights are padded to a whole block with 0, which lies inside [min, max] = [-1, 1.5],
/// so the block's minimum and maximum (hence d and m) are those of the 12 weights.
///
/// The paper computes in exact arithmetic; a stored block rounds `d` (and `m`, here -1 exactly)
/// to f16. So the levels must match exactly, `w'` and `delta` recomputed from the levels with
/// the exact `d = (max - min) / (levels - 1)` must print as in the table, and the stored block's
/// values may differ from the exact ones by at most `q * |d_f16 - d|` (plus f32 rounding) -
/// enough to change the third decimal of some entries, e.g. Q4's 1.5 dequantizes to 1.49939.
/// The average error of the stored block still prints as in the table.
pub fn check_table2(format: Format, levels: u8, level: fn(&[u8], usize) -> u8, want: &Table2) {
    let mut src = vec![0.0f32; format.block_size()];
    src[..12].copy_from_slice(&TABLE2_W);
    let bytes = quantize(format, &src, Rounding::MinMax);
    let stored = dequantize_format(format, &bytes);
    let (min, max) = (-1.0f64, 1.5f64);
    let d = (max - min) / f64::from(levels - 1);
    let d16 = crate::Half::from_bits(u16::from_le_bytes([bytes[0], bytes[1]])).to_f32();
    let mut total_error = 0.0;
    for (i, &w) in TABLE2_W.iter().enumerate() {
        let q = level(&bytes, i);
        assert_eq!(q, want.q[i], "{format}: level of w = {w}");
        let exact = min + f64::from(q) * d;
        let delta = (f64::from(w) - exact).abs();
        assert_eq!(format!("{exact:.3}"), want.w[i], "{format}: w' of w = {w}");
        assert_eq!(
            format!("{delta:.3}"),
            want.delta[i],
            "{format}: delta of w = {w}"
        );
        let bound = f64::from(q) * (f64::from(d16) - d).abs() + 1e-6;
        assert!(
            (f64::from(stored[i]) - exact).abs() <= bound,
            "{format}: stored w' {} of w = {w} is off the exact {exact} by more than {bound}",
            stored[i]
        );
        total_error += (f64::from(w) - f64::from(stored[i])).abs();
    }
    let average = total_error / 12.0;
    assert_eq!(
        format!("{average:.3}"),
        want.average,
        "{format}: average error"
    );
}

/// The f32 value of the IEEE binary16 `bits`, restated from the standard (no f16 library): a
/// NaN comes back as the canonical f32 NaN.
pub fn f16_bits_to_f32(bits: u16) -> f32 {
    let sign = if bits & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exponent = u32::from((bits >> 10) & 0x1F);
    let mantissa = f32::from(bits & 0x3FF);
    // 2^e for a normal f32 exponent, built from its bits so that it is exact.
    let pow2 = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
    match exponent {
        0 => sign * mantissa * pow2(-24),
        31 if mantissa == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1024.0 + mantissa) * pow2(e as i32 - 25),
    }
}

/// The IEEE binary16 nearest to the finite or infinite `x`, ties to even, restated from the
/// standard (no f16 library): values from 65520 on round to infinity.
pub fn f32_to_f16_bits(x: f32) -> u16 {
    assert!(!x.is_nan(), "the reference takes no NaN");
    let sign = if x.is_sign_negative() { 0x8000u16 } else { 0 };
    if x.is_infinite() {
        return sign | 0x7C00;
    }
    let a = f64::from(x.abs()); // exact
                                // The step between adjacent f16 values at `a`: 2^-24 below 2^-14 (subnormals), else
                                // 2^(e - 10) for a in [2^e, 2^(e + 1)).
    let e = if a < 2f64.powi(-14) {
        -14
    } else {
        let e = a.log2().floor() as i32;
        // log2 may round across a power of two.
        if 2f64.powi(e) > a {
            e - 1
        } else if 2f64.powi(e + 1) <= a {
            e + 1
        } else {
            e
        }
    };
    let steps = (a / 2f64.powi(e - 10)).round_ties_even(); // exact: a power-of-two scaling
    if e == -14 && steps < 1024.0 {
        return sign | steps as u16; // subnormal or zero
    }
    // `steps` is in [1024, 2048]; 2048 carries into the next exponent.
    let (e, steps) = if steps == 2048.0 {
        (e + 1, 1024.0)
    } else {
        (e, steps)
    };
    if e + 15 >= 31 {
        return sign | 0x7C00;
    }
    sign | ((e + 15) as u16) << 10 | (steps as u16 - 1024)
}

#[test]
fn f16_reference_conversions_hold_hand_checked_values() {
    let p2 = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
    // (f32 value, f16 bits), each exact.
    let exact = [
        (0.0, 0x0000),
        (-0.0, 0x8000),
        (1.0, 0x3C00),
        (-2.0, 0xC000),
        (0.5, 0x3800),
        (1.5, 0x3E00),
        (65504.0, 0x7BFF),          // largest finite
        (p2(-14), 0x0400),          // smallest normal
        (p2(-24), 0x0001),          // smallest subnormal
        (1023.0 * p2(-24), 0x03FF), // largest subnormal
        (f32::INFINITY, 0x7C00),
        (f32::NEG_INFINITY, 0xFC00),
    ];
    for (x, bits) in exact {
        assert_eq!(f32_to_f16_bits(x), bits, "{x}");
        assert_eq!(f16_bits_to_f32(bits).to_bits(), x.to_bits(), "{bits:#06x}");
    }
    // Rounding: (f32 value, nearest f16 bits).
    let rounded = [
        (0.1, 0x2E66), // 0.0999755859375 is nearer than 0.10003662109375
        (-3.0e-3, 0x9A25),
        (1.0 + p2(-11), 0x3C00), // a tie between 0x3C00 and 0x3C01: to even
        (1.0 + 3.0 * p2(-11), 0x3C02), // a tie between 0x3C01 and 0x3C02: to even
        (1.0 + 1.5 * p2(-11), 0x3C01), // above the tie
        (65519.0, 0x7BFF),       // below the halfway point to 65536
        (65520.0, 0x7C00),       // the tie with 65536 goes to even: infinity
        (p2(-25), 0x0000),       // halfway to the smallest subnormal: to even (0)
        (0.75 * p2(-24), 0x0001), // nearer 1 step than 0
        (1.5 * p2(-24), 0x0002), // a tie, to even (2)
        (2.5 * p2(-24), 0x0002), // a tie, to even (2)
        (p2(-30), 0x0000),       // far below: zero
    ];
    for (x, bits) in rounded {
        assert_eq!(f32_to_f16_bits(x), bits, "{x}");
    }
    assert!(f16_bits_to_f32(0x7E00).is_nan());
    assert!(f16_bits_to_f32(0xFC01).is_nan());
}
