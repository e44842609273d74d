//! `generate`, `chat`, `tokenize` and `inspect` on the real model.

use super::{error_of, hearth_with_input, json_of, smollm2, stdout_of};

const PROMPT: &str = "The capital of France is";

/// Greedy decoding of PROMPT, 12 tokens: SmolLM2's answer.
const GREEDY_TEXT: &str = " Paris.\n\nThe answer is: 201";
const GREEDY_TOKENS: [u64; 12] = [7042, 30, 198, 198, 504, 2988, 314, 42, 216, 34, 32, 33];

fn greedy(model: &str, placement: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "generate", "-m", model, "-p", PROMPT, "-n", "12", "--temp", "0", "--format", "json",
    ];
    args.extend(placement);
    json_of(&args)
}

/// The CPU executor with its default 8-bit activations rounds every product's input as
/// llama.cpp does, so its continuation may part from the exact one after a close call; the
/// answer itself stays.
#[test]
fn the_cpu_executor_answers_with_8_bit_activations() {
    let Some(model) = smollm2() else { return };
    let out = greedy(&model, &["--device", "cpu"]);
    let text = out["text"].as_str().expect("text");
    assert!(text.starts_with(" Paris."), "{text:?}");
    assert_eq!(out["timings"]["generated_tokens"], 12);
}

/// The Vulkan path (the harness's default device), the CPU reference, the CPU executor with
/// f32 activations, and the model split between the CPU executor and the device or between
/// two parts on the device give the same greedy tokens.
#[test]
fn greedy_generation_matches_the_cpu_reference() {
    let Some(model) = smollm2() else { return };
    let placements: [&[&str]; 5] = [
        &[],
        &["--cpu"],
        &["--device", "cpu", "--activations", "f32"],
        &["--gpu-layers", "13", "--activations", "f32"],
        &["--devices", "0,0"],
    ];
    for placement in placements {
        let cpu = format!("{placement:?}");
        let out = greedy(&model, placement);
        let tokens: Vec<u64> = out["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| t.as_u64().expect("a token id"))
            .collect();
        assert_eq!(tokens, GREEDY_TOKENS, "cpu: {cpu}");
        assert_eq!(out["text"], GREEDY_TEXT, "cpu: {cpu}");
        assert_eq!(out["finish_reason"], "length");
        assert_eq!(out["prompt_tokens"], 5);
        assert_eq!(out["timings"]["generated_tokens"], 12);
    }
}

/// Speculative decoding gives the same greedy tokens: drafts by prompt lookup on a request
/// whose answer repeats its prompt (drafts accepted and rejected), and from the model's own
/// weights quantized to Q8 while loading, with the statistics in the JSON.
#[test]
fn drafting_gives_the_same_greedy_tokens() {
    let Some(model) = smollm2() else { return };
    let edit = "Repeat this sentence with Maria in place of Alice: Alice walked to the market \
                every morning, and Alice bought bread and apples.\nRepeated:";
    let run = |extra: &[&str]| {
        let mut args = vec![
            "generate", "-m", &model, "-p", edit, "-n", "24", "--temp", "0", "--format", "json",
        ];
        args.extend(extra);
        json_of(&args)
    };
    let plain = run(&[]);
    assert!(plain["draft"].is_null());
    for extra in [
        &["--draft", "lookup"][..],
        &["--draft", "self:Q8", "--draft-max", "4"],
    ] {
        let fast = run(extra);
        assert_eq!(fast["tokens"], plain["tokens"], "{extra:?}");
        assert_eq!(fast["text"], plain["text"], "{extra:?}");
        let accepted = fast["draft"]["accepted"]
            .as_u64()
            .expect("draft statistics");
        assert!(accepted > 0, "{extra:?}: {}", fast["draft"]);
    }
    let err = error_of(&["generate", "-m", &model, "-p", "Hi", "--draft", "self:Q9"]);
    assert!(err.contains("Q9"), "{err}");
}

#[test]
fn a_stop_string_ends_generation_before_it() {
    let Some(model) = smollm2() else { return };
    let out = json_of(&[
        "generate", "-m", &model, "-p", PROMPT, "-n", "12", "--temp", "0", "--stop", "answer",
        "--format", "json",
    ]);
    assert_eq!(out["text"], " Paris.\n\nThe ");
    assert_eq!(out["finish_reason"], "stop");
}

/// `--json-schema` and `--grammar` hold the text (sampled, on the CPU executor), which ends
/// by itself when the grammar is complete; a grammar that does not parse and a schema keyword
/// the compiler does not implement are errors that say where and which.
#[test]
fn a_grammar_holds_the_text() {
    let Some(model) = smollm2() else { return };
    let run = |constraint: &[&str]| {
        let mut args = vec![
            "generate",
            "--device",
            "cpu",
            "-m",
            &model,
            "-p",
            "A cat as JSON:",
            "-n",
            "64",
            "--temp",
            "1",
            "--seed",
            "3",
            "--format",
            "json",
        ];
        args.extend(constraint);
        json_of(&args)
    };
    let schema = r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
        "legs": {"type": "integer", "minimum": 0, "maximum": 4}},
        "required": ["name", "legs"], "additionalProperties": false}"#;
    let out = run(&["--json-schema", schema]);
    assert_eq!(out["finish_reason"], "eos", "{out}");
    let cat: serde_json::Value = serde_json::from_str(out["text"].as_str().unwrap()).unwrap();
    let keys: Vec<&String> = cat.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["name", "legs"], "{cat}");
    assert!((0..=4).contains(&cat["legs"].as_i64().unwrap()), "{cat}");

    let out = run(&["--grammar", "root ::= \" \" (\"yes\" | \"no\") \".\""]);
    assert_eq!(out["finish_reason"], "eos", "{out}");
    assert!(out["text"] == " yes." || out["text"] == " no.", "{out}");

    let generate = ["generate", "-m", &model, "-p", "Hi", "--device", "cpu"];
    let err = error_of(
        &[
            &generate[..],
            &["--grammar", "root ::= \"a\"\nitem ::= [b-"],
        ]
        .concat(),
    );
    assert!(err.contains("grammar: line 2, column 13"), "{err}");
    let err = error_of(&[&generate[..], &["-j", r#"{"not": {"type": "string"}}"#]].concat());
    assert!(
        err.contains("json_schema") && err.contains("\"not\""),
        "{err}"
    );
}

#[test]
fn chat_answers_on_stdout_and_leaves_on_exit() {
    let Some(model) = smollm2() else { return };
    let out = hearth_with_input(
        &["chat", "-m", &model, "--temp", "0", "-n", "16"],
        "What is 2+2?\n/exit\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "The answer to this classic math problem is 4."
    );
    assert!(stderr.contains("/exit leaves"), "{stderr}");
}

#[test]
fn tokenize_prints_ids_and_pieces() {
    let Some(model) = smollm2() else { return };
    let out = json_of(&["tokenize", "-m", &model, "Hello world", "--format", "json"]);
    assert_eq!(
        out,
        serde_json::json!({"pieces": ["Hello", " world"], "tokens": [19556, 905]})
    );
}

#[test]
fn inspect_describes_the_file() {
    let Some(model) = smollm2() else { return };
    let out = json_of(&["inspect", &model, "--format", "json"]);
    assert_eq!(out["architecture"], "llama");
    assert_eq!(out["format"], "gguf");
    assert_eq!(out["file_size"], 98_362_432);
    assert!(
        out["chat_template"]
            .as_str()
            .is_some_and(|t| t.contains("<|im_start|>assistant")),
        "{}",
        out["chat_template"]
    );
    let table = stdout_of(&["inspect", &model]);
    assert!(table.contains("llama"), "{table}");
}

/// `--placement` plans the split without loading: the CPU's layers first, the device's
/// last with the head; a room too small is an error that says how many layers fit.
#[test]
fn inspect_plans_a_split_without_loading() {
    let Some(model) = smollm2() else { return };
    let args = [
        "inspect",
        &model,
        "--placement",
        "--gpu-layers",
        "10",
        "--format",
        "json",
    ];
    let plan = json_of(&args);
    let parts = plan["parts"].as_array().expect("parts");
    assert_eq!(parts.len(), 2, "{plan}");
    assert_eq!(parts[0]["name"], "cpu");
    assert_eq!(parts[0]["layers"]["end"], 20);
    assert_eq!(parts[1]["layers"]["start"], 20);
    assert!(parts[1]["bytes"]["weights"].as_u64().expect("bytes") > 0);
    let err = super::error_of(&[
        "inspect",
        &model,
        "--placement",
        "--gpu-layers",
        "all",
        "--gpu-memory",
        "64MiB",
    ]);
    assert!(
        err.contains("64.0 MiB free") && err.contains("layers fit"),
        "{err}"
    );
}

#[test]
fn version_completions_and_man_pages_come_from_the_command_tree() {
    let version = super::stdout_of(&["--version"]);
    let lines: Vec<&str> = version.lines().collect();
    assert!(lines[0].starts_with("hearth "), "{version}");
    assert!(lines[1].starts_with("commit "), "{version}");
    assert!(version.contains("Vulkan API 1.2"), "{version}");
    for (shell, mark) in [
        ("bash", "_hearth()"),
        ("zsh", "#compdef hearth"),
        ("fish", "complete -c hearth"),
    ] {
        let script = super::stdout_of(&["completions", shell]);
        assert!(
            script.contains(mark),
            "{shell}: {}",
            &script[..script.len().min(200)]
        );
        assert!(script.contains("serve"), "{shell} completes the commands");
    }
    let dir = super::scratch("man-pages");
    super::stdout_of(&["man", dir.to_str().unwrap()]);
    let serve = std::fs::read_to_string(dir.join("hearth-serve.1")).unwrap();
    assert!(serve.contains("\\-\\-api\\-key"), "{serve}");
    assert!(dir.join("hearth.1").exists());
}
