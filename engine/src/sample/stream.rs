//! One generated sequence, token by token: sampling, end of generation, detokenization, stop
//! strings and the final flush, shared by [`Session`](crate::session::Session) and the
//! [`Scheduler`](crate::sched::Scheduler), so that both stop in the same place and show the
//! same text.
//!
//! A [`TokenStream`] knows nothing of the model or its cache: its owner runs the forward pass,
//! hands it the logits, forwards the token it returns, and decides when the context is full.
//!
//! A request with a grammar ([`GrammarSpec`]) has its logits masked before the sampler sees
//! them: every token that would break the grammar is set to -inf in a copy kept for the
//! purpose, for drawing ([`TokenStream::sample`]) and for verifying a draft
//! ([`TokenStream::verify`]) alike; each token the stream keeps moves the grammar on. Once
//! the grammar is complete only end-of-generation tokens are allowed, so the model ends the
//! text itself and the stream finishes with [`FinishReason::Eos`], as under llama.cpp's
//! grammars.

use hearth_models::{StreamDecoder, Tokenizer};
use serde::Serialize;

use super::{Logprobs, Sampler, SamplerParams, StopStrings};
use crate::grammar::{Constraint, GrammarSpec};
use crate::speculative::{self, Distribution, Speculative, Verdict};
use hearth_model::{Error, Result};

/// What a generation request asks for.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Most tokens to generate; `None` runs until the context is full.
    pub max_tokens: Option<usize>,
    pub sampler: SamplerParams,
    /// Generation ends before any of these strings; they are not part of the text.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Report each generated token's log probability with this many most likely alternatives
    /// (at most [`MAX_TOP_LOGPROBS`](super::MAX_TOP_LOGPROBS)); `None` reports none.
    pub logprobs: Option<usize>,
    /// Draft tokens and verify them in one step (speculative decoding); the output is the
    /// same as without.
    pub speculative: Option<Speculative>,
    /// Hold the text to a grammar or JSON Schema: only tokens that keep it valid are drawn,
    /// and the text ends when the grammar is complete. Log probabilities stay the model's own
    /// (before the mask), as llama.cpp reports them.
    pub grammar: Option<GrammarSpec>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            max_tokens: Some(256),
            sampler: SamplerParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            speculative: None,
            grammar: None,
        }
    }
}

impl GenerateParams {
    /// Checks a request before any work: valid sampling (biased tokens within a vocabulary
    /// of `n_vocab`), a prompt, room in a context of `n_ctx` for the prompt and
    /// `max_tokens`, and a grammar that compiles over `tokenizer`'s vocabulary and admits
    /// some text.
    pub(crate) fn check(
        &self,
        tokenizer: &Tokenizer,
        prompt: &[u32],
        n_ctx: usize,
        n_vocab: usize,
    ) -> Result<()> {
        self.sampler
            .validate()
            .map_err(|e| Error::options(e.field, e.to_string()))?;
        if let Some(id) = self.sampler.bias_outside(n_vocab) {
            return Err(Error::options(
                "logit_bias",
                format!("token {id} is outside the vocabulary of {n_vocab}"),
            ));
        }
        if prompt.is_empty() {
            return Err(Error::options("prompt", "is empty"));
        }
        if let Some(n) = self.logprobs.filter(|&n| n > super::MAX_TOP_LOGPROBS) {
            return Err(Error::options(
                "top_logprobs",
                format!("is {n}; at most {} alternatives", super::MAX_TOP_LOGPROBS),
            ));
        }
        // Saturating: a huge `max_tokens` is refused, never wrapped into range.
        let needed = prompt.len().saturating_add(self.max_tokens.unwrap_or(0));
        if needed > n_ctx {
            return Err(Error::ContextFull {
                needed,
                used: 0,
                n_ctx,
            });
        }
        if let Some(spec) = &self.grammar {
            Constraint::new(spec, tokenizer)?;
        }
        Ok(())
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-generation token.
    Eos,
    /// A stop string appeared.
    Stop,
    /// `max_tokens` were generated, or the context is full.
    Length,
    /// The caller asked to stop.
    Cancelled,
}

/// What one [`TokenStream::sample`] produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    /// The token drawn; it is in [`TokenStream::tokens`] even when it ends the stream.
    pub token: u32,
    /// Text this token makes safe to show: complete characters, none of a stop string, and
    /// nothing for an end-of-generation token.
    pub text: String,
    /// Set when this token ends the stream: [`Eos`](FinishReason::Eos),
    /// [`Stop`](FinishReason::Stop) or [`Length`](FinishReason::Length) (`max_tokens`).
    /// The owner may end it for its own reasons too (a full context, a cancel).
    pub finish: Option<FinishReason>,
    /// The token's log probability and the best alternatives, when asked for.
    pub logprobs: Option<Logprobs>,
}

/// One sequence being generated: the tokens so far (prompt and generated), the sampler that
/// continues them, and the text pipeline from token ids to what a user may see.
///
/// Drive it with [`sample`](Self::sample) once per step until a token comes back with a
/// `finish`, or the owner stops for a reason of its own; then [`finish`](Self::finish) gives
/// the text still held back. It holds no reference to the tokenizer, so a runtime can keep one
/// per request next to a shared tokenizer; pass the same tokenizer on every call.
#[derive(Clone, Debug)]
pub struct TokenStream {
    sampler: Sampler,
    stops: StopStrings,
    decoder: StreamDecoder,
    /// Prompt then generated tokens: the penalties' history, and what the owner's
    /// cache is to hold.
    tokens: Vec<u32>,
    prompt_len: usize,
    max_tokens: usize,
    ignore_eos: bool,
    logprobs: Option<usize>,
    /// The request's grammar, moved past every token kept.
    constraint: Option<Constraint>,
    /// The logits as the grammar leaves them (vocab), reused from step to step.
    masked: Vec<f32>,
}

impl TokenStream {
    /// A stream continuing `prompt` under `params`, with `tokenizer`, the one every later
    /// call passes. Special tokens are left out of the text. Only the grammar is checked here
    /// (it must compile; [`GenerateParams::check`] checks the rest, the grammar too).
    pub fn new(tokenizer: &Tokenizer, prompt: &[u32], params: &GenerateParams) -> Result<Self> {
        let constraint = match &params.grammar {
            Some(spec) => Some(Constraint::new(spec, tokenizer)?),
            None => None,
        };
        Ok(Self {
            sampler: Sampler::for_vocabulary(params.sampler.clone(), tokenizer),
            stops: StopStrings::new(params.stop.clone()),
            decoder: StreamDecoder::new(true),
            tokens: prompt.to_vec(),
            prompt_len: prompt.len(),
            max_tokens: params.max_tokens.unwrap_or(usize::MAX),
            ignore_eos: params.ignore_eos,
            logprobs: params.logprobs,
            constraint,
            masked: Vec::new(),
        })
    }

    /// Draws the next token from `logits` (the model's scores after the last token), appends
    /// it, and returns it with the text it completes and whether it ends the stream. After
    /// an end-of-generation token no text is decoded; after a stop string, none is shown.
    pub fn sample(&mut self, tokenizer: &Tokenizer, logits: &[f32]) -> Sampled {
        let allowed = masked(&mut self.constraint, logits, &mut self.masked);
        let token = self.sampler.sample(allowed, &self.tokens);
        self.push(tokenizer, token, logits)
    }

    /// Decides on a drafted token given the target's `logits` after the tokens so far, and
    /// appends the token that results: the draft itself or its replacement (see
    /// [`speculative::verify`]). The draft is taken to be the drafter's certain choice.
    pub fn verify(
        &mut self,
        tokenizer: &Tokenizer,
        logits: &[f32],
        drafted: u32,
        acceptance: speculative::Acceptance,
    ) -> (Verdict, Sampled) {
        let allowed = masked(&mut self.constraint, logits, &mut self.masked);
        let p = self.sampler.distribution(allowed, &self.tokens);
        let q = Distribution::certain(drafted);
        let (u, u2) = (self.sampler.uniform(), self.sampler.uniform());
        let verdict = speculative::verify(&p, &q, drafted, acceptance, u, u2);
        let token = match verdict {
            Verdict::Accepted => drafted,
            Verdict::Replaced(t) => t,
        };
        self.sampler.observe(token);
        (verdict, self.push(tokenizer, token, logits))
    }

    /// Appends `token`, chosen from `logits`, and returns what it completes.
    fn push(&mut self, tokenizer: &Tokenizer, token: u32, logits: &[f32]) -> Sampled {
        self.tokens.push(token);
        // A complete grammar has nothing to add: its end ends the text even under
        // `ignore_eos`.
        let grammar_done = self.constraint.as_mut().is_some_and(|c| {
            c.commit(token);
            c.is_complete()
        });
        let logprobs = self.logprobs.map(|top| super::logprobs(logits, token, top));
        if (!self.ignore_eos || grammar_done) && tokenizer.is_end_of_generation(token) {
            return Sampled {
                token,
                text: String::new(),
                finish: Some(FinishReason::Eos),
                logprobs,
            };
        }
        let delta = self.stops.push(&self.decoder.push(tokenizer, token));
        let finish = if delta.stop.is_some() {
            Some(FinishReason::Stop)
        } else if self.at_max_tokens() {
            Some(FinishReason::Length)
        } else {
            None
        };
        Sampled {
            token,
            text: delta.text,
            finish,
            logprobs,
        }
    }

    /// Ends the stream and returns the text still held back: an incomplete character (as
    /// U+FFFD) and a tail that could have begun a stop string. Nothing after a stop string or
    /// a cancel, whose text past the last shown piece is dropped.
    pub fn finish(&mut self, reason: FinishReason) -> String {
        if matches!(reason, FinishReason::Stop | FinishReason::Cancelled) {
            return String::new();
        }
        let rest = self.stops.push(&self.decoder.finish());
        rest.text + &self.stops.finish()
    }

    /// Tokens still to generate before `max_tokens`.
    pub fn remaining(&self) -> usize {
        self.max_tokens.saturating_sub(self.generated().len())
    }

    /// Whether `max_tokens` tokens have been generated.
    pub fn at_max_tokens(&self) -> bool {
        self.generated().len() >= self.max_tokens
    }

    /// Prompt and generated tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// Tokens generated so far, a final end-of-generation token included.
    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    /// The generated tokens, the stream consumed.
    pub fn into_generated(mut self) -> Vec<u32> {
        self.tokens.split_off(self.prompt_len)
    }
}

/// `logits` as `constraint` leaves them (in `scratch`), or as they are without one.
fn masked<'a>(
    constraint: &mut Option<Constraint>,
    logits: &'a [f32],
    scratch: &'a mut Vec<f32>,
) -> &'a [f32] {
    match constraint {
        Some(c) => {
            c.mask(logits, scratch);
            scratch
        }
        None => logits,
    }
}

#[cfg(test)]
mod tests {
    use hearth_models::{GgufFile, GgufWriter, MetaArray, MetaValue};
    use rand::{Rng, SeedableRng};

    use super::*;

    /// A SentencePiece vocabulary small enough to read: the three specials, words, the
    /// pieces of `</s>` typed one by one, and the three bytes of "日".
    const VOCAB: &[(&str, i32)] = &[
        ("<unk>", 2),
        ("<s>", 3),
        ("</s>", 3),
        ("Hello", 1),
        ("\u{2581}world", 1),
        ("<", 1),
        ("/", 1),
        ("s", 1),
        (">", 1),
        ("<0xE6>", 6),
        ("<0x97>", 6),
        ("<0xA5>", 6),
        ("#", 1),
    ];
    const EOS: u32 = 2;
    const HELLO: u32 = 3;
    const WORLD: u32 = 4;
    const LT: u32 = 5;
    const SLASH: u32 = 6;
    const S: u32 = 7;
    const GT: u32 = 8;
    const RI: [u32; 3] = [9, 10, 11]; // 日 in UTF-8
    const HASH: u32 = 12;

    fn tokenizer() -> Tokenizer {
        let mut w = GgufWriter::new();
        let strings = |v: Vec<String>| MetaValue::Array(MetaArray::String(v));
        w.set_metadata("general.architecture", MetaValue::String("llama".into()));
        w.set_metadata("tokenizer.ggml.model", MetaValue::String("llama".into()));
        w.set_metadata(
            "tokenizer.ggml.tokens",
            strings(VOCAB.iter().map(|(p, _)| p.to_string()).collect()),
        );
        w.set_metadata(
            "tokenizer.ggml.token_type",
            MetaValue::Array(MetaArray::I32(VOCAB.iter().map(|&(_, t)| t).collect())),
        );
        w.set_metadata("tokenizer.ggml.eos_token_id", MetaValue::U32(EOS));
        let file = GgufFile::from_bytes("test-vocab", w.to_bytes().unwrap()).unwrap();
        Tokenizer::from_gguf(&file).unwrap()
    }

    /// Logits that make a greedy sampler pick `id`.
    fn pick(id: u32) -> Vec<f32> {
        let mut logits = vec![0.0; VOCAB.len()];
        logits[id as usize] = 1.0;
        logits
    }

    fn params(max_tokens: Option<usize>, stop: &[&str]) -> GenerateParams {
        GenerateParams {
            max_tokens,
            sampler: SamplerParams::greedy(),
            stop: stop.iter().map(|s| s.to_string()).collect(),
            ignore_eos: false,
            logprobs: None,
            speculative: None,
            grammar: None,
        }
    }

    fn new_stream(prompt: &[u32], params: &GenerateParams) -> TokenStream {
        TokenStream::new(&tokenizer(), prompt, params).unwrap()
    }

    /// Feeds `ids` until one ends the stream; returns each token's text and finish.
    fn feed(stream: &mut TokenStream, ids: &[u32]) -> Vec<(String, Option<FinishReason>)> {
        let tok = tokenizer();
        let mut out = Vec::new();
        for &id in ids {
            let next = stream.sample(&tok, &pick(id));
            assert_eq!(next.token, id);
            let end = next.finish.is_some();
            out.push((next.text, next.finish));
            if end {
                break;
            }
        }
        out
    }

    fn texts(steps: &[(String, Option<FinishReason>)]) -> Vec<&str> {
        steps.iter().map(|(t, _)| t.as_str()).collect()
    }

    #[test]
    fn text_comes_out_token_by_token() {
        let mut stream = new_stream(&[1], &params(None, &[]));
        let steps = feed(&mut stream, &[HELLO, WORLD, HASH]);
        assert_eq!(texts(&steps), ["Hello", " world", "#"]);
        assert!(steps.iter().all(|(_, finish)| finish.is_none()));
        assert_eq!(stream.finish(FinishReason::Length), "");
        assert_eq!(stream.tokens(), [1, HELLO, WORLD, HASH]);
        assert_eq!(stream.generated(), [HELLO, WORLD, HASH]);
        assert_eq!(stream.prompt_len(), 1);
        assert_eq!(stream.into_generated(), vec![HELLO, WORLD, HASH]);
    }

    #[test]
    fn a_stop_string_split_across_tokens_is_held_back_and_dropped() {
        let mut stream = new_stream(&[1], &params(Some(10), &["</s>"]));
        let steps = feed(&mut stream, &[HELLO, LT, SLASH, S, GT, WORLD]);
        assert_eq!(texts(&steps), ["Hello", "", "", "", ""]);
        assert_eq!(steps[4].1, Some(FinishReason::Stop));
        assert!(steps[..4].iter().all(|(_, finish)| finish.is_none()));
        // The stop string's tokens were generated; its text is never shown.
        assert_eq!(stream.generated(), [HELLO, LT, SLASH, S, GT]);
        assert_eq!(stream.finish(FinishReason::Stop), "");
    }

    #[test]
    fn a_false_start_of_a_stop_string_is_released() {
        let mut stream = new_stream(&[1], &params(Some(10), &["</s>"]));
        let steps = feed(&mut stream, &[LT, SLASH, HASH, HELLO]);
        assert_eq!(texts(&steps), ["", "", "</#", "Hello"]);
    }

    #[test]
    fn end_of_generation_ends_the_stream_without_text() {
        let mut stream = new_stream(&[1], &params(Some(10), &[]));
        let steps = feed(&mut stream, &[HELLO, EOS, HELLO]);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[1], (String::new(), Some(FinishReason::Eos)));
        // The end token counts as generated.
        assert_eq!(stream.generated(), [HELLO, EOS]);
        assert_eq!(stream.finish(FinishReason::Eos), "");

        // With `ignore_eos` it is an ordinary (special, so silent) token.
        let mut stream = new_stream(
            &[1],
            &GenerateParams {
                ignore_eos: true,
                ..params(Some(10), &[])
            },
        );
        let steps = feed(&mut stream, &[HELLO, EOS, HELLO]);
        assert_eq!(texts(&steps), ["Hello", "", "Hello"]);
        assert!(steps.iter().all(|(_, finish)| finish.is_none()));
    }

    #[test]
    fn end_of_generation_before_max_tokens_and_stop_before_length() {
        let mut stream = new_stream(&[1], &params(Some(2), &[]));
        let steps = feed(&mut stream, &[HELLO, EOS]);
        assert_eq!(steps[1].1, Some(FinishReason::Eos));

        let mut stream = new_stream(&[1], &params(Some(2), &["Hello"]));
        let steps = feed(&mut stream, &[WORLD, HELLO]);
        assert_eq!(steps[1], (String::new(), Some(FinishReason::Stop)));
    }

    #[test]
    fn max_tokens_ends_the_stream_on_its_last_token() {
        let mut stream = new_stream(&[1], &params(Some(3), &[]));
        assert!(!stream.at_max_tokens());
        let steps = feed(&mut stream, &[HELLO, WORLD, HASH, HELLO]);
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[2], ("#".into(), Some(FinishReason::Length)));
        assert!(stream.at_max_tokens());

        // No room at all: the owner sees it before sampling.
        assert!(new_stream(&[1], &params(Some(0), &[])).at_max_tokens());
        // Without a limit the stream never ends on length; the owner's context does that.
        let mut stream = new_stream(&[1], &params(None, &[]));
        let steps = feed(&mut stream, &[HELLO; 100]);
        assert!(steps.iter().all(|(_, finish)| finish.is_none()));
        assert!(!stream.at_max_tokens());
    }

    #[test]
    fn finish_flushes_held_back_text() {
        // A tail that could have begun a stop string.
        let mut stream = new_stream(&[1], &params(Some(2), &["##"]));
        let steps = feed(&mut stream, &[HELLO, HASH]);
        assert_eq!(texts(&steps), ["Hello", ""]);
        assert_eq!(steps[1].1, Some(FinishReason::Length));
        assert_eq!(stream.finish(FinishReason::Length), "#");

        // An incomplete character comes out as U+FFFD; a complete one as itself.
        let mut stream = new_stream(&[1], &params(Some(10), &[]));
        assert_eq!(texts(&feed(&mut stream, &RI)), ["", "", "日"]);
        let steps = feed(&mut stream, &RI[..2]);
        assert_eq!(texts(&steps), ["", ""]);
        assert_eq!(stream.finish(FinishReason::Eos), "\u{FFFD}");

        // Both at once, in order: the decoder's tail goes through the stop strings too.
        let mut stream = new_stream(&[1], &params(Some(10), &["#日"]));
        assert_eq!(
            texts(&feed(&mut stream, &[HELLO, HASH, RI[0]])),
            ["Hello", "", ""]
        );
        assert_eq!(stream.finish(FinishReason::Length), "#\u{FFFD}");
    }

    #[test]
    fn nothing_is_flushed_after_a_stop_or_a_cancel() {
        let mut stream = new_stream(&[1], &params(Some(10), &["##"]));
        feed(&mut stream, &[HELLO, HASH, RI[0]]);
        assert_eq!(stream.finish(FinishReason::Cancelled), "");

        let mut stream = new_stream(&[1], &params(Some(10), &["##"]));
        let steps = feed(&mut stream, &[HELLO, HASH, HASH]);
        assert_eq!(steps[2].1, Some(FinishReason::Stop));
        assert_eq!(stream.finish(FinishReason::Stop), "");
    }

    /// The stream draws exactly what a bare sampler draws over the prompt and the tokens so
    /// far: the repetition penalty sees the prompt, and every draw uses the same generator.
    #[test]
    fn sampling_matches_a_sampler_over_the_whole_history() {
        let tok = tokenizer();
        let sampler = SamplerParams {
            repeat_penalty: 1.3,
            temperature: 1.5,
            ..SamplerParams::default()
        };
        let prompt = [HELLO, WORLD, HELLO];
        let mut stream = new_stream(
            &prompt,
            &GenerateParams {
                sampler: sampler.clone(),
                ignore_eos: true,
                ..params(None, &[])
            },
        );
        let mut reference = Sampler::new(sampler);
        let mut history = prompt.to_vec();
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..200 {
            let logits: Vec<f32> = (0..VOCAB.len()).map(|_| rng.gen_range(-2.0..2.0)).collect();
            let want = reference.sample(&logits, &history);
            history.push(want);
            assert_eq!(stream.sample(&tok, &logits).token, want);
        }
        assert_eq!(stream.tokens(), history);
    }

    fn constrained(grammar: &str, max_tokens: usize) -> GenerateParams {
        GenerateParams {
            grammar: Some(GrammarSpec::Gbnf(grammar.into())),
            ..params(Some(max_tokens), &[])
        }
    }

    /// The grammar decides whatever the logits prefer; once it is complete only the end of
    /// generation is left, which ends the stream as an end token does.
    #[test]
    fn a_grammar_masks_the_logits_and_ends_the_text() {
        let tok = tokenizer();
        let mut stream = new_stream(
            &[1],
            &constrained(r##"root ::= "Hello" (" world" | "#")"##, 10),
        );
        let first = stream.sample(&tok, &pick(HASH));
        assert_eq!((first.token, first.finish), (HELLO, None));
        // Between the grammar's two choices the logits decide.
        let mut logits = pick(LT);
        logits[WORLD as usize] = 0.5;
        assert_eq!(stream.sample(&tok, &logits).token, WORLD);
        let end = stream.sample(&tok, &pick(HELLO));
        assert_eq!((end.token, end.finish), (EOS, Some(FinishReason::Eos)));
        assert_eq!(stream.generated(), [HELLO, WORLD, EOS]);

        // Logits past the vocabulary (a padded output) are never drawn.
        let mut stream = new_stream(&[1], &constrained(r##"root ::= "#"+"##, 10));
        let mut logits = pick(HASH);
        logits.push(100.0);
        assert_eq!(stream.sample(&tok, &logits).token, HASH);

        // A complete grammar ends the text under `ignore_eos` too.
        let params = GenerateParams {
            ignore_eos: true,
            ..constrained(r##"root ::= "#""##, 10)
        };
        let mut stream = new_stream(&[1], &params);
        assert_eq!(stream.sample(&tok, &pick(HELLO)).token, HASH);
        let end = stream.sample(&tok, &pick(HELLO));
        assert_eq!((end.token, end.finish), (EOS, Some(FinishReason::Eos)));
    }

    /// Log probabilities are the model's, before the mask.
    #[test]
    fn logprobs_are_the_model_s_own() {
        let tok = tokenizer();
        let params = GenerateParams {
            logprobs: Some(1),
            ..constrained(r##"root ::= "#""##, 10)
        };
        let mut stream = new_stream(&[1], &params);
        let logits = pick(HELLO);
        let got = stream.sample(&tok, &logits);
        assert_eq!(got.token, HASH);
        assert_eq!(got.logprobs, Some(super::super::logprobs(&logits, HASH, 1)));
    }

    /// Speculative decoding's path: a draft the grammar refuses is replaced by a token it
    /// allows, one it allows is kept, and only kept tokens move the grammar on.
    #[test]
    fn verify_applies_the_grammar() {
        let tok = tokenizer();
        let exact = speculative::Acceptance::Exact;
        let mut stream = new_stream(&[1], &constrained(r##"root ::= "Hello" "#"+"##, 10));
        let (verdict, next) = stream.verify(&tok, &pick(HASH), HASH, exact);
        assert_eq!((verdict, next.token), (Verdict::Replaced(HELLO), HELLO));
        let (verdict, next) = stream.verify(&tok, &pick(WORLD), HASH, exact);
        assert_eq!((verdict, next.token), (Verdict::Accepted, HASH));
        // `#` again or the end: the logits choose the end.
        let (verdict, next) = stream.verify(&tok, &pick(EOS), HASH, exact);
        assert_eq!(verdict, Verdict::Replaced(EOS));
        assert_eq!(next.finish, Some(FinishReason::Eos));
    }

    #[test]
    fn a_bad_grammar_is_refused_before_the_stream_starts() {
        let tok = tokenizer();
        for grammar in [r##"root ::= "Hello"##, r##"root ::= "zzz""##] {
            let err = TokenStream::new(&tok, &[1], &constrained(grammar, 10)).unwrap_err();
            assert!(
                matches!(err, Error::Options { ref field, .. } if field == "grammar"),
                "{err}"
            );
            let checked = constrained(grammar, 10).check(&tok, &[1], 100, VOCAB.len());
            assert!(checked.is_err());
        }
        assert!(constrained(r##"root ::= "Hello""##, 10)
            .check(&tok, &[1], 100, VOCAB.len())
            .is_ok());
    }
}
