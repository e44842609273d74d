//! `hearth bench -m MODEL`: prompt processing (pp) and text generation (tg) speed, measured
//! the way llama-bench measures them: pp evaluates a prompt of random tokens from an empty
//! cache; tg generates tokens one at a time from an empty cache. Each test runs once to warm
//! up, then `reps` times; JSON uses llama-bench's field names. With a depth, the cache holds
//! that many tokens first (prefilled once per depth, then truncated back to for every
//! repetition and test); with `--parallel N`, tg runs N sequences that share the depth, one decode
//! step for all of them at a time.
//!
//! `hearth bench --synthetic PRESET` measures a model shape without its file: the runtime's
//! `synthetic` module builds a Llama-architecture file of that shape in memory.

use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use hearth_quant::Format as QuantFormat;
use hearth_runtime::engine::{BackendKind, Engine};
use hearth_runtime::kv::infinigen::{IgParams, IgStats};
use hearth_runtime::kv::policy::KvPolicyKind;
use hearth_runtime::kv::KvPlacement;
use hearth_runtime::model::{Backend, Logits, SeqStep};
use hearth_runtime::synthetic::{self, Preset, PRESETS};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::model_args::{KvOffload, RunArgs};
use crate::{DeviceChoice, Format};

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
    pub(crate) n_prompt: Vec<usize>,
    /// Generation lengths to test (comma-separated; 0 skips).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub(crate) n_gen: Vec<usize>,
    /// Context already in the cache when each test starts (comma-separated; llama-bench's
    /// -d): the tests then read that much KV cache at every step.
    #[arg(
        short = 'd',
        long = "depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub(crate) depth: Vec<usize>,
    /// Sequences generating at once in tg tests (comma-separated): they share the depth's
    /// context, and each decode step runs one token of each (the batched matrix-vector
    /// path); t/s counts every sequence's tokens.
    #[arg(long, value_delimiter = ',', default_value = "1", value_name = "N,...")]
    pub(crate) parallel: Vec<usize>,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    #[arg(short = 'o', long = "format", value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
    /// Serving benchmark instead of pp/tg: a stream of requests (prompt lengths around -p,
    /// output lengths around -n) served with at most this many at once, by continuous and by
    /// static batching (comma-separated list).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub(crate) concurrency: Vec<usize>,
    /// Requests in the serving benchmark's stream [default: twice the concurrency, at least 8].
    #[arg(long, value_name = "N")]
    pub(crate) requests: Option<usize>,
}

#[derive(Clone)]
struct Test {
    n_prompt: usize,
    n_gen: usize,
    /// Tokens in the cache before the timed part.
    depth: usize,
    /// Sequences generating at once (tg).
    parallel: usize,
    /// What InfiniGen fetched, or H2O kept, during the timed parts, when one is on.
    ig: Option<IgStats>,
    /// With `--profile`: GPU time of InfiniGen's fetch kernels during the timed parts, and
    /// how much of it ran alongside other kernels (ns).
    ig_fetch_ns: (f64, f64),
    samples_ns: Vec<f64>,
    /// KV blocks in use at the end of a repetition.
    kv_blocks_used: usize,
}

/// What runs: a model file, or a preset's shape built in memory.
enum Source<'a> {
    File(&'a str),
    Synthetic(&'static Preset),
}

pub fn run(args: &BenchModelArgs, device: &DeviceChoice) -> Result<()> {
    let source = match (&args.model, &args.synthetic) {
        (Some(model), _) => Source::File(model),
        (None, Some(name)) if name == "list" => return crate::inspect::emit(&preset_table()),
        (None, Some(name)) => match synthetic::preset(name) {
            Ok(preset) => Source::Synthetic(preset),
            Err(e) => return Err(anyhow!("{e}\n\n{}", preset_table())),
        },
        (None, None) => {
            return Err(anyhow!(
                "say what to benchmark: a model file (`hearth bench -m MODEL`), a model shape \
                 (`hearth bench --synthetic PRESET`, `--synthetic list` for the presets) or \
                 the kernels (`hearth bench kernels`)"
            ))
        }
    };
    let most = args
        .n_prompt
        .iter()
        .chain(&args.n_gen)
        .copied()
        .max()
        .unwrap_or(1);
    let serving = !args.concurrency.is_empty();
    // The serving benchmark's lengths go up to 1.5 times -p and -n.
    let (n_ctx, n_seq) = if serving {
        let p = args.n_prompt.iter().max().copied().unwrap_or(0);
        let n = args.n_gen.iter().max().copied().unwrap_or(0);
        let c = args.concurrency.iter().max().copied().unwrap_or(1);
        (Some((3 * p / 2 + 3 * n / 2).max(2)), c.max(1))
    } else {
        let deepest = args.depth.iter().max().copied().unwrap_or(0);
        let widest = args.parallel.iter().max().copied().unwrap_or(1);
        if widest > 1 && args.run.infinigen.kv_pool_capacity.is_some() {
            return Err(anyhow!(
                "--parallel with --kv-pool-capacity: an evicting pool serves one sequence"
            ));
        }
        (Some((most + deepest).max(1)), widest.max(1))
    };
    // One engine per KV placement asked for (`--kv-offload none,full,infinigen`).
    let placements = &args.run.kv_offload;
    let load = |offload: KvOffload| -> Result<Engine> {
        match source {
            Source::File(model) => args.run.load_as(offload, model, device, n_ctx, n_seq),
            Source::Synthetic(preset) => {
                let format = args.synthetic_format;
                let what = || format!("synthetic {} ({format})", preset.name);
                let file = preset.build(format).with_context(what)?;
                args.run
                    .load_placed(offload, device, n_ctx, n_seq, |options, progress| {
                        Engine::load_file(file, options, progress)
                    })
                    .with_context(what)
            }
        }
    };
    if serving {
        let mut engine = load(args.run.offload()?)?;
        return crate::bench_serving::run(args, &mut engine);
    }
    let mut engines: Vec<Engine> = placements.iter().map(|&o| load(o)).collect::<Result<_>>()?;
    // Every test, as yet unmeasured; each engine keeps its own record of them.
    let plan: Vec<Test> = args
        .depth
        .iter()
        .flat_map(|&depth| {
            let pp = args.n_prompt.iter().filter(|&&p| p > 0).map(|&p| (p, 0, 1));
            let tg = args
                .n_gen
                .iter()
                .filter(|&&n| n > 0)
                .flat_map(|&n| args.parallel.iter().map(move |&b| (0, n, b.max(1))));
            pp.chain(tg).map(move |(n_prompt, n_gen, parallel)| Test {
                n_prompt,
                n_gen,
                depth,
                parallel,
                ig: None,
                ig_fetch_ns: (0.0, 0.0),
                samples_ns: Vec::new(),
                kv_blocks_used: 0,
            })
        })
        .collect();
    let mut tests: Vec<Vec<Test>> = vec![plan.clone(); engines.len()];
    let n_vocab = engines[0].info().config.n_vocab as u32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    // One context per depth, so the tests at a depth share its prefill.
    let mut contexts: std::collections::HashMap<usize, Vec<u32>> = Default::default();
    for (i, test) in plan.iter().enumerate() {
        let context = contexts
            .entry(test.depth)
            .or_insert_with(|| (0..test.depth).map(|_| rng.gen_range(0..n_vocab)).collect())
            .clone();
        for rep in 0..=args.reps {
            let tokens: Vec<u32> = (0..test.n_prompt.max(test.n_gen * test.parallel))
                .map(|_| rng.gen_range(0..n_vocab))
                .collect();
            // Every placement runs each repetition in turn, on the same tokens, so that a
            // host whose speed drifts slows them alike and their ratios hold.
            for (engine, tests) in engines.iter_mut().zip(&mut tests) {
                measure(engine, &mut tests[i], rep > 0, &context, &tokens)?;
            }
        }
    }
    for (engine, offload) in engines.iter().zip(placements) {
        if placements.len() > 1 && args.run.profile {
            let name = clap::ValueEnum::to_possible_value(offload);
            eprintln!(
                "--kv-offload {}:",
                name.as_ref().map_or("?", |v| v.get_name())
            );
        }
        crate::model_args::print_profile(engine);
    }
    report(args, &engines, &source, &tests)
}

/// One repetition of `test` on `engine`, recorded unless it is the warm-up.
fn measure(
    engine: &mut Engine,
    test: &mut Test,
    timed: bool,
    context: &[u32],
    tokens: &[u32],
) -> Result<()> {
    let before = sparse_stats(engine);
    let fetch_before = fetch_ns(engine);
    let ns = run_test(engine, test, context, tokens)?;
    if timed {
        test.samples_ns.push(ns);
        let fetch_after = fetch_ns(engine);
        test.ig_fetch_ns.0 += fetch_after.0 - fetch_before.0;
        test.ig_fetch_ns.1 += fetch_after.1 - fetch_before.1;
        if let (Some(b), Some(a)) = (before, sparse_stats(engine)) {
            let ig = test.ig.get_or_insert_with(IgStats::default);
            ig.selections += a.selections - b.selections;
            ig.fetched += a.fetched - b.fetched;
            ig.available += a.available - b.available;
        }
    }
    let backend = engine.session().backend();
    test.kv_blocks_used = backend.as_vulkan().map_or(0, |m| m.kv_usage().blocks_used);
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

/// One repetition: the time of its timed part (after the cache holds `context`) in
/// nanoseconds.
fn run_test(engine: &mut Engine, test: &Test, context: &[u32], tokens: &[u32]) -> Result<f64> {
    let backend = engine.session_mut().backend_at(context)?;
    if test.parallel > 1 {
        return run_parallel(backend, test, tokens);
    }
    let start = Instant::now();
    if test.n_prompt > 0 {
        backend.forward(&tokens[..test.n_prompt], Logits::Last)?;
    }
    for &t in &tokens[..test.n_gen] {
        backend.forward(&[t], Logits::Last)?;
    }
    Ok(start.elapsed().as_nanos() as f64)
}

/// tg with `test.parallel` sequences: rows 1.. share row 0's context, and every step decodes
/// one token of each.
fn run_parallel(backend: &mut dyn Backend, test: &Test, tokens: &[u32]) -> Result<f64> {
    let model = backend
        .as_vulkan_mut()
        .ok_or_else(|| anyhow!("--parallel needs a Vulkan device"))?;
    let depth = model.kv().len(0);
    for row in 1..test.parallel {
        model.fork(0, row, depth);
    }
    let start = Instant::now();
    for next in tokens.chunks(test.parallel).take(test.n_gen) {
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

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// The results of every placement: one JSON array, or one table with a `kv offload` column
/// when there are several.
fn report(
    args: &BenchModelArgs,
    engines: &[Engine],
    source: &Source,
    tests: &[Vec<Test>],
) -> Result<()> {
    let several = engines.len() > 1;
    let mut rows = Vec::new();
    let mut table = String::from(if several {
        "| model | size | params | backend | device | kv offload | test | t/s |\n\
         | --- | ---: | ---: | --- | --- | --- | ---: | ---: |\n"
    } else {
        "| model | size | params | backend | device | test | t/s |\n\
         | --- | ---: | ---: | --- | --- | ---: | ---: |\n"
    });
    let mut kv_lines = String::new();
    for (engine, tests) in engines.iter().zip(tests) {
        let placement = EngineReport::of(args, engine, source, tests);
        let info = engine.info();
        for (t, row) in tests.iter().zip(&placement.rows) {
            let offload = match several {
                true => format!(" {} |", placement.kv_offload),
                false => String::new(),
            };
            table.push_str(&format!(
                "| {} | {:.2} MiB | {:.2} M | {} | {} |{offload} {} | {:.2} ± {:.2} |\n",
                placement.model_type,
                info.file_bytes as f64 / (1 << 20) as f64,
                info.n_params as f64 / 1e6,
                placement.backend,
                info.device,
                test_name(t),
                row["avg_ts"].as_f64().unwrap_or_default(),
                row["stddev_ts"].as_f64().unwrap_or_default(),
            ));
        }
        kv_lines.push_str(&placement.kv_line);
        rows.extend(placement.rows);
    }
    match args.format {
        Format::Json => {
            crate::inspect::emit(&format!("{}\n", serde_json::to_string_pretty(&rows)?))
        }
        Format::Table => crate::inspect::emit(&format!("{table}{kv_lines}")),
    }
}

/// One placement's results: JSON rows in llama-bench's names, and what the table shows.
struct EngineReport {
    rows: Vec<Value>,
    model_type: String,
    backend: &'static str,
    kv_offload: &'static str,
    /// Where the KV cache lives and what each test read of it ("" without one).
    kv_line: String,
}

impl EngineReport {
    fn of(args: &BenchModelArgs, engine: &Engine, source: &Source, tests: &[Test]) -> Self {
        let info = engine.info();
        let file_name = info
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let backend = match info.backend {
            BackendKind::Vulkan => "Vulkan",
            BackendKind::Cpu => "CPU",
        };
        // The weight formats as the backend holds them, most bytes first ("Q4+Q8").
        let weights: Vec<&str> = info.weight_formats.iter().map(|(f, _)| f.name()).collect();
        let model_type = match source {
            Source::File(_) => format!(
                "{} {}M {}",
                info.architecture,
                (info.n_params as f64 / 1e6).round(),
                weights.join("+")
            ),
            Source::Synthetic(preset) => format!(
                "{} {} {} (synthetic)",
                info.architecture,
                preset.size,
                weights.join("+")
            ),
        };
        // The paged KV cache: where it lives, its blocks, and the bytes attention reads.
        let kv = engine.session().backend().as_vulkan().map(|m| {
            let kv = m.kv();
            (kv.placement(), kv.shape(), kv.usage())
        });
        let policy = engine.kv_policy_stats().map(|s| s.policy);
        let ig_on = policy == Some(KvPolicyKind::Infinigen);
        let h2o_on = policy == Some(KvPolicyKind::H2o);
        let kv_offload = match kv.map(|k| k.0) {
            Some(KvPlacement::Host) if ig_on => "infinigen",
            Some(KvPlacement::Host) => "full",
            _ if h2o_on => "h2o",
            _ => "none",
        };
        let n_layer = info.config.n_layer as f64;
        let rows: Vec<Value> = tests
        .iter()
        .map(|t| {
            // Decode step i (after the depth and the prompt) reads every cached position's K
            // and V: depth + n_prompt + i + 1 positions; under InfiniGen the sparse layers
            // read only what they fetched, under H2O what they keep.
            let token_bytes = kv.map_or(0, |k| k.1.token_bytes()) as f64;
            let positions = (t.depth + t.n_prompt) as f64 + (t.n_gen as f64 + 1.0) / 2.0;
            let read_fraction = match &t.ig {
                Some(ig) if ig.selections > 0 => {
                    let dense = (IgParams::defaults(true).dense_layers as f64).min(n_layer);
                    (dense + (n_layer - dense) * ig.fetched_fraction()) / n_layer
                }
                _ => 1.0,
            };
            let kv_read = if t.n_gen > 0 {
                token_bytes * positions * read_fraction
            } else {
                0.0
            };
            let n = (t.n_prompt + t.n_gen * t.parallel) as f64;
            // Tokens generated over the timed repetitions.
            let generated = (t.n_gen * t.parallel * t.samples_ns.len()).max(1) as f64;
            let samples_ts: Vec<f64> = t.samples_ns.iter().map(|ns| n * 1e9 / ns).collect();
            let (avg_ns, stddev_ns) = mean_sd(&t.samples_ns);
            let (avg_ts, stddev_ts) = mean_sd(&samples_ts);
            json!({
                "build_commit": env!("CARGO_PKG_VERSION"),
                "backends": backend,
                "gpu_info": info.device,
                "model_filename": file_name,
                "model_type": model_type,
                "model_size": info.file_bytes,
                "model_n_params": info.n_params,
                "n_ubatch": args.run.ubatch,
                "type_k": "f32",
                "type_v": "f32",
                "n_prompt": t.n_prompt,
                "n_gen": t.n_gen,
                "n_depth": t.depth,
                "n_parallel": t.parallel,
                "avg_ns": avg_ns.round() as u64,
                "stddev_ns": stddev_ns.round() as u64,
                "avg_ts": avg_ts,
                "stddev_ts": stddev_ts,
                "samples_ns": t.samples_ns.iter().map(|&v| v.round() as u64).collect::<Vec<_>>(),
                "samples_ts": samples_ts,
                "kv_offload": kv_offload,
                "kv_blocks_used": t.kv_blocks_used,
                "kv_blocks_total": kv.map_or(0, |k| k.2.blocks_used + k.2.blocks_free),
                "kv_read_bytes_per_token": kv_read.round() as u64,
                "kv_read_bytes_per_s": if avg_ns > 0.0 { (kv_read * (t.n_gen * t.parallel) as f64 * 1e9 / avg_ns).round() as u64 } else { 0 },
                "ig_fetched_fraction": t.ig.filter(|ig| ig_on && ig.selections > 0).map(|ig| ig.fetched_fraction()),
                "ig_mean_fetched": t.ig.filter(|ig| ig_on && ig.selections > 0).map(|ig| ig.mean_fetched()),
                "h2o_kept_fraction": t.ig.filter(|ig| h2o_on && ig.selections > 0).map(|ig| ig.fetched_fraction()),
                "h2o_mean_kept": t.ig.filter(|ig| h2o_on && ig.selections > 0).map(|ig| ig.mean_fetched()),
                "ig_fetch_ms_per_token": (t.ig_fetch_ns.0 > 0.0).then(|| t.ig_fetch_ns.0 / 1e6 / generated),
                "ig_fetch_overlap_ms_per_token": (t.ig_fetch_ns.0 > 0.0).then(|| t.ig_fetch_ns.1 / 1e6 / generated),
            })
        })
        .collect();
        let kv_line = match kv {
            Some((placement, shape, _)) => {
                let read: Vec<String> = tests
                    .iter()
                    .zip(&rows)
                    .filter(|(t, _)| t.n_gen > 0)
                    .map(|(t, row)| {
                        let bytes = row["kv_read_bytes_per_token"].as_f64().unwrap_or_default();
                        let share = |key: &str, what: &str| {
                            row[key]
                                .as_f64()
                                .map(|f| format!(" ({what} {:.1}% in its layers)", 100.0 * f))
                        };
                        let fetched = share("ig_fetched_fraction", "InfiniGen fetched")
                            .or_else(|| share("h2o_kept_fraction", "H2O kept"))
                            .unwrap_or_default();
                        format!(
                            "{} {:.2} MiB{fetched}",
                            test_name(t),
                            bytes / (1 << 20) as f64
                        )
                    })
                    .collect();
                let read = match read.is_empty() {
                    true => "-".to_string(),
                    false => read.join(", "),
                };
                format!(
                    "\nKV cache: {placement} memory ({kv_offload} offload), {} blocks of {} \
                     tokens ({:.1} MiB); KV read per generated token: {read}\n",
                    shape.blocks,
                    hearth_runtime::kv::BLOCK_TOKENS,
                    shape.total_bytes() as f64 / (1 << 20) as f64,
                )
            }
            None => String::new(),
        };
        Self {
            rows,
            model_type,
            backend,
            kv_offload,
            kv_line,
        }
    }
}

/// "pp512", "tg128 @ d2048", "tg32 x8 @ d4096".
fn test_name(t: &Test) -> String {
    let mut name = if t.n_gen == 0 {
        format!("pp{}", t.n_prompt)
    } else {
        format!("tg{}", t.n_gen)
    };
    if t.parallel > 1 {
        name.push_str(&format!(" x{}", t.parallel));
    }
    if t.depth > 0 {
        name.push_str(&format!(" @ d{}", t.depth));
    }
    name
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
