//! Embeddings of all-MiniLM-L6-v2 (BERT, the Hugging Face folder `scripts/setup` installs)
//! against sentence-transformers' (`scripts/fixtures/make-minilm-embeddings`, f32 on the CPU),
//! on the CPU reference and on the native CPU executor with f32 and 8-bit activations.
//!
//! Bounds: cosine similarity to the reference's vector at least 1 - 1e-4 in f32 (what is left
//! is the order of f32 sums), and 1 - 1e-3 with 8-bit activations (each product rounds its
//! input to 8 bits per 32 values, as llama.cpp's CPU backend does).

use hearth_cpu::Activations;
use hearth_engine::embed::cosine;
use hearth_engine::{BackendKind, Embedder, EngineOptions};

const FIXTURE: &str = include_str!("fixtures/minilm_embeddings.json");

struct Case {
    text: String,
    ids: Vec<u32>,
    embedding: Vec<f32>,
}

fn cases() -> Vec<Case> {
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    let numbers = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().unwrap().to_string(),
            ids: numbers(&c["ids"]).into_iter().map(|x| x as u32).collect(),
            embedding: numbers(&c["embedding"])
                .into_iter()
                .map(|x| x as f32)
                .collect(),
        })
        .collect()
}

fn load(backend: BackendKind, activations: Activations) -> Option<Embedder> {
    let dir = hearth_testkit::model(hearth_testkit::MINILM)?;
    let options = EngineOptions {
        backend,
        activations,
        ..EngineOptions::default()
    };
    Some(Embedder::load(&dir, &options, &mut |_| true).unwrap())
}

fn check_against_reference(backend: BackendKind, activations: Activations, bound: f32) {
    let Some(mut m) = load(backend, activations) else {
        return;
    };
    assert_eq!(m.info().dims, 384);
    let cases = cases();
    for c in &cases {
        assert_eq!(m.tokenize(&c.text), c.ids, "{:?}", c.text);
    }
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let got = m.embed(&texts).unwrap();
    for (c, v) in cases.iter().zip(&got) {
        let sim = cosine(v, &c.embedding);
        assert!(
            sim >= 1.0 - bound,
            "{backend:?} {activations:?} {:?}: cosine {sim}",
            c.text
        );
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }
}

#[test]
fn reference_embeddings_match_sentence_transformers() {
    check_against_reference(BackendKind::Reference, Activations::F32, 1e-4);
}

#[test]
fn native_embeddings_match_sentence_transformers() {
    check_against_reference(BackendKind::Cpu, Activations::F32, 1e-4);
    check_against_reference(BackendKind::Cpu, Activations::Q8, 1e-3);
}

/// Similar sentences are nearer than dissimilar ones; a text embedded in a batch of texts of
/// other lengths gets the vector it gets alone.
#[test]
fn embeddings_order_meanings_and_batches_change_nothing() {
    let Some(mut m) = load(BackendKind::Cpu, Activations::F32) else {
        return;
    };
    let food = "A man is eating food.";
    let v = m
        .embed(&[
            food,
            "A man is eating a piece of bread.",
            "A man is riding a horse.",
        ])
        .unwrap();
    let (bread, horse) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
    assert!(bread > horse + 0.1, "bread {bread}, horse {horse}");
    let alone = m.embed(&[food]).unwrap();
    assert!(cosine(&alone[0], &v[0]) > 1.0 - 1e-6);
}

/// Bad input is an error naming the text; an over-long text is cut to the positions the
/// model has, keeping its closing [SEP].
#[test]
fn bad_and_long_inputs() {
    let Some(mut m) = load(BackendKind::Cpu, Activations::Q8) else {
        return;
    };
    let err = m.embed_tokens(&[vec![101, 102], vec![]], true).unwrap_err();
    assert!(err.to_string().contains("text 1"), "{err}");
    let err = m
        .embed_tokens(&[vec![101, 999_999, 102]], true)
        .unwrap_err();
    assert!(err.to_string().contains("999999"), "{err}");
    let long = "word ".repeat(2000);
    let ids = m.tokenize(&long);
    assert_eq!(ids.len(), 512);
    assert_eq!(ids.last(), Some(&102));
    assert_eq!(m.embed(&[&long]).unwrap()[0].len(), 384);
}
