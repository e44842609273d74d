//! Resolving model names in a models directory.

mod common;

use std::fs;

use hearth_models::{list_models, resolve_model, Error};

#[test]
fn names_resolve_case_insensitively_without_extension_and_quant() {
    let dir = common::scratch_dir("resolve");
    for f in [
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "Llama-3.2-1B-Instruct-Q4_K_M.gguf",
        "Llama-3.2-1B-Instruct-Q8_0.gguf",
        "notes.txt",
        ".partial.gguf",
    ] {
        fs::write(dir.join(f), b"").unwrap();
    }
    let minilm = dir.join("all-MiniLM-L6-v2");
    fs::create_dir(&minilm).unwrap();
    fs::write(minilm.join("config.json"), b"{}").unwrap();
    fs::write(minilm.join("model.safetensors"), b"").unwrap();
    fs::create_dir(dir.join("not-a-model")).unwrap();

    let names: Vec<String> = list_models(&dir)
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(
        names,
        [
            "Llama-3.2-1B-Instruct-Q4_K_M",
            "Llama-3.2-1B-Instruct-Q8_0",
            "SmolLM2-135M-Instruct.Q4_1",
            "all-MiniLM-L6-v2"
        ]
    );

    let smol = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    for name in [
        "smollm2-135m-instruct",
        "SmolLM2-135M-Instruct.Q4_1",
        "smollm2-135m-instruct.q4_1.gguf",
    ] {
        assert_eq!(resolve_model(name, &dir).unwrap(), smol, "{name}");
    }
    assert_eq!(resolve_model("ALL-minilm-l6-v2", &dir).unwrap(), minilm);
    assert_eq!(
        resolve_model("llama-3.2-1b-instruct-q8_0", &dir).unwrap(),
        dir.join("Llama-3.2-1B-Instruct-Q8_0.gguf")
    );
    // A path is used as given.
    let given = smol.to_str().unwrap();
    assert_eq!(resolve_model(given, &dir).unwrap(), smol);

    // Two quantizations of one model: ambiguous, and both are listed.
    match resolve_model("llama-3.2-1b-instruct", &dir) {
        Err(e @ Error::AmbiguousModel { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("Q4_K_M.gguf") && msg.contains("Q8_0.gguf"),
                "{msg}"
            );
        }
        other => panic!("expected ambiguity, got {other:?}"),
    }
    match resolve_model("gpt-5", &dir) {
        Err(e @ Error::ModelNotFound { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("gpt-5") && msg.contains("SmolLM2-135M-Instruct.Q4_1"),
                "{msg}"
            );
        }
        other => panic!("expected not found, got {other:?}"),
    }
    let missing_dir = dir.join("nope");
    let err = resolve_model("x", &missing_dir).unwrap_err().to_string();
    assert!(err.contains("nope"), "{err}");
    fs::remove_dir_all(&dir).unwrap();
}
