//! OpenAI's shapes at the edges: lengths, seeds, nulls, token-id prompts, roles and content,
//! the field named in every 400, JSON bodies for 404 and 405, `/v1/models/{id}` and
//! `/openapi.json`.

mod common;

use common::Server;
use hearth_server::ServerOptions;
use serde_json::{json, Value};

async fn server() -> Server {
    Server::start(2, 128, ServerOptions::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_openai_takes_is_taken() {
    let s = server().await;
    for body in [
        json!({ "prompt": "a", "max_tokens": 2, "seed": -1, "stream": null }),
        json!({ "prompt": "a", "max_tokens": 2, "seed": i64::MIN, "n": null, "stop": null }),
        json!({ "prompt": [5, 6, 7], "max_tokens": 2 }),
        // Whole numbers written as floats, as JSON Schema counts them.
        json!({ "prompt": [5.0, 6], "max_tokens": 2.0, "n": 1.0 }),
    ] {
        let a = s.call("POST", "/v1/completions", Some(body.clone())).await;
        assert_eq!(a.status, 200, "{body}: {}", a.body);
        assert_eq!(a.json()["choices"].as_array().unwrap().len(), 1);
    }
    // A batch of prompts: `n` choices each, numbered prompt by prompt.
    let body = json!({ "prompt": [[5, 6], [7, 8]], "n": 2, "max_tokens": 2, "temperature": 0 });
    let a = s.call("POST", "/v1/completions", Some(body)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let json = a.json();
    let indexes: Vec<u64> = json["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [0, 1, 2, 3]);
    assert_eq!(json["usage"]["prompt_tokens"], 4);
    let chat = json!({ "messages": [{ "role": "developer", "content": "Be brief." },
                                    { "role": "user", "content": "Hi" }],
                       "max_tokens": 2, "stream": null });
    let a = s.call("POST", "/v1/chat/completions", Some(chat)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = s.call("GET", "/openapi.json", None).await;
    assert_eq!(a.status, 200);
    assert!(a.json()["paths"]["/v1/chat/completions"]["post"].is_object());
    let a = s.call("GET", "/v1/models/tiny", None).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["id"], "tiny");
    assert_eq!(a.json()["object"], "model");
}

/// `logit_bias` moves greedy decoding: a large bias makes its token the answer, and banning
/// the greedy token changes it; the neutral values of what is not served pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logit_bias_moves_the_answer_and_neutral_values_pass() {
    let s = server().await;
    let tokens = |extra: Value| {
        let mut body = json!({ "prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0,
                               "logprobs": 0 });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let greedy = |a: &common::Answer| -> Vec<String> {
        a.json()["choices"][0]["logprobs"]["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect()
    };
    let plain = s
        .call("POST", "/v1/completions", Some(tokens(json!({}))))
        .await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    let forced = s
        .call(
            "POST",
            "/v1/completions",
            Some(tokens(json!({ "logit_bias": { "42": 100 } }))),
        )
        .await;
    assert_eq!(forced.status, 200, "{}", forced.body);
    let forced_tokens = greedy(&forced);
    assert!(
        forced_tokens.windows(2).all(|w| w[0] == w[1]),
        "{forced_tokens:?}"
    );
    assert_ne!(greedy(&plain), forced_tokens);
    for neutral in [
        json!({ "response_format": { "type": "text" } }),
        json!({ "tools": [], "tool_choice": "none" }),
        json!({ "tool_choice": "auto", "logit_bias": {} }),
    ] {
        let a = s
            .call("POST", "/v1/completions", Some(tokens(neutral.clone())))
            .await;
        assert_eq!(a.status, 200, "{neutral}: {}", a.body);
        assert_eq!(greedy(&a), greedy(&plain), "{neutral}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_json_and_every_400_names_its_field() {
    let s = server().await;
    let completion = |extra: Value| {
        let mut body = json!({ "prompt": "a" });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let chat = |messages: Value| json!({ "messages": messages, "max_tokens": 2 });
    let cases = [
        (
            "/v1/completions",
            completion(json!({ "max_tokens": 0 })),
            "max_tokens",
        ),
        (
            "/v1/completions",
            completion(json!({ "max_tokens": 18446744073709551615u64 })),
            "max_tokens",
        ),
        (
            "/v1/completions",
            completion(json!({ "max_tokens": 1_000_000_000_000u64 })),
            "max_tokens",
        ),
        (
            "/v1/completions",
            completion(json!({ "top_p": 2.0 })),
            "top_p",
        ),
        (
            "/v1/completions",
            completion(json!({ "temperature": "hot" })),
            "temperature",
        ),
        (
            "/v1/completions",
            completion(json!({ "seed": 1.5 })),
            "seed",
        ),
        (
            "/v1/completions",
            completion(json!({ "stop": "x".repeat(2000) })),
            "stop",
        ),
        ("/v1/completions", completion(json!({ "n": 17 })), "n"),
        ("/v1/completions", completion(json!({ "n": 1.5 })), "n"),
        ("/v1/completions", json!({ "prompt": [] }), "prompt"),
        ("/v1/completions", json!({ "prompt": [1, 99999] }), "prompt"),
        ("/v1/completions", json!({ "prompt": [1, -1] }), "prompt[1]"),
        ("/v1/completions", json!({ "prompt": {} }), "prompt"),
        ("/v1/completions", json!({ "max_tokens": 3 }), "prompt"),
        (
            "/v1/chat/completions",
            chat(json!([{ "role": "wizard", "content": "x" }])),
            "messages[0].role",
        ),
        (
            "/v1/chat/completions",
            chat(json!([{ "role": "user", "content": null }])),
            "messages[0].content",
        ),
        ("/v1/chat/completions", chat(json!([])), "messages"),
        (
            "/v1/completions",
            completion(json!({ "logit_bias": { "5": 101 } })),
            "logit_bias.5",
        ),
        (
            "/v1/completions",
            completion(json!({ "logit_bias": { "five": 1 } })),
            "logit_bias.five",
        ),
        (
            "/v1/completions",
            completion(json!({ "logit_bias": { "99999": 1 } })),
            "logit_bias",
        ),
        (
            "/v1/completions",
            completion(json!({ "logit_bias": [1] })),
            "logit_bias",
        ),
        // What would change the answer but is not served is refused, never ignored.
        (
            "/v1/completions",
            completion(json!({ "response_format": { "type": "xml" } })),
            "response_format.type",
        ),
        (
            "/v1/completions",
            completion(json!({ "tools": [{ "type": "function", "function": { "name": "f" } }] })),
            "tools",
        ),
        (
            "/v1/chat/completions",
            json!({ "messages": [{ "role": "user", "content": "Hi" }],
                    "tools": [{ "type": "function", "function": { "name": "a b" } }] }),
            "tools[0].function.name",
        ),
        (
            "/v1/chat/completions",
            json!({ "messages": [{ "role": "user", "content": "Hi" }],
                    "tool_choice": "required" }),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            json!({ "messages": [{ "role": "user", "content": "Hi" }],
                    "functions": [{ "name": "f" }], "function_call": { "name": "g" } }),
            "function_call",
        ),
    ];
    for (path, body, param) in cases {
        let a = s.call("POST", path, Some(body.clone())).await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        let error = &a.json()["error"];
        assert_eq!(error["param"], param, "{body}: {}", a.body);
        assert_eq!(error["type"], "invalid_request_error");
    }
    let a = s
        .call("POST", "/v1/completions", Some(json!({ "prompt": [] })))
        .await;
    let message = a.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("empty"), "{message}");
    assert!(!message.contains("one prompt per request"), "{message}");
    // Wrong method, unknown route, unknown model: JSON errors too.
    for (method, path, status) in [
        ("GET", "/v1/chat/completions", 405),
        ("DELETE", "/v1/models", 405),
        ("GET", "/v1/nothing", 404),
        ("GET", "/v1/models/other", 404),
    ] {
        let a = s.call(method, path, None).await;
        assert_eq!(a.status, status, "{method} {path}");
        assert!(
            a.json()["error"]["message"].is_string(),
            "{method} {path}: {}",
            a.body
        );
    }
}
