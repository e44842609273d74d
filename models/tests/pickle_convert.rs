//! A Hugging Face folder of PyTorch checkpoints converts to the same GGUF file as its
//! safetensors twin: the fixtures (`scripts/fixtures/make-torch-pickles`) hold one tiny
//! random-weight Llama saved as safetensors and as `.bin` files in torch's zip layout (tied
//! embeddings, q/k/v as views into one storage), its legacy layout and two indexed shards.
//! Same tensors, bytes and metadata means the same logits.

mod common;

use std::path::{Path, PathBuf};

use hearth_models::hf::is_model_folder;
use hearth_models::{list_models, open_model, GgufFile, HfFolder};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch_llama")
}

/// A model folder named `torch_llama` (the name goes into `general.name`) under `root`: the
/// fixtures' config and tokenizer beside the weight files of `variants`.
fn folder(root: &Path, variants: &[&str]) -> PathBuf {
    let dir = root.join(variants.join("+")).join("torch_llama");
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(fixtures().join(file), dir.join(file)).unwrap();
    }
    for variant in variants {
        for entry in std::fs::read_dir(fixtures().join(variant)).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

fn assert_same(variant: &str, ours: &GgufFile, twin: &GgufFile) {
    let keys = |f: &GgufFile| f.metadata().iter().map(|(k, _)| k.to_string()).collect();
    let (our_keys, twin_keys): (Vec<String>, Vec<String>) = (keys(ours), keys(twin));
    assert_eq!(our_keys, twin_keys, "{variant}: metadata keys");
    for (key, value) in twin.metadata().iter() {
        assert!(
            ours.metadata().get(key) == Some(value),
            "{variant}: `{key}` differs"
        );
    }
    let names = |f: &GgufFile| f.tensors().iter().map(|t| t.name.clone()).collect();
    let (our_names, twin_names): (Vec<String>, Vec<String>) = (names(ours), names(twin));
    assert_eq!(our_names, twin_names, "{variant}: tensor names");
    for t in twin.tensors() {
        let o = ours.tensor(&t.name).unwrap();
        assert_eq!(
            (o.ggml_type, &o.shape),
            (t.ggml_type, &t.shape),
            "{variant}: {}",
            t.name
        );
        let same = ours.tensor_data(o).unwrap() == twin.tensor_data(t).unwrap();
        assert!(same, "{variant}: {} bytes differ", t.name);
    }
}

#[test]
fn every_checkpoint_layout_converts_to_the_safetensors_twins_file() {
    let root = common::scratch_dir("pickle-convert");
    let twin_dir = folder(&root, &["safetensors"]);
    let twin = HfFolder::open(&twin_dir).unwrap();
    let twin_bytes = twin.to_gguf().unwrap().to_bytes().unwrap();
    let twin = twin.to_gguf_file().unwrap();
    let types: Vec<_> = twin.tensors().iter().map(|t| t.ggml_type).collect();
    for ty in ["F32", "F16", "BF16"] {
        assert!(
            types.iter().any(|t| format!("{t:?}") == ty),
            "{ty} in {types:?}"
        );
    }

    for variant in ["zip", "legacy", "sharded"] {
        let dir = folder(&root, &[variant]);
        assert!(is_model_folder(&dir), "{variant}");
        let folder = HfFolder::open(&dir).unwrap_or_else(|e| panic!("{variant}: {e}"));
        let bin = folder
            .weights()
            .files()
            .all(|f| f.extension().is_some_and(|e| e == "bin"));
        assert!(bin, "{variant}");
        let ours = open_model(&dir).unwrap_or_else(|e| panic!("{variant}: {e}"));
        assert_same(variant, &ours, &twin);
        // Byte for byte, the whole file.
        let bytes = folder.to_gguf().unwrap().to_bytes().unwrap();
        assert!(bytes == twin_bytes, "{variant}: the GGUF files differ");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn safetensors_win_over_checkpoints_and_bin_folders_are_listed() {
    let root = common::scratch_dir("pickle-both");
    let both = folder(&root, &["safetensors", "zip"]);
    let weights = HfFolder::open(&both).unwrap();
    let files: Vec<&Path> = weights.weights().files().collect();
    assert!(
        files.len() == 1 && files[0].ends_with("model.safetensors"),
        "{files:?}"
    );

    // A broken checkpoint beside good safetensors is never read.
    std::fs::write(both.join("pytorch_model.bin"), b"not a checkpoint").unwrap();
    assert!(HfFolder::open(&both).is_ok());

    let models = root.join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::rename(folder(&root, &["legacy"]), models.join("legacy-llama")).unwrap();
    let listed: Vec<String> = list_models(&models)
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(listed, ["legacy-llama"]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_bad_checkpoint_in_a_folder_names_the_file() {
    let root = common::scratch_dir("pickle-bad-folder");
    let dir = folder(&root, &["sharded"]);
    let shard = dir.join("pytorch_model-00002-of-00002.bin");
    std::fs::write(&shard, b"PK\x03\x04 truncated").unwrap();
    let err = HfFolder::open(&dir).err().unwrap().to_string();
    assert!(
        err.contains("pytorch_model-00002-of-00002.bin") && err.contains("zip"),
        "{err}"
    );
    std::fs::remove_file(&shard).unwrap();
    let err = HfFolder::open(&dir).err().unwrap().to_string();
    assert!(
        err.contains("which pytorch_model.bin.index.json lists, is missing"),
        "{err}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn the_zip_fixture_shares_storages_between_names() {
    let path = fixtures().join("zip/pytorch_model.bin");
    let file = std::fs::read(&path).unwrap();
    let tensors = hearth_models::pickle::read_checkpoint(&path, &file).unwrap();
    let bytes = |name: &str| tensors[name].bytes.clone();
    // lm_head is the embeddings' tensor under a second name.
    assert_eq!(bytes("lm_head.weight"), bytes("model.embed_tokens.weight"));
    // q, k and v are consecutive rows of one storage.
    let attn = "model.layers.0.self_attn.";
    let (q, k, v) = (
        bytes(&format!("{attn}q_proj.weight")),
        bytes(&format!("{attn}k_proj.weight")),
        bytes(&format!("{attn}v_proj.weight")),
    );
    assert!(q.end == k.start && k.end == v.start, "{q:?} {k:?} {v:?}");
}
