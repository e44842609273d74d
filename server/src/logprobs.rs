//! Log probabilities in the two shapes OpenAI's API gives them: chat's list of entries, each
//! with the token's text, bytes and alternatives, and the legacy completions' parallel lists.

use hearth_models::Tokenizer;
use hearth_runtime::sample::{Logprobs, TokenLogprob};
use serde_json::{json, Map, Value};

/// Whether a generated token is reported: end-of-generation tokens are not part of the text.
pub fn reported(tokenizer: &Tokenizer, lp: &Logprobs) -> bool {
    !tokenizer.is_end_of_generation(lp.chosen.token)
}

fn text(tokenizer: &Tokenizer, token: u32) -> String {
    tokenizer.token_text(token).unwrap_or_default()
}

/// A finite number for JSON: -inf (a token the model ruled out) as OpenAI's floor of -9999.
fn number(logprob: f32) -> f64 {
    if logprob.is_finite() {
        f64::from(logprob)
    } else {
        -9999.0
    }
}

fn chat_entry(tokenizer: &Tokenizer, t: &TokenLogprob) -> Map<String, Value> {
    let mut entry = Map::new();
    entry.insert("token".into(), json!(text(tokenizer, t.token)));
    entry.insert("logprob".into(), json!(number(t.logprob)));
    let bytes = tokenizer.token_bytes(t.token).unwrap_or_default();
    entry.insert("bytes".into(), json!(bytes));
    entry
}

/// Chat's `logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}]}`.
pub fn chat(tokenizer: &Tokenizer, items: &[Logprobs]) -> Value {
    let content: Vec<Value> = items
        .iter()
        .map(|lp| {
            let mut entry = chat_entry(tokenizer, &lp.chosen);
            let top: Vec<Value> = lp
                .top
                .iter()
                .map(|t| Value::Object(chat_entry(tokenizer, t)))
                .collect();
            entry.insert("top_logprobs".into(), Value::Array(top));
            Value::Object(entry)
        })
        .collect();
    json!({ "content": content })
}

/// The completions endpoint's `logprobs`: `tokens`, `token_logprobs`, `top_logprobs` (a map
/// from token text to log probability per token) and `text_offset`, each token's offset in
/// characters into the generated text; `offset` is where these tokens start, and moves past
/// them.
pub fn completion(tokenizer: &Tokenizer, items: &[Logprobs], offset: &mut usize) -> Value {
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut top_logprobs = Vec::new();
    let mut text_offset = Vec::new();
    for lp in items {
        let t = text(tokenizer, lp.chosen.token);
        text_offset.push(*offset);
        *offset += t.chars().count();
        tokens.push(t);
        token_logprobs.push(number(lp.chosen.logprob));
        let top: Map<String, Value> = lp
            .top
            .iter()
            .map(|a| (text(tokenizer, a.token), json!(number(a.logprob))))
            .collect();
        top_logprobs.push(Value::Object(top));
    }
    json!({
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": text_offset,
    })
}
