//! `hearth imatrix`: an importance matrix for `hearth quantize --imatrix` (and
//! `llama-quantize --imatrix`): the mean square of every matrix input column over a text.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use hearth_tools::imatrix::{collect, CollectOptions};

use crate::model_args::ModelsDirArg;
use crate::output::step_bar;

#[derive(clap::Args, Debug)]
pub struct ImatrixArgs {
    /// Model to run: a path, or a name in the models directory.
    #[arg(short = 'm', long)]
    model: String,
    #[command(flatten)]
    models: ModelsDirArg,
    /// The calibration text.
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Where to write the matrix (llama.cpp's GGUF form).
    #[arg(
        short = 'o',
        long,
        value_name = "OUT.gguf",
        default_value = "imatrix.gguf"
    )]
    output: PathBuf,
    /// Tokens per window; each runs from an empty cache.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx: usize,
    /// Run at most this many windows (-1: the whole text).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    chunks: i64,
}

pub fn run(args: &ImatrixArgs) -> Result<()> {
    let model = args.models.resolve(&args.model)?;
    if model.is_dir() {
        bail!(
            "{} is a model directory; imatrix reads GGUF files",
            model.display()
        );
    }
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let opts = CollectOptions {
        window: args.ctx,
        max_windows: usize::try_from(args.chunks).ok(),
        dataset: args.file.file_name().map_or_else(
            || args.file.display().to_string(),
            |n| n.to_string_lossy().into(),
        ),
    };
    let bar = step_bar(0, "imatrix");
    let matrix = collect(&model, &text, &opts, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        true
    })?;
    bar.finish_and_clear();
    matrix.write(&args.output)?;
    eprintln!(
        "{}: {} matrices from {} windows of {} tokens of {}",
        args.output.display(),
        matrix.entries.len(),
        matrix.chunk_count,
        matrix.chunk_size,
        args.file.display()
    );
    Ok(())
}
