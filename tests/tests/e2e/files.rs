//! Bad model files through the command line: a clear error naming the file and what is
//! wrong, exit status 1, nothing on stdout.

use std::path::Path;

use super::{error_of, json_of, scratch, smollm2};

#[test]
fn a_truncated_model_is_reported_with_its_path() {
    let Some(model) = smollm2() else { return };
    let dir = scratch("truncated");
    let cut = dir.join("cut.gguf");
    let bytes = std::fs::read(&model).expect("the model reads");
    std::fs::write(&cut, &bytes[..1000]).expect("scratch write");
    let cut = cut.to_str().unwrap();
    let stderr = error_of(&["generate", "-m", cut, "-p", "hi"]);
    assert!(
        stderr.contains(cut) && stderr.contains("truncated"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_file_that_is_not_gguf_is_named() {
    let dir = scratch("not-gguf");
    let bad = dir.join("bad.gguf");
    std::fs::write(&bad, b"garbage\n").expect("scratch write");
    let bad = bad.to_str().unwrap();
    let stderr = error_of(&["inspect", bad]);
    assert!(
        stderr.contains(bad) && stderr.contains("not a GGUF file"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_missing_model_lists_what_is_installed() {
    let stderr = error_of(&["generate", "-m", "no-such-model", "-p", "hi"]);
    assert!(
        stderr.contains("no model named `no-such-model`"),
        "{stderr}"
    );
    assert!(stderr.contains("available:"), "{stderr}");
}

/// A Hugging Face directory (all-MiniLM-L6-v2, which scripts/setup installs): its tensor
/// index from the memory-mapped safetensors, and, with a shard missing, an error naming it.
#[test]
fn a_safetensors_directory_shows_its_tensors_and_names_a_missing_shard() {
    let Some(minilm) = hearth_testkit::model(hearth_testkit::MINILM) else {
        return;
    };
    let minilm = minilm.to_str().unwrap();
    let report = json_of(&["inspect", minilm, "--format", "json"]);
    let tensors = report["tensors"].as_array().expect("a tensor list");
    // BERT-small: embeddings, 6 layers of 16 tensors, pooler.
    assert!(tensors.len() > 100, "{} tensors", tensors.len());
    let query = tensors
        .iter()
        .find(|t| t["name"] == "encoder.layer.0.attention.self.query.weight")
        .expect("layer 0's query");
    assert_eq!(query["shape"], serde_json::json!([384, 384]));
    assert_eq!(query["file"], "model.safetensors");

    let dir = scratch("shard-missing");
    std::fs::copy(
        Path::new(minilm).join("config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    let index = r#"{"weight_map": {"a": "model-00001-of-00002.safetensors"}}"#;
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
    let stderr = error_of(&["inspect", dir.to_str().unwrap()]);
    assert!(
        stderr.contains("model-00001-of-00002.safetensors") && stderr.contains("missing"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}
