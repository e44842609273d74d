//! `perplexity` on the real model: the digits the project keeps fixed across changes.

use super::{json_of, smollm2};

const TEXT: &str = "/usr/share/common-licenses/GPL-3";

/// llama-perplexity's measure over the GPL-3 text in two 512-token windows, with the KV
/// cache in f32; the printed figure is 17.6866 (17.6846 with the default f16 cache).
#[test]
fn perplexity_of_gpl3_keeps_its_digits() {
    let Some(model) = smollm2() else { return };
    let out = json_of(&[
        "perplexity",
        "-m",
        &model,
        "-f",
        TEXT,
        "-c",
        "512",
        "--chunks",
        "2",
        "--kv-type",
        "f32",
        "--format",
        "json",
    ]);
    let ppl = out["ppl"].as_f64().expect("ppl");
    assert!((ppl - 17.686_634_7).abs() < 1e-6, "ppl {ppl}");
    assert_eq!(out["n_scored"], 510);
    assert_eq!(out["windows"].as_array().map(Vec::len), Some(2));
}

/// The same text decoded token by token with InfiniGen fetching from host memory, at the
/// paper's settings and an f32 cache: 24.1996 with 7.4% of the tokens fetched. Several minutes on a CPU Vulkan device, so it runs on
/// request: `cargo test -p hearth-tests -- --ignored`.
#[test]
#[ignore = "several minutes on lavapipe"]
fn infinigen_perplexity_keeps_its_digits() {
    let Some(model) = smollm2() else { return };
    let out = json_of(&[
        "perplexity",
        "-m",
        &model,
        "-f",
        TEXT,
        "-c",
        "2048",
        "--chunks",
        "1",
        "--decode",
        "--kv-offload",
        "infinigen",
        "--ig-partial-ratio",
        "0.2",
        "--ig-alpha",
        "5",
        "--kv-type",
        "f32",
        "--format",
        "json",
    ]);
    let ppl = out["ppl"].as_f64().expect("ppl");
    assert_eq!(format!("{ppl:.4}"), "24.1996");
    let fetched = out["infinigen"]["fetched_fraction"].as_f64();
    assert_eq!(
        fetched.map(|f| format!("{:.1}", f * 100.0)),
        Some("7.4".into()),
        "{out}"
    );
}
