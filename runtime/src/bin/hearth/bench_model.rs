//! `hearth bench -m MODEL`: prompt processing (pp) and text generation (tg) speed, measured
//! the way llama-bench measures them: pp evaluates a prompt of random tokens from an empty
//! cache; tg generates tokens one at a time from an empty cache. Each test runs once to warm
//! up, then `reps` times; JSON uses llama-bench's field names.

use std::time::Instant;

use anyhow::Result;
use hearth_runtime::engine::{BackendKind, Engine};
use hearth_runtime::model::Logits;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::model_args::RunArgs;
use crate::{DeviceChoice, Format};

#[derive(clap::Args, Debug)]
pub struct BenchModelArgs {
    /// Model: a path, or a name in the models directory (`smollm2-135m-instruct`).
    #[arg(short = 'm', long)]
    pub model: Option<String>,
    #[command(flatten)]
    run: RunArgs,
    /// Prompt lengths to test (comma-separated; 0 skips).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    n_prompt: Vec<usize>,
    /// Generation lengths to test (comma-separated; 0 skips).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    n_gen: Vec<usize>,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    #[arg(short = 'o', long = "format", value_enum, default_value_t = Format::Table)]
    format: Format,
}

struct Test {
    n_prompt: usize,
    n_gen: usize,
    samples_ns: Vec<f64>,
}

pub fn run(args: &BenchModelArgs, model: &str, device: &DeviceChoice) -> Result<()> {
    let most = args
        .n_prompt
        .iter()
        .chain(&args.n_gen)
        .copied()
        .max()
        .unwrap_or(1);
    let mut engine = args.run.load(model, device, Some(most.max(1)))?;
    let mut tests: Vec<Test> = Vec::new();
    for &p in args.n_prompt.iter().filter(|&&p| p > 0) {
        tests.push(Test {
            n_prompt: p,
            n_gen: 0,
            samples_ns: Vec::new(),
        });
    }
    for &n in args.n_gen.iter().filter(|&&n| n > 0) {
        tests.push(Test {
            n_prompt: 0,
            n_gen: n,
            samples_ns: Vec::new(),
        });
    }
    let n_vocab = engine.info().config.n_vocab as u32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    for test in &mut tests {
        for rep in 0..=args.reps {
            let tokens: Vec<u32> = (0..test.n_prompt.max(test.n_gen))
                .map(|_| rng.gen_range(0..n_vocab))
                .collect();
            let ns = run_test(&mut engine, test, &tokens)?;
            if rep > 0 {
                test.samples_ns.push(ns);
            }
        }
    }
    crate::model_args::print_profile(&engine);
    report(args, &engine, &tests)
}

/// One repetition: its time in nanoseconds.
fn run_test(engine: &mut Engine, test: &Test, tokens: &[u32]) -> Result<f64> {
    let backend = engine.session_mut().fresh_backend();
    let start = Instant::now();
    if test.n_prompt > 0 {
        backend.forward(&tokens[..test.n_prompt], Logits::Last)?;
    }
    for &t in &tokens[..test.n_gen] {
        backend.forward(&[t], Logits::Last)?;
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

fn report(args: &BenchModelArgs, engine: &Engine, tests: &[Test]) -> Result<()> {
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
    let model_type = format!(
        "{} {}M {}",
        info.architecture,
        (info.n_params as f64 / 1e6).round(),
        weights.join("+")
    );
    let rows: Vec<Value> = tests
        .iter()
        .map(|t| {
            let n = (t.n_prompt + t.n_gen) as f64;
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
                "avg_ns": avg_ns.round() as u64,
                "stddev_ns": stddev_ns.round() as u64,
                "avg_ts": avg_ts,
                "stddev_ts": stddev_ts,
                "samples_ns": t.samples_ns.iter().map(|&v| v.round() as u64).collect::<Vec<_>>(),
                "samples_ts": samples_ts,
            })
        })
        .collect();
    match args.format {
        Format::Json => {
            crate::inspect::emit(&format!("{}\n", serde_json::to_string_pretty(&rows)?))
        }
        Format::Table => {
            let mut out = String::from(
                "| model | size | params | backend | device | test | t/s |\n\
                 | --- | ---: | ---: | --- | --- | ---: | ---: |\n",
            );
            for (t, row) in tests.iter().zip(&rows) {
                let test = if t.n_gen == 0 {
                    format!("pp{}", t.n_prompt)
                } else {
                    format!("tg{}", t.n_gen)
                };
                out.push_str(&format!(
                    "| {} | {:.2} MiB | {:.2} M | {} | {} | {test} | {:.2} ± {:.2} |\n",
                    model_type,
                    info.file_bytes as f64 / (1 << 20) as f64,
                    info.n_params as f64 / 1e6,
                    backend,
                    info.device,
                    row["avg_ts"].as_f64().unwrap_or_default(),
                    row["stddev_ts"].as_f64().unwrap_or_default(),
                ));
            }
            crate::inspect::emit(&out)
        }
    }
}
