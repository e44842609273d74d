//! SmolLM2-135M-Instruct's logits against two independent references computed from the same
//! GGUF file, for a few short prompts (English, the GPL's opening, Python, French):
//!
//! - Hugging Face transformers (fixtures/smollm2_logits_transformers.json, made by
//!   scripts/fixtures/make-smollm2-logits-transformers): gguf-py dequantizes the weights to f32
//!   and PyTorch runs the model in f32. Hearth computes the same function from the same weights,
//!   so only the order of f32 operations differs: the tolerance is tight.
//! - llama.cpp's CPU backend (fixtures/smollm2_logits_llama_cpp.json, made by
//!   scripts/fixtures/make-smollm2-logits): it rounds each activation vector to 8 bits (Q8_1)
//!   before a product with Q4_1 weights, an approximation of its own, so it is held to a looser
//!   tolerance, and the top token must agree wherever its lead is larger than that tolerance.
//!
//! Each fixture holds, per prompt, the reference tokenizer's token ids and, at every position,
//! the reference's ten highest logits and their ids. Hearth runs the same ids through the engine,
//! on the Vulkan device (lavapipe in CI) and on the CPU reference; its tokenizer must give the
//! same ids. On the native CPU executor, with f32 activations it meets transformers' bound;
//! with 8-bit activations (its default, as llama.cpp's CPU backend) llama.cpp's.

use std::path::Path;

use hearth_cpu::Activations;
use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_model::kv::KvType;
use hearth_model::Logits;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    prompt: String,
    tokens: Vec<u32>,
    /// [position][rank]: the reference's highest logits, best first, and their token ids.
    top_ids: Vec<Vec<usize>>,
    top_logits: Vec<Vec<f32>>,
}

fn fixture(json: &str) -> Fixture {
    serde_json::from_str(json).expect("fixture parses")
}

const TRANSFORMERS: &str = include_str!("fixtures/smollm2_logits_transformers.json");
const LLAMA_CPP: &str = include_str!("fixtures/smollm2_logits_llama_cpp.json");

/// Hearth's logits, [tokens, n_vocab] per prompt, from an empty cache each time.
struct Hearth {
    n_vocab: usize,
    logits: Vec<Vec<f32>>,
}

/// Loads SmolLM2 on `backend` and runs every prompt of `cases` (whose tokens its tokenizer
/// must give).
fn run_hearth(backend: BackendKind, activations: Activations, cases: &[Case]) -> Option<Hearth> {
    let path = hearth_testkit::model(hearth_testkit::SMOLLM2)?;
    // The KV cache in f32, as transformers keeps it (llama.cpp: f16, Hearth's default).
    let options = EngineOptions {
        backend,
        n_ctx: Some(128),
        kv_type: KvType::F32,
        activations,
        ..EngineOptions::default()
    };
    let mut engine = hearth_testkit::or_skip(
        Engine::load(Path::new(&path), &options, &mut |_| true),
        "Vulkan device",
    )?;
    let n_vocab = engine.info().config.n_vocab;
    let mut logits = Vec::new();
    for case in cases {
        let tokens = engine.tokenize(&case.prompt);
        assert_eq!(tokens, case.tokens, "Hearth's tokens for {:?}", case.prompt);
        let backend = engine.session_mut().fresh_backend();
        logits.push(backend.forward(&tokens, Logits::All).unwrap());
    }
    Some(Hearth { n_vocab, logits })
}

/// How far Hearth's logits are from a reference over the reference's top ids.
#[derive(Debug, Default)]
struct Distance {
    /// Largest |Hearth - reference| over every position's top ids.
    max_abs: f32,
    /// Positions whose reference top token leads its second by more than the tolerance.
    clear_leads: usize,
    /// Those of them where Hearth's top token is another.
    top1_misses: Vec<String>,
}

fn distance(hearth: &Hearth, reference: &Fixture, tolerance: f32) -> Distance {
    let n_vocab = hearth.n_vocab;
    let mut d = Distance::default();
    assert_eq!(reference.cases.len(), hearth.logits.len());
    for (case, got) in reference.cases.iter().zip(&hearth.logits) {
        assert_eq!(got.len(), case.tokens.len() * n_vocab);
        for (pos, (ids, want)) in case.top_ids.iter().zip(&case.top_logits).enumerate() {
            let row = &got[pos * n_vocab..][..n_vocab];
            for (&id, &w) in ids.iter().zip(want) {
                d.max_abs = d.max_abs.max((row[id] - w).abs());
            }
            if want[0] - want[1] > tolerance {
                d.clear_leads += 1;
                let best = (0..n_vocab).fold(0, |b, i| if row[i] > row[b] { i } else { b });
                if best != ids[0] {
                    d.top1_misses.push(format!("{:?} at {pos}", case.prompt));
                }
            }
        }
    }
    d
}

/// transformers computes in f32 from the same f32 weights: Hearth's logits (up to ~22 here)
/// differ from it by 7.6e-5 on the CPU reference and 8.0e-5 on lavapipe, the rounding of f32
/// sums taken in another order. 5e-4 leaves room for other devices' orders.
const TRANSFORMERS_TOLERANCE: f32 = 5e-4;
/// llama.cpp's 8-bit activations move its logits from transformers' by up to 1.40 on these
/// prompts (0.61-1.40 per prompt), and Hearth's by the same.
const LLAMA_CPP_TOLERANCE: f32 = 2.0;

/// The CPU executor with 8-bit activations rounds as llama.cpp does: it is held to llama.cpp's
/// tolerance against both references.
fn check(backend: BackendKind, activations: Activations) {
    let (transformers, llama_cpp) = (fixture(TRANSFORMERS), fixture(LLAMA_CPP));
    for (a, b) in transformers.cases.iter().zip(&llama_cpp.cases) {
        assert_eq!(
            a.tokens, b.tokens,
            "the references tokenize {:?} alike",
            a.prompt
        );
    }
    let Some(hearth) = run_hearth(backend, activations, &transformers.cases) else {
        return;
    };
    let hf_tolerance = match activations {
        Activations::F32 => TRANSFORMERS_TOLERANCE,
        Activations::Q8 => LLAMA_CPP_TOLERANCE,
    };
    let hf = distance(&hearth, &transformers, hf_tolerance);
    let llama = distance(&hearth, &llama_cpp, LLAMA_CPP_TOLERANCE);
    eprintln!("{backend:?}: against transformers {hf:?}; against llama.cpp {llama:?}");
    assert!(
        hf.max_abs < hf_tolerance,
        "{backend:?}: max |logit - transformers'| {}",
        hf.max_abs
    );
    assert!(
        hf.top1_misses.is_empty(),
        "{backend:?}: {:?}",
        hf.top1_misses
    );
    assert!(
        llama.max_abs < LLAMA_CPP_TOLERANCE,
        "{backend:?}: max |logit - llama.cpp's| {}",
        llama.max_abs
    );
    assert!(
        llama.top1_misses.is_empty(),
        "{backend:?}: top token differs from llama.cpp's: {:?}",
        llama.top1_misses
    );
    // The top-1 checks are not vacuous: most positions have a clear leader.
    assert!(llama.clear_leads > 20, "{llama:?}");
}

#[test]
fn vulkan_logits_match_transformers_and_llama_cpp() {
    check(BackendKind::Vulkan, Activations::F32);
}

#[test]
fn cpu_reference_logits_match_transformers_and_llama_cpp() {
    check(BackendKind::Reference, Activations::F32);
}

#[test]
fn cpu_executor_logits_with_f32_activations_match_transformers() {
    check(BackendKind::Cpu, Activations::F32);
}

#[test]
fn cpu_executor_logits_with_8_bit_activations_match_llama_cpp() {
    check(BackendKind::Cpu, Activations::Q8);
}
