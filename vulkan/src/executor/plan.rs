//! What a step runs, decided before anything is recorded: each sequence's run of tokens and
//! which path (decode or prefill, streaming or tiled products) the step takes. The step and
//! the KV policies both read it.

use super::kernels::DECODE_MAX_TOKENS;
use hearth_kernels::StepToken;

/// One sequence's tokens in a step: `tokens` of them from the step's token `t0`, appended
/// after the `len` entries its row held.
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    /// Index in the step's `seqs`.
    pub seq: usize,
    pub t0: usize,
    pub tokens: usize,
    pub len: usize,
}

impl Run {
    /// Few enough tokens for the decode path.
    pub fn decodes(&self) -> bool {
        self.tokens <= DECODE_MAX_TOKENS
    }
}

/// What a step runs, decided before anything is recorded (the KV policy plans its part).
pub(super) struct StepPlan<'s> {
    /// The step's tokens, as `steps` in the scratch holds them.
    pub steps: &'s [StepToken],
    /// Tokens of the decode runs, which come first in the step.
    pub decode_tokens: usize,
    /// The most positions a decode token attends to, its own included.
    pub longest: u32,
    /// Every decode run is one token, so decode attention may store its K/V itself.
    pub fused: bool,
    /// Weight-streaming products (a few tokens, or any step on a CPU device) rather than
    /// tiled matmuls.
    pub streaming: bool,
    /// Runs too long for the decode path: (first token, tokens).
    pub prefill: Vec<(usize, usize)>,
}
