//! Encoder-decoders (T5) against transformers: random-weight models in Flan-T5's shape and
//! T5 v1.0's (`scripts/conformance/seq2seq.py`), converted by llama.cpp's converter.

use std::path::Path;

use hearth_model::seq2seq::{buckets, Seq2Seq};
use hearth_model::Logits;
use hearth_models::{resolve_gguf, GgufFile};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
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
    assert!(worst_logit < bound, "logits off by {worst_logit}");
    assert_eq!(generated, r.decoder, "greedy tokens");
    // The whole decoder prefix in one step gives every position's logits alike.
    model.begin(1, &memory).unwrap();
    let all = model.decode(1, &r.decoder, Logits::All).unwrap();
    let w = worst(&all, &r.logits[..r.decoder.len() * v]);
    assert!(w < bound, "logits of one prefix step off by {w}");
}

fn each_model(mut f: impl FnMut(&str, &Path, &Reference)) {
    for name in ["t5-gated", "t5-relu"] {
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
