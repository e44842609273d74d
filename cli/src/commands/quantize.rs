//! `hearth quantize`: a model's weight matrices re-encoded in one of Hearth's formats, written
//! to a new GGUF file, with a progress bar, Ctrl-C to cancel (leaving no file) and a summary.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use hearth_model::quantize::imatrix::ImportanceMatrix;
use hearth_model::quantize::{quantize_model, Mix, QuantizeOptions, QuantizeReport, QuantizeStage};
use hearth_quant::Format;
use indicatif::{ProgressBar, ProgressStyle};

use crate::model_args::{parse_format, ModelsDirArg};
use crate::output::{emit, size};

#[derive(clap::Args, Debug)]
#[command(after_help = formats_help())]
pub struct QuantizeArgs {
    /// Model to quantize: a GGUF file or Hugging Face folder, or a name in the models
    /// directory (`smollm2-135m-instruct`).
    #[arg(short = 'm', long)]
    model: String,
    #[command(flatten)]
    models: ModelsDirArg,
    /// Where to write the quantized model (a GGUF file; replaced if it exists).
    #[arg(short = 'o', long, value_name = "OUT.gguf")]
    output: PathBuf,
    /// Format of the weight matrices, or one of llama.cpp's mixes (see the lists below).
    #[arg(long, value_parser = parse_target, value_name = "FMT")]
    format: Target,
    /// Format of the output head (`output.weight`, or `token_embd.weight` when the model ties
    /// its embeddings) [default: Q8 when --format has fewer bits, else --format].
    #[arg(long, value_parser = parse_format, value_name = "FMT")]
    keep_output: Option<Format>,
    /// Format of the matrices whose names match PATTERN, where `*` matches anything
    /// (`blk.*.ffn_down.weight=Q6`). Repeatable; later ones win, and all win over --format
    /// and --keep-output.
    #[arg(long = "tensor-format", value_parser = parse_tensor_format, value_name = "PATTERN=FMT")]
    tensor_formats: Vec<(String, Format)>,
    /// An importance matrix (`hearth imatrix`, or llama.cpp's `llama-imatrix` file): the
    /// k-quants, the i-quants, Q4_0..Q5_1 and Hearth's own Q2..Q6 (not Q8, MXFP4, the ternary
    /// types or the float ones) weigh each value's rounding error by its column's importance.
    /// The 1- and 2-bit i-quant mixes (IQ1_S..IQ2_M) and Q2_K_S need one, as llama-quantize
    /// does.
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
}

/// What `--format` names: one format for every matrix, or a llama.cpp mix.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    Format(Format),
    Mix(Mix),
}

/// A mix name first: names llama.cpp uses for file types (`Q4_0`, `Q6_K`) make the file
/// llama.cpp would.
pub(crate) fn parse_target(s: &str) -> Result<Target, String> {
    if let Some(mix) = Mix::from_name(s) {
        return Ok(Target::Mix(mix));
    }
    parse_format(s).map(Target::Format).map_err(|e| {
        let mixes: Vec<_> = Mix::ALL.iter().map(|m| m.name()).collect();
        format!("{e}; llama.cpp mixes: {}", mixes.join(", "))
    })
}

/// The formats with their sizes, for `--help`.
fn formats_help() -> String {
    let mut s = String::from("Formats:\n  FMT     bits/weight  values/block\n");
    for f in Format::ALL {
        let _ = writeln!(
            s,
            "  {:6}  {:>11.2}  {:>12}",
            f.name(),
            f.bits_per_weight(),
            f.block_size()
        );
    }
    let mixes: Vec<_> = Mix::ALL.iter().map(|m| m.name()).collect();
    let _ = writeln!(
        s,
        "\nllama.cpp's mixes (files llama.cpp loads; its per-tensor rules and fallbacks):\n  {}",
        mixes.join(", ")
    );
    s.push_str(
        "\n1-D tensors (norms, biases) are stored as F32. A matrix whose rows are not whole \
         blocks of its format takes the closest format that fits, and the summary says so. \
         Files holding Q2, Q3, Q3H, Q4B64, Q5 or Q6 are readable by Hearth only; Q4 and Q8 are \
         GGUF's Q4_1 and Q8_0, and Q2_K..Q6_K GGUF's k-quants (rows of 256).\n\nExample:\n  hearth quantize -m smollm2-135m-instruct -o \
         smollm2.Q3H.gguf --format Q3H --tensor-format 'blk.*.ffn_down.weight=Q4'",
    );
    s
}

fn parse_tensor_format(s: &str) -> Result<(String, Format), String> {
    let Some((pattern, format)) = s.rsplit_once('=') else {
        return Err(format!("expected PATTERN=FMT, found `{s}`"));
    };
    if pattern.is_empty() {
        return Err(format!("empty tensor name pattern in `{s}`"));
    }
    Ok((pattern.to_string(), parse_format(format)?))
}

pub fn run(args: &QuantizeArgs) -> Result<()> {
    let input = args.models.resolve(&args.model)?;
    let base = args.format.options();
    let imatrix = match &args.imatrix {
        Some(path) => Some(Arc::new(ImportanceMatrix::read(path)?)),
        None => None,
    };
    let opts = QuantizeOptions {
        output_format: args.keep_output,
        tensor_formats: args.tensor_formats.clone(),
        imatrix,
        ..base
    };
    quantize_to(&input, &args.output, &opts)
}

impl Target {
    pub(crate) fn options(self) -> QuantizeOptions {
        match self {
            Target::Format(format) => QuantizeOptions::new(format),
            Target::Mix(mix) => QuantizeOptions::mix(mix),
        }
    }
}

/// Quantizes `input` to `output` with a progress bar, Ctrl-C cancelling, and prints the
/// summary.
pub(crate) fn quantize_to(input: &Path, output: &Path, opts: &QuantizeOptions) -> Result<()> {
    // Ctrl-C asks the quantizer to stop; it then removes what it wrote and returns.
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let interrupted = interrupted.clone();
        ctrlc::set_handler(move || interrupted.store(true, Ordering::SeqCst))?;
    }

    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template(
            "{prefix} {msg:24!} [{bar:30}] {bytes}/{total_bytes} ({elapsed}, eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix("quantizing");
    bar.enable_steady_tick(Duration::from_millis(200));
    let result = quantize_model(input, output, opts, &mut |p| {
        bar.set_length(p.total_bytes);
        bar.set_position(p.done_bytes);
        match p.stage {
            QuantizeStage::Quantizing => bar.set_message(p.tensor.to_string()),
            QuantizeStage::Writing => {
                bar.set_prefix("writing");
                bar.set_message(output.display().to_string());
            }
        }
        !interrupted.load(Ordering::SeqCst)
    });
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(hearth_engine::Error::Cancelled) => {
            bail!("cancelled; {} was not written", output.display())
        }
        Err(e) => return Err(e.into()),
    };
    for pattern in &report.unmatched_patterns {
        eprintln!("warning: --tensor-format pattern `{pattern}` matched no matrix");
    }
    emit(&summary(&report))
}

/// The table printed at the end: tensors, weights, bytes and bits per weight by format.
fn summary(r: &QuantizeReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}) -> {} ({}) in {:.1} s\n",
        r.input.display(),
        size(r.file_bytes_before),
        r.output.display(),
        size(r.file_bytes_after),
        r.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "{:7} {:>7} {:>12} {:>10} {:>11}",
        "format", "tensors", "weights", "size", "bits/weight"
    );
    for f in r.by_format() {
        let _ = writeln!(
            out,
            "{:7} {:>7} {:>12} {:>10} {:>11.2}",
            f.format.name(),
            f.tensors,
            f.elements,
            size(f.bytes),
            f.bits_per_weight()
        );
    }
    let _ = writeln!(
        out,
        "{:7} {:>7} {:>12} {:>10} {:>11.2}",
        "total",
        r.tensors.len(),
        r.n_elements(),
        size(r.bytes_after()),
        r.bits_per_weight_after()
    );
    let _ = writeln!(
        out,
        "{:7} {:>7} {:>12} {:>10} {:>11.2}",
        "input",
        r.tensors.len(),
        r.n_elements(),
        size(r.bytes_before()),
        r.bits_per_weight_before()
    );
    let notes: Vec<_> = r.tensors.iter().filter(|t| t.note.is_some()).collect();
    if !notes.is_empty() {
        let _ = writeln!(out, "\nnotes");
        for t in notes {
            let _ = writeln!(out, "  {}: {}", t.name, t.note.as_deref().unwrap_or(""));
        }
    }
    out
}
