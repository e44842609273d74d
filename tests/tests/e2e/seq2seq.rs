//! `hearth generate` on an encoder-decoder: the random-weight Flan-T5-shaped folder the
//! conformance build makes (`scripts/conformance/seq2seq.py`), converted as it loads. Its
//! greedy output is transformers' greedy output.

use super::{error_of, json_of};

struct T5 {
    folder: String,
    text: String,
    decoder: Vec<u64>,
}

fn flan() -> Option<T5> {
    let dir = hearth_testkit::conformance_model("t5-flan")?;
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let decoder = r["decoder"].as_array().unwrap();
    Some(T5 {
        folder: dir.join("hf").to_str().unwrap().to_owned(),
        text: r["text"].as_str().unwrap().to_owned(),
        decoder: decoder.iter().map(|t| t.as_u64().unwrap()).collect(),
    })
}

#[test]
fn generate_decodes_a_t5_folder_as_transformers_does() {
    let Some(t5) = flan() else { return };
    let n = (t5.decoder.len() - 1).to_string();
    let out = json_of(&[
        "generate",
        "-m",
        &t5.folder,
        "-p",
        &t5.text,
        "-n",
        &n,
        "--temp",
        "0",
        "--ignore-eos",
        "--activations",
        "f32",
        "--format",
        "json",
    ]);
    let tokens: Vec<u64> = out["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert_eq!(tokens, t5.decoder[1..], "{out}");
    assert_eq!(out["finish_reason"], "length");
    assert!(out["device"].as_str().unwrap().contains("CPU"), "{out}");

    // Sampling with a seed repeats; beam search gives its hypotheses best first.
    let sampled = |seed: &str| {
        json_of(&[
            "generate", "-m", &t5.folder, "-p", &t5.text, "-n", "8", "--temp", "1", "--seed", seed,
            "--format", "json",
        ])["tokens"]
            .clone()
    };
    assert_eq!(sampled("7"), sampled("7"));
    let beams = json_of(&[
        "generate", "-m", &t5.folder, "-p", &t5.text, "-n", "6", "--beams", "3", "--format", "json",
    ]);
    let hyps = beams["hypotheses"].as_array().unwrap();
    assert_eq!(hyps.len(), 3, "{beams}");
    let scores: Vec<f64> = hyps.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
}

#[test]
fn t5_errors_name_what_is_wrong() {
    let Some(t5) = flan() else { return };
    let err = error_of(&["generate", "-m", &t5.folder, "-p", "x", "--beams", "40"]);
    assert!(err.contains("40 beams"), "{err}");
    let err = error_of(&[
        "generate", "-m", &t5.folder, "-p", "x", "--draft", &t5.folder,
    ]);
    assert!(err.contains("encoder-decoder"), "{err}");
}
