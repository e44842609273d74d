//! `hearth convert`: a Hugging Face folder (config.json, safetensors weights, tokenizer files)
//! written as the GGUF file llama.cpp's converter would write, which llama.cpp and Hearth both
//! load; `--format` quantizes it on the way, as `hearth quantize` does.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use hearth_models::hf::{is_model_folder, HfFolder};

use super::quantize::{parse_target, quantize_to, Target};
use crate::model_args::ModelsDirArg;
use crate::output::{emit, size};

#[derive(clap::Args, Debug)]
pub struct ConvertArgs {
    /// The folder (config.json, model.safetensors or the shards model.safetensors.index.json
    /// lists, tokenizer.json or tokenizer.model), or its name in the models directory.
    #[arg(value_name = "DIR")]
    dir: String,
    #[command(flatten)]
    models: ModelsDirArg,
    /// Where to write the GGUF file (replaced if it exists).
    #[arg(short = 'o', long, value_name = "OUT.gguf")]
    output: PathBuf,
    /// Format of the weight matrices: a format or one of llama.cpp's mixes, as `hearth
    /// quantize --format` takes [default: as stored, f32, f16 or bf16; norms and biases f32].
    #[arg(long, value_parser = parse_target, value_name = "FMT")]
    format: Option<Target>,
}

pub fn run(args: &ConvertArgs) -> Result<()> {
    let dir = args.models.resolve(&args.dir)?;
    if !is_model_folder(&dir) {
        bail!(
            "{} is not a Hugging Face model folder (config.json beside model.safetensors, \
             model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json)",
            dir.display()
        );
    }
    if let Some(target) = args.format {
        return quantize_to(&dir, &args.output, &target.options());
    }
    let start = Instant::now();
    let folder = HfFolder::open(&dir)?;
    let gguf = folder
        .to_gguf()
        .with_context(|| format!("converting {}", dir.display()))?;
    gguf.write_atomic(&args.output)?;
    let written = std::fs::metadata(&args.output).map_or(0, |m| m.len());
    emit(&format!(
        "{} ({}) -> {} ({}) in {:.1} s\n",
        dir.display(),
        folder.architecture(),
        args.output.display(),
        size(written),
        start.elapsed().as_secs_f64()
    ))
}
