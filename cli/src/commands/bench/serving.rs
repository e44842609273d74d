//! `hearth bench -m MODEL --concurrency 1,4,16 -p 128 -n 128`: serving throughput and
//! latency. A stream of requests, all arriving at the start, with prompt lengths uniform in
//! [p/2, 3p/2] and output lengths in [n/2, 3n/2] (random tokens, greedy, no early end), is
//! served with at most C sequences at once:
//!   continuous: the scheduler admits a waiting request as soon as a sequence finishes;
//!   static: requests go in batches of C, and a batch starts when the last one ended.
//! Reported per run: generated tokens per second over the whole stream, time to first token
//! and time per output token (p50, p99), and KV blocks in use at most.

use std::time::{Duration, Instant};

use anyhow::Result;
use hearth_runtime::engine::Engine;
use hearth_runtime::sample::SamplerParams;
use hearth_runtime::sched::{RequestId, RequestParams, Scheduler};
use hearth_runtime::session::GenerateParams;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::model::BenchModelArgs;
use crate::output::Format;

#[derive(Serialize)]
struct Run {
    mode: &'static str,
    concurrency: usize,
    requests: usize,
    n_prompt: usize,
    n_gen: usize,
    generated_tokens: usize,
    wall_s: f64,
    tokens_per_s: f64,
    ttft_ms_p50: f64,
    ttft_ms_p99: f64,
    tpot_ms_p50: f64,
    tpot_ms_p99: f64,
    kv_blocks_max: usize,
    kv_blocks_total: usize,
    preemptions: usize,
}

struct Request {
    prompt: Vec<u32>,
    n_gen: usize,
}

pub fn run(args: &BenchModelArgs, engine: &mut Engine) -> Result<()> {
    let mut runs = Vec::new();
    let n_vocab = engine.info().config.n_vocab as u32;
    for &p in &args.n_prompt {
        for &n in &args.n_gen {
            for &c in &args.concurrency {
                let c = c.max(1);
                let count = args.requests.unwrap_or((2 * c).max(8));
                let stream = requests(count, p, n, n_vocab);
                for mode in ["continuous", "static"] {
                    let mut sched = engine.scheduler()?;
                    sched.set_max_running(c);
                    let run = serve(&mut sched, &stream, c, mode == "static")?;
                    runs.push(Run {
                        mode,
                        concurrency: c,
                        requests: count,
                        n_prompt: p,
                        n_gen: n,
                        ..run
                    });
                }
            }
        }
    }
    let info = engine.info();
    match args.format {
        Format::Json => crate::output::emit_json(&runs)?,
        Format::Table => {
            let mut out = format!(
                "{} on {}: {} requests per run, prompts ~{}, outputs ~{}\n\n",
                info.name,
                info.device,
                runs.first().map_or(0, |r| r.requests),
                args.n_prompt.first().unwrap_or(&0),
                args.n_gen.first().unwrap_or(&0)
            );
            out += "| batching | concurrency | gen t/s | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | KV blocks max | preemptions |\n";
            out += "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
            for r in &runs {
                out += &format!(
                    "| {} | {} | {:.2} | {:.0} / {:.0} | {:.1} / {:.1} | {} / {} | {} |\n",
                    r.mode,
                    r.concurrency,
                    r.tokens_per_s,
                    r.ttft_ms_p50,
                    r.ttft_ms_p99,
                    r.tpot_ms_p50,
                    r.tpot_ms_p99,
                    r.kv_blocks_max,
                    r.kv_blocks_total,
                    r.preemptions
                );
            }
            crate::output::emit(&out)?;
        }
    }
    Ok(())
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
fn serve(sched: &mut Scheduler<'_>, stream: &[Request], c: usize, batches: bool) -> Result<Run> {
    let start = Instant::now();
    let params = |n_gen| RequestParams {
        generate: GenerateParams {
            max_tokens: Some(n_gen),
            sampler: SamplerParams::greedy(),
            stop: Vec::new(),
            ignore_eos: true,
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
        let room = if batches {
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
        kv_max = kv_max.max(sched.model().kv_usage().blocks_used);
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
    Ok(Run {
        mode: "",
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

/// The q-quantile (nearest rank) of `v`; 0 when empty.
fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}
