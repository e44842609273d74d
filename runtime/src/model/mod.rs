//! Running a transformer described by a model spec: its configuration, its weights, and the
//! [`Backend`] trait both executors implement (the CPU reference in `cpu::forward` and the
//! Vulkan executor in `model::vulkan`).

mod config;
mod h2o;
mod infinigen;
mod matrix;
mod vulkan;
mod weights;

pub use config::{ModelConfig, Rope};
pub use infinigen::FETCH_KERNELS;
pub use matrix::Matrix;
pub use vulkan::{KvBudget, SeqStep, VkModel, VkModelOptions};
pub use weights::{LayerWeights, LoadProgress, ProgressFn, WeightReader};

use crate::error::Result;
use crate::kv::infinigen::{IgParams, IgStats, Skew};

/// Which logits a step returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's, [tokens, n_vocab] (perplexity, tests).
    All,
}

/// A model with its KV cache for one sequence. `forward` appends `tokens` at positions
/// `len()..` and returns logits.
pub trait Backend {
    fn config(&self) -> &ModelConfig;
    /// Positions the KV cache holds.
    fn n_ctx(&self) -> usize;
    /// Positions already in the cache.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Forgets positions from `len` on (a new conversation, or an edit of an earlier turn).
    fn truncate(&mut self, len: usize);
    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>>;
    /// The Vulkan executor, for batched steps over several sequences (the scheduler, beam
    /// search); `None` on the CPU reference.
    fn as_vulkan_mut(&mut self) -> Option<&mut VkModel> {
        None
    }
    fn as_vulkan(&self) -> Option<&VkModel> {
        None
    }
    /// The CPU reference, where this is it.
    fn as_cpu_mut(&mut self) -> Option<&mut crate::cpu::CpuModel> {
        None
    }
    /// Turns InfiniGen decode attention on (`Some`) or off; an error where the backend does
    /// not run it.
    fn set_infinigen(&mut self, setup: Option<(&Skew, IgParams)>) -> Result<()> {
        match setup {
            None => Ok(()),
            Some(_) => Err(crate::Error::options(
                "kv-offload",
                "infinigen is not available on this backend",
            )),
        }
    }
    /// Tokens InfiniGen fetched so far, when it is on.
    fn infinigen_stats(&self) -> Option<IgStats> {
        None
    }
    /// Turns H2O, the heavy-hitter eviction baseline, on (`Some`, with InfiniGen's budget)
    /// or off; an error where the backend does not run it.
    fn set_h2o(&mut self, params: Option<IgParams>) -> Result<()> {
        match params {
            None => Ok(()),
            Some(_) => Err(crate::Error::options(
                "kv-offload",
                "h2o is not available on this backend",
            )),
        }
    }
    /// Tokens H2O attended to so far, when it is on.
    fn h2o_stats(&self) -> Option<IgStats> {
        None
    }
    /// GPU time per kernel since load, where the backend was asked to profile; empty
    /// otherwise.
    fn profile(&self) -> Profile {
        Profile::default()
    }
}

/// GPU time per kernel since load (`--profile`).
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// (kernel, nanoseconds, dispatches).
    pub kernels: Vec<(&'static str, f64, u64)>,
    /// How long InfiniGen's fetch kernels ran while other kernels ran too: the part of the
    /// fetch hidden behind the previous layer's compute. Zero on a device that runs one
    /// command at a time.
    pub fetch_overlap_ns: f64,
}

impl Profile {
    /// GPU time of InfiniGen's fetch kernels (speculation, selection, gather).
    pub fn fetch_ns(&self) -> f64 {
        self.kernels
            .iter()
            .filter(|k| FETCH_KERNELS.contains(&k.0))
            .map(|k| k.1)
            .sum()
    }
}
