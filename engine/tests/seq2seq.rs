//! Encoder-decoders (T5) against transformers: random-weight models in Flan-T5's shape and
//! T5 v1.0's (`scripts/conformance/seq2seq.py`), converted by llama.cpp's converter.

use std::path::Path;

use hearth_cpu::Activations;
use hearth_engine::sample::beam_scores::BeamParams;
use hearth_engine::sample::{FinishReason, GenerateParams, SamplerParams};
use hearth_engine::{BackendKind, EngineOptions, Seq2SeqEngine};
use hearth_model::seq2seq::{buckets, Seq2Seq};
use hearth_model::Logits;
use hearth_models::{resolve_gguf, GgufFile};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    text: String,
    ids: Vec<u32>,
    encoder: Vec<f32>,
    decoder: Vec<u32>,
    logits: Vec<f32>,
    n_vocab: usize,
    buckets: std::collections::HashMap<String, Vec<i64>>,
}

fn reference(dir: &Path) -> Reference {
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn worst(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Runs `model` over the reference's input: the encoder's output, then the decoder fed its
/// own greedy choices one token at a time for 16 steps, each step's logits compared.
fn matches_transformers(model: &mut dyn Seq2Seq, r: &Reference, bound: f32) {
    let memory = model.encode(&r.ids).unwrap();
    let enc = worst(&memory, &r.encoder);
    assert!(enc < bound, "encoder output off by {enc}");
    model.begin(0, &memory).unwrap();
    let v = r.n_vocab;
    let mut worst_logit = 0f32;
    let mut generated = vec![r.decoder[0]];
    for step in 0..r.decoder.len() {
        let logits = model.decode(0, &[generated[step]], Logits::Last).unwrap();
        worst_logit = worst_logit.max(worst(&logits, &r.logits[step * v..(step + 1) * v]));
        if step + 1 < r.decoder.len() {
            generated.push(argmax(&logits));
        }
    }
    eprintln!(
        "seq2seq: encoder output off by {enc:.1e}, 16 decode steps' logits by {worst_logit:.1e}"
    );
    assert!(worst_logit < bound, "logits off by {worst_logit}");
    assert_eq!(generated, r.decoder, "greedy tokens");
    // The whole decoder prefix in one step gives every position's logits alike.
    model.begin(1, &memory).unwrap();
    let all = model.decode(1, &r.decoder, Logits::All).unwrap();
    let w = worst(&all, &r.logits[..r.decoder.len() * v]);
    assert!(w < bound, "logits of one prefix step off by {w}");
}

fn each_model(mut f: impl FnMut(&str, &Path, &Reference)) {
    for name in ["t5-flan", "t5-v1"] {
        let Some(dir) = hearth_testkit::conformance_model(name) else {
            return;
        };
        let r = reference(&dir);
        f(name, &dir, &r);
    }
}

/// T5's buckets as transformers computes them, for every distance within ±300.
#[test]
fn relative_buckets_are_transformers() {
    each_model(|_, _, r| {
        for (mode, expected) in &r.buckets {
            let both = mode == "true";
            for (i, &b) in expected.iter().enumerate() {
                let rel = i as i64 - 300;
                assert_eq!(
                    buckets::bucket(rel, both, 32, 128) as i64,
                    b,
                    "distance {rel}, bidirectional {both}"
                );
            }
        }
    });
}

/// The reference against transformers: the encoder's output, 16 decode steps' logits within
/// 1e-4, the same greedy tokens.
#[test]
fn the_reference_decodes_as_transformers_does() {
    each_model(|name, dir, r| {
        let file = GgufFile::open(dir.join("model.gguf")).unwrap();
        let resolved = resolve_gguf(&file).unwrap();
        let mut model = hearth_reference::load_seq2seq(&file, &resolved, &mut |_| true)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        matches_transformers(&mut model, r, 1e-4);
    });
}

fn engine(dir: &Path, backend: BackendKind) -> Seq2SeqEngine {
    let options = EngineOptions {
        backend,
        activations: Activations::F32,
        ..EngineOptions::default()
    };
    Seq2SeqEngine::load(&dir.join("model.gguf"), &options, &mut |_| true).unwrap()
}

/// The native CPU executor (its packed products, f32 activations) against transformers.
#[test]
fn the_native_executor_decodes_as_transformers_does() {
    each_model(|_, dir, r| {
        let file = GgufFile::open(dir.join("model.gguf")).unwrap();
        let resolved = resolve_gguf(&file).unwrap();
        let options = hearth_cpu::CpuOptions {
            activations: Activations::F32,
            ..Default::default()
        };
        let mut m = hearth_cpu::NativeSeq2Seq::load(&file, &resolved, options, &mut |_| true)
            .unwrap()
            .model;
        matches_transformers(&mut m, r, 1e-4);
    });
}

/// The engine's generation: the input tokenized as transformers tokenizes it, greedy output
/// equal to transformers' greedy tokens, and the text they spell.
#[test]
fn greedy_generation_is_transformers_greedy() {
    each_model(|name, dir, r| {
        let mut e = engine(dir, BackendKind::Cpu);
        assert_eq!(e.tokenize(&r.text), r.ids, "{name}");
        let params = GenerateParams {
            max_tokens: Some(r.decoder.len() - 1),
            sampler: SamplerParams::greedy(),
            ignore_eos: true,
            ..GenerateParams::default()
        };
        let mut streamed = String::new();
        let out = e
            .generate(&r.ids, &params, &mut |t| {
                streamed.push_str(t);
                true
            })
            .unwrap();
        assert_eq!(out.tokens, r.decoder[1..], "{name}");
        assert_eq!(out.finish, FinishReason::Length);
        assert_eq!(out.text, streamed);
        assert_eq!(out.text, e.tokenizer().decode(&out.tokens, true), "{name}");
    });
}

/// Beam search: one beam is greedy search; with four, each hypothesis's log-probability is
/// what the model gives its tokens when fed them, and they come best first.
#[test]
fn beam_search_keeps_the_best_hypotheses() {
    each_model(|name, dir, r| {
        let mut e = engine(dir, BackendKind::Cpu);
        let params = BeamParams {
            width: 1,
            max_tokens: 8,
            length_penalty: 1.0,
            early_stopping: false,
        };
        let one = e.beam_search(&r.ids, &params).unwrap();
        let eos = r.decoder[1..9]
            .iter()
            .position(|&t| e.tokenizer().is_end_of_generation(t));
        let greedy = &r.decoder[1..1 + eos.map_or(8, |p| p + 1)];
        assert_eq!(one[0].tokens, greedy, "{name}");
        let four = e
            .beam_search(&r.ids, &BeamParams { width: 4, ..params })
            .unwrap();
        assert_eq!(four.len(), 4);
        assert!(four.windows(2).all(|w| w[0].score >= w[1].score));
        assert!(
            four[0].logprob >= one[0].logprob - 1e-6 || four[0].tokens.len() != one[0].tokens.len()
        );
        let memory = e.model().encode(&r.ids).unwrap();
        for h in &four {
            e.model().begin(0, &memory).unwrap();
            let mut fed = vec![r.decoder[0]];
            fed.extend(&h.tokens[..h.tokens.len() - 1]);
            let logits = e.model().decode(0, &fed, Logits::All).unwrap();
            let v = r.n_vocab;
            let lp: f64 = h
                .tokens
                .iter()
                .enumerate()
                .map(|(i, &t)| log_softmax(&logits[i * v..(i + 1) * v], t))
                .sum();
            assert!(
                (lp - h.logprob).abs() < 1e-3,
                "{name}: {lp} vs {}",
                h.logprob
            );
        }
    });
}

fn log_softmax(row: &[f32], t: u32) -> f64 {
    let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    row[t as usize] as f64 - max - sum.ln()
}

/// Bad input is refused by name: a token outside the vocabulary, an empty input, and a
/// decoder row that was never begun.
#[test]
fn bad_input_is_refused() {
    each_model(|_, dir, r| {
        let mut e = engine(dir, BackendKind::Reference);
        let err = e.model().encode(&[0, 99_999]).unwrap_err();
        assert!(err.to_string().contains("99999"), "{err}");
        assert!(e.model().encode(&[]).is_err());
        let err = e.model().decode(7, &[0], Logits::Last).unwrap_err();
        assert!(err.to_string().contains("row 7"), "{err}");
        let params = GenerateParams {
            max_tokens: Some(4),
            ..GenerateParams::default()
        };
        assert!(e.generate(&[], &params, &mut |_| true).is_err());
        assert!(e.generate(&r.ids, &params, &mut |_| true).is_ok());
    });
}
