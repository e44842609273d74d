//! `config.json`'s sizes against the converted tensors that embody them, so that a wrong
//! config names its key rather than surfacing later as a shape error: the embeddings' width
//! and rows, each stack's last block, and the query and key rows of its first.

use super::config::{Config, N_EMBD, N_HEAD};
use crate::error::{Error, Result};

/// One stack of blocks: a decoder's or encoder's (`blk`), an encoder-decoder's encoder
/// (`enc.blk`) or decoder (`dec.blk`), with the number `config.json` gives under `key`.
pub(super) struct Blocks {
    prefix: &'static str,
    count: usize,
    key: &'static str,
}

impl Blocks {
    pub fn new(prefix: &'static str, count: usize, key: &'static str) -> Self {
        Blocks { prefix, count, key }
    }
}

pub(super) fn contradiction(config: &Config, key: &str, reason: String) -> Error {
    Error::metadata(
        &config.path,
        key,
        format!("contradicts the weights: {reason}"),
    )
}

/// Checks `tensors` (GGUF names and shapes) against `config`, for the stacks `blocks`;
/// `embeddings`: the Hugging Face name of the embeddings, for a message that they are missing.
pub(super) fn check_shapes(
    config: &Config,
    tensors: &[(&str, &[u64])],
    blocks: &[Blocks],
    embeddings: &str,
) -> Result<()> {
    let shape = |name: &str| tensors.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
    let embd = shape("token_embd.weight")
        .ok_or_else(|| Error::tensor(&config.path, embeddings, "missing from the weights"))?;
    let hidden = config.n_embd()?;
    if embd[0] != hidden {
        return Err(contradiction(
            config,
            config.named(N_EMBD),
            format!("{hidden}, but the embeddings are {} wide", embd[0]),
        ));
    }
    if let Some(v) = config.u64("vocab_size")? {
        if embd.get(1) != Some(&v) {
            return Err(contradiction(
                config,
                "vocab_size",
                format!(
                    "{v}, but the embeddings have {} rows",
                    embd.get(1).unwrap_or(&0)
                ),
            ));
        }
    }
    let head_dim = config.head_dim()?;
    let derived = match config.u64_any(&["head_dim", "d_kv"])? {
        Some(_) => String::new(),
        None => format!(" ({} / {})", config.named(N_EMBD), config.named(N_HEAD)),
    };
    for stack in blocks {
        let last = format!("{}.{}.", stack.prefix, stack.count.saturating_sub(1));
        if stack.count > 0 && !tensors.iter().any(|(n, _)| n.starts_with(&last)) {
            return Err(contradiction(
                config,
                stack.key,
                format!(
                    "{}, but block {} has no weights",
                    stack.count,
                    stack.count - 1
                ),
            ));
        }
        // Latent attention's query heads are their unrotated and rotated parts (DeepSeek's
        // `head_dim` is the rotated part's width).
        let q_dim = match config.u64("qk_nope_head_dim")? {
            Some(nope) => nope + config.require_u64("qk_rope_head_dim")?,
            None => head_dim,
        };
        for (tensor, key, heads, head_dim) in [
            ("attn_q", config.named(N_HEAD), config.n_head()?, q_dim),
            (
                "attn_k",
                "num_key_value_heads",
                config.n_head_kv()?,
                head_dim,
            ),
        ] {
            let tensor = format!("{}.0.{tensor}.weight", stack.prefix);
            if let Some(s) = shape(&tensor) {
                if s.get(1) != Some(&(heads * head_dim)) {
                    return Err(contradiction(
                        config,
                        key,
                        format!(
                            "{heads} heads of {head_dim}{derived}, but `{tensor}` has {} rows",
                            s.get(1).unwrap_or(&0)
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
