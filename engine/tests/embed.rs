//! Embeddings of all-MiniLM-L6-v2 (BERT, the Hugging Face folder `scripts/setup` installs)
//! against sentence-transformers' (`scripts/fixtures/make-minilm-embeddings`, f32 on the CPU),
//! on the CPU reference and on the native CPU executor with f32 and 8-bit activations.
//!
//! Bounds: cosine similarity to the reference's vector at least 1 - 1e-6 (measured: 1 -
//! 7e-13; what is left is the order of f32 sums). MiniLM's weights are f32, whose products
//! the native executor computes in f32 whatever `--activations` says.

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
    check_against_reference(BackendKind::Reference, Activations::F32, 1e-6);
}

#[test]
fn native_embeddings_match_sentence_transformers() {
    check_against_reference(BackendKind::Cpu, Activations::F32, 1e-6);
    check_against_reference(BackendKind::Cpu, Activations::Q8, 1e-6);
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

/// llama.cpp's conversion of the same folder (`scripts/conformance/encoders.py`): its
/// phantom-space vocabulary, its metadata and tensor names give the same tokens and vectors.
#[test]
fn llama_cpp_gguf_of_minilm_embeds_as_the_folder_does() {
    let Some(dir) = hearth_testkit::conformance_model("bert-minilm") else {
        return;
    };
    let options = EngineOptions {
        backend: BackendKind::Cpu,
        activations: Activations::F32,
        ..EngineOptions::default()
    };
    let mut m = Embedder::load(&dir.join("model.gguf"), &options, &mut |_| true).unwrap();
    let cases = cases();
    for c in &cases {
        assert_eq!(m.tokenize(&c.text), c.ids, "{:?}", c.text);
    }
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    for (c, v) in cases.iter().zip(m.embed(&texts).unwrap()) {
        let sim = cosine(&v, &c.embedding);
        assert!(sim >= 1.0 - 1e-6, "{:?}: cosine {sim}", c.text);
    }
}

/// A random-weight cross-encoder made by transformers (BertForSequenceClassification, one
/// label; `scripts/conformance/encoders.py`): the pair's tokens and types as transformers'
/// tokenizer makes them, and scores within 1e-4 of transformers' logits, on the reference and
/// the native executor. llama.cpp's conversion of it (which drops the pooler) loads and
/// scores as a cross-encoder too.
#[test]
fn a_cross_encoder_scores_pairs_as_transformers_does() {
    let Some(dir) = hearth_testkit::conformance_model("bert-rerank") else {
        return;
    };
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let query = reference["query"].as_str().unwrap();
    let cases = reference["cases"].as_array().unwrap();
    let docs: Vec<&str> = cases
        .iter()
        .map(|c| c["document"].as_str().unwrap())
        .collect();
    let ids = |c: &serde_json::Value, key: &str| -> Vec<u32> {
        let v = c[key].as_array().unwrap();
        v.iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    for backend in [BackendKind::Reference, BackendKind::Cpu] {
        let options = EngineOptions {
            backend,
            activations: Activations::F32,
            ..EngineOptions::default()
        };
        let mut m = Embedder::load(&dir.join("hf"), &options, &mut |_| true).unwrap();
        assert!(m.reranks());
        for (c, d) in cases.iter().zip(&docs) {
            let pair = m.tokenize_pair(query, d);
            assert_eq!(pair.tokens, ids(c, "ids"), "{d:?}");
            assert_eq!(pair.types, ids(c, "types"), "{d:?}");
        }
        let scores = m.rerank(query, &docs).unwrap();
        for (c, s) in cases.iter().zip(&scores) {
            let want = c["score"].as_f64().unwrap() as f32;
            assert!((s - want).abs() < 1e-4, "{backend:?}: {s} against {want}");
        }
    }
    let options = EngineOptions {
        backend: BackendKind::Cpu,
        ..EngineOptions::default()
    };
    let mut gguf = Embedder::load(&dir.join("model.gguf"), &options, &mut |_| true).unwrap();
    assert_eq!(gguf.rerank(query, &docs).unwrap().len(), docs.len());
    // An embedding model has no head to score with.
    let Some(mut minilm) = load(BackendKind::Cpu, Activations::Q8) else {
        return;
    };
    let err = minilm.rerank(query, &docs).unwrap_err();
    assert!(err.to_string().contains("cross-encoder"), "{err}");
}

/// all-MiniLM-L6-v2 converted, rebuilt without tensor `skip` and with `edit` applied to its
/// metadata: a broken embedding model.
fn broken_minilm(
    skip: &str,
    edit: impl FnOnce(&mut hearth_models::GgufWriter),
) -> Option<hearth_models::GgufFile> {
    use hearth_models::{GgufFile, GgufWriter};
    let dir = hearth_testkit::model(hearth_testkit::MINILM)?;
    let file = hearth_models::open_model(&dir).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata().iter() {
        w.set_metadata(key, value.clone());
    }
    for t in file.tensors().iter().filter(|t| t.name != skip) {
        let data = file.tensor_data(t).unwrap();
        w.add_tensor(&t.name, t.ggml_type, &t.shape, data).unwrap();
    }
    edit(&mut w);
    Some(GgufFile::from_bytes(std::path::Path::new("broken.gguf"), w.to_bytes().unwrap()).unwrap())
}

/// A change to a file's metadata.
type Edit = Box<dyn FnOnce(&mut hearth_models::GgufWriter)>;

/// A broken embedding model is an error naming the key or tensor at fault, never a panic.
#[test]
fn broken_embedding_models_are_refused_by_name() {
    use hearth_models::MetaValue;
    let options = EngineOptions {
        backend: BackendKind::Cpu,
        ..EngineOptions::default()
    };
    let refused =
        |file: hearth_models::GgufFile| match Embedder::load_file(file, &options, &mut |_| true) {
            Ok(_) => panic!("loaded"),
            Err(e) => e.to_string(),
        };
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "",
            Box::new(|w| w.set_metadata("bert.pooling_type", MetaValue::U32(9))),
            "bert.pooling_type",
        ),
        (
            "token_embd_norm.weight",
            Box::new(|_| {}),
            "token_embd_norm.weight",
        ),
        (
            "blk.3.attn_output_norm.bias",
            Box::new(|_| {}),
            "blk.3.attn_output_norm.bias",
        ),
        (
            "",
            Box::new(|w| w.set_metadata("bert.context_length", MetaValue::U32(1024))),
            "position_embd.weight",
        ),
        (
            "",
            Box::new(|w| w.set_metadata("tokenizer.ggml.model", MetaValue::String("rwkv".into()))),
            "tokenizer.ggml.model",
        ),
        (
            "",
            Box::new(|w| w.set_metadata("tokenizer.ggml.cls_token_id", MetaValue::U32(99_999))),
            "tokenizer.ggml.cls_token_id",
        ),
    ];
    for (skip, edit, named) in cases {
        let Some(file) = broken_minilm(skip, edit) else {
            return;
        };
        let err = refused(file);
        assert!(err.contains(named), "{named}: {err}");
    }
}

/// Random-weight RoBERTa models made by transformers (`scripts/conformance/encoders.py`,
/// GPT-2's byte-level BPE numbered as RoBERTa numbers it): <s> text </s> with positions past
/// the padding row; mean-pooled vectors within cosine 1 - 1e-5 of transformers'; a
/// cross-encoder's pairs (<s> query </s></s> document </s>, one token type) and its scores
/// (a dense layer, tanh, the output layer) within 1e-4.
#[test]
fn roberta_encoders_match_transformers() {
    let (Some(embed), Some(rerank)) = (
        hearth_testkit::conformance_model("roberta-embed"),
        hearth_testkit::conformance_model("roberta-rerank"),
    ) else {
        return;
    };
    let (read, ids) = (reference_json, u32s);
    let options = EngineOptions {
        backend: BackendKind::Cpu,
        activations: Activations::F32,
        ..EngineOptions::default()
    };
    let reference = read(&embed);
    let mut m = Embedder::load(&embed.join("hf"), &options, &mut |_| true).unwrap();
    for c in reference["cases"].as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        assert_eq!(m.tokenize(text), ids(&c["ids"]), "{text:?}");
        let want: Vec<f32> = c["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let sim = cosine(&m.embed(&[text]).unwrap()[0], &want);
        assert!(sim >= 1.0 - 1e-5, "{text:?}: cosine {sim}");
    }
    let reference = read(&rerank);
    let query = reference["query"].as_str().unwrap();
    let mut m = Embedder::load(&rerank.join("hf"), &options, &mut |_| true).unwrap();
    assert!(m.reranks());
    let cases = reference["cases"].as_array().unwrap();
    let docs: Vec<&str> = cases
        .iter()
        .map(|c| c["document"].as_str().unwrap())
        .collect();
    for (c, d) in cases.iter().zip(&docs) {
        let pair = m.tokenize_pair(query, d);
        assert_eq!(pair.tokens, ids(&c["ids"]), "{d:?}");
        assert_eq!(pair.types, ids(&c["types"]), "{d:?}");
    }
    for (c, s) in cases.iter().zip(m.rerank(query, &docs).unwrap()) {
        let want = c["score"].as_f64().unwrap() as f32;
        assert!((s - want).abs() < 1e-4, "{s} against {want}");
    }
}

/// A conformance model's `reference.json`.
fn reference_json(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap()
}

fn u32s(v: &serde_json::Value) -> Vec<u32> {
    let a = v.as_array().unwrap();
    a.iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn f32s(v: &serde_json::Value) -> Vec<f32> {
    let a = v.as_array().unwrap();
    a.iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// A random-weight XLMRobertaModel made by transformers (`scripts/conformance/encoders.py`: a
/// SentencePiece Unigram vocabulary trained there, sentence-transformers' mean pooling), from
/// its folder, from llama.cpp's conversion of it, and from the folder without
/// `sentencepiece.bpe.model` (the vocabulary read from tokenizer.json), on the reference and
/// the native executor: <s> text </s> with transformers' ids for every text (accents, CJK, an
/// unknown script, runs of spaces, full-width forms, and one cut to the model's 128 positions
/// with its </s> kept), and vectors within cosine 1 - 1e-5 of transformers' (measured: 1 -
/// 1.2e-7 at worst, f32 rounding).
#[test]
fn xlm_roberta_embeddings_match_transformers() {
    let Some(dir) = hearth_testkit::conformance_model("xlmr-embed") else {
        return;
    };
    let reference = reference_json(&dir);
    let cases = reference["cases"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let longest = cases.iter().map(|c| c["ids"].as_array().unwrap().len());
    assert_eq!(longest.max(), Some(128), "no text is cut");
    for backend in [BackendKind::Reference, BackendKind::Cpu] {
        for source in ["hf", "model.gguf", "hf-json"] {
            let options = EngineOptions {
                backend,
                activations: Activations::F32,
                ..EngineOptions::default()
            };
            let mut m = Embedder::load(&dir.join(source), &options, &mut |_| true).unwrap();
            assert_eq!(m.info().pooling, hearth_engine::embed::Pooling::Mean);
            for (c, text) in cases.iter().zip(&texts) {
                assert_eq!(m.tokenize(text), u32s(&c["ids"]), "{source}: {text:?}");
            }
            let mut worst = 1.0f32;
            for (c, v) in cases.iter().zip(m.embed(&texts).unwrap()) {
                let sim = cosine(&v, &f32s(&c["embedding"]));
                assert!(sim >= 1.0 - 1e-5, "{backend:?} {source}: cosine {sim}");
                worst = worst.min(sim);
            }
            println!(
                "{backend:?} {source}: cosine at worst 1 - {:.1e}",
                1.0 - worst
            );
        }
    }
}

/// A random-weight XLMRobertaForSequenceClassification (one label) made by transformers, from
/// its folder and from llama.cpp's conversion of it (which keeps the classification head's
/// dense layer), on the reference and the native executor: pairs framed <s> query </s></s>
/// document </s> (one token type) with transformers' ids, a long document cut to the model's
/// 128 positions, and a pair both of whose parts are longer than half of them cut as
/// transformers cuts them; scores within 1e-4 of transformers' (measured: 3e-7 at worst).
#[test]
fn xlm_roberta_cross_encoder_scores_as_transformers_does() {
    let Some(dir) = hearth_testkit::conformance_model("xlmr-rerank") else {
        return;
    };
    let reference = reference_json(&dir);
    let cases = reference["cases"].as_array().unwrap();
    let text = |c: &serde_json::Value, key: &str| c[key].as_str().unwrap().to_string();
    for backend in [BackendKind::Reference, BackendKind::Cpu] {
        for source in ["hf", "model.gguf"] {
            let options = EngineOptions {
                backend,
                activations: Activations::F32,
                ..EngineOptions::default()
            };
            let mut m = Embedder::load(&dir.join(source), &options, &mut |_| true).unwrap();
            assert!(m.reranks());
            let mut pairs = Vec::new();
            for c in cases {
                let (query, document) = (text(c, "query"), text(c, "document"));
                let pair = m.tokenize_pair(&query, &document);
                assert_eq!(pair.tokens, u32s(&c["ids"]), "{source}: {document:?}");
                assert_eq!(pair.types, u32s(&c["types"]), "{source}: {document:?}");
                pairs.push(pair);
            }
            let mut worst = 0.0f32;
            for (c, s) in cases.iter().zip(m.score(&pairs).unwrap()) {
                let want = c["score"].as_f64().unwrap() as f32;
                assert!(
                    (s - want).abs() < 1e-4,
                    "{backend:?} {source}: {s} against {want}"
                );
                worst = worst.max((s - want).abs());
            }
            println!("{backend:?} {source}: scores within {worst:.1e}");
        }
    }
}
