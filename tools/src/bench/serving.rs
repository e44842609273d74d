//! Serving throughput and latency. A stream of requests, all arriving at the start, with
//! prompt lengths uniform in [p/2, 3p/2] and output lengths in [n/2, 3n/2] (random tokens,
//! greedy, no early end), is served with at most C sequences at once:
//!   continuous: the scheduler admits a waiting request as soon as a sequence finishes;
//!   static: requests go in batches of C, and a batch starts when the last one ended.
//! Reported per run: generated tokens per second over the whole stream, time to first token
//! and time per output token (p50, p99), and KV blocks in use at most.

use std::fmt;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::stats::percentile;
use hearth_engine::sample::SamplerParams;
use hearth_engine::sched::{RequestId, RequestParams, Scheduler};
use hearth_engine::session::GenerateParams;
use hearth_engine::Engine;
use hearth_model::Result;

/// Which streams to serve: every combination of prompt length, output length and
/// concurrency, each by both kinds of batching.
#[derive(Clone, Debug, Serialize)]
pub struct ServingParams {
    /// Prompt lengths: a stream's prompts are spread around each.
    pub n_prompt: Vec<usize>,
    /// Output lengths: a stream's outputs are spread around each.
    pub n_gen: Vec<usize>,
    /// Most sequences served at once.
    pub concurrency: Vec<usize>,
    /// Requests per stream; `None`: twice the concurrency, at least 8.
    pub requests: Option<usize>,
}

impl ServingParams {
    /// The context the engine needs: the longest prompt and output the streams can hold.
    pub fn n_ctx(&self) -> usize {
        let p = self.n_prompt.iter().max().copied().unwrap_or(0);
        let n = self.n_gen.iter().max().copied().unwrap_or(0);
        (3 * p / 2 + 3 * n / 2).max(2)
    }

    /// The sequences the engine's KV cache serves at once: the highest concurrency.
    pub fn n_seq(&self) -> usize {
        self.concurrency.iter().max().copied().unwrap_or(1).max(1)
    }
}

/// How requests are admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Batching {
    /// A waiting request joins as soon as a sequence finishes.
    Continuous,
    /// Requests go in batches; a batch starts when the last one ended.
    Static,
}

impl fmt::Display for Batching {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Continuous => "continuous",
            Self::Static => "static",
        })
    }
}

/// One stream served one way.
#[derive(Clone, Debug, Serialize)]
pub struct ServingRun {
    pub mode: Batching,
    pub concurrency: usize,
    pub requests: usize,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub generated_tokens: usize,
    pub wall_s: f64,
    pub tokens_per_s: f64,
    pub ttft_ms_p50: f64,
    pub ttft_ms_p99: f64,
    pub tpot_ms_p50: f64,
    pub tpot_ms_p99: f64,
    pub kv_blocks_max: usize,
    pub kv_blocks_total: usize,
    pub preemptions: usize,
}

struct Request {
    prompt: Vec<u32>,
    n_gen: usize,
}

/// Serves every stream of `params` on `engine` (loaded with a context of
/// [`ServingParams::n_ctx`] and [`ServingParams::n_seq`] sequences; Vulkan only), by
/// continuous and then by static batching.
pub fn bench_serving(engine: &mut Engine, params: &ServingParams) -> Result<Vec<ServingRun>> {
    let mut runs = Vec::new();
    let n_vocab = engine.info().config.n_vocab as u32;
    for &p in &params.n_prompt {
        for &n in &params.n_gen {
            for &c in &params.concurrency {
                let c = c.max(1);
                let count = params.requests.unwrap_or((2 * c).max(8));
                let stream = requests(count, p, n, n_vocab);
                for mode in [Batching::Continuous, Batching::Static] {
                    let mut sched = engine.scheduler()?;
                    sched.set_max_running(c);
                    let run = serve(&mut sched, &stream, c, mode)?;
                    runs.push(ServingRun {
                        n_prompt: p,
                        n_gen: n,
                        ..run
                    });
                }
            }
        }
    }
    Ok(runs)
}

/// `count` requests with lengths spread around `p` and `n`, the same for every run.
fn requests(count: usize, p: usize, n: usize, n_vocab: u32) -> Vec<Request> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let spread =
        |rng: &mut rand::rngs::StdRng, x: usize| rng.gen_range((x / 2).max(1)..=(3 * x / 2).max(1));
    (0..count)
        .map(|_| {
            let len = spread(&mut rng, p);
            Request {
                prompt: (0..len).map(|_| rng.gen_range(0..n_vocab)).collect(),
                n_gen: spread(&mut rng, n),
            }
        })
        .collect()
}

/// Serves `stream` with at most `c` sequences at once and measures it.
fn serve(
    sched: &mut Scheduler<'_>,
    stream: &[Request],
    c: usize,
    mode: Batching,
) -> Result<ServingRun> {
    let start = Instant::now();
    let params = |n_gen| RequestParams {
        generate: GenerateParams {
            max_tokens: Some(n_gen),
            sampler: SamplerParams::greedy(),
            ignore_eos: true,
            ..GenerateParams::default()
        },
        n: 1,
    };
    let mut ids: Vec<RequestId> = Vec::new();
    let mut next = 0;
    let mut kv_max = 0;
    let mut times = Vec::new();
    while next < stream.len() || sched.pending() > 0 {
        // Continuous: keep the queue full; the scheduler admits as rows free up.
        // Static: the next batch only when the last one is done.
        let room = if mode == Batching::Static {
            if sched.pending() == 0 {
                c
            } else {
                0
            }
        } else {
            stream.len()
        };
        for _ in 0..room {
            if next < stream.len() {
                let r = &stream[next];
                ids.push(sched.add_request(&r.prompt, &params(r.n_gen))?);
                next += 1;
            }
        }
        sched.step()?;
        kv_max = kv_max.max(sched.model().kv().usage().blocks_used);
        if sched.pending() == 0 {
            for id in ids.drain(..) {
                times.extend(sched.times(id));
            }
            sched.forget_finished();
        }
    }
    let wall = start.elapsed();
    let generated: usize = times.iter().map(|t| t.generated).sum();
    // Every request arrived at the start.
    let mut ttft: Vec<f64> = times
        .iter()
        .filter_map(|t| t.first_token)
        .map(|f| ms(f - start))
        .collect();
    let mut tpot: Vec<f64> = times
        .iter()
        .filter_map(|t| {
            let (first, end) = (t.first_token?, t.finished?);
            (t.generated > 1).then(|| ms(end - first) / (t.generated - 1) as f64)
        })
        .collect();
    Ok(ServingRun {
        mode,
        concurrency: c,
        requests: stream.len(),
        n_prompt: 0,
        n_gen: 0,
        generated_tokens: generated,
        wall_s: wall.as_secs_f64(),
        tokens_per_s: generated as f64 / wall.as_secs_f64().max(1e-9),
        ttft_ms_p50: percentile(&mut ttft, 0.5),
        ttft_ms_p99: percentile(&mut ttft, 0.99),
        tpot_ms_p50: percentile(&mut tpot, 0.5),
        tpot_ms_p99: percentile(&mut tpot, 0.99),
        kv_blocks_max: kv_max,
        kv_blocks_total: sched.model().kv().pool().capacity(),
        preemptions: sched.preemptions(),
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
