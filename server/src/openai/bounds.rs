//! What one request may ask for: each bound keeps a request's memory and work in proportion to
//! what a client may reasonably want (docs/serving.md).

/// Stop strings one request may give.
pub const MAX_STOP: usize = 4;
/// Bytes of one stop string: the stream holds back up to this much text while a stop string
/// may be starting.
pub const MAX_STOP_BYTES: usize = 1024;
/// Tokens one request's `logit_bias` may name.
pub const MAX_LOGIT_BIAS: usize = 1024;
/// The bias `logit_bias` may add or take away, as OpenAI's API bounds it.
pub const MAX_BIAS: f32 = 100.0;
/// Completions one request may ask for: `n`, times the prompts of a batch.
pub const MAX_COMPLETIONS: usize = 16;

/// DRY's sequence breakers a request may give, each at most [`MAX_STOP_BYTES`] long: each is
/// searched for in every token of the vocabulary when the request starts.
pub const MAX_DRY_BREAKERS: usize = 16;
