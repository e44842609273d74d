//! Every instruction set's kernels against the exact sums, at lengths of one chunk, an odd
//! number of chunks and a model's width.

use super::{Kernels, LevelsRow};
use crate::act::{ActQ8, ActRow};
use crate::isa::Isa;

fn noise(n: usize, seed: u64) -> impl Iterator<Item = f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n).map(move |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// The dot product in f64 from the same integers and scales.
fn exact(w: LevelsRow, x: ActRow) -> f64 {
    let mut sum = 0f64;
    for (j, (&l, &q)) in w.levels.iter().zip(x.q).enumerate() {
        let (d, m) = (w.d[j / 16] as f64, w.m[j / 16] as f64);
        sum += (l as f64 * d + m) * (q as f64 * x.d[j / 32] as f64);
    }
    sum
}

#[test]
fn every_instruction_set_matches_the_exact_sum() {
    for isa in Isa::available() {
        let kernels = Kernels::new(isa).unwrap();
        for (len, seed) in [(32, 1), (64, 2), (96, 3), (576, 4), (1568, 5)] {
            let levels: Vec<i8> = noise(len, seed)
                .map(|u| (u * 254.0 - 127.0).round() as i8)
                .collect();
            let d: Vec<f32> = noise(len / 16, seed + 10)
                .map(|u| (u * 0.02) as f32)
                .collect();
            let m: Vec<f32> = noise(len / 16, seed + 20)
                .map(|u| (u - 0.5) as f32)
                .collect();
            let xs: Vec<f32> = noise(len, seed + 30)
                .map(|u| (u * 8.0 - 4.0) as f32)
                .collect();
            let mut act = ActQ8::default();
            act.quantize(&xs, len);
            for has_base in [false, true] {
                let zeros = vec![0f32; m.len()];
                let w = LevelsRow {
                    levels: &levels,
                    d: &d,
                    m: if has_base { &m } else { &zeros },
                    has_base,
                };
                let want = exact(w, act.row(0));
                let got = kernels.levels(w, act.row(0)) as f64;
                let scale: f64 = levels.iter().map(|&l| (l as f64).abs()).sum::<f64>() * 0.02 * 4.0;
                assert!(
                    (got - want).abs() <= 1e-5 * scale + 1e-6,
                    "{isa} len {len} base {has_base}: {got} vs {want}"
                );
            }
            let a: Vec<f32> = noise(len + 3, seed + 40).map(|u| u as f32 - 0.5).collect();
            let b: Vec<f32> = noise(len + 3, seed + 50).map(|u| u as f32 - 0.5).collect();
            let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
            let got = kernels.floats(&a, &b) as f64;
            assert!(
                (got - want).abs() < 1e-4,
                "{isa} floats {len}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn the_lowest_set_is_forced_and_a_missing_one_refused() {
    assert_eq!(Kernels::new(Isa::Portable).unwrap().isa(), Isa::Portable);
    if let Some(missing) = Isa::ALL.into_iter().find(|i| !i.supported()) {
        assert!(Kernels::new(missing).is_err());
    }
}

/// Every instruction set's panel products against the f64 sums of the same levels and
/// scales, for every format's level range and group width, at one row and a part-filled panel,
/// and at token counts with and without a remainder past the kernels' pass.
#[test]
fn panel_products_match_the_exact_sums_on_every_instruction_set() {
    use crate::levels::{unpacker, RowLevels};
    use crate::panel::Panel;
    use hearth_quant::Format;
    for isa in Isa::available() {
        let kernels = Kernels::new(isa).unwrap();
        for format in Format::ALL {
            let Some(unpack) = unpacker(format) else {
                continue;
            };
            let Some(dot) = kernels.panel_dot(format) else {
                assert!(
                    isa == Isa::Avx2 && crate::levels::beyond_64(format),
                    "{isa} {format}"
                );
                continue;
            };
            let lanes = dot.lanes();
            let block = format.block_size().max(32);
            for (rows, cols, tokens, seed) in [
                (1, block, 1, 1),
                (lanes - 3, 2 * block, 5, 2),
                (lanes, 576.max(block), 9, 3),
            ] {
                let cols = cols / block * block;
                let values: Vec<f32> = noise(rows * cols, seed)
                    .enumerate()
                    .map(|(i, u)| ((u - 0.5) * [0.05, 1.0, 20.0][i / cols % 3]) as f32)
                    .collect();
                let w = hearth_model::Matrix::quantize(format, rows, cols, &values).unwrap();
                let xs: Vec<f32> = noise(tokens * cols, seed + 7)
                    .map(|u| (u * 6.0 - 3.0) as f32)
                    .collect();
                let mut act = ActQ8::default();
                act.quantize(&xs, cols);
                let (mut panel, mut scratch) = (Panel::default(), RowLevels::default());
                panel.fill(lanes, format, unpack, &w.data, cols, &mut scratch);
                let mut out = vec![f32::NAN; tokens * lanes];
                dot.run(&panel, &act, &mut out);
                let row_bytes = w.data.len() / rows;
                for r in 0..lanes {
                    let mut levels = RowLevels::default();
                    if r < rows {
                        let row = &w.data[r * row_bytes..][..row_bytes];
                        levels.unpack(format, unpack, row, cols);
                    } else {
                        levels.levels = vec![0; cols];
                        levels.d = vec![0.0; cols / 16];
                        levels.m = vec![0.0; cols / 16];
                    }
                    let row = LevelsRow {
                        levels: &levels.levels,
                        d: &levels.d,
                        m: &levels.m,
                        has_base: true,
                    };
                    for t in 0..tokens {
                        let want = exact(row, act.row(t));
                        let got = out[t * lanes + r] as f64;
                        let scale: f64 = (0..cols)
                            .map(|j| {
                                let (l, x) = (row.levels[j] as f64, act.row(t).q[j] as f64);
                                let term = (l * row.d[j / 16] as f64 + row.m[j / 16] as f64)
                                    * x
                                    * act.row(t).d[j / 32] as f64;
                                term.abs()
                            })
                            .sum();
                        assert!(
                            (got - want).abs() <= 1e-5 * scale + 1e-6,
                            "{isa} {format} {rows}x{cols} row {r} token {t}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

/// Attention's scores and weighted sums of rows, at widths with and without a remainder past the SIMD
/// kernels' 32 and 8 columns, against f64.
#[test]
fn weighted_sums_match_f64_on_every_instruction_set() {
    for isa in Isa::available() {
        let kernels = Kernels::new(isa).unwrap();
        for (rows, width, seed) in [(1, 64, 1), (7, 72, 2), (3, 5, 3), (40, 128, 4)] {
            let w: Vec<f32> = noise(rows, seed).map(|u| u as f32).collect();
            let values: Vec<f32> = noise(rows * width, seed + 1)
                .map(|u| (u * 4.0 - 2.0) as f32)
                .collect();
            let start: Vec<f32> = noise(width, seed + 2).map(|u| u as f32).collect();
            let mut out = start.clone();
            kernels.weighted_sum(&w, &values, &mut out);
            for (j, &got) in out.iter().enumerate() {
                let want = start[j] as f64
                    + (0..rows)
                        .map(|p| w[p] as f64 * values[p * width + j] as f64)
                        .sum::<f64>();
                assert!(
                    (got as f64 - want).abs() < 1e-5,
                    "{isa} {rows}x{width} column {j}"
                );
            }
            let mut unchanged = start.clone();
            kernels.weighted_sum(&w, &values[1..], &mut unchanged);
            assert_eq!(unchanged, start, "{isa}: rows of the wrong length");

            // The scores' side: each row's dot product with one query.
            let q = &start;
            let mut scores = vec![f32::NAN; rows];
            kernels.dots(q, &values, &mut scores);
            for (p, &got) in scores.iter().enumerate() {
                let want: f64 = (0..width)
                    .map(|j| q[j] as f64 * values[p * width + j] as f64)
                    .sum();
                assert!(
                    (got as f64 - want).abs() < 1e-5,
                    "{isa} dots {rows}x{width} row {p}"
                );
            }
        }
    }
}

/// Every instruction set quantizes activations to exactly the plain-Rust definition's values,
/// ties and zero blocks included.
#[test]
fn every_instruction_set_quantizes_as_the_definition() {
    let mut x: Vec<f32> = noise(4 * 96, 9).map(|u| (u * 10.0 - 5.0) as f32).collect();
    // A block of zeros, and ties: 127 / amax = 1 makes 0.5 and 2.5 exact halves.
    x[96..128].fill(0.0);
    x[128] = 127.0;
    x[129] = 0.5;
    x[130] = 2.5;
    x[131] = -3.5;
    let mut want = ActQ8::default();
    want.quantize(&x, 96);
    assert_eq!(&want.q[129..132], &[0, 2, -4]);
    for isa in Isa::available() {
        let mut got = ActQ8::default();
        Kernels::new(isa).unwrap().quantize(&x, 96, &mut got);
        assert_eq!((got.rows, got.cols), (want.rows, want.cols), "{isa}");
        assert_eq!(got.q, want.q, "{isa}");
        assert_eq!(got.u, want.u, "{isa}");
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got.d), bits(&want.d), "{isa}");
        assert_eq!(bits(&got.sums), bits(&want.sums), "{isa}");
    }
}

/// F16 rows read as the file holds them, against f64, at lengths with and without a tail
/// past the SIMD kernel's 32 values.
#[test]
fn f16_rows_match_f64_on_every_instruction_set() {
    for isa in Isa::available() {
        let kernels = Kernels::new(isa).unwrap();
        for (len, seed) in [(1, 1), (32, 2), (45, 3), (576, 4)] {
            let w: Vec<half::f16> = noise(len, seed)
                .map(|u| half::f16::from_f64(u * 2.0 - 1.0))
                .collect();
            let bytes: Vec<u8> = w.iter().flat_map(|h| h.to_le_bytes()).collect();
            let x: Vec<f32> = noise(len, seed + 1)
                .map(|u| (u * 4.0 - 2.0) as f32)
                .collect();
            let want: f64 = w.iter().zip(&x).map(|(a, &b)| a.to_f64() * b as f64).sum();
            let got = kernels.f16_dot(&bytes, &x) as f64;
            assert!((got - want).abs() < 1e-4, "{isa} {len}: {got} vs {want}");
            assert_eq!(
                kernels.f16_dot(&bytes[1..], &x),
                0.0,
                "{isa}: a row of the wrong length"
            );
        }
    }
}

/// The SIMD exponential is within 2 ulp-ish (4e-7 relative) of `expf` from 0 down to where
/// `expf` leaves the normal numbers, and the sums agree.
#[test]
fn exp_shifted_matches_expf() {
    let x: Vec<f32> = (0..1003).map(|i| 3.0 - i as f32 * 0.0867).collect();
    for isa in Isa::available() {
        let k = Kernels::new(isa).unwrap();
        let mut got = x.clone();
        let (max, sum) = k.exp_shifted(&mut got);
        assert_eq!(max, 3.0);
        let want: Vec<f32> = x.iter().map(|v| (v - max).exp()).collect();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 4e-7 * w, "{isa} at {}: {g} vs {w}", x[i]);
        }
        let total: f32 = want.iter().sum();
        assert!(
            (sum - total).abs() <= 1e-5 * total,
            "{isa}: {sum} vs {total}"
        );
    }
    let k = Kernels::new(Isa::Portable).unwrap();
    assert_eq!(k.exp_shifted(&mut []), (f32::NEG_INFINITY, 0.0));
}
