//! Log probabilities in the two shapes OpenAI's API gives them: chat's list of entries, each
//! with the token's text, bytes and alternatives, and the legacy completions' parallel lists.

use hearth_engine::sample::{Logprobs, TokenLogprob};
use hearth_models::Tokenizer;

use crate::openai::{ChatAlternative, ChatLogprob, ChatLogprobs, CompletionLogprobs};

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

fn alternative(tokenizer: &Tokenizer, t: &TokenLogprob) -> ChatAlternative {
    ChatAlternative {
        token: text(tokenizer, t.token),
        logprob: number(t.logprob),
        bytes: tokenizer.token_bytes(t.token).unwrap_or_default().to_vec(),
    }
}

/// Chat's `logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}]}`.
pub fn chat(tokenizer: &Tokenizer, items: &[Logprobs]) -> ChatLogprobs {
    let content = items
        .iter()
        .map(|lp| {
            let chosen = alternative(tokenizer, &lp.chosen);
            ChatLogprob {
                token: chosen.token,
                logprob: chosen.logprob,
                bytes: chosen.bytes,
                top_logprobs: lp.top.iter().map(|t| alternative(tokenizer, t)).collect(),
            }
        })
        .collect();
    ChatLogprobs { content }
}

/// The completions endpoint's `logprobs`: `tokens`, `token_logprobs`, `top_logprobs` (a map
/// from token text to log probability per token) and `text_offset`, each token's offset in
/// characters into the generated text; `offset` is where these tokens start, and moves past
/// them.
pub fn completion(
    tokenizer: &Tokenizer,
    items: &[Logprobs],
    offset: &mut usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for lp in items {
        let t = text(tokenizer, lp.chosen.token);
        out.text_offset.push(*offset);
        *offset += t.chars().count();
        out.tokens.push(t);
        out.token_logprobs.push(number(lp.chosen.logprob));
        let top = lp
            .top
            .iter()
            .map(|a| (text(tokenizer, a.token), number(a.logprob)))
            .collect();
        out.top_logprobs.push(top);
    }
    out
}
