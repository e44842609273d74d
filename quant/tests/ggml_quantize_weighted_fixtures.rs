//! Quantization against ggml's own C quantizers (`ggml_quantize_chunk` of the llama.cpp that
//! scripts/llama-cpp builds): the fixtures in tests/fixtures/ggml_quantize_weighted hold rows of
//! f32 values, an importance per column (as llama.cpp's imatrix gives), and the blocks ggml
//! writes for them with the importance (`quantize_row_*_impl`) and, for Q8_0 and the k-quants,
//! without it (`quantize_row_*_ref`); scripts/fixtures/make-ggml-quantize-weighted makes them (versions in
//! VERSIONS). Hearth's blocks must be the same bytes.

use std::path::PathBuf;

use hearth_quant::{Format, Rounding};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ggml_quantize_weighted")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn floats(name: &str) -> Vec<f32> {
    fixture(name)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// The blocks of `got` that differ from `want`, as "N of M blocks differ, first [..]".
fn differing_blocks(format: Format, got: &[u8], want: &[u8]) -> Option<String> {
    assert_eq!(got.len(), want.len(), "{format}");
    let bad: Vec<usize> = got
        .chunks(format.block_bytes())
        .zip(want.chunks(format.block_bytes()))
        .enumerate()
        .filter(|(_, (g, w))| g != w)
        .map(|(b, _)| b)
        .collect();
    (!bad.is_empty()).then(|| {
        format!(
            "{} of {} blocks differ, first {:?}",
            bad.len(),
            got.len() / format.block_bytes(),
            &bad[..bad.len().min(8)]
        )
    })
}

/// ggml's name of each format the fixtures hold.
const TYPES: [(&str, Format); 21] = [
    ("Q4_0", Format::Q4_0),
    ("Q4_1", Format::Q4),
    ("Q5_0", Format::Q5_0),
    ("Q5_1", Format::Q5_1),
    ("Q2_K", Format::Q2_K),
    ("Q3_K", Format::Q3_K),
    ("Q4_K", Format::Q4_K),
    ("Q5_K", Format::Q5_K),
    ("Q6_K", Format::Q6_K),
    ("IQ4_NL", Format::IQ4_NL),
    ("IQ4_XS", Format::IQ4_XS),
    ("MXFP4", Format::MXFP4),
    ("IQ2_XXS", Format::IQ2_XXS),
    ("IQ2_XS", Format::IQ2_XS),
    ("IQ2_S", Format::IQ2_S),
    ("IQ3_XXS", Format::IQ3_XXS),
    ("IQ3_S", Format::IQ3_S),
    ("IQ1_S", Format::IQ1_S),
    ("IQ1_M", Format::IQ1_M),
    ("TQ1_0", Format::TQ1_0),
    ("TQ2_0", Format::TQ2_0),
];

#[test]
fn importance_weighted_blocks_are_ggmls() {
    let input = floats("input.f32");
    let importance = floats("importance.f32");
    assert_eq!(input.len() % importance.len(), 0);
    for (name, format) in TYPES {
        let want = fixture(&format!("{name}.weighted.bin"));
        let mut got = vec![0u8; format.bytes_for(input.len()).unwrap()];
        format
            .quantize_weighted(&input, &mut got, &importance)
            .unwrap();
        if let Some(diff) = differing_blocks(format, &got, &want) {
            panic!("{name} with an importance matrix: {diff}");
        }
        let mut values = vec![0f32; input.len()];
        format.dequantize(&got, &mut values).unwrap();
        assert!(values.iter().all(|v| v.is_finite()), "{name}");
    }
}

#[test]
fn reference_blocks_are_ggmls() {
    // The k-quants, the 4-bit i-quants, MXFP4 and the lattice i-quants whose ggml quantizer
    // runs without a matrix follow ggml's quantizers whatever the rounding; Q8 (Q8_0) with
    // MinMax.
    let input = floats("input.f32");
    let k_quants = TYPES.into_iter().filter(|(_, f)| {
        f.is_k_quant()
            || matches!(
                f,
                Format::IQ4_NL
                    | Format::IQ4_XS
                    | Format::MXFP4
                    | Format::IQ2_S
                    | Format::IQ3_XXS
                    | Format::IQ3_S
                    | Format::IQ1_M
                    | Format::TQ1_0
                    | Format::TQ2_0
            )
    });
    let cases = k_quants
        .map(|(name, f)| (name, f, Rounding::Search))
        .chain([("Q8_0", Format::Q8, Rounding::MinMax)]);
    for (name, format, rounding) in cases {
        let want = fixture(&format!("{name}.ref.bin"));
        let mut got = vec![0u8; format.bytes_for(input.len()).unwrap()];
        format.quantize_with(&input, &mut got, rounding).unwrap();
        if let Some(diff) = differing_blocks(format, &got, &want) {
            panic!("{name} {rounding:?}: {diff}");
        }
    }
}
