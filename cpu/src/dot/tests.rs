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
