//! A model's prompt processing (pp) and text generation (tg) speed, measured the way
//! llama-bench measures them: pp evaluates a prompt of random tokens from an empty cache; tg
//! generates tokens one at a time from an empty cache. Each test runs once to warm up, then
//! `reps` times. With a depth, the cache holds that many tokens first (prefilled once per
//! depth, then truncated back to for every repetition and test); with a `parallel` above 1,
//! tg runs that many sequences that share the depth, one decode step for all of them at a
//! time.
//!
//! Several engines (one per KV placement) are measured in one run: every repetition runs on
//! each in turn, on the same tokens, so that a host whose speed drifts slows them alike.

use std::collections::HashMap;
use std::fmt;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::report::PlacementReport;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kv::infinigen::IgStats;
use crate::model::{Backend, Logits, SeqStep};
use crate::synthetic::Preset;

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
}

/// Runs every test of `params` on every engine (one per KV placement, each loaded with a
/// context of [`ModelBenchParams::n_ctx`] and [`ModelBenchParams::n_seq`] sequences) and
/// returns each engine's results, in the engines' order.
pub fn bench_model(
    engines: &mut [Engine],
    params: &ModelBenchParams,
    source: ModelSource,
) -> Result<Vec<PlacementReport>> {
    let Some(first) = engines.first() else {
        return Ok(Vec::new());
    };
    let tests = params.tests();
    let mut measured = vec![vec![Measured::default(); tests.len()]; engines.len()];
    let n_vocab = first.info().config.n_vocab as u32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    // One context per depth, so the tests at a depth share its prefill.
    let mut contexts: HashMap<usize, Vec<u32>> = HashMap::new();
    for (i, test) in tests.iter().enumerate() {
        let context = contexts
            .entry(test.depth)
            .or_insert_with(|| (0..test.depth).map(|_| rng.gen_range(0..n_vocab)).collect())
            .clone();
        for rep in 0..=params.reps {
            let tokens: Vec<u32> = (0..test.n_prompt.max(test.n_gen * test.parallel))
                .map(|_| rng.gen_range(0..n_vocab))
                .collect();
            // Every placement runs each repetition in turn, on the same tokens, so that a
            // host whose speed drifts slows them alike and their ratios hold.
            for (engine, measured) in engines.iter_mut().zip(&mut measured) {
                let input = Repetition {
                    test,
                    context: &context,
                    tokens: &tokens,
                };
                measure(engine, &input, &mut measured[i], rep > 0)?;
            }
        }
    }
    Ok(engines
        .iter()
        .zip(&measured)
        .map(|(engine, measured)| PlacementReport::of(engine, &tests, measured, params, source))
        .collect())
}

/// One repetition of a test: the cache's context and the tokens it evaluates.
struct Repetition<'a> {
    test: &'a Test,
    context: &'a [u32],
    tokens: &'a [u32],
}

/// Runs one repetition on `engine`, added to `measured` unless it is the warm-up.
fn measure(
    engine: &mut Engine,
    rep: &Repetition,
    measured: &mut Measured,
    timed: bool,
) -> Result<()> {
    let before = sparse_stats(engine);
    let fetch_before = fetch_ns(engine);
    let ns = run_test(engine, rep)?;
    if timed {
        measured.samples_ns.push(ns);
        let fetch_after = fetch_ns(engine);
        measured.fetch_ns += fetch_after.0 - fetch_before.0;
        measured.fetch_overlap_ns += fetch_after.1 - fetch_before.1;
        if let (Some(b), Some(a)) = (before, sparse_stats(engine)) {
            let s = measured.sparse.get_or_insert_with(IgStats::default);
            s.selections += a.selections - b.selections;
            s.fetched += a.fetched - b.fetched;
            s.available += a.available - b.available;
        }
    }
    measured.kv_blocks_used = engine.kv_usage().map_or(0, |u| u.blocks_used);
    Ok(())
}

/// What InfiniGen fetched, or H2O kept, so far: the tokens its sparse layers attended to.
fn sparse_stats(engine: &Engine) -> Option<IgStats> {
    engine.kv_policy_stats().map(|s| s.tokens)
}

/// GPU time of InfiniGen's fetch kernels so far, and the part of it that ran alongside other
/// kernels (ns; zero unless profiling).
fn fetch_ns(engine: &Engine) -> (f64, f64) {
    let profile = engine.session().backend().profile();
    (profile.fetch_ns(), profile.fetch_overlap_ns)
}

/// One repetition: the time of its timed part (after the cache holds its context) in
/// nanoseconds.
fn run_test(engine: &mut Engine, rep: &Repetition) -> Result<f64> {
    let test = rep.test;
    let backend = engine.session_mut().backend_at(rep.context)?;
    if test.parallel > 1 {
        return run_parallel(backend, rep);
    }
    let start = Instant::now();
    if test.n_prompt > 0 {
        backend.forward(&rep.tokens[..test.n_prompt], Logits::Last)?;
    }
    for &t in &rep.tokens[..test.n_gen] {
        backend.forward(&[t], Logits::Last)?;
    }
    Ok(start.elapsed().as_nanos() as f64)
}

/// tg with `parallel` sequences: rows 1.. share row 0's context, and every step decodes one
/// token of each.
fn run_parallel(backend: &mut dyn Backend, rep: &Repetition) -> Result<f64> {
    let test = rep.test;
    let model = backend.as_vulkan_mut().ok_or_else(|| {
        Error::options("parallel", "more than one sequence needs a Vulkan device")
    })?;
    let depth = model.kv().len(0);
    for row in 1..test.parallel {
        model.fork(0, row, depth);
    }
    let start = Instant::now();
    for next in rep.tokens.chunks(test.parallel).take(test.n_gen) {
        let steps: Vec<SeqStep> = next
            .iter()
            .enumerate()
            .map(|(row, t)| SeqStep {
                row,
                tokens: std::slice::from_ref(t),
                logits: Some(Logits::Last),
                beam: None,
            })
            .collect();
        model.step_batch(&steps)?;
    }
    Ok(start.elapsed().as_nanos() as f64)
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
