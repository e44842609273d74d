//! Hearth's conversion of a Hugging Face folder against llama.cpp's: for every conformance
//! family (`scripts/conformance/build` saves each random-weight model with transformers and
//! converts it with llama.cpp's `convert_hf_to_gguf.py`), the file `HfFolder::to_gguf`
//! builds from the same folder must hold the same tensors (names, types, shapes and bytes)
//! and every metadata value llama.cpp wrote, the vocabulary included.

use hearth_models::gguf::MetaValue;
use hearth_models::{GgufFile, HfFolder};

/// Keys that name the file rather than describe the model.
const NAMING: &[&str] = &["general.name", "general.size_label", "general.type"];

/// Keys where llama.cpp's converter and Hearth's may differ without changing the model:
/// whether a pair of sequences gets a separator (encoder input only).
const UNUSED_BY_DECODERS: &[&str] = &["tokenizer.ggml.add_sep_token"];

fn check(family: &str) {
    let Some(dir) = hearth_testkit::conformance_model(family) else {
        return;
    };
    let theirs = GgufFile::open(dir.join("model.gguf")).unwrap();
    let folder = HfFolder::open(&dir.join("hf")).unwrap();
    let ours = folder
        .to_gguf_file()
        .unwrap_or_else(|e| panic!("{family}: {e}"));

    for (key, want) in theirs.metadata().iter() {
        if NAMING.contains(&key) || UNUSED_BY_DECODERS.contains(&key) {
            continue;
        }
        let got = ours.metadata().get(key);
        assert!(
            got == Some(want),
            "{family}: `{key}` is {}, llama.cpp wrote {}",
            got.map_or("absent".into(), short),
            short(want)
        );
    }
    let extra: Vec<&str> = ours
        .metadata()
        .iter()
        .map(|(k, _)| k)
        .filter(|k| theirs.metadata().get(k).is_none() && !NAMING.contains(k))
        .collect();
    println!("{family}: metadata matches; keys llama.cpp leaves out: {extra:?}");

    let mut names: Vec<&str> = theirs.tensors().iter().map(|t| t.name.as_str()).collect();
    let mut our_names: Vec<&str> = ours.tensors().iter().map(|t| t.name.as_str()).collect();
    names.sort();
    our_names.sort();
    assert_eq!(our_names, names, "{family}: tensor names");
    for t in theirs.tensors() {
        let o = ours.tensor(&t.name).unwrap();
        assert_eq!(
            (o.ggml_type, &o.shape),
            (t.ggml_type, &t.shape),
            "{family}: {}",
            t.name
        );
        let (a, b) = (ours.tensor_data(o).unwrap(), theirs.tensor_data(t).unwrap());
        if t.name.starts_with("rope_") {
            // Computed in f64 here, in f32 by torch there.
            for (x, y) in f32s(a).iter().zip(f32s(b)) {
                assert!(
                    (x - y).abs() <= 1e-6 * y.abs(),
                    "{family}: {} {x} vs {y}",
                    t.name
                );
            }
        } else {
            assert!(a == b, "{family}: {} bytes differ", t.name);
        }
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn short(v: &MetaValue) -> String {
    let s = format!("{v:?}");
    if s.len() > 160 {
        format!("{}...", &s[..160])
    } else {
        s
    }
}

macro_rules! families {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            check(stringify!($name));
        }
    )*};
}

families!(
    llama3, granite, smollm3, glm4, qwen2, yarn, qwen3, gemma2, gemma3, phi3, phi4mini, longrope,
    mistral, mixtral, qwen2moe, qwen3moe, olmoe, gptoss, glm4moe, deepseek3, deepseek2
);

/// BERT folders against llama.cpp's conversions (`scripts/conformance/encoders.py`):
/// all-MiniLM-L6-v2 as scripts/setup installs it, and a random-weight cross-encoder. Every
/// tensor llama.cpp writes is here with the same bytes, and every `bert.*` and tokenizer
/// value it writes is here too (but the pre-tokenizer's name, which WordPiece does not read).
/// The cross-encoder keeps its pooler (`cls.weight`, `cls.bias`), which llama.cpp's
/// converter drops though transformers' BertForSequenceClassification applies it.
#[test]
fn bert_folders_convert_as_llama_cpp_converts_them() {
    let Some(minilm) = hearth_testkit::model(hearth_testkit::MINILM) else {
        return;
    };
    let Some(minilm_gguf) = hearth_testkit::conformance_model("bert-minilm") else {
        return;
    };
    let Some(rerank) = hearth_testkit::conformance_model("bert-rerank") else {
        return;
    };
    for (folder, gguf, ours_only) in [
        (minilm, minilm_gguf.join("model.gguf"), &[][..]),
        (
            rerank.join("hf"),
            rerank.join("model.gguf"),
            &["cls.weight", "cls.bias"][..],
        ),
    ] {
        let theirs = GgufFile::open(&gguf).unwrap();
        let ours = HfFolder::open(&folder).unwrap().to_gguf_file().unwrap();
        for (key, want) in theirs.metadata().iter() {
            let compared = key.starts_with("bert.") || key.starts_with("tokenizer.");
            if !compared || key == "tokenizer.ggml.pre" || UNUSED_BY_DECODERS.contains(&key) {
                continue;
            }
            let got = ours.metadata().get(key);
            assert!(
                got == Some(want),
                "{}: `{key}` is {}, llama.cpp wrote {}",
                folder.display(),
                got.map_or("absent".into(), short),
                short(want)
            );
        }
        let mut names: Vec<&str> = theirs.tensors().iter().map(|t| t.name.as_str()).collect();
        names.extend(ours_only);
        names.sort();
        let mut our_names: Vec<&str> = ours.tensors().iter().map(|t| t.name.as_str()).collect();
        our_names.sort();
        assert_eq!(our_names, names, "{}", folder.display());
        for t in theirs.tensors() {
            let o = ours.tensor(&t.name).unwrap();
            assert_eq!(
                (o.ggml_type, &o.shape),
                (t.ggml_type, &t.shape),
                "{}",
                t.name
            );
            let same = ours.tensor_data(o).unwrap() == theirs.tensor_data(t).unwrap();
            assert!(same, "{}: {} bytes differ", folder.display(), t.name);
        }
    }
}

/// XLM-RoBERTa folders against llama.cpp's conversions (`scripts/conformance/encoders.py`):
/// a random-weight XLMRobertaModel (its pooler dropped; sentence-transformers' mean pooling)
/// and an XLMRobertaForSequenceClassification, each with a SentencePiece Unigram
/// `sentencepiece.bpe.model` that the conversion numbers as fairseq does; and the first without
/// that file, its vocabulary read from tokenizer.json. Every key and tensor llama.cpp writes is
/// here with the same value and bytes, and the other way round, but for:
/// - `tokenizer.ggml.cls_token_id`, which Hearth writes and gguf-py has no writer for;
/// - `bert.attention.head_count_kv`, which Hearth writes for every family (the head count here,
///   what llama.cpp reads where the key is absent) and llama.cpp's converter only where
///   config.json has `num_key_value_heads`;
/// - from tokenizer.json, `tokenizer.ggml.remove_extra_whitespaces`: llama.cpp's converter reads
///   `clean_up_tokenization_spaces` (a decoding option, false in transformers 5 where the folder
///   does not set it), Hearth whether the tokenizer's steps collapse runs of spaces (here its
///   `WhitespaceSplit` pre-tokenizer does: true), so that the file tokenizes as the folder does.
#[test]
fn xlm_roberta_folders_convert_as_llama_cpp_converts_them() {
    let Some(embed) = hearth_testkit::conformance_model("xlmr-embed") else {
        return;
    };
    let Some(rerank) = hearth_testkit::conformance_model("xlmr-rerank") else {
        return;
    };
    let cls = "tokenizer.ggml.cls_token_id";
    let kv = "bert.attention.head_count_kv";
    let spaces = "tokenizer.ggml.remove_extra_whitespaces";
    for (folder, gguf, differ) in [
        (embed.join("hf"), embed.join("model.gguf"), &[cls, kv][..]),
        (rerank.join("hf"), rerank.join("model.gguf"), &[cls, kv][..]),
        (
            embed.join("hf-json"),
            embed.join("model-json.gguf"),
            &[cls, kv, spaces][..],
        ),
    ] {
        let what = folder.display().to_string();
        let theirs = GgufFile::open(&gguf).unwrap();
        let ours = HfFolder::open(&folder)
            .unwrap()
            .to_gguf_file()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let keys = |f: &GgufFile| -> Vec<String> {
            let mut k: Vec<String> = f
                .metadata()
                .iter()
                .map(|(k, _)| k.to_string())
                .filter(|k| !NAMING.contains(&k.as_str()) && !differ.contains(&k.as_str()))
                .collect();
            k.sort();
            k
        };
        assert_eq!(keys(&ours), keys(&theirs), "{what}: metadata keys");
        for (key, want) in theirs.metadata().iter() {
            if NAMING.contains(&key) || differ.contains(&key) {
                continue;
            }
            let got = ours.metadata().get(key);
            assert!(
                got == Some(want),
                "{what}: `{key}` is {}, llama.cpp wrote {}",
                got.map_or("absent".into(), short),
                short(want)
            );
        }
        let model = ours.metadata().get("tokenizer.ggml.model");
        assert_eq!(model, Some(&MetaValue::String("t5".into())), "{what}");
        assert_eq!(ours.metadata().get(cls), Some(&MetaValue::U32(0)), "{what}");
        if differ.contains(&spaces) {
            assert_eq!(ours.metadata().get(spaces), Some(&MetaValue::Bool(true)));
        }
        let names = |f: &GgufFile| -> Vec<String> {
            let mut n: Vec<String> = f.tensors().iter().map(|t| t.name.clone()).collect();
            n.sort();
            n
        };
        assert_eq!(names(&ours), names(&theirs), "{what}: tensor names");
        for t in theirs.tensors() {
            let o = ours.tensor(&t.name).unwrap();
            assert_eq!(
                (o.ggml_type, &o.shape),
                (t.ggml_type, &t.shape),
                "{what}: {}",
                t.name
            );
            let same = ours.tensor_data(o).unwrap() == theirs.tensor_data(t).unwrap();
            assert!(same, "{what}: {} bytes differ", t.name);
        }
    }
}

/// T5 folders against llama.cpp's conversions (`scripts/conformance/seq2seq.py`): Flan-T5's
/// shape (gated GELU, its own lm_head, f32, the shared embeddings stored three times) and T5
/// v1.0's (ReLU, tied output, bf16, no `n_positions`), each with 3 encoder and 2 decoder
/// blocks and a SentencePiece Unigram `spiece.model`. Every key and tensor is the same, both
/// ways, but the file's name and size label; v1.0's PyTorch checkpoint twin converts to the
/// same file as its safetensors.
#[test]
fn t5_folders_convert_as_llama_cpp_converts_them() {
    let Some(flan) = hearth_testkit::conformance_model("t5-flan") else {
        return;
    };
    let Some(v1) = hearth_testkit::conformance_model("t5-v1") else {
        return;
    };
    for dir in [&flan, &v1] {
        let theirs = GgufFile::open(dir.join("model.gguf")).unwrap();
        let ours = HfFolder::open(&dir.join("hf"))
            .unwrap()
            .to_gguf_file()
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        same_files(&dir.display().to_string(), &ours, &theirs);
        assert_eq!(
            ours.metadata().get("tokenizer.ggml.model"),
            Some(&MetaValue::String("t5".into()))
        );
    }
    let bin = v1.join("hf-bin");
    let from_bin = HfFolder::open(&bin).unwrap().to_gguf_file().unwrap();
    let from_safetensors = HfFolder::open(&v1.join("hf"))
        .unwrap()
        .to_gguf_file()
        .unwrap();
    same_files(&bin.display().to_string(), &from_bin, &from_safetensors);
}

/// Every key (but those naming the file) and every tensor of `want` in `got` with the same
/// value, type, shape and bytes, and nothing more.
fn same_files(what: &str, got: &GgufFile, want: &GgufFile) {
    let keys = |f: &GgufFile| -> Vec<String> {
        let mut k: Vec<String> = f
            .metadata()
            .iter()
            .map(|(k, _)| k.to_string())
            .filter(|k| !NAMING.contains(&k.as_str()))
            .collect();
        k.sort();
        k
    };
    assert_eq!(keys(got), keys(want), "{what}: metadata keys");
    for (key, value) in want.metadata().iter() {
        if !NAMING.contains(&key) {
            let v = got.metadata().get(key);
            assert!(
                v == Some(value),
                "{what}: `{key}` is {}, llama.cpp wrote {}",
                v.map_or("absent".into(), short),
                short(value)
            );
        }
    }
    let names = |f: &GgufFile| -> Vec<String> {
        let mut n: Vec<String> = f.tensors().iter().map(|t| t.name.clone()).collect();
        n.sort();
        n
    };
    assert_eq!(names(got), names(want), "{what}: tensor names");
    for t in want.tensors() {
        let o = got.tensor(&t.name).unwrap();
        assert_eq!(
            (o.ggml_type, &o.shape),
            (t.ggml_type, &t.shape),
            "{what}: {}",
            t.name
        );
        let same = got.tensor_data(o).unwrap() == want.tensor_data(t).unwrap();
        assert!(same, "{what}: {} bytes differ", t.name);
    }
}
