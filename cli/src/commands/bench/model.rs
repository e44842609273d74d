//! `hearth bench -m MODEL`: prompt processing (pp) and text generation (tg) speed, the way
//! llama-bench measures them (JSON uses llama-bench's field names); several `--kv-offload`
//! placements compare in one run, one engine each. `hearth bench --synthetic PRESET` measures
//! a model shape without its file: the runtime's `synthetic` module builds a
//! Llama-architecture file of that shape in memory. The runtime's `bench` module measures;
//! this module loads the engines and prints the results.

use anyhow::{anyhow, Context, Result};
use hearth_engine::Engine;
use hearth_models::synthetic::{self, PRESETS};
use hearth_quant::Format as QuantFormat;
use hearth_tools::bench::{
    bench_model, ModelBenchParams, ModelSource, PlacementReport, ServingParams,
};

use crate::draft_args::DraftArgs;
use crate::model_args::{CacheSpec, RunArgs};
use crate::output::{emit, emit_json, print_profile, Format};
use crate::DeviceChoice;

#[derive(clap::Args, Debug)]
pub struct BenchModelArgs {
    /// Model: a path, or a name in the models directory (`smollm2-135m-instruct`).
    #[arg(short = 'm', long, conflicts_with = "synthetic")]
    pub model: Option<String>,
    /// Instead of a model file, a model of this shape built in memory (`list` shows them:
    /// smollm2-135m, llama-1b, llama-7b, llama-3-8b, ...).
    #[arg(long, value_name = "PRESET")]
    pub synthetic: Option<String>,
    /// Format of the synthetic model's weight matrices: F32, F16, Q2, Q3, Q3H, Q4, Q4B64,
    /// Q5, Q6 or Q8.
    #[arg(
        long,
        value_name = "FMT",
        default_value = "Q4",
        requires = "synthetic",
        conflicts_with = "model"
    )]
    synthetic_format: QuantFormat,
    #[command(flatten)]
    run: RunArgs,
    /// Prompt lengths to test (comma-separated; 0 skips).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Generation lengths to test (comma-separated; 0 skips).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Context already in the cache when each test starts (comma-separated; llama-bench's
    /// -d): the tests then read that much KV cache at every step.
    #[arg(
        short = 'd',
        long = "depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub depth: Vec<usize>,
    /// Sequences generating at once in tg tests (comma-separated): they share the depth's
    /// context, and each decode step runs one token of each (the batched matrix-vector
    /// path); t/s counts every sequence's tokens.
    #[arg(long, value_delimiter = ',', default_value = "1", value_name = "N,...")]
    pub parallel: Vec<usize>,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    #[arg(short = 'o', long = "format", value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Serving benchmark instead of pp/tg: a stream of requests (prompt lengths around -p,
    /// output lengths around -n) served with at most this many at once, by continuous and by
    /// static batching (comma-separated list).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub concurrency: Vec<usize>,
    /// Requests in the serving benchmark's stream [default: twice the concurrency, at least 8].
    #[arg(long, value_name = "N")]
    pub requests: Option<usize>,
    /// With `--draft`: speculative decoding against plain decoding on a text-editing
    /// request, instead of pp/tg (-n tokens, -r repetitions).
    #[command(flatten)]
    draft: DraftArgs,
}

impl BenchModelArgs {
    fn params(&self) -> ModelBenchParams {
        ModelBenchParams {
            n_prompt: self.n_prompt.clone(),
            n_gen: self.n_gen.clone(),
            depth: self.depth.clone(),
            parallel: self.parallel.clone(),
            reps: self.reps,
            n_ubatch: self.run.ubatch,
        }
    }

    fn serving(&self) -> Option<ServingParams> {
        (!self.concurrency.is_empty()).then(|| ServingParams {
            n_prompt: self.n_prompt.clone(),
            n_gen: self.n_gen.clone(),
            concurrency: self.concurrency.clone(),
            requests: self.requests,
        })
    }

    /// What runs, or `None` once `--synthetic list` has printed the presets.
    fn source(&self) -> Result<Option<Source<'_>>> {
        match (&self.model, &self.synthetic) {
            (Some(model), _) => Ok(Some(Source::File(model))),
            (None, Some(name)) if name == "list" => {
                emit(&preset_table())?;
                Ok(None)
            }
            (None, Some(name)) => match synthetic::preset(name) {
                Ok(preset) => Ok(Some(Source::Synthetic(preset))),
                Err(e) => Err(anyhow!("{e}\n\n{}", preset_table())),
            },
            (None, None) => Err(anyhow!(
                "say what to benchmark: a model file (`hearth bench -m MODEL`), a model shape \
                 (`hearth bench --synthetic PRESET`, `--synthetic list` for the presets) or \
                 the kernels (`hearth bench kernels`)"
            )),
        }
    }
}

/// What runs: a model file, or a preset's shape built in memory.
#[derive(Clone, Copy)]
enum Source<'a> {
    File(&'a str),
    Synthetic(&'static synthetic::Preset),
}

impl Source<'_> {
    /// Loads the model with the KV cache `cache`.
    fn load(
        self,
        args: &BenchModelArgs,
        device: &DeviceChoice,
        cache: CacheSpec,
    ) -> Result<Engine> {
        match self {
            Source::File(model) => args.run.load(model, device, cache),
            Source::Synthetic(preset) => {
                let format = args.synthetic_format;
                let what = || format!("synthetic {} ({format})", preset.name);
                let file = preset.build(format).with_context(what)?;
                args.run
                    .load_placed(device, cache, |options, progress| {
                        Engine::load_file(file, options, progress)
                    })
                    .with_context(what)
            }
        }
    }
}

pub fn run(args: &BenchModelArgs, device: &DeviceChoice) -> Result<()> {
    let Some(source) = args.source()? else {
        return Ok(());
    };
    if let Some(serving) = args.serving() {
        let cache = args.run.cache(Some(serving.n_ctx()), serving.n_seq())?;
        let mut engine = source.load(args, device, cache)?;
        return super::serving::run(&mut engine, &serving, args.format);
    }
    if let (Some(spec), Some(draft)) = (args.draft.speculative()?, &args.draft.draft) {
        let n_gen = args.n_gen.iter().copied().find(|&n| n > 0).unwrap_or(128);
        let cache = args.run.cache(Some(1024), 1)?;
        let mut engine = source.load(args, device, cache)?;
        args.draft.load(&mut engine, &args.run, device)?;
        return super::speculative::run(&mut engine, draft, spec, n_gen, args.reps, args.format);
    }
    let params = args.params();
    if params.n_seq() > 1 && args.run.infinigen.kv_pool_capacity.is_some() {
        return Err(anyhow!(
            "--parallel with --kv-pool-capacity: an evicting pool serves one sequence"
        ));
    }
    // One engine per KV placement asked for (`--kv-offload none,full,infinigen`).
    let placements = &args.run.kv_offload;
    let mut engines: Vec<Engine> = placements
        .iter()
        .map(|&offload| {
            let cache = CacheSpec {
                offload,
                n_ctx: Some(params.n_ctx()),
                n_seq: params.n_seq(),
            };
            source.load(args, device, cache)
        })
        .collect::<Result<_>>()?;
    let model_source = match source {
        Source::File(_) => ModelSource::File,
        Source::Synthetic(preset) => ModelSource::Synthetic(preset),
    };
    let reports = bench_model(&mut engines, &params, model_source)?;
    for (engine, offload) in engines.iter().zip(placements) {
        if placements.len() > 1 && args.run.profile {
            let name = clap::ValueEnum::to_possible_value(offload);
            eprintln!(
                "--kv-offload {}:",
                name.as_ref().map_or("?", |v| v.get_name())
            );
        }
        print_profile(engine);
    }
    match args.format {
        Format::Json => {
            let rows: Vec<_> = reports.iter().flat_map(|r| &r.rows).collect();
            emit_json(&rows)
        }
        Format::Table => emit(&table(&reports)),
    }
}

/// The results of every placement as one table, with a `kv offload` column when there are
/// several, and below it where each placement's KV cache lived and what each test read.
fn table(reports: &[PlacementReport]) -> String {
    let several = reports.len() > 1;
    let mut table = String::from(if several {
        "| model | size | params | backend | device | kv offload | test | t/s |\n\
         | --- | ---: | ---: | --- | --- | --- | ---: | ---: |\n"
    } else {
        "| model | size | params | backend | device | test | t/s |\n\
         | --- | ---: | ---: | --- | --- | ---: | ---: |\n"
    });
    let mut kv_lines = String::new();
    for placement in reports {
        for row in &placement.rows {
            let offload = match several {
                true => format!(" {} |", placement.kv_offload),
                false => String::new(),
            };
            table.push_str(&format!(
                "| {} | {:.2} MiB | {:.2} M | {} | {} |{offload} {} | {:.2} ± {:.2} |\n",
                placement.model_type,
                row.model_size as f64 / (1 << 20) as f64,
                row.model_n_params as f64 / 1e6,
                placement.backend,
                row.gpu_info,
                row.test(),
                row.avg_ts,
                row.stddev_ts,
            ));
        }
        kv_lines.push_str(&kv_line(placement));
        kv_lines.push_str(&parts_lines(placement));
    }
    table + &kv_lines
}

/// A split model's executors and their time per step in each test ("" unless split).
fn parts_lines(placement: &PlacementReport) -> String {
    let mut out = String::new();
    for row in placement.rows.iter().filter(|r| !r.parts.is_empty()) {
        let parts: Vec<String> = row
            .parts
            .iter()
            .map(|p| {
                let share = match &p.shard {
                    Some(s) => format!(" ({s})"),
                    None => String::new(),
                };
                format!(
                    "{} layers {}..{}{share} {:.2} ms ({:.0}%)",
                    p.executor,
                    p.layers[0],
                    p.layers[1],
                    p.ms_per_step,
                    100.0 * p.share
                )
            })
            .collect();
        out.push_str(&format!("{} per step: {}\n", row.test(), parts.join(", ")));
    }
    out
}

/// Where the KV cache lives and what each test read of it ("" without one).
fn kv_line(placement: &PlacementReport) -> String {
    let Some(kv) = &placement.kv else {
        return String::new();
    };
    let read: Vec<String> = placement
        .rows
        .iter()
        .filter(|row| row.n_gen > 0)
        .map(|row| {
            let fetched = match (row.ig_fetched_fraction, row.h2o_kept_fraction) {
                (Some(f), _) => format!(" (InfiniGen fetched {:.1}% in its layers)", 100.0 * f),
                (None, Some(f)) => format!(" (H2O kept {:.1}% in its layers)", 100.0 * f),
                (None, None) => String::new(),
            };
            format!(
                "{} {:.2} MiB{fetched}",
                row.test(),
                row.kv_read_bytes_per_token as f64 / (1 << 20) as f64
            )
        })
        .collect();
    let read = match read.is_empty() {
        true => "-".to_string(),
        false => read.join(", "),
    };
    format!(
        "\nKV cache: {} memory ({} offload), {}, {} bytes per token per layer, {} blocks of {} \
         tokens ({:.1} MiB); KV read per generated token: {read}\n",
        kv.placement,
        placement.kv_offload,
        kv.kv_type,
        kv.bytes_per_token_layer,
        kv.blocks,
        kv.block_tokens,
        kv.total_bytes as f64 / (1 << 20) as f64,
    )
}

/// The presets as a table: shape, parameters, and file size in Q4.
fn preset_table() -> String {
    let mut out = String::from(
        "Presets for `hearth bench --synthetic PRESET` (Llama architecture; weights in \
         --synthetic-format, default Q4):\n\
         | preset | shape of | n_embd | layers | heads | kv heads | n_ff | vocab | tied | params | Q4 size |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n",
    );
    for p in PRESETS {
        let s = &p.shape;
        let q4 = s.file_bytes(QuantFormat::Q4).unwrap_or_default();
        let params = |n: u64| match n {
            n if n >= 1_000_000_000 => format!("{:.2} B", n as f64 / 1e9),
            n => format!("{:.2} M", n as f64 / 1e6),
        };
        let bytes = |b: u64| match b {
            b if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
            b => format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            p.name,
            p.model,
            s.n_embd,
            s.n_layer,
            s.n_head,
            s.n_head_kv,
            s.n_ff,
            s.n_vocab,
            if s.tied_embeddings { "yes" } else { "no" },
            params(s.n_params()),
            bytes(q4),
        ));
    }
    out
}
