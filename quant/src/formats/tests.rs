//! Tests across all formats: identity, geometry, round-trip error bounds, the search against
//! min-max, dot products and size checks. Layouts are tested in each format's module.

use super::*;
use crate::testutil::{dequantize_format, f16_bits_to_f32, f32_to_f16_bits, normal, quantize, Lcg};
use crate::{dequantize as dequantize_ggml_type, BlockType, Half};

/// Quantized formats with their level counts (Q8: `2 * 127 + 1` symmetric levels).
const QUANTIZED: [(Format, u32); 8] = [
    (Format::Q2, 4),
    (Format::Q3, 8),
    (Format::Q3H, 11),
    (Format::Q4, 16),
    (Format::Q4B64, 16),
    (Format::Q5, 32),
    (Format::Q6, 64),
    (Format::Q8, 255),
];

/// Test tensors of 8192 values (a whole number of blocks of every format), from several
/// distributions: weight-like normal values, values far from zero, a wide range, heavy tails
/// (cubes of normals), and blocks that are constant or nearly so.
fn data_sets() -> Vec<(&'static str, Vec<f32>)> {
    let n = 8192;
    let heavy = normal(4, n, 0.0, 1.0).iter().map(|x| x * x * x).collect();
    let mut flat = normal(5, n, 1.0, 1e-6);
    flat[..64].fill(0.3); // one constant block at both block sizes
    flat[64..128].fill(-7.0); // one exactly representable
    vec![
        ("normal", normal(1, n, 0.0, 0.02)),
        ("offset", normal(2, n, 3.0, 1.0)),
        ("wide", normal(3, n, 0.0, 100.0)),
        ("heavy", heavy),
        ("flat", flat),
    ]
}

#[test]
fn names_and_ids_round_trip() {
    for format in Format::ALL {
        assert_eq!(Format::from_name(format.name()), Some(format));
        assert_eq!(
            Format::from_name(&format.name().to_lowercase()),
            Some(format)
        );
        assert_eq!(format.to_string().parse::<Format>(), Ok(format));
        assert_eq!(Format::from_gguf_id(format.gguf_id()), Some(format));
        assert_eq!(format.is_private(), format.gguf_id() >= PRIVATE_ID_BASE);
    }
    let private: Vec<_> = Format::ALL.into_iter().filter(|f| f.is_private()).collect();
    use Format::*;
    assert_eq!(private, [Q2, Q3, Q3H, Q4B64, Q5, Q6]);
    let ids = Format::ALL.map(Format::gguf_id);
    assert_eq!(
        ids,
        [
            0, 1, 1024, 1025, 1026, 3, 1027, 1028, 1029, 8, 2, 6, 7, 10, 11, 12, 13, 14, 20, 23,
            39, 16, 17, 22, 18, 21, 19, 29, 34, 35
        ]
    );
    assert_eq!(Format::from_name("q3h"), Some(Q3H));
    assert_eq!(Format::from_name("q5_1"), Some(Q5_1));
    assert_eq!(Format::from_gguf_id(2), Some(Q4_0));
    assert_eq!(
        Format::from_gguf_id(15),
        None,
        "Q8_K is not a Hearth format"
    );
    assert_eq!(Format::from_gguf_id(1030), None);
    assert_eq!(format!("[{:<6}]", Q4), "[Q4    ]");

    let err = "Q9".parse::<Format>().unwrap_err();
    assert_eq!(err, Error::UnknownFormat { name: "Q9".into() });
    let msg = err.to_string();
    assert!(
        msg.contains("\"Q9\"")
            && msg.contains("F32, F16, Q2, Q3, Q3H, Q4, Q4B64, Q5, Q6, Q8, Q4_0, Q5_0, Q5_1, Q2_K"),
        "{msg}"
    );
}

#[test]
fn geometry() {
    // (format, values per block, bytes per block, bits per weight)
    use Format::*;
    let table = [
        (F32, 1, 4, 32.0),
        (F16, 1, 2, 16.0),
        (Q2, 32, 12, 3.0),
        (Q3, 32, 16, 4.0),
        (Q3H, 64, 32, 4.0),
        (Q4, 32, 20, 5.0),
        (Q4B64, 64, 36, 4.5),
        (Q5, 64, 44, 5.5),
        (Q6, 64, 52, 6.5),
        (Q8, 32, 34, 8.5),
        (Q4_0, 32, 18, 4.5),
        (Q5_0, 32, 22, 5.5),
        (Q5_1, 32, 24, 6.0),
        (Q2_K, 256, 84, 2.625),
        (Q3_K, 256, 110, 3.4375),
        (Q4_K, 256, 144, 4.5),
        (Q5_K, 256, 176, 5.5),
        (Q6_K, 256, 210, 6.5625),
        (IQ4_NL, 32, 18, 4.5),
        (IQ4_XS, 256, 136, 4.25),
        (MXFP4, 32, 17, 4.25),
        (IQ2_XXS, 256, 66, 2.0625),
        (IQ2_XS, 256, 74, 2.3125),
        (IQ2_S, 256, 82, 2.5625),
        (IQ3_XXS, 256, 98, 3.0625),
        (IQ3_S, 256, 110, 3.4375),
        (IQ1_S, 256, 50, 1.5625),
        (IQ1_M, 256, 56, 1.75),
        (TQ1_0, 256, 54, 1.6875),
        (TQ2_0, 256, 66, 2.0625),
    ];
    assert_eq!(table.map(|row| row.0), Format::ALL);
    for (format, size, bytes, bits) in table {
        assert_eq!(format.block_size(), size, "{format}");
        assert_eq!(format.block_bytes(), bytes, "{format}");
        assert_eq!(format.bits_per_weight(), bits, "{format}");
    }
    assert_eq!(Q3H.bytes_for(128), Some(64));
    assert_eq!(Q3H.bytes_for(96), None);
    assert_eq!(F32.bytes_for(usize::MAX), None);
    assert_eq!(Q8.bytes_for(0), Some(0));
}

/// Whether [`layout_reference`] restates the format's layout: all but the k-quants, the
/// lattice i-quants and the ternary types, which are checked elsewhere.
fn restated(f: &Format) -> bool {
    !f.is_k_quant() && !f.is_lattice() && !matches!(f, Format::TQ1_0 | Format::TQ2_0)
}

/// The values `raw` holds in `format`, restated from the layouts the format modules document
/// (and, for the GGUF types, from ggml's `dequantize_row_*`), reading bytes
/// and converting f16 by hand: an expectation that shares no code with the formats. NaN comes
/// back as the canonical NaN.
fn layout_reference(format: Format, raw: &[u8]) -> Vec<f32> {
    use Format::*;
    let half = |b: &[u8]| f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]));
    match format {
        F32 => {
            return raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        }
        F16 => return raw.chunks_exact(2).map(half).collect(),
        Q4_0 | Q5_0 => {
            // d (f16), [Q5_0: a mask of fifth bits], 16 bytes of nibbles (value j < 16 low,
            // j + 16 high); value = (q - 8) * d or (q - 16) * d in integers, then times d.
            let (bytes, centre, at) = if format == Q4_0 {
                (18, 8, 2)
            } else {
                (22, 16, 6)
            };
            return raw
                .chunks_exact(bytes)
                .flat_map(|b| {
                    (0..32).map(move |j| {
                        let low = (b[at + j % 16] >> (4 * (j / 16))) & 0x0F;
                        let high = if format == Q5_0 {
                            (u32::from_le_bytes([b[2], b[3], b[4], b[5]]) >> j) & 1
                        } else {
                            0
                        };
                        let q = i32::from(low) + 16 * high as i32 - centre;
                        q as f32 * half(&b[..2])
                    })
                })
                .collect();
        }
        _ => {}
    }
    // ggml's kvalues_iq4nl.
    const KVALUES: [i8; 16] = [
        -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
    ];
    match format {
        IQ4_XS => {
            // d (f16), the scales' high bits (u16, two per 32), their low nibbles (4 bytes),
            // then each 32's nibbles as IQ4_NL's: value = d * (scale - 32) * kvalues[q].
            return raw
                .chunks_exact(136)
                .flat_map(|b| {
                    (0..256).map(move |j| {
                        let (ib, k) = (j / 32, j % 32);
                        let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
                        let high = (u16::from_le_bytes([b[2], b[3]]) >> (2 * ib)) & 3;
                        let scale = i32::from(low) + 16 * i32::from(high) - 32;
                        let q = (b[8 + 16 * ib + k % 16] >> (4 * (k / 16))) & 0x0F;
                        half(&b[..2]) * scale as f32 * f32::from(KVALUES[usize::from(q)])
                    })
                })
                .collect();
        }
        MXFP4 => {
            // e (a biased exponent byte), 16 bytes of nibbles as Q4_0's; value =
            // kvalues_mxfp4[q] * 2^(e - 128), the e2m1 values doubled.
            const E2M1_TWICE: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
            return raw
                .chunks_exact(17)
                .flat_map(|b| {
                    (0..32).map(move |j| {
                        let q = (b[1 + j % 16] >> (4 * (j / 16))) & 0x0F;
                        let d = (2.0f64).powi(i32::from(b[0]) - 128) as f32;
                        f32::from(E2M1_TWICE[usize::from(q)]) * d
                    })
                })
                .collect();
        }
        IQ4_NL => {
            // d (f16), 16 bytes of nibbles as Q4_0's; value = d * kvalues[q].
            return raw
                .chunks_exact(18)
                .flat_map(|b| {
                    (0..32).map(move |j| {
                        let q = (b[2 + j % 16] >> (4 * (j / 16))) & 0x0F;
                        half(&b[..2]) * f32::from(KVALUES[usize::from(q)])
                    })
                })
                .collect();
        }
        // The k-quants' layouts are restated value by value in their modules' tests; the
        // lattice i-quants' and the ternary types' are checked against gguf-py's on fixture
        // blocks (tests/ggml_fixtures.rs).
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S
        | IQ1_M | TQ1_0 | TQ2_0 => unreachable!("{format}"),
        Q8 => {
            // d (f16), then 32 signed levels: value = q * d.
            return raw
                .chunks_exact(34)
                .flat_map(|b| {
                    b[2..]
                        .iter()
                        .map(move |&q| f32::from(q as i8) * half(&b[..2]))
                })
                .collect();
        }
        _ => {}
    }
    // The rest: d and m (f16), then the levels; value = q * d + m.
    let level = |b: &[u8], j: usize| -> u8 {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        // Low four bits as Q4B64 keeps them (also Q5's and Q6's).
        let nibble64 = || (b[4 + j % 32] >> (4 * (j / 32))) & 0x0F;
        match format {
            Q2 => (b[4 + j % 8] >> (2 * (j / 8))) & 3,
            Q3 => (b[4 + j % 8] >> (2 * (j / 8))) & 3 | (((u32_at(12) >> j) & 1) as u8) << 2,
            Q3H => {
                let p = j / 2;
                let low = (b[4 + p % 16] >> (4 * (p / 16))) & 0x0F;
                let high = (0..3).map(|k| (((u32_at(20 + 4 * k) >> p) & 1) as u8) << (4 + k));
                let code = high.fold(low, |c, bit| c | bit);
                if j % 2 == 0 {
                    code % 11
                } else {
                    code / 11
                }
            }
            Q4 => (b[4 + j % 16] >> (4 * (j / 16))) & 0x0F,
            Q4B64 => nibble64(),
            Q5 => {
                let qh = u64::from_le_bytes(b[36..44].try_into().unwrap());
                nibble64() | (((qh >> j) & 1) as u8) << 4
            }
            Q6 => nibble64() | ((b[36 + j % 16] >> (2 * (j / 16))) & 3) << 4,
            Q5_1 => (b[8 + j % 16] >> (4 * (j / 16))) & 0x0F | (((u32_at(4) >> j) & 1) as u8) << 4,
            _ => unreachable!(),
        }
    };
    raw.chunks_exact(format.block_bytes())
        .flat_map(|b| {
            let (d, m) = (half(&b[0..2]), half(&b[2..4]));
            (0..format.block_size()).map(move |j| f32::from(level(b, j)) * d + m)
        })
        .collect()
}

/// Bits, with every NaN as one value (NaN payloads are not part of any layout).
fn canonical(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
        .collect()
}

/// Four blocks of pseudo-random bytes (any bit pattern is a block), seeded by `seed`.
fn random_blocks(bytes_per_block: usize, seed: u64) -> Vec<u8> {
    let mut rng = Lcg::new(seed);
    (0..4 * bytes_per_block)
        .map(|_| (rng.next_u64() >> 56) as u8)
        .collect()
}

#[test]
fn fitting_formats_keep_precision_where_they_can() {
    use Format::*;
    // Rows of 256 fit every format.
    for f in Format::ALL {
        assert_eq!(f.fitting(256), f);
    }
    // SmolLM2's rows of 576 fit no k-quant: the private format of as many bits or the next
    // above takes them (Q3_K's 3.44 bits go to Q3's 4.0, Q6_K's 6.56 to Q8's 8.5).
    let k_fallbacks = [
        (Q2_K, Q2),
        (Q3_K, Q3),
        (Q4_K, Q4B64),
        (Q5_K, Q5),
        (Q6_K, Q8),
    ];
    for (k, to) in k_fallbacks {
        assert_eq!(k.fitting(576), to, "{k}");
        assert_eq!(k.fitting(1536), k, "{k}");
    }
    // Rows of 96 fit the 32-value formats only: the least bits at or above the wanted format's.
    assert_eq!(Q3H.fitting(96), Q3, "same bits per weight");
    assert_eq!(Q4B64.fitting(96), Q4_0, "same bits per weight");
    assert_eq!(Q5.fitting(96), Q5_0, "same bits per weight");
    assert_eq!(Q6.fitting(96), Q8);
    // Rows of 40 fit no quantized block: the plain floats remain.
    assert_eq!(Q8.fitting(40), F16);
    assert_eq!(Q2.fitting(40), F16);
    assert_eq!(F32.fitting(40), F32);
    for f in Format::ALL {
        for row in [1, 8, 32, 40, 48, 96, 160, 576] {
            let to = f.fitting(row);
            assert_eq!(row % to.block_size(), 0, "{f} rows of {row}");
            // Only F32 and F16 are left at odd rows, and F32 is wider than anything.
            assert!(
                to.bits_per_weight() >= f.bits_per_weight(),
                "{f} rows of {row}"
            );
        }
    }
}

#[test]
fn gguf_types_that_are_formats() {
    let mut found = vec![];
    for ty in BlockType::ALL {
        let Some(format) = ty.format() else {
            continue;
        };
        found.push(format);
        assert_eq!(Some(format.gguf_id()), ty.ggml_id(), "{ty}");
        assert_eq!(format.block_size(), ty.block_size(), "{ty}");
        assert_eq!(format.block_bytes(), ty.block_bytes(), "{ty}");
        // Byte for byte the same type: both paths dequantize random bytes as ggml does.
        let raw = random_blocks(ty.block_bytes(), ty.ggml_id().unwrap().into());
        let n = 4 * ty.block_size();
        let (mut a, mut b) = (vec![0.0f32; n], vec![0.0f32; n]);
        dequantize_ggml_type(ty, &raw, &mut a).unwrap();
        format.dequantize(&raw, &mut b).unwrap();
        if !restated(&format) {
            assert_eq!(canonical(&a), canonical(&b), "{ty}");
            continue;
        }
        let want = canonical(&layout_reference(format, &raw));
        assert_eq!(canonical(&a), want, "{ty}");
        assert_eq!(canonical(&b), want, "{format}");
    }
    use Format::*;
    assert_eq!(
        found,
        [
            F32, F16, Q4_0, Q4, Q5_0, Q5_1, Q8, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS,
            IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, TQ1_0, TQ2_0, MXFP4
        ]
    );
}

#[test]
fn dequantize_follows_the_documented_layouts() {
    for format in Format::ALL.into_iter().filter(restated) {
        let raw = random_blocks(format.block_bytes(), format.gguf_id().into());
        let got = dequantize_format(format, &raw);
        assert_eq!(got.len(), 4 * format.block_size());
        assert_eq!(
            canonical(&got),
            canonical(&layout_reference(format, &raw)),
            "{format}"
        );
    }
}

/// `sum (w - v)^2` per block of `size` values, in f64 in index order.
fn block_errors(w: &[f32], v: &[f32], size: usize) -> Vec<f64> {
    w.chunks(size)
        .zip(v.chunks(size))
        .map(|(w, v)| {
            w.iter()
                .zip(v)
                .map(|(&w, &v)| (f64::from(w) - f64::from(v)).powi(2))
                .sum()
        })
        .collect()
}

#[test]
fn min_max_error_is_within_half_a_step() {
    // With the exact d = (max - min) / (L - 1) and m = min every value would be within d/2 of
    // its level. The block stores d and m rounded to f16, which moves the grid's ends by up to
    // |m16 - min| and |m16 - min| + (L - 1) |d16 - d|; values inside the grid are within
    // d16 / 2 of a level, values beyond its ends within that shift. Bound per value:
    //   d16 / 2 + |m16 - min| + (L - 1) |d16 - d| + 4 eps (|m16| + (L - 1) d16 + |w|)
    // the last term covering f32 rounding of the level choice and of `q * d + m`.
    // Q8 likewise, with d = absmax / 127, m = 0 and L - 1 = 127.
    let eps = f64::from(f32::EPSILON);
    for (name, data) in data_sets() {
        for (format, levels) in QUANTIZED {
            let bytes = quantize(format, &data, Rounding::MinMax);
            let back = dequantize_format(format, &bytes);
            let size = format.block_size();
            for (b, (w, v)) in data.chunks(size).zip(back.chunks(size)).enumerate() {
                let block = &bytes[b * format.block_bytes()..];
                let d16 =
                    f64::from(Half::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32());
                let lo = w.iter().fold(f32::INFINITY, |a, &x| a.min(x));
                let hi = w.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                let (steps, min, m16, d) = if format == Format::Q8 {
                    let amax = f64::from(lo.abs().max(hi.abs()));
                    (127.0, 0.0, 0.0, amax / 127.0)
                } else {
                    let m16 = f64::from(
                        Half::from_bits(u16::from_le_bytes([block[2], block[3]])).to_f32(),
                    );
                    let steps = f64::from(levels - 1);
                    (
                        steps,
                        f64::from(lo),
                        m16,
                        (f64::from(hi) - f64::from(lo)) / steps,
                    )
                };
                for (&w, &v) in w.iter().zip(v) {
                    let w = f64::from(w);
                    let bound = d16 / 2.0
                        + (m16 - min).abs()
                        + steps * (d16 - d).abs()
                        + 4.0 * eps * (m16.abs() + steps * d16 + w.abs());
                    let err = (w - f64::from(v)).abs();
                    assert!(
                        err <= bound,
                        "{name} {format} block {b}: |{w} - {v}| = {err} > {bound}"
                    );
                }
            }
        }
    }
}

#[test]
fn constant_blocks_store_the_value() {
    // Asymmetric formats store a constant block as d = 0, m = the value, all levels 0 (Q8 can
    // only approximate it: its bound is tested above).
    for (format, _) in QUANTIZED.into_iter().filter(|(f, _)| *f != Format::Q8) {
        for rounding in [Rounding::MinMax, Rounding::Search] {
            let src = vec![-0.75f32; format.block_size()];
            let bytes = quantize(format, &src, rounding);
            let mut want = vec![0u8; format.block_bytes()];
            want[2..4].copy_from_slice(&Half::from_f32(-0.75).to_bits().to_le_bytes());
            assert_eq!(bytes, want, "{format} {rounding:?}");
            assert_eq!(
                dequantize_format(format, &bytes),
                src,
                "{format} {rounding:?}"
            );
        }
    }
}

#[test]
fn search_is_never_worse_than_min_max() {
    let mut total = [(0.0f64, 0.0f64); QUANTIZED.len()];
    for (name, data) in data_sets() {
        for (i, (format, _)) in QUANTIZED.into_iter().enumerate() {
            let size = format.block_size();
            let min_max = dequantize_format(format, &quantize(format, &data, Rounding::MinMax));
            let search = dequantize_format(format, &quantize(format, &data, Rounding::Search));
            let (e_min_max, e_search) = (
                block_errors(&data, &min_max, size),
                block_errors(&data, &search, size),
            );
            for (b, (mm, s)) in e_min_max.iter().zip(&e_search).enumerate() {
                assert!(
                    s <= mm,
                    "{name} {format} block {b}: search {s} > min-max {mm}"
                );
            }
            if name == "normal" {
                total[i] = (e_min_max.iter().sum(), e_search.iter().sum());
            }
        }
    }
    // On weight-like data the search gains clearly: at least 5% of the squared error.
    for ((format, _), (mm, s)) in QUANTIZED.iter().zip(total) {
        assert!(s < 0.95 * mm, "{format}: search {s} vs min-max {mm}");
    }
}

#[test]
fn error_falls_with_bits() {
    // RMS error of the round trip on weight-like data, most bits last. Q4B64 and Q4 both have
    // 16 levels; Q4's smaller blocks have the smaller ranges, so the smaller error. Q8's 255
    // levels beat Q6's 64; f16's relative error (2^-11) beats Q8's step of absmax / 127.
    use Format::*;
    let order = [Q2, Q3, Q3H, Q4B64, Q4, Q5, Q6, Q8, F16, F32];
    let data = normal(11, 64 * 512, 0.0, 0.02);
    for rounding in [Rounding::MinMax, Rounding::Search] {
        let rms = order.map(|format| {
            let back = dequantize_format(format, &quantize(format, &data, rounding));
            let sq: f64 = block_errors(&data, &back, data.len())[0];
            (sq / data.len() as f64).sqrt()
        });
        for (pair, err) in order.windows(2).zip(rms.windows(2)) {
            assert!(
                err[0] > err[1],
                "{rounding:?}: {} RMS {} <= {} RMS {}",
                pair[0],
                err[0],
                pair[1],
                err[1]
            );
        }
        assert_eq!(rms[9], 0.0, "F32 is exact");
    }
}

#[test]
fn f16_rounds_to_nearest_and_f32_copies() {
    let data = normal(12, 256, 0.0, 3.0);
    let f16 = quantize(Format::F16, &data, Rounding::Search);
    let want: Vec<u8> = data
        .iter()
        .flat_map(|&x| f32_to_f16_bits(x).to_le_bytes())
        .collect();
    assert_eq!(f16, want);
    assert_eq!(quantize(Format::F16, &data, Rounding::MinMax), f16);
    let f32 = quantize(Format::F32, &data, Rounding::Search);
    assert_eq!(f32, bytemuck::cast_slice::<f32, u8>(&data));
}

#[test]
fn dot_is_the_sum_of_dequantized_products() {
    // The reference sums the same products (exact in f64) in f64 in plain index order; `dot`
    // sums block by block, so the two f64 sums may differ by a few f64 roundings (relative
    // 1e-15 of sum |w x|), and each is rounded to f32 once. Tolerance: one f32 rounding of the
    // result plus 1e-12 of sum |w x|.
    let data = normal(13, 2048, 0.0, 0.5);
    let x = normal(14, 2048, 0.0, 1.0);
    for format in Format::ALL {
        let bytes = quantize(format, &data, Rounding::Search);
        let w = dequantize_format(format, &bytes);
        let exact: f64 = w
            .iter()
            .zip(&x)
            .map(|(&w, &x)| f64::from(w) * f64::from(x))
            .sum();
        let magnitude: f64 = w
            .iter()
            .zip(&x)
            .map(|(&w, &x)| (f64::from(w) * f64::from(x)).abs())
            .sum();
        let got = format.dot(&bytes, &x).unwrap();
        let tolerance = f64::from(f32::EPSILON) * exact.abs() + 1e-12 * magnitude;
        assert!(
            (f64::from(got) - exact).abs() <= tolerance,
            "{format}: {got} vs {exact}"
        );

        // Unaligned storage changes nothing.
        let mut storage = vec![0u8; bytes.len() + 1];
        storage[1..].copy_from_slice(&bytes);
        assert_eq!(
            format.dot(&storage[1..], &x).unwrap().to_bits(),
            got.to_bits(),
            "{format}"
        );
        assert_eq!(dequantize_format(format, &storage[1..]), w, "{format}");
    }
    // A small exact case: F32 [1, 2, 3] . [4, 5, 6] = 32.
    let bytes = quantize(Format::F32, &[1.0, 2.0, 3.0], Rounding::Search);
    assert_eq!(Format::F32.dot(&bytes, &[4.0, 5.0, 6.0]), Ok(32.0));
}

#[test]
fn empty_tensors_are_fine() {
    for format in Format::ALL {
        format.quantize(&[], &mut []).unwrap();
        format.dequantize(&[], &mut []).unwrap();
        assert_eq!(format.dot(&[], &[]), Ok(0.0));
    }
}

#[test]
fn sizes_are_checked() {
    let src = [0.5f32; 64];
    let mut dst = [7u8; 41];
    let err = Format::Q4.quantize(&src, &mut dst).unwrap_err();
    assert_eq!(
        err,
        Error::FormatByteCount {
            format: Format::Q4,
            values: 64,
            expected: 40,
            found: 41
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("Q4") && msg.contains("40") && msg.contains("41"),
        "{msg}"
    );
    assert_eq!(dst, [7u8; 41], "output untouched on error");

    let err = Format::Q3H
        .quantize(&src[..32], &mut dst[..16])
        .unwrap_err();
    assert_eq!(
        err,
        Error::FormatPartialBlock {
            format: Format::Q3H,
            values: 32,
            block_size: 64
        }
    );
    assert!(err.to_string().contains("64-value blocks"), "{err}");

    let mut out = [7.0f32; 64];
    let err = Format::Q5.dequantize(&[0; 43], &mut out).unwrap_err();
    assert_eq!(
        err,
        Error::FormatByteCount {
            format: Format::Q5,
            values: 64,
            expected: 44,
            found: 43
        }
    );
    assert_eq!(out, [7.0; 64]);
    // Too many bytes is as wrong as too few.
    assert_eq!(
        Format::Q5.dequantize(&[0; 45], &mut out),
        Err(Error::FormatByteCount {
            format: Format::Q5,
            values: 64,
            expected: 44,
            found: 45
        })
    );
    assert_eq!(
        Format::Q2.dequantize(&[0; 12], &mut out[..31]),
        Err(Error::FormatPartialBlock {
            format: Format::Q2,
            values: 31,
            block_size: 32
        })
    );
    assert_eq!(
        Format::F16.dequantize(&[0; 3], &mut out[..1]),
        Err(Error::FormatByteCount {
            format: Format::F16,
            values: 1,
            expected: 2,
            found: 3
        })
    );
    assert_eq!(out, [7.0; 64], "output untouched on error");

    // dot takes its value count from x.
    assert_eq!(
        Format::Q8.dot(&[0; 34], &[1.0; 31]),
        Err(Error::FormatPartialBlock {
            format: Format::Q8,
            values: 31,
            block_size: 32
        })
    );
    assert_eq!(
        Format::Q8.dot(&[0; 34], &[1.0; 64]),
        Err(Error::FormatByteCount {
            format: Format::Q8,
            values: 64,
            expected: 68,
            found: 34
        })
    );
    assert_eq!(Format::Q8.dot(&[0; 34], &[1.0; 32]), Ok(0.0));
}

#[test]
fn non_finite_input_is_rejected() {
    let mut src = vec![0.25f32; 256];
    src[37] = f32::NAN;
    src[50] = f32::INFINITY;
    for format in Format::ALL {
        let mut dst = vec![9u8; format.bytes_for(256).unwrap()];
        let err = format.quantize(&src, &mut dst).unwrap_err();
        assert_eq!(
            err,
            Error::NonFinite {
                format,
                index: 37,
                what: "NaN"
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("value 37") && msg.contains("NaN"), "{msg}");
        assert!(
            dst.iter().all(|&b| b == 9),
            "{format}: output untouched on error"
        );
    }
    src[37] = 1.0;
    src[12] = f32::NEG_INFINITY;
    let mut dst = vec![0u8; 256 * 4];
    let err = Format::F32.quantize(&src, &mut dst).unwrap_err();
    assert_eq!(
        err,
        Error::NonFinite {
            format: Format::F32,
            index: 12,
            what: "-inf"
        }
    );
}

#[test]
fn values_beyond_f16_range_are_rejected() {
    // 65519 still rounds to the largest f16, 65504; 65520 rounds to infinity.
    let mut src = vec![1.0f32; 256];
    src[3] = -65519.0;
    for format in Format::ALL {
        let mut dst = vec![0u8; format.bytes_for(256).unwrap()];
        format.quantize(&src, &mut dst).unwrap();
    }
    src[9] = 65520.0;
    for format in Format::ALL {
        let mut dst = vec![0u8; format.bytes_for(256).unwrap()];
        let result = format.quantize(&src, &mut dst);
        if format == Format::F32 {
            assert_eq!(result, Ok(()));
        } else {
            let err = result.unwrap_err();
            assert_eq!(
                err,
                Error::OutOfRange {
                    format,
                    index: 9,
                    value: "65520".into()
                }
            );
            assert!(err.to_string().contains("value 9"), "{err}");
        }
    }
}

/// The k-quants with their bits per level, values per sub-block and levels of a sub-block's
/// scale.
const K_QUANTS: [(Format, u32, usize, f64); 5] = [
    (Format::Q2_K, 2, 16, 15.0),
    (Format::Q3_K, 3, 16, 32.0),
    (Format::Q4_K, 4, 32, 63.0),
    (Format::Q5_K, 5, 32, 63.0),
    (Format::Q6_K, 6, 16, 128.0),
];

#[test]
fn k_quants_round_trip_within_bounds() {
    // Per sub-block, no value is further from its original than
    //   range / (2^bits - 1) + 2 amax / S + f32 rounding,
    // with `range` the sub-block's (from its min or 0, or 2 |x|max for the symmetric Q3_K and
    // Q6_K), `amax` the super-block's largest magnitude and S the levels of a sub-block's scale:
    // one step of the sub-block's own grid (nearest rounding needs half of it, the searches move
    // the grid), plus what rounding the sub-block's scale and min to S levels of the
    // super-block's can shift the grid's ends by. The RMS error on weight-like data falls with
    // bits.
    let mut previous = f64::INFINITY;
    for (format, bits, sub, scale_levels) in K_QUANTS {
        let steps = f64::from((1u32 << bits) - 1);
        for (name, data) in data_sets() {
            let back = dequantize_format(format, &quantize(format, &data, Rounding::Search));
            let amax = |w: &[f32]| w.iter().fold(0.0f64, |a, &x| a.max(f64::from(x.abs())));
            for (g, (w, v)) in data.chunks(sub).zip(back.chunks(sub)).enumerate() {
                let lo = w.iter().fold(f32::INFINITY, |a, &x| a.min(x));
                let hi = w.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                let range = if matches!(format, Format::Q3_K | Format::Q6_K) {
                    2.0 * amax(w)
                } else {
                    f64::from(hi) - f64::from(lo.min(0.0))
                };
                let sb_amax = amax(&data[g * sub / 256 * 256..][..256]);
                let bound = range / steps + 2.0 * sb_amax / scale_levels + 1e-6 * sb_amax;
                for (&w, &v) in w.iter().zip(v) {
                    let err = (f64::from(w) - f64::from(v)).abs();
                    assert!(
                        err <= bound,
                        "{name} {format} sub-block {g}: |{w} - {v}| = {err} > {bound}"
                    );
                }
            }
        }
        let data = normal(21, 256 * 64, 0.0, 0.02);
        let back = dequantize_format(format, &quantize(format, &data, Rounding::Search));
        let rms = (block_errors(&data, &back, data.len())[0] / data.len() as f64).sqrt();
        eprintln!("{format}: RMS error / sigma = {:.4}", rms / 0.02);
        assert!(rms < previous, "{format}: {rms} >= {previous}");
        previous = rms;
    }
}

/// `sum_i importance[i % row] (w_i - v_i)^2` in f64.
fn weighted_error(w: &[f32], v: &[f32], importance: &[f32]) -> f64 {
    let row = importance.len();
    w.iter()
        .zip(v)
        .enumerate()
        .map(|(i, (&w, &v))| f64::from(importance[i % row]) * (f64::from(w) - f64::from(v)).powi(2))
        .sum()
}

#[test]
fn importance_weights_lower_the_weighted_error() {
    // Rows of 512 where a few columns matter a hundred times more than the rest, as an
    // importance matrix finds for the channels with large activations: quantizing with the
    // weights must lower the error those weights measure, against the unweighted quantizer.
    let row = 512;
    let mut rng = Lcg::new(31);
    let importance: Vec<f32> = (0..row)
        .map(|_| if rng.uniform() < 0.1 { 100.0 } else { 1.0 })
        .collect();
    let data = normal(32, row * 64, 0.0, 0.02);
    for format in Format::ALL.into_iter().filter(|f| f.uses_importance()) {
        let plain = dequantize_format(format, &quantize(format, &data, Rounding::Search));
        let mut bytes = vec![0u8; format.bytes_for(data.len()).unwrap()];
        format
            .quantize_weighted(&data, &mut bytes, &importance)
            .unwrap();
        let weighted = dequantize_format(format, &bytes);
        let (e_plain, e_weighted) = (
            weighted_error(&data, &plain, &importance),
            weighted_error(&data, &weighted, &importance),
        );
        eprintln!("{format}: weighted error {e_weighted:.4e} vs {e_plain:.4e} without weights");
        assert!(
            e_weighted < 0.9 * e_plain,
            "{format}: {e_weighted} vs {e_plain}"
        );
    }
}

#[test]
fn own_formats_fit_blocks_whose_weights_are_all_zero() {
    // Columns an importance matrix never saw weigh nothing; a block of them is fitted
    // unweighted, as close as the plain quantizer's.
    let data = normal(35, 1024, 0.0, 1.0);
    let mut importance = vec![1.0f32; 256];
    importance[..64].fill(0.0);
    for format in [
        Format::Q2,
        Format::Q3,
        Format::Q3H,
        Format::Q4B64,
        Format::Q5,
        Format::Q6,
    ] {
        let mut bytes = vec![0u8; format.bytes_for(data.len()).unwrap()];
        format
            .quantize_weighted(&data, &mut bytes, &importance)
            .unwrap();
        let plain = dequantize_format(format, &quantize(format, &data, Rounding::Search));
        let weighted = dequantize_format(format, &bytes);
        let error = |v: &[f32], range: std::ops::Range<usize>| -> f64 {
            range
                .flat_map(|r| (0..64).map(move |c| r * 256 + c))
                .map(|i| (f64::from(v[i]) - f64::from(data[i])).powi(2))
                .sum()
        };
        let (e_plain, e_weighted) = (error(&plain, 0..4), error(&weighted, 0..4));
        assert!(
            e_weighted.is_finite() && e_weighted <= 1.01 * e_plain,
            "{format}: {e_weighted} vs {e_plain}"
        );
    }
}

#[test]
fn importance_weights_are_checked_and_others_ignore_them() {
    let data = normal(33, 1024, 0.0, 1.0);
    let mut dst = vec![0u8; Format::Q4_K.bytes_for(1024).unwrap()];
    for (importance, what) in [
        (vec![1.0; 128], "128 weights"),
        (vec![1.0; 768], "768 weights"),
        (vec![], "0 weights"),
    ] {
        let err = Format::Q4_K
            .quantize_weighted(&data, &mut dst, &importance)
            .unwrap_err();
        assert!(matches!(err, Error::Importance { .. }), "{err}");
        assert!(err.to_string().contains(what), "{err}");
    }
    let mut importance = vec![1.0; 256];
    importance[7] = -1.0;
    let err = Format::Q6_K
        .quantize_weighted(&data, &mut vec![0u8; 4 * 210], &importance)
        .unwrap_err();
    assert!(err.to_string().contains("weight 7 is -1"), "{err}");
    // Formats without a weighted quantizer quantize as without weights.
    for format in Format::ALL.into_iter().filter(|f| !f.uses_importance()) {
        let mut bytes = vec![0u8; format.bytes_for(1024).unwrap()];
        format
            .quantize_weighted(&data, &mut bytes, &[2.0; 256])
            .unwrap();
        assert_eq!(bytes, quantize(format, &data, Rounding::Search), "{format}");
    }
}

#[test]
fn ggml_formats_quantize_by_ggml_rule_whatever_the_rounding() {
    // Q4_0, Q5_0 and Q5_1 write ggml's reference bytes (tests/ggml_quantize_fixtures.rs
    // checks them against gguf-py's), so both rules give the same blocks; each value is
    // within a step of the stored scale (ggml's levels come from the unrounded scale).
    for (name, data) in data_sets() {
        for format in [Format::Q4_0, Format::Q5_0, Format::Q5_1] {
            let bytes = quantize(format, &data, Rounding::Search);
            assert_eq!(
                bytes,
                quantize(format, &data, Rounding::MinMax),
                "{name} {format}"
            );
            let back = dequantize_format(format, &bytes);
            let size = format.block_size();
            for (b, (w, v)) in data.chunks(size).zip(back.chunks(size)).enumerate() {
                let block = &bytes[b * format.block_bytes()..];
                let d = Half::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32();
                let amax = w.iter().fold(0f32, |a, x| a.max(x.abs()));
                for (&w, &v) in w.iter().zip(v) {
                    let err = (w - v).abs();
                    let bound = d.abs() + 1e-3 * amax;
                    assert!(
                        err <= bound,
                        "{name} {format} block {b}: |{w} - {v}| > {bound}"
                    );
                }
            }
        }
    }
}
