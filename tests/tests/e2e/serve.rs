//! `hearth serve` on the real model, driven over raw HTTP/1.1 (so that framing, slow bodies
//! and vanishing clients are what the test writes) and by curl: greedy answers equal
//! `hearth generate`'s, streamed and not, alone and among 64 concurrent requests; the errors of OpenAI's API; the
//! API key; metrics; and SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::smollm2;

const KEY: &str = "test-key";
/// `hearth generate -p "The capital of France is" -n 12 --temp 0` (generate.rs).
const PROMPT: &str = "The capital of France is";
const GREEDY_TEXT: &str = " Paris.\n\nThe answer is: 201";

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the server on a free port and waits until it says it is ready.
fn start(model: &str, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth-e2e"))
        .env("HEARTH_DEVICE", super::DEVICE)
        .args(["serve", "-m", model, "--port", "0", "--api-key", KEY])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hearth serve starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut addr = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("hearth serve: listening on http://") {
            addr = rest.split_whitespace().next().map(str::to_string);
        }
        if line.starts_with("hearth serve: ready") {
            break;
        }
        assert!(!line.starts_with("error"), "{line}");
    }
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Server {
        child,
        addr: addr.expect("the listening address"),
    }
}

/// One request on its own connection: (status, body), the body de-chunked.
fn request(addr: &str, method: &str, path: &str, key: Option<&str>, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").expect("a chunk size line");
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
}

fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = request(addr, "POST", path, Some(KEY), body.to_string().as_bytes());
    (status, parse(&text))
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn greedy_completion(stream: bool) -> Value {
    json!({ "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "stream": stream,
            "stream_options": { "include_usage": true } })
}

/// The text of a stream's `data:` events, checking the framing: events separated by blank
/// lines, each a JSON chunk, the last `[DONE]`.
fn streamed_text(body: &str) -> (String, Value) {
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"), "{body}");
    let mut text = String::new();
    let mut usage = Value::Null;
    for e in &events[..events.len() - 1] {
        let chunk = parse(e.strip_prefix("data: ").expect("a data line"));
        if let Some(c) = chunk["choices"].get(0) {
            text.push_str(
                c["text"]
                    .as_str()
                    .or(c["delta"]["content"].as_str())
                    .unwrap_or(""),
            );
        }
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
    }
    (text, usage)
}

#[test]
fn the_server_answers_as_generate_does_and_refuses_what_it_should() {
    let Some(model) = smollm2() else { return };
    let server = start(&model, &["--parallel", "8", "--max-body", "100000"]);
    let addr = server.addr.as_str();

    let (status, health) = request(addr, "GET", "/health", None, b"");
    assert_eq!((status, parse(&health)), (200, json!({ "status": "ok" })));
    let (status, models) = request(addr, "GET", "/v1/models", Some(KEY), b"");
    assert_eq!(status, 200);
    assert_eq!(parse(&models)["data"][0]["id"], model.as_str());

    // Greedy, not streamed and streamed: `hearth generate`'s text, with the usage.
    let (status, done) = post(addr, "/v1/completions", &greedy_completion(false));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["choices"][0]["text"], GREEDY_TEXT);
    assert_eq!(done["choices"][0]["finish_reason"], "length");
    assert_eq!(done["usage"]["completion_tokens"], 12);
    let (status, body) = request(
        addr,
        "POST",
        "/v1/completions",
        Some(KEY),
        greedy_completion(true).to_string().as_bytes(),
    );
    assert_eq!(status, 200);
    let (text, usage) = streamed_text(&body);
    assert_eq!(text, GREEDY_TEXT);
    assert_eq!(usage["prompt_tokens"], 5);

    // curl sees the same stream, framed as server-sent events.
    let out = Command::new("curl")
        .args(["-sS", "-N", "-i", "--fail-with-body", "-H"])
        .arg(format!("Authorization: Bearer {KEY}"))
        .args(["-H", "Content-Type: application/json", "-d"])
        .arg(greedy_completion(true).to_string())
        .arg(format!("http://{addr}/v1/completions"))
        .output()
        .expect("curl runs (scripts/setup installs it)");
    let raw = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{raw}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .expect("headers, then the stream");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{head}"
    );
    assert!(body.starts_with("data: {"), "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    assert_eq!(streamed_text(body).0, GREEDY_TEXT);

    // Among 64 concurrent requests, each the same answer.
    let answers: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..64)
            .map(|i| {
                s.spawn(move || {
                    let (status, body) = request(
                        addr,
                        "POST",
                        "/v1/completions",
                        Some(KEY),
                        greedy_completion(i % 2 == 0).to_string().as_bytes(),
                    );
                    assert_eq!(status, 200, "{body}");
                    match i % 2 == 0 {
                        true => streamed_text(&body).0,
                        false => parse(&body)["choices"][0]["text"].as_str().unwrap().into(),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(answers.len(), 64);
    assert!(answers.iter().all(|a| a == GREEDY_TEXT), "{answers:?}");

    // A chat: the template's prompt, an assistant message.
    let chat = json!({ "messages": [{ "role": "user", "content": "What is the capital of France?" }],
                       "max_tokens": 12, "temperature": 0 });
    let (status, answer) = post(addr, "/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["choices"][0]["message"]["role"], "assistant");
    assert!(
        answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{answer}"
    );

    // Errors in OpenAI's shape, each with its status.
    let error = |status: u16, body: &str| {
        let v = parse(body);
        assert!(v["error"]["message"].is_string(), "{body}");
        status
    };
    let (s, b) = request(addr, "POST", "/v1/completions", Some(KEY), b"{not json");
    assert_eq!(error(s, &b), 400);
    let (s, b) = post(addr, "/v1/chat/completions", &json!({ "messages": "hi" }));
    assert_eq!(
        (s, b["error"]["type"].as_str()),
        (400, Some("invalid_request_error"))
    );
    let (s, b) = request(addr, "GET", "/v1/nothing", Some(KEY), b"");
    assert_eq!(error(s, &b), 404);
    let (s, b) = post(
        addr,
        "/v1/completions",
        &json!({ "prompt": "hi", "model": "gpt-4" }),
    );
    assert_eq!((s, b["error"]["param"].as_str()), (404, Some("model")));
    let (s, b) = post(
        addr,
        "/v1/completions",
        &json!({ "prompt": "hi", "max_tokens": 100000 }),
    );
    assert_eq!(s, 400);
    let message = b["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("100000") && message.contains("4096"),
        "{message}"
    );
    let big = json!({ "prompt": "a".repeat(200_000) });
    let (s, b) = request(
        addr,
        "POST",
        "/v1/completions",
        Some(KEY),
        big.to_string().as_bytes(),
    );
    assert_eq!(error(s, &b), 413);
    for key in [None, Some("wrong")] {
        let (s, b) = request(addr, "GET", "/v1/models", key, b"");
        assert_eq!(error(s, &b), 401);
    }
    let (s, b) = post(addr, "/v1/embeddings", &json!({ "input": "hi" }));
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--embedding-model"),
        "{b}"
    );
    assert_eq!(s, 400);

    // A client that goes away mid-stream: the server carries on serving the others.
    {
        let mut s = TcpStream::connect(addr).unwrap();
        let body =
            json!({ "prompt": PROMPT, "max_tokens": 3000, "temperature": 0, "stream": true })
                .to_string();
        let head = format!(
            "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {KEY}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        let mut first = [0u8; 256];
        let _ = s.read(&mut first).unwrap();
    }
    // Its sequence is cancelled at the next token, long before its 3000 would be done.
    let t0 = Instant::now();
    loop {
        let (_, metrics) = request(addr, "GET", "/metrics", None, b"");
        if metrics.contains("hearth_running_sequences 0") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{metrics}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, done) = post(addr, "/v1/completions", &greedy_completion(false));
    assert_eq!(
        (status, done["choices"][0]["text"].as_str()),
        (200, Some(GREEDY_TEXT))
    );

    // A client sending its body a byte at a time is one slow connection, not a slow server.
    let slow = std::thread::spawn({
        let addr = addr.to_string();
        move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            let head = format!(
                "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {KEY}\r\n\
                 Content-Length: 100\r\n\r\n"
            );
            s.write_all(head.as_bytes()).unwrap();
            for _ in 0..3 {
                s.write_all(b" ").unwrap();
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    });
    let t0 = Instant::now();
    let (status, _) = post(addr, "/v1/completions", &greedy_completion(false));
    assert_eq!(status, 200);
    assert!(t0.elapsed() < Duration::from_secs(60));
    slow.join().unwrap();

    // Metrics in Prometheus' text format, counting what happened.
    let (status, metrics) = request(addr, "GET", "/metrics", None, b"");
    assert_eq!(status, 200);
    for series in [
        "hearth_requests_total{route=\"/v1/completions\",status=\"200\"}",
        "hearth_requests_total{route=\"/v1/models\",status=\"401\"} 2",
        "hearth_requests_total{route=\"/v1/completions\",status=\"413\"} 1",
        "hearth_requests_total{route=\"other\",status=\"404\"} 1",
        "hearth_time_to_first_token_seconds_count",
        "hearth_kv_blocks_total",
    ] {
        assert!(metrics.contains(series), "{series} in\n{metrics}");
    }

    // SIGTERM with nothing in flight: the server exits cleanly.
    let mut server = server;
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Constrained output on the native CPU executor: JSON mode and a strict JSON Schema hold
/// sampled answers (several seeds, streamed and not), llama.cpp's `grammar` field holds a
/// completion to a GBNF grammar. The schema's and the grammar's answers are bounded, so each
/// ends by itself (`stop`); JSON mode's object may nest without end, and a 135M model at
/// temperature 0.7 sometimes does, so there each answer that ends is an object, and most end.
/// A schema keyword the compiler does not implement is a 400 naming it, as are a grammar that
/// does not parse and an unknown format type.
#[test]
fn response_format_holds_the_answer() {
    let Some(model) = smollm2() else { return };
    let server = start(&model, &["--device", "cpu", "--parallel", "2"]);
    let chat = |format: Value, seed: u64, stream: bool| {
        let body = json!({
            "messages": [{ "role": "user",
                           "content": "Describe a cat in a short JSON object: name, legs, color." }],
            "max_tokens": 240,
            "temperature": 0.7,
            "seed": seed,
            "stream": stream,
            "response_format": format,
        });
        // The finish reason and the answer's text.
        if !stream {
            let (status, answer) = post(&server.addr, "/v1/chat/completions", &body);
            assert_eq!(status, 200, "{answer}");
            let choice = &answer["choices"][0];
            let content = choice["message"]["content"].as_str().unwrap().to_string();
            return (
                choice["finish_reason"].as_str().unwrap().to_string(),
                content,
            );
        }
        let (status, text) = request(
            &server.addr,
            "POST",
            "/v1/chat/completions",
            Some(KEY),
            body.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "{text}");
        let finish = ["stop", "length"]
            .into_iter()
            .find(|r| text.contains(&format!("\"finish_reason\":\"{r}\"")))
            .unwrap_or_else(|| panic!("no finish reason: {text}"));
        (finish.to_string(), streamed_text(&text).0)
    };
    let ended = |(finish, content): (String, String)| {
        assert_eq!(finish, "stop", "{content}");
        parse(&content)
    };

    let mut stopped = 0;
    for seed in 0..6 {
        let (finish, content) = chat(json!({ "type": "json_object" }), seed, seed % 2 == 1);
        assert!(
            finish == "stop" || finish == "length",
            "{finish}: {content}"
        );
        if finish == "stop" {
            assert!(parse(&content).is_object(), "{content}");
            stopped += 1;
        }
    }
    assert!(
        stopped >= 3,
        "{stopped} of 6 JSON-mode answers ended by themselves"
    );

    let schema = json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "maxLength": 10 },
            "legs": { "type": "integer", "minimum": 0, "maximum": 8 },
            "color": { "enum": ["black", "white", "gray \"tabby\""] },
            "toys": {
                "type": "array",
                "items": { "type": "string", "maxLength": 12 },
                "maxItems": 2
            }
        },
        "required": ["name", "legs", "color", "toys"],
        "additionalProperties": false
    });
    let format = json!({ "type": "json_schema",
                         "json_schema": { "name": "cat", "schema": schema, "strict": true } });
    for seed in 0..3 {
        let cat = ended(chat(format.clone(), seed, seed == 2));
        let keys: Vec<&String> = cat.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["name", "legs", "color", "toys"], "{cat}");
        assert!(cat["name"].as_str().unwrap().chars().count() <= 10, "{cat}");
        assert!((0..=8).contains(&cat["legs"].as_i64().unwrap()), "{cat}");
        assert!(schema["properties"]["color"]["enum"]
            .as_array()
            .unwrap()
            .contains(&cat["color"]));
        assert!(cat["toys"].as_array().unwrap().len() <= 2, "{cat}");
    }

    // llama.cpp's `grammar`, on the completions endpoint.
    let (status, answer) = post(
        &server.addr,
        "/v1/completions",
        &json!({ "prompt": "Is the sky blue? Answer:", "max_tokens": 8, "temperature": 1,
                 "grammar": "root ::= \" \" (\"yes\" | \"no\") \".\"" }),
    );
    assert_eq!(status, 200, "{answer}");
    let text = answer["choices"][0]["text"].as_str().unwrap();
    assert!(text == " yes." || text == " no.", "{text:?}");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");

    let refused = |body: Value, param: &str, names: &str| {
        let (status, e) = post(&server.addr, "/v1/chat/completions", &body);
        assert_eq!(status, 400, "{e}");
        assert_eq!(e["error"]["param"], param, "{e}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{message}");
    };
    let ask = |extra: Value| {
        let mut body = json!({ "messages": [{ "role": "user", "content": "Hi" }] });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let conditional = json!({ "type": "object", "if": { "required": ["a"] },
                              "then": { "required": ["b"] } });
    refused(
        ask(json!({ "response_format": { "type": "json_schema",
                    "json_schema": { "name": "x", "schema": conditional, "strict": true } } })),
        "response_format",
        "\"if\"",
    );
    refused(
        ask(json!({ "json_schema": { "dependentSchemas": { "a": { "required": ["b"] } } } })),
        "json_schema",
        "dependentSchemas",
    );
    refused(
        ask(json!({ "grammar": "root ::= [a-" })),
        "grammar",
        "line 1, column 13",
    );
    refused(
        ask(json!({ "response_format": { "type": "xml" } })),
        "response_format.type",
        "`xml`",
    );
}

/// The official `openai` Python package as the client (`scripts/pytools/openai_check.py`):
/// models, completions, chat, streamed chat with usage, and the errors it raises.
#[test]
fn the_openai_python_client_drives_it() {
    let Some(model) = smollm2() else { return };
    let Some(python) = hearth_testkit::tools_python() else {
        return;
    };
    let server = start(&model, &["--parallel", "2"]);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/pytools/openai_check.py");
    let out = Command::new(python)
        .arg(script)
        .args([
            &format!("http://{}/v1", server.addr),
            KEY,
            &model,
            GREEDY_TEXT,
        ])
        .output()
        .expect("python runs");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("ok: wrong type"), "{report}");
}

/// Property-based requests from the server's own `/openapi.json` (schemathesis, bounded in
/// time): no server error, every status and body as described, every request that breaks the
/// description refused. One check is left out and one limit raised: a schema-valid request may still be refused
/// for what the description cannot know (a prompt and `max_tokens` past this model's context,
/// a token id past its vocabulary), and the response-time limit is raised, since a long answer
/// on a CPU takes longer than the default one.
#[test]
fn the_openapi_description_holds_under_schemathesis() {
    let Some(model) = smollm2() else { return };
    let Some(python) = hearth_testkit::tools_python() else {
        return;
    };
    let server = start(&model, &["--parallel", "4", "-c", "256"]);
    // Its example database goes to a scratch directory, not the source tree.
    let out = Command::new(python)
        .current_dir(super::scratch("schemathesis"))
        .args(["-m", "schemathesis.cli", "run"])
        .arg(format!("http://{}/openapi.json", server.addr))
        .args(["-H", &format!("Authorization: Bearer {KEY}")])
        .args(["--checks", "all"])
        .args(["--exclude-checks", "positive_data_acceptance"])
        .args(["--max-response-time", "600"])
        .args(["--max-examples", "30", "--max-time", "180", "--seed", "1"])
        .args(["--request-timeout", "120"])
        .args(["--suppress-health-check", "filter_too_much"])
        .output()
        .expect("python runs");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server started with `--draft lookup` drafts for every request: its greedy answer is
/// the one a request that turns drafting off (`speculative.n_max: 0`) gets, streamed too; a
/// request for a draft model the server has not loaded is refused by name.
#[test]
fn a_drafting_server_answers_as_a_plain_one() {
    let Some(model) = smollm2() else { return };
    let server = start(&model, &["--draft", "lookup"]);
    let edit = "Repeat this sentence with Maria in place of Alice: Alice walked to the market \
                every morning, and Alice bought bread and apples.";
    let ask = |extra: Value| {
        let mut body = json!({
            "messages": [{ "role": "user", "content": edit }],
            "max_tokens": 32,
            "temperature": 0,
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        post(&server.addr, "/v1/chat/completions", &body)
    };
    let (status, plain) = ask(json!({ "speculative.n_max": 0 }));
    assert_eq!(status, 200, "{plain}");
    let (status, drafted) = ask(json!({}));
    assert_eq!(status, 200, "{drafted}");
    let text = &plain["choices"][0]["message"]["content"];
    assert_eq!(&drafted["choices"][0]["message"]["content"], text);
    let (status, tuned) = ask(json!({ "speculative.n_max": 3 }));
    assert_eq!(status, 200, "{tuned}");
    assert_eq!(&tuned["choices"][0]["message"]["content"], text);
    let body = json!({
        "messages": [{ "role": "user", "content": edit }],
        "max_tokens": 32, "temperature": 0, "stream": true,
    });
    let (status, raw) = request(
        &server.addr,
        "POST",
        "/v1/chat/completions",
        Some(KEY),
        body.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{raw}");
    let (streamed, _) = streamed_text(&raw);
    assert_eq!(Value::from(streamed), *text);
    let (status, refused) = ask(json!({ "speculative.source": "model" }));
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "draft", "{refused}");
}

/// deploy/kubernetes/ against the Kubernetes API's schema (`kubernetes-validate`, strict) and
/// the fields serving needs (`scripts/pytools/manifests_check.py`); a misspelt field fails.
#[test]
fn the_kubernetes_manifests_validate() {
    let Some(python) = hearth_testkit::tools_python() else {
        return;
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let check = |dir: &std::path::Path| {
        Command::new(&python)
            .arg(root.join("scripts/pytools/manifests_check.py"))
            .arg(dir)
            .output()
            .expect("python runs")
    };
    let out = check(&root.join("deploy/kubernetes"));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("ok: probes"), "{report}");

    let bad = super::scratch("manifests");
    for name in ["deployment.yaml", "service.yaml"] {
        let text = std::fs::read_to_string(root.join("deploy/kubernetes").join(name)).unwrap();
        let text = text.replace("readinessProbe:", "readinesProbe:");
        std::fs::write(bad.join(name), text).unwrap();
    }
    let out = check(&bad);
    assert!(!out.status.success(), "a misspelt field passed");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("readinesProbe"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(bad).ok();
}

/// all-MiniLM-L6-v2 through the official `openai` package
/// (`scripts/pytools/openai_embeddings_check.py`): served alone (`-m`), where chat is refused,
/// and beside the chat model (`--embedding-model`), where both answer.
#[test]
fn the_openai_python_client_embeds() {
    let Some(minilm) = hearth_testkit::model(hearth_testkit::MINILM) else {
        return;
    };
    let minilm = minilm.to_str().expect("a UTF-8 path").to_owned();
    let Some(python) = hearth_testkit::tools_python() else {
        return;
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts/pytools/openai_embeddings_check.py");
    let check = |server: &Server, model: &str, mode: &str| {
        let out = Command::new(&python)
            .arg(&script)
            .args([&format!("http://{}/v1", server.addr), KEY, model, mode])
            .output()
            .expect("python runs");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{report}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(report.contains("ok: meaning orders them"), "{report}");
    };
    let alone = start(&minilm, &["--alias", "minilm"]);
    check(&alone, "minilm", "alone");
    drop(alone);
    let Some(chat) = smollm2() else { return };
    let beside = start(&chat, &["--embedding-model", &minilm, "-c", "256"]);
    check(&beside, &minilm, "beside");
    let (status, body) = request(
        &beside.addr,
        "POST",
        "/v1/completions",
        Some(KEY),
        json!({ "prompt": PROMPT, "max_tokens": 12, "temperature": 0 })
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["choices"][0]["text"], GREEDY_TEXT);
}

/// A cross-encoder served alone (the conformance suite's random-weight one, made by
/// transformers): `/v1/rerank` orders the documents by transformers' scores, honours `top_n`
/// and `return_documents`, and answers at llama.cpp's `/rerank` too; bad requests name the
/// field.
#[test]
fn rerank_orders_documents_as_transformers_scores_them() {
    let Some(dir) = hearth_testkit::conformance_model("bert-rerank") else {
        return;
    };
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let cases = reference["cases"].as_array().unwrap();
    let docs: Vec<&str> = cases
        .iter()
        .map(|c| c["document"].as_str().unwrap())
        .collect();
    let want: Vec<f64> = cases.iter().map(|c| c["score"].as_f64().unwrap()).collect();
    let hf = dir.join("hf");
    let server = start(hf.to_str().unwrap(), &["--alias", "ranker"]);
    let ask = |path: &str, body: Value| {
        let (status, text) = request(
            &server.addr,
            "POST",
            path,
            Some(KEY),
            body.to_string().as_bytes(),
        );
        (status, serde_json::from_str::<Value>(&text).unwrap())
    };
    let body = json!({ "model": "ranker", "query": reference["query"], "documents": docs,
                       "top_n": 3, "return_documents": true });
    let (status, answer) = ask("/v1/rerank", body.clone());
    assert_eq!(status, 200, "{answer}");
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let mut order: Vec<usize> = (0..want.len()).collect();
    order.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
    for (r, &i) in results.iter().zip(&order) {
        assert_eq!(r["index"], i, "{answer}");
        let score = r["relevance_score"].as_f64().unwrap();
        assert!(
            (score - want[i]).abs() < 1e-4,
            "{score} against {}",
            want[i]
        );
        assert_eq!(r["document"]["text"], docs[i]);
    }
    assert!(answer["usage"]["prompt_tokens"].as_u64().unwrap() > 20);
    let (status, same) = ask("/rerank", body);
    assert_eq!((status, &same["results"]), (200, &answer["results"]));
    let (status, bad) = ask("/v1/rerank", json!({ "query": "q", "documents": [] }));
    assert_eq!(status, 400);
    assert_eq!(bad["error"]["param"], "documents");
    let (status, bad) = ask(
        "/v1/rerank",
        json!({ "model": "other", "query": "q", "documents": ["d"] }),
    );
    assert_eq!(status, 404, "{bad}");
}
