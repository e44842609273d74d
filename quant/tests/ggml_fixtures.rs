//! ggml dequantization against gguf-py's: the fixtures in tests/fixtures/ggml are random
//! blocks of each type and the values `gguf.quants.dequantize` gives for them, made by
//! scripts/fixtures/make-ggml-dequant (versions in the fixtures' VERSIONS file). Hearth's
//! values must be the same bits.

use std::path::PathBuf;

use hearth_quant::dequantize_ggml;

/// Each fixture's type name and GGUF id.
const TYPES: [(&str, u32); 23] = [
    ("Q4_0", 2),
    ("Q4_1", 3),
    ("Q5_0", 6),
    ("Q5_1", 7),
    ("Q8_0", 8),
    ("Q2_K", 10),
    ("Q3_K", 11),
    ("Q4_K", 12),
    ("Q5_K", 13),
    ("Q6_K", 14),
    ("BF16", 30),
    ("IQ4_NL", 20),
    ("IQ4_XS", 23),
    ("TQ1_0", 34),
    ("TQ2_0", 35),
    ("MXFP4", 39),
    ("IQ2_XXS", 16),
    ("IQ2_XS", 17),
    ("IQ2_S", 22),
    ("IQ3_XXS", 18),
    ("IQ3_S", 21),
    ("IQ1_S", 19),
    ("IQ1_M", 29),
];

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ggml")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_ggml_type_dequantizes_as_gguf_py_does() {
    for (name, id) in TYPES {
        let blocks = fixture(&format!("{name}.bin"));
        let expected: Vec<f32> = fixture(&format!("{name}.f32"))
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert!(!expected.is_empty(), "{name}: empty fixture");
        let mut out = vec![f32::NAN; expected.len()];
        dequantize_ggml(id, &blocks, &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mismatches: Vec<(usize, f32, f32)> = (0..out.len())
            .filter(|&i| out[i].to_bits() != expected[i].to_bits())
            .map(|i| (i, out[i], expected[i]))
            .collect();
        assert!(
            mismatches.is_empty(),
            "{name}: {} of {} values differ from gguf-py's, first (index, hearth, gguf-py): {:?}",
            mismatches.len(),
            out.len(),
            &mismatches[..mismatches.len().min(4)]
        );
    }
}
