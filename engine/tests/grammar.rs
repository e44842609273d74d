//! Constrained output on a real model, SmolLM2-135M-Instruct (`scripts/setup` fetches it):
//! 200 completions sampled at temperature 1 (no other filter) under a JSON Schema with nested
//! objects, enums, bounded arrays and strings that need escapes all end by themselves and
//! validate (Python's `jsonschema`, from the test tools' venv, `scripts/pytools/setup`). The
//! completions run batched on the native CPU executor; afterwards their tokens are replayed
//! through the grammar alone, and through a GBNF grammar of any JSON, to print the mask's
//! cost per token on the 49k vocabulary.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hearth_engine::grammar::{Constraint, GrammarSpec};
use hearth_engine::sample::SamplerParams;
use hearth_engine::sched::RequestParams;
use hearth_engine::session::{FinishReason, GenerateParams};
use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_models::ChatMessage;
use serde_json::{json, Value};

const SAMPLES: usize = 200;

/// Nested objects, enums (one whose value needs escapes), bounded arrays, bounded strings,
/// a string that can only be written with an escaped backslash, and a constant that needs
/// escaped quotes and a newline.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 8},
            "kind": {"enum": ["cat", "dog", "a \"bird\""]},
            "tags": {
                "type": "array",
                "items": {"type": "string", "maxLength": 6},
                "minItems": 1,
                "maxItems": 2
            },
            "owner": {
                "type": "object",
                "properties": {
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "city": {"enum": ["Paris", "Oslo", "Lima"]},
                    "home": {"type": "string", "pattern": "^C:\\\\[a-z]{1,4}$"}
                },
                "required": ["age", "city", "home"],
                "additionalProperties": false
            },
            "motto": {"const": "say \"hi\"\n"}
        },
        "required": ["name", "kind", "tags", "owner", "motto"],
        "additionalProperties": false
    })
}

/// Reads a JSON array of texts and the schema; prints every text that does not parse or
/// validate, and fails if there is one.
const VALIDATE: &str = r#"
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
bad = []
for i, text in enumerate(json.load(open(sys.argv[2]))):
    try:
        jsonschema.validate(json.loads(text), schema)
    except Exception as e:
        bad.append(f"{i}: {e}: {text!r}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
"#;

#[test]
fn sampled_json_always_validates() {
    let Some(path) = hearth_testkit::model(hearth_testkit::SMOLLM2) else {
        return;
    };
    let Some(python) = hearth_testkit::tools_python() else {
        return;
    };
    let options = EngineOptions {
        backend: BackendKind::Cpu,
        n_ctx: Some(384),
        n_seq: 64,
        ..EngineOptions::default()
    };
    let mut engine = Engine::load(&path, &options, &mut |_| true).unwrap();
    let (tokenizer, _) = engine.text_tools();
    // One compact answer to copy the layout of: shorter answers, a shorter test.
    let ask = |s: &str| ChatMessage::new("user", format!("Describe a pet and its owner as {s}."));
    let example = r#"{"name":"Rex","kind":"dog","tags":["calm"],"owner":{"age":30,"city":"Oslo","home":"C:\\rex"},"motto":"say \"hi\"\n"}"#;
    let prompt = engine
        .tokenize_chat(&[
            ask("JSON"),
            ChatMessage::new("assistant", example),
            ask("JSON, another one"),
        ])
        .unwrap();
    let spec = GrammarSpec::JsonSchema(schema());
    let params = RequestParams {
        generate: GenerateParams {
            max_tokens: Some(160),
            sampler: SamplerParams {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                seed: 51,
                ..SamplerParams::default()
            },
            grammar: Some(spec.clone()),
            ..GenerateParams::default()
        },
        n: SAMPLES,
    };

    let start = Instant::now();
    let mut sched = engine.scheduler().unwrap();
    sched.add_request(&prompt, &params).unwrap();
    let mut outputs: HashMap<usize, (String, Vec<u32>, Option<FinishReason>)> = HashMap::new();
    while sched.pending() > 0 {
        for e in sched.step().unwrap() {
            let out = outputs.entry(e.sample).or_default();
            out.0.push_str(&e.text);
            out.1.extend(e.token);
            out.2 = out.2.or(e.finish);
        }
    }
    let elapsed = start.elapsed();
    let generated: usize = outputs.values().map(|o| o.1.len()).sum();
    eprintln!(
        "{SAMPLES} completions, {generated} tokens in {:.1} s ({:.0} tokens/s, 64 at a time)",
        elapsed.as_secs_f64(),
        generated as f64 / elapsed.as_secs_f64()
    );

    assert_eq!(outputs.len(), SAMPLES);
    let mut texts = Vec::new();
    for i in 0..SAMPLES {
        let (text, tokens, finish) = &outputs[&i];
        assert_eq!(
            *finish,
            Some(FinishReason::Eos),
            "sample {i} did not end by itself after {} tokens: {text:?}",
            tokens.len()
        );
        texts.push(text.clone());
    }
    let distinct: std::collections::HashSet<&String> = texts.iter().collect();
    assert!(
        distinct.len() > SAMPLES / 2,
        "only {} distinct",
        distinct.len()
    );
    eprintln!("e.g. {}", texts[0]);

    let dir = std::env::temp_dir().join(format!("hearth-grammar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (schema_file, texts_file) = (dir.join("schema.json"), dir.join("texts.json"));
    std::fs::write(&schema_file, schema().to_string()).unwrap();
    std::fs::write(&texts_file, serde_json::to_string(&texts).unwrap()).unwrap();
    let run = std::process::Command::new(&python)
        .arg("-c")
        .arg(VALIDATE)
        .arg(&schema_file)
        .arg(&texts_file)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        run.status.success(),
        "outputs that do not validate:\n{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );

    // The mask alone, step by step over the same tokens: under the schema, and under a GBNF
    // grammar of any JSON (whose terminals are single characters).
    for (what, spec) in [
        ("JSON Schema", spec),
        ("GBNF", GrammarSpec::Gbnf(JSON_GBNF.into())),
    ] {
        let mut times: Vec<Duration> = Vec::new();
        for (_, tokens, _) in outputs.values().take(50) {
            let mut c = Constraint::new(&spec, &tokenizer).unwrap();
            for &t in tokens {
                let start = Instant::now();
                assert!(c.allowed().is_allowed(t), "{what}: token {t}");
                times.push(start.elapsed());
                c.commit(t);
            }
        }
        times.sort();
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        eprintln!(
            "{what} mask over {} tokens: mean {:.0} µs, median {:.0} µs, p99 {:.0} µs ({} steps)",
            tokenizer.vocab_size(),
            mean.as_secs_f64() * 1e6,
            times[times.len() / 2].as_secs_f64() * 1e6,
            times[times.len() * 99 / 100].as_secs_f64() * 1e6,
            times.len()
        );
    }
}

/// Any JSON value, for timing a GBNF grammar's masks.
const JSON_GBNF: &str = r#"
root   ::= ws value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}" ws
member ::= string ":" ws value
array  ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" ws
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws
ws     ::= [ \t\n]*
"#;
