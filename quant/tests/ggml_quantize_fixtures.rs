//! Quantization to Q4_0, Q5_0 and Q5_1 against gguf-py's port of ggml's reference quantizer:
//! the fixtures in tests/fixtures/ggml_quantize hold f32 inputs and the blocks
//! `gguf.quants.quantize` writes for them, made by scripts/fixtures/make-ggml-quantize
//! (versions in the fixtures' VERSIONS file). Hearth's blocks must be the same bytes, with
//! either rounding rule.

use std::path::PathBuf;

use hearth_quant::{Format, Rounding};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ggml_quantize")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn legacy_types_quantize_as_gguf_py_does() {
    let input: Vec<f32> = fixture("input.f32")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(!input.is_empty());
    for format in [Format::Q4_0, Format::Q5_0, Format::Q5_1] {
        let want = fixture(&format!("{format}.bin"));
        for rounding in [Rounding::Search, Rounding::MinMax] {
            let mut got = vec![0u8; format.bytes_for(input.len()).unwrap()];
            format.quantize_with(&input, &mut got, rounding).unwrap();
            assert_eq!(got.len(), want.len(), "{format}");
            let bad: Vec<usize> = got
                .chunks(format.block_bytes())
                .zip(want.chunks(format.block_bytes()))
                .enumerate()
                .filter(|(_, (g, w))| g != w)
                .map(|(b, _)| b)
                .collect();
            assert!(
                bad.is_empty(),
                "{format} {rounding:?}: {} of {} blocks differ from gguf-py's, first {:?}",
                bad.len(),
                input.len() / 32,
                &bad[..bad.len().min(8)]
            );
        }
    }
}
