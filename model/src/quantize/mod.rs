//! Quantizing a model: a GGUF file's (or a Hugging Face folder's) weight matrices re-encoded in one of Hearth's block
//! formats and written, with all of its metadata, to a new GGUF file.
//!
//! What becomes what:
//! - matrices (2 or more dimensions) take the chosen format; the output head (`output.weight`,
//!   or `token_embd.weight` when the model ties its embeddings) takes `output_format`, by
//!   default Q8 when the chosen format is smaller (the head is where low precision hurts most);
//!   `tensor_formats` patterns override both;
//! - 1-D tensors (norm weights, biases) become F32;
//! - a matrix whose rows are not a whole number of the format's blocks takes the format
//!   [`Format::fitting`] chooses, the rule model loading uses too: the fewest bits per weight
//!   at or above the wanted format's among those whose blocks fit (noted in the report);
//! - a tensor already in its target format is copied byte for byte, never requantized.
//!
//! The input may hold any type `hearth-quant` can dequantize, Hearth's own formats included.
//! Tensors are split into chunks of rows that every core works through in parallel; the file is
//! written with [`GgufWriter::write_atomic`], so a failed or cancelled run leaves no file.

mod convert;
pub mod imatrix;
mod mix;
mod plan;
mod report;

use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use hearth_models::gguf::MetaValue;
use hearth_models::{GgmlType, GgufFile, GgufWriter, TensorInfo};
use hearth_quant::{Format, FORMAT_VERSION, VERSION_KEY};

pub use mix::Mix;
pub use plan::{glob_match, QuantizeOptions};
pub use report::{FormatTotal, QuantizeProgress, QuantizeReport, QuantizeStage, TensorReport};

use crate::error::{Error, Result};

/// Converts `input` (a GGUF file, or a Hugging Face folder converted on the way) to `output`
/// as `opts` say, reporting progress; `progress` returning `false` cancels, and then (as on
/// any error) no output file is left behind.
pub fn quantize_model(
    input: &Path,
    output: &Path,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(QuantizeProgress) -> bool,
) -> Result<QuantizeReport> {
    let start = Instant::now();
    let file = hearth_models::open_model(input)?;
    let (writer, tensors, unmatched_patterns) = quantized(&file, opts, progress)?;
    writer.write_atomic(output)?;
    let file_bytes_after = std::fs::metadata(output).map_or(0, |m| m.len());

    Ok(QuantizeReport {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        tensors,
        file_bytes_before: file.file_size(),
        file_bytes_after,
        unmatched_patterns,
        elapsed: start.elapsed(),
    })
}

/// `file` quantized as `opts` say, held in memory: a model quantized at load
/// (`--load-format`). `progress` returning `false` cancels.
pub fn quantize_in_memory(
    file: &GgufFile,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(QuantizeProgress) -> bool,
) -> Result<GgufFile> {
    let (writer, ..) = quantized(file, opts, progress)?;
    let bytes = writer.to_bytes().map_err(|e| Error::Io {
        path: file.path().to_path_buf(),
        source: e,
    })?;
    Ok(GgufFile::from_bytes(file.path(), bytes)?)
}

/// The quantized file, ready to write (copied tensors borrow `file`), with each tensor's
/// report and the `tensor_formats` patterns that matched nothing.
fn quantized<'f>(
    file: &'f GgufFile,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(QuantizeProgress) -> bool,
) -> Result<(GgufWriter<'f>, Vec<TensorReport>, Vec<String>)> {
    let (plans, unmatched_patterns) = plan::plan(file, opts)?;

    let buffers = convert::convert_all(&plans, file.path(), progress)?;
    let total_bytes: u64 = plans.iter().map(|p| p.info.n_bytes).sum();
    if !progress(QuantizeProgress {
        stage: QuantizeStage::Writing,
        tensor: "",
        done_bytes: total_bytes,
        total_bytes,
    }) {
        return Err(Error::Cancelled);
    }

    let mut writer = GgufWriter::new();
    writer.set_version(file.version())?;
    for (key, value) in file.metadata().iter() {
        writer.set_metadata(key, value.clone());
    }
    if plans.iter().any(|p| p.to.is_private()) {
        writer.set_metadata(VERSION_KEY, MetaValue::U32(FORMAT_VERSION));
    } else {
        writer.remove_metadata(VERSION_KEY);
    }
    if let Some(m) = &opts.imatrix {
        // llama.cpp's record of the importance matrix a file was quantized with.
        let dataset = m.datasets.first().cloned().unwrap_or_default();
        writer.set_metadata("quantize.imatrix.dataset", MetaValue::String(dataset));
        let entries = m.entries.len() as i32;
        writer.set_metadata("quantize.imatrix.entries_count", MetaValue::I32(entries));
        let chunks = m.chunk_count as i32;
        writer.set_metadata("quantize.imatrix.chunks_count", MetaValue::I32(chunks));
    }
    match opts
        .mix
        .map(Mix::file_type)
        .or(llama_file_type(opts.format))
    {
        Some(t) => writer.set_metadata("general.file_type", MetaValue::U32(t)),
        // llama.cpp's file types have no number for Hearth's formats; none beats a wrong one.
        None => drop(writer.remove_metadata("general.file_type")),
    }
    let mut tensors = Vec::with_capacity(plans.len());
    for (p, buffer) in plans.iter().zip(buffers) {
        let data: Cow<[u8]> = match buffer {
            Some(b) => Cow::Owned(b),
            None => Cow::Borrowed(p.data),
        };
        tensors.push(TensorReport {
            name: p.info.name.clone(),
            shape: p.info.shape.clone(),
            from: p.info.ggml_type,
            to: p.to,
            bytes_before: p.info.n_bytes,
            bytes_after: data.len() as u64,
            note: p.note.clone(),
        });
        writer.add_tensor(&p.info.name, GgmlType::from(p.to), &p.info.shape, data)?;
    }
    Ok((writer, tensors, unmatched_patterns))
}

/// llama.cpp's `general.file_type` (`llama_ftype`) for files whose matrices are mostly
/// `format`; `None` for Hearth's own formats, which it has no number for.
fn llama_file_type(format: Format) -> Option<u32> {
    match format {
        Format::F32 => Some(0),
        Format::F16 => Some(1),
        Format::Q4_0 => Some(2),
        Format::Q4 => Some(3),
        Format::Q8 => Some(7),
        Format::Q5_0 => Some(8),
        Format::Q5_1 => Some(9),
        Format::IQ4_NL => Some(25),
        Format::IQ4_XS => Some(30),
        _ => None,
    }
}

fn tensor_error(path: &Path, info: &TensorInfo, reason: String) -> Error {
    Error::Tensor {
        path: path.to_path_buf(),
        tensor: info.name.clone(),
        reason,
    }
}
