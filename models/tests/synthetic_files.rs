//! The bytes of synthetic files are pinned: benchmarks compare runs across versions, and tests
//! elsewhere hold numbers measured on these files, so a shape must keep building the same file.

use hearth_models::synthetic::{self, Family, Llama3Rope, Shape, ShapeExperts};
use hearth_models::{GgufFile, Result};
use hearth_quant::Format;

/// FNV-1a over 8-byte words (and the length): quick enough for a 100 MB file in a debug build.
fn digest(bytes: &[u8]) -> u64 {
    const PRIME: u64 = 0x0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let word = u64::from_le_bytes(w.try_into().unwrap());
        h = (h ^ word).wrapping_mul(PRIME);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(PRIME);
    }
    h
}

fn tiny(family: Family) -> Shape {
    Shape {
        family,
        ..Shape::TINY
    }
}

/// Every family, both ways of drawing weights, experts of both kinds, Llama 3's RoPE divisors
/// and a preset (the smallest), with the digest and length of the file each built first.
#[rustfmt::skip]
fn cases() -> Vec<(&'static str, Result<GgufFile>, u64, usize)> {
    let experts = |count, used, n_ff| Some(ShapeExperts { count, used, n_ff });
    let gemma2 = Shape {
        key_length: Some(32),
        sliding_window: Some(128),
        tied_embeddings: true,
        norm_eps: 1e-6,
        ..tiny(Family::Gemma2)
    };
    let qwen3moe = Shape {
        key_length: Some(16),
        experts: experts(4, 2, 64),
        ..tiny(Family::Qwen3)
    };
    let mixtral = Shape {
        experts: experts(4, 2, 128),
        ..Shape::TINY
    };
    let factors = Llama3Rope::LLAMA_3_1.factors(Shape::TINY.head_dim(), 10_000.0);
    let smollm2 = synthetic::preset("smollm2-135m").unwrap();
    vec![
        ("tiny", Shape::TINY.build("tiny", Format::Q8), 0x5a80_50cc_5b9f_0695, 121_056),
        ("tiny random", Shape::TINY.build_random("tiny", Format::Q4, 7), 0x2027_e778_a110_d44d, 74_464),
        (
            "tiny with RoPE divisors",
            Shape::TINY.build_random_with_rope_factors("tiny", Format::F16, 3, &factors),
            0xf029_1d86_cd3a_f9bd, 220_960,
        ),
        ("qwen2", tiny(Family::Qwen2).build_random("q2", Format::F16, 11), 0x0fab_af95_c308_360c, 222_208),
        ("qwen3moe", qwen3moe.build("q3", Format::Q4), 0x4617_3cd4_6dde_89dd, 106_432),
        ("gemma2", gemma2.build_random("g2", Format::Q8, 5), 0x9621_7676_dda9_a078, 131_200),
        ("gemma3", tiny(Family::Gemma3).build("g3", Format::F32), 0x0ba4_f7da_bf66_d3d4, 435_648),
        ("phi3", tiny(Family::Phi3).build_random("phi", Format::F32, 1), 0x89fe_8781_d72a_8324, 433_504),
        ("mixtral", mixtral.build("mx", Format::Q8), 0xa322_246a_cd82_f580, 278_560),
        ("smollm2-135m", smollm2.build(Format::Q8), 0x6a94_0b7a_26af_838b, 144_063_296),
    ]
}

#[test]
fn shapes_build_the_same_bytes() {
    for (what, file, want_digest, want_len) in cases() {
        let file = file.unwrap_or_else(|e| panic!("{what}: {e}"));
        let got = (digest(file.bytes()), file.bytes().len());
        assert_eq!(
            got,
            (want_digest, want_len),
            "{what}: the file's bytes changed"
        );
    }
}
