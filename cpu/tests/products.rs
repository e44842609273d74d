//! The native products against the quant crate's reference dot product, for every format and
//! every instruction set this CPU has (each forced in turn), at awkward shapes: one row, rows
//! not a multiple of any SIMD width, K of one block, one token, five, seven and eleven (a
//! step's eight-token passes and what is left, four, two and one at a time) and nineteen (rows
//! unpacked into panels, four tokens a pass and what is left). Matrices are laid out as the
//! executor lays them out for the instruction set (Q4_K's rows interleaved where its kernels
//! read them so, from shapes of whole groups of eight rows).
//!
//! Activations are rounded to 8 bits per 32 values (`x ~ q * d`, error at most `d / 2`), so a
//! row's product may differ from the exact one by `sum(|w_j| * d_j / 2)`: the bound each value
//! is held to, plus float rounding. Float formats, and every format with f32 activations, meet
//! 1e-5 of the sum of the products' magnitudes.

use hearth_cpu::act::{ActQ8, Activations, BLOCK};
use hearth_cpu::dot::Kernels;
use hearth_cpu::product::{product, Input, Output};
use hearth_cpu::weights::CpuMatrix;
use hearth_cpu::Isa;
use hearth_model::Matrix;
use hearth_quant::Format;

fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32
        })
        .collect()
}

/// Shapes (rows, cols) for `format`: one block, two blocks, and a model's widths.
fn shapes(format: Format) -> Vec<(usize, usize)> {
    let block = format.block_size().max(32);
    let mut shapes = vec![(1, block), (7, 2 * block), (16, block), (33, 3 * block)];
    if format.bytes_for(576).is_some() {
        shapes.push((67, 576));
    }
    shapes.push((5, 1536));
    shapes.push((40, 1536));
    shapes
}

#[test]
fn every_format_at_every_instruction_set_matches_the_reference_dot() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for isa in Isa::available() {
        let kernels = Kernels::new(isa).unwrap();
        for format in Format::ALL {
            for (seed, (rows, cols)) in shapes(format).into_iter().enumerate() {
                let seed = seed as u64;
                let values: Vec<f32> = noise(rows * cols, seed)
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v * [0.05, 1.0, 20.0][i / cols % 3])
                    .collect();
                let w = Matrix::quantize(format, rows, cols, &values).unwrap();
                let row_bytes = w.data.len() / rows;
                let dequantized = w.to_f32();
                for (tokens, mode) in [1, 5, 7, 11, 19]
                    .into_iter()
                    .flat_map(|t| Activations::ALL.map(|m| (t, m)))
                {
                    let laid = CpuMatrix::for_kernels(&kernels, mode, w.clone(), 8);
                    let x: Vec<f32> = noise(tokens * cols, seed + 100)
                        .iter()
                        .map(|v| v * 3.0)
                        .collect();
                    let mut act = ActQ8::default();
                    let mut input = Input::new(&x, cols, &mut act, mode);
                    let (stride, col0) = (rows + 3, 2);
                    let mut out = vec![f32::NAN; tokens * stride];
                    let mut transposed = Vec::new();
                    pool.install(|| {
                        let o = Output {
                            out: &mut out,
                            stride,
                            col0,
                        };
                        product(&kernels, &laid, 0..rows, &mut input, o, &mut transposed)
                    });
                    let mut rounded = ActQ8::default();
                    rounded.quantize(&x, cols);
                    for t in 0..tokens {
                        let xt = &x[t * cols..][..cols];
                        for r in 0..rows {
                            let row = &w.data[r * row_bytes..][..row_bytes];
                            let want = format.dot(row, xt).unwrap();
                            let got = out[t * stride + col0 + r];
                            let wr = &dequantized[r * cols..][..cols];
                            let bound = match (format, mode) {
                                (Format::F32 | Format::F16, _) | (_, Activations::F32) => {
                                    1e-5 * wr
                                        .iter()
                                        .zip(xt)
                                        .map(|(a, b)| (a * b).abs())
                                        .sum::<f32>()
                                }
                                _ => {
                                    wr.iter()
                                        .enumerate()
                                        .map(|(j, w)| {
                                            w.abs() * rounded.d[(t * cols + j) / BLOCK] * 0.5
                                        })
                                        .sum::<f32>()
                                        * 1.0001
                                }
                            } + 1e-6;
                            assert!(
                                (got - want).abs() <= bound,
                                "{isa} {format} {mode:?} {rows}x{cols} token {t} row {r}: {got} vs {want} (bound {bound})"
                            );
                        }
                        // Columns outside the product's are untouched.
                        assert!(out[t * stride].is_nan() && out[t * stride + stride - 1].is_nan());
                    }
                }
            }
        }
    }
}

/// Products the interleaved kernels do not take (part of a group's rows, f32 activations) put
/// the rows back in the file's packing and give the same values as the plain rows.
#[test]
fn interleaved_rows_in_part_or_with_f32_activations_match_the_plain_rows() {
    let (rows, cols) = (24, 512);
    let values: Vec<f32> = noise(rows * cols, 7);
    let w = Matrix::quantize(Format::Q4_K, rows, cols, &values).unwrap();
    for isa in Isa::available() {
        let kernels = Kernels::new(isa).unwrap();
        let laid = CpuMatrix::for_kernels(&kernels, Activations::Q8, w.clone(), 8);
        if cfg!(target_arch = "x86_64") && isa != Isa::Portable {
            assert!(laid.interleaved, "{isa} reads Q4_K interleaved");
        }
        let plain = CpuMatrix::rows(w.clone());
        let x = noise(3 * cols, 9);
        for (range, mode) in [
            (3..19, Activations::Q8),
            (8..24, Activations::Q8),
            (0..24, Activations::F32),
        ] {
            let run = |m: &CpuMatrix| {
                let mut act = ActQ8::default();
                let mut input = Input::new(&x, cols, &mut act, mode);
                let mut out = vec![0f32; 3 * range.len()];
                let o = Output {
                    out: &mut out,
                    stride: range.len(),
                    col0: 0,
                };
                product(&kernels, m, range.clone(), &mut input, o, &mut Vec::new());
                out
            };
            let (got, want) = (run(&laid), run(&plain));
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                    "{isa} {range:?} {mode:?}: {g} vs {w}"
                );
            }
        }
    }
}
