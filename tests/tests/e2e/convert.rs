//! A Hugging Face folder as a user runs it: directly, quantized at load, and converted to a
//! GGUF file first. The folder is the qwen2 conformance model (`scripts/conformance/build`
//! saves it with transformers); all three ways must produce the same greedy tokens.

use super::{json_of, scratch, stdout_of};

fn greedy_tokens(model: &str, extra: &[&str]) -> Vec<u64> {
    let mut args = vec![
        "generate",
        "-m",
        model,
        "-p",
        "Hello world, this is",
        "-n",
        "8",
        "--temp",
        "0",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = json_of(&args);
    out["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().expect("a token id"))
        .collect()
}

#[test]
fn a_folder_runs_directly_quantized_at_load_and_converted() {
    let Some(dir) = hearth_testkit::conformance_model("qwen2") else {
        return;
    };
    let folder = dir.join("hf");
    let folder = folder.to_str().unwrap();
    let out = scratch("convert");
    let f32_file = out.join("qwen2.gguf");
    let q8_file = out.join("qwen2.Q8.gguf");

    let report = stdout_of(&["convert", folder, "-o", f32_file.to_str().unwrap()]);
    assert!(report.contains("(qwen2)"), "{report}");
    let direct = greedy_tokens(folder, &[]);
    assert_eq!(direct.len(), 8);
    assert_eq!(greedy_tokens(f32_file.to_str().unwrap(), &[]), direct);
    // llama.cpp's own conversion of the same folder runs the same.
    let theirs = dir.join("model.gguf");
    assert_eq!(greedy_tokens(theirs.to_str().unwrap(), &[]), direct);

    stdout_of(&[
        "convert",
        folder,
        "-o",
        q8_file.to_str().unwrap(),
        "--format",
        "Q8",
    ]);
    assert_eq!(
        greedy_tokens(folder, &["--load-format", "Q8"]),
        greedy_tokens(q8_file.to_str().unwrap(), &[])
    );

    let info = json_of(&["inspect", folder, "--format", "json"]);
    assert_eq!(info["runs_as"]["architecture"], "qwen2");
    std::fs::remove_dir_all(out).ok();
}
