//! `hearth bench -m MODEL --draft lookup|MODEL|self:FMT`: speculative decoding against plain
//! decoding on one text-editing request (the answer repeats most of the prompt, as edits,
//! retrieval answers and code changes do), greedy so both produce the same tokens. Plain and
//! drafting runs alternate, so that a busy machine slows both alike; the prompt is cached
//! after the first run and only generation is timed.

use anyhow::Result;
use hearth_engine::sample::SamplerParams;
use hearth_engine::session::GenerateParams;
use hearth_engine::speculative::Speculative;
use hearth_engine::Engine;
use hearth_models::ChatMessage;
use serde::Serialize;

use crate::output::{emit, emit_json, Format};

/// The request: change one name throughout a paragraph.
const EDIT: &str = "Rewrite the following paragraph, changing only the name Alice to Maria. \
    Keep every other word as it is.\n\n\
    Alice walked to the market every morning before work. Alice bought bread, cheese and \
    apples, and Alice always greeted the baker by name. The baker gave Alice the warmest loaf \
    from the oven, and Alice paid with the coins she kept in a small blue purse. On Sundays \
    Alice stayed home, read the newspaper in the garden and wrote letters to her sister.";

/// One row of the results (JSON field names in llama-bench's style where it has one).
#[derive(Serialize, Debug)]
pub struct SpecRow {
    pub model_filename: String,
    pub gpu_info: String,
    /// `lookup`, a draft model's path, or `self:FMT`.
    pub draft: String,
    pub draft_max: usize,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub repetitions: usize,
    /// Mean generation speed without drafts and with them.
    pub plain_ts: f64,
    pub draft_ts: f64,
    pub speedup: f64,
    pub drafted: usize,
    pub accepted: usize,
    pub acceptance_rate: f64,
    /// Target steps that verified a draft, per run.
    pub draft_steps: usize,
    /// Whether the drafting runs produced the plain runs' tokens (greedy: they must).
    pub same_output: bool,
}

pub fn run(
    engine: &mut Engine,
    draft: &str,
    spec: Speculative,
    n_gen: usize,
    reps: usize,
    format: Format,
) -> Result<()> {
    let prompt = engine.tokenize_chat(&[ChatMessage::new("user", EDIT)])?;
    let plain = GenerateParams {
        max_tokens: Some(n_gen),
        sampler: SamplerParams::greedy(),
        ..GenerateParams::default()
    };
    let drafting = GenerateParams {
        speculative: Some(spec),
        ..plain.clone()
    };
    // A first run of each: the prompt into the cache, kernels built, pages touched.
    engine.generate(&prompt, &plain, &mut |_| true)?;
    engine.generate(&prompt, &drafting, &mut |_| true)?;
    let (mut plain_ts, mut draft_ts) = (Vec::new(), Vec::new());
    let mut stats = hearth_engine::speculative::DraftStats::default();
    let mut same = true;
    for _ in 0..reps.max(1) {
        let a = engine.generate(&prompt, &plain, &mut |_| true)?;
        let b = engine.generate(&prompt, &drafting, &mut |_| true)?;
        plain_ts.push(a.timings.generation_tokens_per_second());
        draft_ts.push(b.timings.generation_tokens_per_second());
        stats.add(b.draft);
        same &= a.tokens == b.tokens;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let runs = reps.max(1);
    let row = SpecRow {
        model_filename: engine.info().path.display().to_string(),
        gpu_info: engine.info().device.clone(),
        draft: draft.to_string(),
        draft_max: spec.max,
        n_prompt: prompt.len(),
        n_gen,
        repetitions: runs,
        plain_ts: mean(&plain_ts),
        draft_ts: mean(&draft_ts),
        speedup: mean(&draft_ts) / mean(&plain_ts),
        drafted: stats.drafted / runs,
        accepted: stats.accepted / runs,
        acceptance_rate: stats.acceptance_rate(),
        draft_steps: stats.steps / runs,
        same_output: same,
    };
    match format {
        Format::Json => emit_json(&[&row]),
        Format::Table => emit(&format!(
            "| model | device | draft | test | plain t/s | drafting t/s | speed-up | accepted |\n\
             | --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n\
             | {} | {} | {} (max {}) | edit pp{} tg{} | {:.2} | {:.2} | {:.2}x | {}/{} ({:.0}%) |\n{}",
            engine.info().name,
            row.gpu_info,
            row.draft,
            row.draft_max,
            row.n_prompt,
            row.n_gen,
            row.plain_ts,
            row.draft_ts,
            row.speedup,
            row.accepted,
            row.drafted,
            100.0 * row.acceptance_rate,
            if same {
                ""
            } else {
                "\nThe drafting runs' tokens differ from the plain runs': the step over several \
                 tokens rounds differently and a near-tie went the other way.\n"
            },
        )),
    }
}
