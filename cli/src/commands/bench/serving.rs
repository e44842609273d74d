//! `hearth bench -m MODEL --concurrency 1,4,16 -p 128 -n 128`: serving throughput and
//! latency of a stream of requests, served by continuous and by static batching (the
//! runtime's `bench::serving` describes the stream), as a table or JSON.

use anyhow::Result;
use hearth_engine::Engine;
use hearth_tools::bench::{bench_serving, ServingParams};

use crate::output::{emit, emit_json, Format};

pub fn run(engine: &mut Engine, params: &ServingParams, format: Format) -> Result<()> {
    let runs = bench_serving(engine, params)?;
    if format == Format::Json {
        return emit_json(&runs);
    }
    let info = engine.info();
    let mut out = format!(
        "{} on {}: {} requests per run, prompts ~{}, outputs ~{}\n\n",
        info.name,
        info.device,
        runs.first().map_or(0, |r| r.requests),
        params.n_prompt.first().unwrap_or(&0),
        params.n_gen.first().unwrap_or(&0)
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
    emit(&out)
}
