//! Which shapes a synthetic file may have: those the executors run, in whole blocks of the
//! chosen format, with counts that fit the file's 32-bit keys.

use hearth_quant::Format;

use super::Shape;
use crate::error::{Error, Result};

impl Shape {
    /// Checks the shape is one the runtime executes and `format` can hold.
    pub fn check(&self, format: Format) -> Result<()> {
        let bad = |reason: String| Err(Error::options("synthetic shape", reason));
        let counts = [
            ("n_layer", self.n_layer),
            ("n_embd", self.n_embd),
            ("n_ff", self.n_ff),
            ("n_head", self.n_head),
            ("n_head_kv", self.n_head_kv),
            ("n_ctx_train", self.n_ctx_train),
        ];
        for (what, n) in counts {
            if n == 0 || u32::try_from(n).is_err() {
                return bad(format!("{what} {n} is not a positive 32-bit count"));
            }
        }
        // `<unk>`, `<s>` and `</s>` at least; the byte tokens follow where there is room.
        if self.n_vocab < 3 || u32::try_from(self.n_vocab).is_err() {
            return bad(format!(
                "{} tokens is not a usable vocabulary",
                self.n_vocab
            ));
        }
        match self.key_length {
            Some(d) if d == 0 || d % 2 != 0 => {
                return bad(format!("head width {d} is not a positive even number"))
            }
            None if self.n_embd % self.n_head != 0 || self.head_dim() % 2 != 0 => {
                return bad(format!(
                    "{} heads do not split n_embd {} into even head dimensions",
                    self.n_head, self.n_embd
                ))
            }
            _ => {}
        }
        if let Some(x) = self.experts {
            if x.count == 0 || x.used == 0 || x.used > x.count || x.n_ff == 0 {
                return bad(format!(
                    "{} of {} experts {} wide is not a mixture of experts",
                    x.used, x.count, x.n_ff
                ));
            }
            if self.family.moe_architecture().is_none() {
                return bad(format!(
                    "{:?} has no mixture-of-experts sibling here (Llama and Qwen3 do)",
                    self.family
                ));
            }
            if !self.family.experts_have_own_width() && x.n_ff != self.n_ff {
                return bad(format!(
                    "Mixtral's experts are feed_forward_length wide: {} against n_ff {}",
                    x.n_ff, self.n_ff
                ));
            }
            if x.n_ff % format.block_size() != 0 {
                return bad(format!(
                    "{format} packs rows in blocks of {}: the experts' width {} must be a \
                     multiple",
                    format.block_size(),
                    x.n_ff
                ));
            }
        }
        if self.n_head % self.n_head_kv != 0 {
            return bad(format!(
                "{} key/value heads do not divide {} heads",
                self.n_head_kv, self.n_head
            ));
        }
        if let Some(w) = self
            .sliding_window
            .filter(|&w| w == 0 || w > self.n_ctx_train)
        {
            return bad(format!(
                "a window of {w} does not fit the context of {}",
                self.n_ctx_train
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return bad(format!("RoPE base {} is not above 1", self.rope_base));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0) {
            return bad(format!("norm epsilon {} is not positive", self.norm_eps));
        }
        let block = format.block_size();
        let q_dim = self.n_head * self.head_dim();
        if self.n_embd % block != 0 || self.n_ff % block != 0 || q_dim % block != 0 {
            return bad(format!(
                "{format} packs rows in blocks of {block} values: n_embd {}, n_ff {} and the \
                 query width {q_dim} must be multiples of {block}",
                self.n_embd, self.n_ff
            ));
        }
        Ok(())
    }
}
