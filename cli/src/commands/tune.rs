//! `hearth tune`: times the kernels' variants on a device for a model's products and keeps
//! the fastest for every later run on that device and driver (see `hearth_kernels::tune`).

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result};
use hearth_kernels::tune::{TuneOptions, TuneProgress, Tuning};
use hearth_model::ModelConfig;
use indicatif::{ProgressBar, ProgressStyle};

use crate::model_args::ModelsDirArg;
use crate::output::{emit, emit_json, Format};
use crate::DeviceChoice;

#[derive(clap::Args)]
pub struct TuneArgs {
    /// Model whose products are tuned: a path, or a name in the models directory.
    #[arg(
        short,
        long,
        required_unless_present = "synthetic",
        conflicts_with = "synthetic"
    )]
    model: Option<String>,
    /// Instead of a model file, a model shape (`hearth bench --synthetic list`).
    #[arg(long, value_name = "PRESET")]
    synthetic: Option<String>,
    /// Format of the synthetic model's weight matrices.
    #[arg(long, value_name = "FMT", default_value = "Q4", requires = "synthetic")]
    synthetic_format: hearth_quant::Format,
    /// Try the wider set of variants (subgroups per workgroup as well as chunks, more rows).
    #[arg(long)]
    full: bool,
    /// Measure this model's products again, where they are tuned already.
    #[arg(long)]
    again: bool,
    /// Stop starting new variants after this many seconds [default: no limit].
    #[arg(long, value_name = "SECONDS")]
    budget: Option<u64>,
    #[command(flatten)]
    models: ModelsDirArg,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: &TuneArgs, choice: &DeviceChoice) -> Result<()> {
    let file = match (&args.model, &args.synthetic) {
        (Some(model), _) => {
            let path = args.models.resolve(model)?;
            hearth_models::open_model(&path)
                .with_context(|| format!("opening {}", path.display()))?
        }
        (None, Some(name)) => {
            let preset = hearth_models::synthetic::preset(name)?;
            preset.build(args.synthetic_format)?
        }
        (None, None) => anyhow::bail!("name a model (-m) or a shape (--synthetic)"),
    };
    let model = hearth_models::resolve_gguf(&file)?;
    let config = ModelConfig::from_resolved(&file, &model)?;
    let products = hearth_engine::tune::products(&file, &model, &config);
    let device = choice.open()?;
    let dir = hearth_models::user_tuning_dir()
        .context("no home directory to keep the tuning in (or HEARTH_TUNE=0)")?;
    let info = device.info();
    let mut tuning = Tuning::load(&dir, info).unwrap_or_else(|| Tuning::for_device(info));
    if args.again {
        tuning.forget(&products);
    }
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("tuning {msg} [{bar:30}] {pos}/{len} variants")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(info.name.clone());
    let options = TuneOptions {
        full: args.full,
        budget: args.budget.map_or(Duration::MAX, Duration::from_secs),
    };
    let mut progress = |p: TuneProgress| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
    };
    tuning.tune(&device, &products, options, &mut progress)?;
    bar.finish_and_clear();
    let file = tuning
        .save(&dir)
        .with_context(|| format!("keeping the tuning in {}", dir.display()))?;
    match args.format {
        Format::Json => emit_json(&tuning),
        Format::Table => emit(&table(&tuning, &file.display().to_string())),
    }
}

fn table(tuning: &Tuning, file: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} ({}): {file}", tuning.device, tuning.driver);
    let _ = writeln!(
        out,
        "{:<8} {:>6} {:>12} {:>12} {:>8}  chosen (units, chunks, rows per lane)",
        "format", "tokens", "default us", "best us", "tried"
    );
    for e in &tuning.matvec {
        let default = e.tried.first().map_or(0.0, |t| t.1);
        let best = e
            .tried
            .iter()
            .find(|t| t.0 == e.chosen)
            .map_or(default, |t| t.1);
        let c = e.chosen;
        let _ = writeln!(
            out,
            "{:<8} {:>6} {:>12.1} {:>12.1} {:>8}  {}, {}, {}",
            e.format,
            e.tokens,
            default,
            best,
            e.tried.len(),
            c.units,
            c.lane_chunks,
            c.rb
        );
    }
    out
}
