//! InfiniGen (OSDI 2024): decode attention over the tokens that matter, chosen ahead of time.
//!
//! Offline, each layer's query space is skewed ([`skew`]) so a few columns carry most of the
//! query-key product. At run time a partial key cache keeps those columns of every key. While
//! layer i-1 runs, its input, normalized with layer i's gain, times layer i's query weight
//! gives an early query for layer i; its partial columns against the partial keys speculate
//! layer i's scores ([`select::speculate`]). Each head counts the tokens within `alpha` of its best; the mean
//! count, capped by a budget, is how many tokens every KV head fetches, the highest-scoring
//! ones ([`select::select`]), plus a few of the newest. Layer i attends to those and the new
//! token only. The first layers, whose inputs differ most from their predecessors', run
//! dense.

pub mod evict;
pub mod select;
pub mod skew;

use std::path::{Path, PathBuf};

pub use skew::{spread_positions, Calibration, Skew};

/// The calibration text skewing runs through by default.
pub const CALIBRATION_TEXT: &str = include_str!("calibration.txt");

/// InfiniGen's settings (`--ig-partial-ratio`, `--ig-alpha`, `--ig-budget`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IgParams {
    /// Fraction of head_dim kept as partial columns.
    pub partial_ratio: f32,
    /// Tokens scoring within alpha of their head's best count as critical (in logits, so
    /// alpha 5 counts tokens down to e^-5 of the best one's weight).
    pub alpha: f32,
    /// Most tokens fetched per KV head, as a fraction of the tokens so far.
    pub budget: f32,
    /// Fewer tokens than this so far: fetch them all.
    pub min_budget: usize,
    /// The newest tokens, fetched always on top of the speculated ones: small models lean on
    /// local context that a few partial columns do not speculate well. 0 is InfiniGen's rule.
    pub recent: usize,
    /// The first layers run dense.
    pub dense_layers: usize,
    /// Most tokens a sequence's pool holds (`--kv-pool-capacity`); past that, the least
    /// fetched leave ([`evict`]). `None`: the whole context.
    pub pool_capacity: Option<usize>,
    /// Record each layer's fetch apart from the previous layer's kernels (a barrier on each
    /// side), to measure what running them together saves.
    pub serial_fetch: bool,
}

/// The head width the reference implementation was evaluated on, where its settings hold.
pub const PAPER_HEAD_DIM: usize = 128;

/// Fewest partial columns the defaults keep: with fewer, speculation misses tokens that carry
/// weight (13 of SmolLM2's 64 dimensions lost 20% perplexity; 32 lose 1.3%).
pub const MIN_PARTIAL_DIMS: usize = 32;

impl IgParams {
    /// The reference implementation's settings: a fifth of each head's dimensions as partial
    /// columns, alpha 5 for RoPE models and 4 otherwise (with Hearth's recent window and
    /// floor, which `recent: 0` and `min_budget: 0` take away).
    pub fn paper(rope: bool) -> Self {
        Self {
            partial_ratio: 0.2,
            alpha: if rope { 5.0 } else { 4.0 },
            budget: 0.2,
            min_budget: 64,
            recent: 32,
            dense_layers: 2,
            pool_capacity: None,
            serial_fetch: false,
        }
    }

    /// Hearth's defaults for heads of `head_dim` dimensions. The paper's settings were chosen
    /// on 128-wide heads; narrower heads keep at least [`MIN_PARTIAL_DIMS`] partial columns
    /// and raise alpha in proportion to how much narrower they are (10 on 64-wide heads), so
    /// that a small model stays within 2% of dense attention's perplexity (measured in
    /// docs/infinigen.md). Wider heads keep the paper's alpha and ratio.
    pub fn defaults(rope: bool, head_dim: usize) -> Self {
        let paper = Self::paper(rope);
        let head_dim = head_dim.max(1);
        let narrower = (PAPER_HEAD_DIM as f32 / head_dim as f32).max(1.0);
        Self {
            partial_ratio: paper
                .partial_ratio
                .max(MIN_PARTIAL_DIMS as f32 / head_dim as f32)
                .min(1.0),
            alpha: paper.alpha * narrower,
            ..paper
        }
    }

    /// Whether a decode step with `n` tokens cached would fetch them all anyway (the floor
    /// and the recent window cover them): it then attends densely, skipping speculation.
    pub fn fetches_all(&self, n: usize) -> bool {
        self.min_budget + self.recent >= n
    }

    /// Tokens layer attention may fetch per KV head when `n` are in the cache.
    pub fn budget_tokens(&self, n: usize) -> usize {
        ((self.budget * n as f32).ceil() as usize)
            .max(self.min_budget)
            .min(n)
    }
}

/// Tokens fetched, counted over decode steps and layers that run sparse.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IgStats {
    /// Layer-steps counted (one per KV head).
    pub selections: u64,
    pub fetched: u64,
    /// Tokens that were in the cache at those selections.
    pub available: u64,
    pub min_fetched: Option<u32>,
    pub max_fetched: u32,
    /// Tokens evicted from the pool (`--kv-pool-capacity`).
    pub evicted: u64,
}

impl IgStats {
    pub fn record(&mut self, fetched: usize, available: usize) {
        self.selections += 1;
        self.fetched += fetched as u64;
        self.available += available as u64;
        self.min_fetched = Some(
            self.min_fetched
                .map_or(fetched as u32, |m| m.min(fetched as u32)),
        );
        self.max_fetched = self.max_fetched.max(fetched as u32);
    }

    /// Mean tokens fetched per KV head and layer.
    pub fn mean_fetched(&self) -> f64 {
        self.fetched as f64 / self.selections.max(1) as f64
    }

    /// Fetched tokens as a fraction of those available.
    pub fn fetched_fraction(&self) -> f64 {
        self.fetched as f64 / self.available.max(1) as f64
    }
}

/// Where skew matrices computed for `model` are cached: beside it. None for a model with no
/// file (`synthetic:NAME`, built in memory), whose skews are not kept.
pub fn skew_cache_path(model: &Path) -> Option<PathBuf> {
    if !model.is_file() {
        return None;
    }
    let mut name = model.file_name().unwrap_or_default().to_os_string();
    name.push(".skew");
    Some(model.with_file_name(name))
}

/// What a skew depends on: the model file's bytes and the calibration tokens, as their CRC-32s.
/// Not the standard library's hasher: that runs at a third of CRC-32's speed, a second or more
/// for a 7B model's file at every start, and may change with the toolchain, which would throw
/// every cached skew away.
pub fn skew_key(model_bytes: &[u8], calibration: &[u32]) -> u64 {
    let mut tokens = crc32fast::Hasher::new();
    for t in calibration {
        tokens.update(&t.to_le_bytes());
    }
    (u64::from(crc32fast::hash(model_bytes)) << 32) | u64::from(tokens.finalize())
}

#[cfg(test)]
mod tests {
    use super::skew_key;
    use super::{skew::partial_dims, IgParams};

    #[test]
    fn defaults_follow_the_head_width() {
        // SmolLM2's 64-wide heads: 32 partial columns, alpha 10.
        let small = IgParams::defaults(true, 64);
        assert_eq!(partial_dims(64, small.partial_ratio), 32);
        assert_eq!(small.alpha, 10.0);
        // The paper's 128-wide heads: its alpha, and the floor of 32 columns over its 26.
        let paper_width = IgParams::defaults(true, 128);
        assert_eq!(partial_dims(128, paper_width.partial_ratio), 32);
        assert_eq!(paper_width.alpha, 5.0);
        assert_eq!(IgParams::defaults(false, 128).alpha, 4.0);
        // Wider heads keep the paper's fifth.
        let wide = IgParams::defaults(true, 256);
        assert_eq!(partial_dims(256, wide.partial_ratio), 51);
        assert_eq!(wide.alpha, 5.0);
        // Heads narrower than the floor use every dimension.
        assert_eq!(
            partial_dims(16, IgParams::defaults(true, 16).partial_ratio),
            16
        );
        // Everything else is the paper's.
        assert_eq!(
            IgParams {
                partial_ratio: 0.2,
                alpha: 5.0,
                ..small
            },
            IgParams::paper(true)
        );
    }

    /// The key changes with any byte of the model or any calibration token, and stays the same
    /// from build to build (a cached skew outlives the toolchain that wrote it).
    #[test]
    fn skew_key_follows_the_model_and_the_calibration() {
        let model = b"GGUF model bytes";
        let key = skew_key(model, &[1, 2, 3]);
        assert_eq!(key, 0xd61e_6c02_b0e0_2293, "{key:#x}");
        assert_ne!(skew_key(b"GGUF model byteS", &[1, 2, 3]), key);
        assert_ne!(skew_key(model, &[1, 2, 4]), key);
        assert_ne!(skew_key(model, &[1, 2]), key);
    }
}
