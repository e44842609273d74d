//! `hearth embed` on all-MiniLM-L6-v2 (the Hugging Face folder scripts/setup installs): texts
//! from arguments and from standard input, JSON and the similarity table, and the errors a
//! user meets (no text, a chat model given to embed, an embedding model given to generate).

use super::{error_of, hearth_with_input, json_of, smollm2};

fn minilm() -> Option<String> {
    let path = hearth_testkit::model(hearth_testkit::MINILM)?;
    Some(path.to_str().expect("a UTF-8 model path").to_owned())
}

fn dot(a: &serde_json::Value, b: &serde_json::Value) -> f64 {
    let (a, b) = (a.as_array().unwrap(), b.as_array().unwrap());
    a.iter()
        .zip(b)
        .map(|(x, y)| x.as_f64().unwrap() * y.as_f64().unwrap())
        .sum()
}

#[test]
fn embed_prints_one_unit_vector_per_text() {
    let Some(model) = minilm() else { return };
    let texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "A man is riding a horse.",
    ];
    let mut args = vec!["embed", "-m", &model, "--format", "json"];
    args.extend(texts);
    let out = json_of(&args);
    let data = out["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    let v: Vec<&serde_json::Value> = data.iter().map(|d| &d["embedding"]).collect();
    assert_eq!(v[0].as_array().unwrap().len(), 384);
    assert!((dot(v[0], v[0]) - 1.0).abs() < 1e-5);
    assert!(dot(v[0], v[1]) > dot(v[0], v[2]) + 0.1);

    // The same texts as lines of standard input, with the similarity table.
    let out = hearth_with_input(
        &["embed", "-m", &model, "--similarity"],
        &texts.join("\n\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0].split(' ').count(), 384);
    assert!(text.contains("cosine similarity:"), "{text}");
    assert!(
        lines.last().unwrap().trim_end().ends_with("1.000"),
        "{text}"
    );
}

#[test]
fn embed_errors_say_what_to_do() {
    let Some(model) = minilm() else { return };
    let err = error_of(&["embed", "-m", &model, "--file", "/nonexistent/texts.txt"]);
    assert!(err.contains("/nonexistent/texts.txt"), "{err}");
    let Some(chat) = smollm2() else { return };
    let err = error_of(&["embed", "-m", &chat, "hello"]);
    assert!(err.contains("encoder-only"), "{err}");
    let err = error_of(&["generate", "-m", &model, "-p", "hello", "-n", "4"]);
    assert!(err.contains("hearth embed"), "{err}");
}

/// `hearth rerank` with the conformance suite's random-weight cross-encoder: documents in
/// the order of transformers' scores, with those scores; an embedding model is refused.
#[test]
fn rerank_prints_documents_by_relevance() {
    let Some(dir) = hearth_testkit::conformance_model("bert-rerank") else {
        return;
    };
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let cases = reference["cases"].as_array().unwrap();
    let hf = dir.join("hf");
    let mut args = vec![
        "rerank",
        "-m",
        hf.to_str().unwrap(),
        "-q",
        reference["query"].as_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend(cases.iter().map(|c| c["document"].as_str().unwrap()));
    let out = json_of(&args);
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), cases.len());
    let mut last = f64::INFINITY;
    for r in results {
        let score = r["relevance_score"].as_f64().unwrap();
        let want = cases[r["index"].as_u64().unwrap() as usize]["score"]
            .as_f64()
            .unwrap();
        assert!((score - want).abs() < 1e-4 && score <= last, "{out}");
        last = score;
    }
    let Some(model) = minilm() else { return };
    let err = error_of(&["rerank", "-m", &model, "-q", "q", "d"]);
    assert!(err.contains("cross-encoder"), "{err}");
}
