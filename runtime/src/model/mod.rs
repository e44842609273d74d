//! Running a transformer described by a model spec: its configuration, its weights, and the
//! [`Backend`] trait both executors implement (the CPU reference in `cpu::forward` and the
//! Vulkan executor in `model::vulkan`).

mod config;
mod layer;
mod matrix;
mod vulkan;
mod weights;

pub use config::{ModelConfig, Rope};
pub use layer::{Layer, LayerWeights, Mlp, SharedMlp};
pub use matrix::{Matrix, Projection};
pub use vulkan::FETCH_KERNELS;
pub use vulkan::{KvBudget, SeqStep, VkModel, VkModelOptions};
pub use weights::{LoadProgress, ProgressFn, WeightReader};

use crate::error::Result;
use crate::kv::policy::{KvPolicyChoice, KvPolicyStats};

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
    /// Runs the KV policy `choice` from now on, over what the cache holds; an error where
    /// the backend does not run it.
    fn set_kv_policy(&mut self, choice: KvPolicyChoice) -> Result<()> {
        match choice {
            KvPolicyChoice::Dense => Ok(()),
            other => Err(crate::Error::options(
                "kv-offload",
                format!("{} is not available on this backend", other.kind()),
            )),
        }
    }

    /// What the KV policy read so far, when a sparse one runs.
    fn kv_policy_stats(&self) -> Option<KvPolicyStats> {
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
