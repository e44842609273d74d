//! What `bench_model` runs and what it measures: the tests (llama-bench's -p, -n, -d and -r,
//! and `parallel`), what the engines run, and one test's measurements on one engine.

use std::fmt;

use hearth_model::kv::infinigen::IgStats;
use hearth_models::synthetic::Preset;
use serde::Serialize;

/// Which tests to run (llama-bench's -p, -n, -d and -r, and `parallel`).
#[derive(Clone, Debug, Serialize)]
pub struct ModelBenchParams {
    /// Prompt lengths to test (0 skips).
    pub n_prompt: Vec<usize>,
    /// Generation lengths to test (0 skips).
    pub n_gen: Vec<usize>,
    /// Context already in the cache when each test starts.
    pub depth: Vec<usize>,
    /// Sequences generating at once in tg tests.
    pub parallel: Vec<usize>,
    /// Timed repetitions of each test (after one warm-up).
    pub reps: usize,
    /// The engines' most tokens per prefill submission, reported as llama-bench's n_ubatch.
    pub n_ubatch: usize,
}

impl ModelBenchParams {
    /// The context the engines need: the longest test on top of the deepest cache.
    pub fn n_ctx(&self) -> usize {
        let most = self.n_prompt.iter().chain(&self.n_gen).copied().max();
        let deepest = self.depth.iter().copied().max().unwrap_or(0);
        (most.unwrap_or(1) + deepest).max(1)
    }

    /// The sequences the engines' KV cache serves at once: the widest `parallel`.
    pub fn n_seq(&self) -> usize {
        self.parallel.iter().copied().max().unwrap_or(1).max(1)
    }

    /// Every test in the order they run: at each depth, the pp tests, then the tg tests at
    /// each width.
    pub fn tests(&self) -> Vec<Test> {
        self.depth
            .iter()
            .flat_map(|&depth| {
                let pp = self.n_prompt.iter().filter(|&&p| p > 0).map(|&p| (p, 0, 1));
                let tg = self
                    .n_gen
                    .iter()
                    .filter(|&&n| n > 0)
                    .flat_map(|&n| self.parallel.iter().map(move |&b| (0, n, b.max(1))));
                pp.chain(tg).map(move |(n_prompt, n_gen, parallel)| Test {
                    n_prompt,
                    n_gen,
                    depth,
                    parallel,
                })
            })
            .collect()
    }
}

/// One test: a prompt of `n_prompt` tokens (pp) or `n_gen` decode steps of `parallel`
/// sequences (tg), after `depth` tokens in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Test {
    pub n_prompt: usize,
    pub n_gen: usize,
    /// Tokens in the cache before the timed part.
    pub depth: usize,
    /// Sequences generating at once (tg).
    pub parallel: usize,
}

/// "pp512", "tg128 @ d2048", "tg32 x8 @ d4096".
impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.n_gen == 0 {
            write!(f, "pp{}", self.n_prompt)?;
        } else {
            write!(f, "tg{}", self.n_gen)?;
        }
        if self.parallel > 1 {
            write!(f, " x{}", self.parallel)?;
        }
        if self.depth > 0 {
            write!(f, " @ d{}", self.depth)?;
        }
        Ok(())
    }
}

/// What the engines run, for naming it in the results.
#[derive(Clone, Copy, Debug)]
pub enum ModelSource {
    /// A model file.
    File,
    /// A preset's shape built in memory (`synthetic`).
    Synthetic(&'static Preset),
}

/// What one test measured on one engine over its timed repetitions.
#[derive(Clone, Debug, Default)]
pub(super) struct Measured {
    /// What InfiniGen fetched, or H2O kept, during the timed parts, when one is on.
    pub sparse: Option<IgStats>,
    /// With profiling: GPU time of InfiniGen's fetch kernels during the timed parts (ns).
    pub fetch_ns: f64,
    /// The part of `fetch_ns` that ran alongside other kernels.
    pub fetch_overlap_ns: f64,
    pub samples_ns: Vec<f64>,
    /// KV blocks in use at the end of a repetition.
    pub kv_blocks_used: usize,
    /// Time each executor of a split model spent in the timed parts (ns), in layer order.
    pub parts_ns: Vec<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ModelBenchParams {
        ModelBenchParams {
            n_prompt: vec![512, 0],
            n_gen: vec![128],
            depth: vec![0, 2048],
            parallel: vec![1, 8],
            reps: 5,
            n_ubatch: 256,
        }
    }

    #[test]
    fn tests_run_pp_then_tg_at_each_depth() {
        let names: Vec<String> = params().tests().iter().map(Test::to_string).collect();
        assert_eq!(
            names,
            [
                "pp512",
                "tg128",
                "tg128 x8",
                "pp512 @ d2048",
                "tg128 @ d2048",
                "tg128 x8 @ d2048"
            ]
        );
    }

    #[test]
    fn engines_hold_the_longest_test_on_the_deepest_cache() {
        let p = params();
        assert_eq!(p.n_ctx(), 512 + 2048);
        assert_eq!(p.n_seq(), 8);
    }
}
