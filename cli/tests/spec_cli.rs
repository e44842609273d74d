//! `--spec FILE`: a family Hearth ships no spec for runs from a spec file of the user's,
//! without rebuilding. The file here is a tiny Llama-block model whose architecture is called
//! `toy`.

use std::path::{Path, PathBuf};
use std::process::Command;

use hearth_models::synthetic::{Family, Shape};
use hearth_models::{GgufFile, GgufWriter, MetaValue};
use hearth_quant::Format;

fn hearth(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .expect("the hearth binary runs")
}

/// A tiny model in `dir` whose metadata names the architecture `toy`, and a spec for it.
fn toy_model(dir: &Path) -> (PathBuf, PathBuf) {
    let shape = Shape {
        family: Family::Llama,
        n_layer: 1,
        n_embd: 64,
        n_ff: 64,
        n_head: 2,
        n_head_kv: 1,
        n_vocab: 300,
        n_ctx_train: 64,
        rope_base: 10_000.0,
        norm_eps: 1e-5,
        tied_embeddings: true,
        key_length: None,
        sliding_window: None,
        experts: None,
    };
    let llama = shape.build_random("toy", Format::F32, 3).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in llama.metadata().iter() {
        let v = match k {
            "general.architecture" => MetaValue::String("toy".into()),
            _ => v.clone(),
        };
        w.set_metadata(k.replacen("llama.", "toy.", 1), v);
    }
    for t in llama.tensors() {
        let data = llama.tensor_data(t).unwrap().to_vec();
        w.add_tensor(&t.name, t.ggml_type, &t.shape, data).unwrap();
    }
    let model = dir.join("toy.gguf");
    std::fs::write(&model, w.to_bytes().unwrap()).unwrap();
    assert!(GgufFile::open(&model).is_ok());
    let spec = dir.join("toy.toml");
    let text = include_str!("../../models/specs/llama.toml")
        .replace("name = \"llama\"", "name = \"toy\"")
        .replace("architectures = [\"llama\"]", "architectures = [\"toy\"]");
    std::fs::write(&spec, text).unwrap();
    (model, spec)
}

#[test]
fn a_users_spec_runs_an_architecture_hearth_does_not_ship() {
    let dir = std::env::temp_dir().join(format!("hearth-spec-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (model, spec) = toy_model(&dir);
    let (model, spec) = (model.to_str().unwrap(), spec.to_str().unwrap());

    let out = hearth(&["inspect", model]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("no model spec for architecture `toy`"),
        "{text}"
    );

    let out = hearth(&["inspect", model, "--spec", spec]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("architecture  toy (spec `toy`"), "{stdout}");
    let out = hearth(&["inspect", model, "--spec", spec, "--format", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["model"]["spec"], "toy", "{report}");
    assert_eq!(report["model"]["rope"]["scaling"], "none", "{report}");

    // The CPU reference: no device needed.
    let run = [
        "generate", "-m", model, "--spec", spec, "--cpu", "-p", "ab", "-n", "3",
    ];
    let out = hearth(&[&run[..], &["--temp", "0"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("generated: 3 tokens"));

    // A spec for other architectures, or one that is not a spec, is refused by name.
    let llama_spec = dir.join("llama.toml");
    std::fs::write(&llama_spec, include_str!("../../models/specs/llama.toml")).unwrap();
    let out = hearth(&["inspect", model, "--spec", llama_spec.to_str().unwrap()]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("not `toy`"), "{text}");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "name = \"bad\"\nactivation = \"swish\"\n").unwrap();
    let bad = bad.to_str().unwrap();
    let out = hearth(&["generate", "-m", model, "--spec", bad, "--cpu", "-p", "ab"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("bad.toml"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
