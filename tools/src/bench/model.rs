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
use std::time::Instant;

use hearth_engine::Engine;
use hearth_model::kv::infinigen::IgStats;
use hearth_model::{Backend, Error, Logits, Result, SeqStep};
use rand::{Rng, SeedableRng};

use super::params::Measured;
pub use super::params::{ModelBenchParams, ModelSource, Test};
use super::report::PlacementReport;

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
    let (ns, parts_ns) = run_test(engine, rep)?;
    if timed {
        measured.samples_ns.push(ns);
        measured.parts_ns.resize(parts_ns.len(), 0.0);
        for (sum, ns) in measured.parts_ns.iter_mut().zip(parts_ns) {
            *sum += ns;
        }
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
    (profile.fetch_ns, profile.fetch_overlap_ns)
}

/// One repetition: the time of its timed part (after the cache holds its context) in
/// nanoseconds, and the time each executor of a split model spent in it.
fn run_test(engine: &mut Engine, rep: &Repetition) -> Result<(f64, Vec<f64>)> {
    let test = rep.test;
    let backend = engine.session_mut().backend_at(rep.context)?;
    let busy =
        |b: &dyn Backend| -> Vec<f64> { b.placement().iter().map(|p| p.busy_ns as f64).collect() };
    let before = busy(backend);
    let ns = match test.parallel {
        1 => {
            let start = Instant::now();
            if test.n_prompt > 0 {
                backend.forward(&rep.tokens[..test.n_prompt], Logits::Last)?;
            }
            for &t in &rep.tokens[..test.n_gen] {
                backend.forward(&[t], Logits::Last)?;
            }
            start.elapsed().as_nanos() as f64
        }
        _ => run_parallel(backend, rep)?,
    };
    let parts = busy(backend)
        .iter()
        .zip(&before)
        .map(|(a, b)| a - b)
        .collect();
    Ok((ns, parts))
}

/// tg with `parallel` sequences: rows 1.. share row 0's context, and every step decodes one
/// token of each.
fn run_parallel(backend: &mut dyn Backend, rep: &Repetition) -> Result<f64> {
    let test = rep.test;
    let model = backend.as_batched_mut().ok_or_else(|| {
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
