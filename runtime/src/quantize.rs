//! Quantizing a model file: a GGUF file's weight matrices re-encoded in one of Hearth's block
//! formats and written, with all of its metadata, to a new GGUF file.
//!
//! What becomes what:
//! - matrices (2 or more dimensions) take the chosen format; the output head (`output.weight`,
//!   or `token_embd.weight` when the model ties its embeddings) takes `output_format`, by
//!   default Q8 when the chosen format is smaller (the head is where low precision hurts most);
//!   `tensor_formats` patterns override both;
//! - 1-D tensors (norm weights, biases) become F32;
//! - a matrix whose rows are not a whole number of the format's blocks takes the format whose
//!   bits per weight are closest among those whose blocks fit its rows (noted in the report);
//! - a tensor already in its target format is copied byte for byte, never requantized.
//!
//! The input may hold any type `hearth-quant` can dequantize, Hearth's own formats included.
//! Tensors are split into chunks of rows that every core works through in parallel; the file is
//! written with [`GgufWriter::write_atomic`], so a failed or cancelled run leaves no file.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hearth_models::gguf::MetaValue;
use hearth_models::{resolve_gguf, GgmlType, GgufFile, GgufWriter, TensorInfo};
use hearth_quant::{BlockType, Format, FORMAT_VERSION, VERSION_KEY};

use crate::error::{Error, Result};

/// What to quantize to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantizeOptions {
    /// Format of the weight matrices.
    pub format: Format,
    /// Format of the output head; `None`: Q8 when `format` has fewer bits per weight than Q8,
    /// else `format`.
    pub output_format: Option<Format>,
    /// (glob pattern, format) overrides for matrices whose names match; `*` matches any run
    /// of characters. Later entries win, and every entry wins over `format` and
    /// `output_format`.
    pub tensor_formats: Vec<(String, Format)>,
}

impl QuantizeOptions {
    /// Every matrix in `format`, the head at its default.
    pub fn new(format: Format) -> Self {
        QuantizeOptions {
            format,
            output_format: None,
            tensor_formats: Vec::new(),
        }
    }

    /// The head's format when no pattern names it.
    pub fn head_format(&self) -> Format {
        self.output_format.unwrap_or(
            if self.format.bits_per_weight() < Format::Q8.bits_per_weight() {
                Format::Q8
            } else {
                self.format
            },
        )
    }
}

/// Which part of the work is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantizeStage {
    /// Tensors are being converted; `done_bytes` counts input tensor bytes.
    Quantizing,
    /// All tensors are converted and the file is being written.
    Writing,
}

/// Where quantizing stands, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct QuantizeProgress<'a> {
    pub stage: QuantizeStage,
    /// The tensor a chunk of which just finished.
    pub tensor: &'a str,
    /// Bytes of input tensor data converted so far, out of `total_bytes`.
    pub done_bytes: u64,
    pub total_bytes: u64,
}

/// What happened to one tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorReport {
    pub name: String,
    /// ggml order: `shape[0]` is a row.
    pub shape: Vec<u64>,
    /// Type in the input file.
    pub from: GgmlType,
    /// Format in the output file.
    pub to: Format,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Why the tensor did not get the format it was meant to (rows that do not fit its
    /// blocks), or `None`.
    pub note: Option<String>,
}

impl TensorReport {
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// The tensors of one format in the output.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FormatTotal {
    pub format: Format,
    pub tensors: usize,
    pub elements: u64,
    pub bytes: u64,
}

impl FormatTotal {
    pub fn bits_per_weight(&self) -> f64 {
        bits_per_weight(self.bytes, self.elements)
    }
}

/// What [`quantize_model`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizeReport {
    pub input: PathBuf,
    pub output: PathBuf,
    /// Every tensor, in file order.
    pub tensors: Vec<TensorReport>,
    /// Sizes of the whole files.
    pub file_bytes_before: u64,
    pub file_bytes_after: u64,
    /// Patterns of [`QuantizeOptions::tensor_formats`] that matched no matrix.
    pub unmatched_patterns: Vec<String>,
    pub elapsed: Duration,
}

impl QuantizeReport {
    pub fn n_elements(&self) -> u64 {
        self.tensors.iter().map(TensorReport::n_elements).sum()
    }

    /// Tensor data bytes in the input.
    pub fn bytes_before(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes_before).sum()
    }

    /// Tensor data bytes in the output.
    pub fn bytes_after(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes_after).sum()
    }

    pub fn bits_per_weight_before(&self) -> f64 {
        bits_per_weight(self.bytes_before(), self.n_elements())
    }

    pub fn bits_per_weight_after(&self) -> f64 {
        bits_per_weight(self.bytes_after(), self.n_elements())
    }

    /// Output totals per format, most bytes first.
    pub fn by_format(&self) -> Vec<FormatTotal> {
        let mut totals: Vec<FormatTotal> = Vec::new();
        for t in &self.tensors {
            let i = match totals.iter().position(|f| f.format == t.to) {
                Some(i) => i,
                None => {
                    totals.push(FormatTotal {
                        format: t.to,
                        tensors: 0,
                        elements: 0,
                        bytes: 0,
                    });
                    totals.len() - 1
                }
            };
            totals[i].tensors += 1;
            totals[i].elements += t.n_elements();
            totals[i].bytes += t.bytes_after;
        }
        totals.sort_by_key(|t| std::cmp::Reverse(t.bytes));
        totals
    }
}

fn bits_per_weight(bytes: u64, elements: u64) -> f64 {
    if elements == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / elements as f64
    }
}

/// True when `name` matches `pattern`, where `*` stands for any run of characters (dots
/// included) and every other character for itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    // `split` always yields at least one part.
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No `*`: the whole name must be the pattern.
        return rest.is_empty();
    };
    // Each middle part as early as possible leaves the most room for the rest.
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The format closest in bits per weight to `wanted` whose blocks fit rows of `row` values,
/// the more precise of two equally close ones. F32 fits every row, so there always is one.
pub fn fitting_format(wanted: Format, row: u64) -> Format {
    let fits = |f: &Format| row % f.block_size() as u64 == 0;
    if fits(&wanted) {
        return wanted;
    }
    let distance = |f: &Format| (f.bits_per_weight() - wanted.bits_per_weight()).abs();
    Format::ALL
        .iter()
        .copied()
        .filter(fits)
        .min_by(|a, b| {
            distance(a)
                .total_cmp(&distance(b))
                .then(b.bits_per_weight().total_cmp(&a.bits_per_weight()))
        })
        .unwrap_or(Format::F32)
}

/// One tensor's fate, decided before any work starts.
struct Plan<'f> {
    info: &'f TensorInfo,
    /// The input tensor's bytes.
    data: &'f [u8],
    to: Format,
    note: Option<String>,
}

impl Plan<'_> {
    /// The input bytes go to the output as they are.
    fn is_copy(&self) -> bool {
        self.info.ggml_type == GgmlType::from(self.to)
    }

    /// Values per row: the unit tensors are split at.
    fn row_len(&self) -> u64 {
        match self.info.shape.as_slice() {
            [] | [_] => self.info.n_elements().max(1),
            [row, ..] => *row,
        }
    }
}

/// Decides every tensor's output format; also returns the patterns that matched nothing.
fn plan<'f>(file: &'f GgufFile, opts: &QuantizeOptions) -> Result<(Vec<Plan<'f>>, Vec<String>)> {
    let head = head_tensor(file);
    let mut matched = vec![false; opts.tensor_formats.len()];
    let mut plans = Vec::with_capacity(file.tensors().len());
    for info in file.tensors() {
        let data = file.tensor_data(info)?;
        let readable = info.ggml_type.hearth_format().is_some()
            || BlockType::from_ggml_id(info.ggml_type.id()).is_some();
        if !readable {
            return Err(tensor_error(
                file.path(),
                info,
                format!("type {} cannot be read for quantizing", info.ggml_type),
            ));
        }
        let is_matrix = info.shape.len() >= 2;
        if !is_matrix {
            plans.push(Plan {
                info,
                data,
                to: Format::F32,
                note: None,
            });
            continue;
        }
        let mut wanted = if head.as_deref() == Some(info.name.as_str()) {
            opts.head_format()
        } else {
            opts.format
        };
        for (i, (pattern, format)) in opts.tensor_formats.iter().enumerate() {
            if glob_match(pattern, &info.name) {
                wanted = *format;
                matched[i] = true;
            }
        }
        let row = info.shape[0];
        let to = fitting_format(wanted, row);
        let note = (to != wanted).then(|| {
            format!(
                "rows of {row} values are not whole {wanted} blocks of {}; stored as {to}",
                wanted.block_size()
            )
        });
        plans.push(Plan {
            info,
            data,
            to,
            note,
        });
    }
    let unmatched = opts
        .tensor_formats
        .iter()
        .zip(matched)
        .filter(|(_, m)| !m)
        .map(|((p, _), _)| p.clone())
        .collect();
    Ok((plans, unmatched))
}

/// The name of the output head: what the model spec resolves it to, or by ggml's naming
/// convention (`output.weight`, else the tied `token_embd.weight`) for an architecture
/// without a spec.
fn head_tensor(file: &GgufFile) -> Option<String> {
    if let Ok(model) = resolve_gguf(file) {
        return Some(model.tensors.output);
    }
    ["output.weight", "token_embd.weight"]
        .into_iter()
        .find(|name| file.tensor(name).is_some())
        .map(str::to_string)
}

/// One chunk of rows of one tensor: read `src`, write `dst`.
struct Job<'a> {
    tensor: usize,
    from: GgmlType,
    to: Format,
    src: &'a [u8],
    dst: &'a mut [u8],
    n_values: usize,
}

impl Job<'_> {
    /// Dequantizes the chunk into `scratch` and encodes it into `dst`.
    fn run(self, scratch: &mut Vec<f32>) -> std::result::Result<(), String> {
        scratch.clear();
        scratch.resize(self.n_values, 0.0);
        let read = match self.from.hearth_format() {
            Some(f) => f.dequantize(self.src, scratch),
            None => hearth_quant::dequantize_ggml(self.from.id(), self.src, scratch),
        };
        read.map_err(|e| format!("reading {}: {e}", self.from))?;
        self.to
            .quantize(scratch, self.dst)
            .map_err(|e| format!("encoding as {}: {e}", self.to))
    }
}

/// Values per job: big enough that handing out jobs costs nothing, small enough that progress
/// moves and a cancel is noticed within a fraction of a second.
const CHUNK_VALUES: u64 = 1 << 18;

/// Converts `input` to `output` as `opts` say, reporting progress; `progress` returning
/// `false` cancels, and then (as on any error) no output file is left behind.
pub fn quantize_model(
    input: &Path,
    output: &Path,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(QuantizeProgress) -> bool,
) -> Result<QuantizeReport> {
    let start = Instant::now();
    let file = GgufFile::open(input)?;
    let (plans, unmatched_patterns) = plan(&file, opts)?;

    // One output buffer per converted tensor; copied tensors borrow the input mapping.
    let mut buffers: Vec<Option<Vec<u8>>> = Vec::with_capacity(plans.len());
    for p in &plans {
        if p.is_copy() {
            buffers.push(None);
            continue;
        }
        let n = usize::try_from(p.info.n_elements())
            .ok()
            .and_then(|n| p.to.bytes_for(n))
            .ok_or_else(|| tensor_error(input, p.info, format!("too large for {}", p.to)))?;
        buffers.push(Some(vec![0u8; n]));
    }

    let total_bytes: u64 = plans.iter().map(|p| p.info.n_bytes).sum();
    let mut done_bytes: u64 = plans
        .iter()
        .filter(|p| p.is_copy())
        .map(|p| p.info.n_bytes)
        .sum();
    let jobs = split_into_jobs(&plans, &mut buffers, input)?;

    let cancelled = AtomicBool::new(false);
    let queue = Mutex::new(jobs.into_iter());
    let (tx, rx) = mpsc::channel::<(usize, u64, std::result::Result<(), String>)>();
    let n_threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut failure: Option<Error> = None;
    std::thread::scope(|s| {
        for _ in 0..n_threads {
            let tx = tx.clone();
            let (queue, cancelled) = (&queue, &cancelled);
            s.spawn(move || {
                let mut scratch = Vec::new();
                while !cancelled.load(Ordering::Relaxed) {
                    let job = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
                    let Some(job) = job else { break };
                    let (tensor, bytes) = (job.tensor, job.src.len() as u64);
                    let result = job.run(&mut scratch);
                    if tx.send((tensor, bytes, result)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        // The caller's callback runs here, on the calling thread, as chunks finish.
        for (tensor, bytes, result) in rx {
            if failure.is_some() {
                continue;
            }
            let info = plans[tensor].info;
            if let Err(reason) = result {
                failure = Some(tensor_error(input, info, reason));
            } else {
                done_bytes += bytes;
                let go_on = progress(QuantizeProgress {
                    stage: QuantizeStage::Quantizing,
                    tensor: &info.name,
                    done_bytes,
                    total_bytes,
                });
                if !go_on {
                    failure = Some(Error::Cancelled);
                }
            }
            if failure.is_some() {
                cancelled.store(true, Ordering::Relaxed);
            }
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
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
    match llama_file_type(opts.format) {
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

/// Cuts every converted tensor into jobs of whole rows, each writing its own part of the
/// tensor's output buffer.
fn split_into_jobs<'a>(
    plans: &[Plan<'a>],
    buffers: &'a mut [Option<Vec<u8>>],
    input: &Path,
) -> Result<Vec<Job<'a>>> {
    let mut jobs = Vec::new();
    for (i, (p, buffer)) in plans.iter().zip(buffers.iter_mut()).enumerate() {
        let Some(buffer) = buffer else { continue };
        let row = p.row_len();
        let n = p.info.n_elements();
        if n == 0 {
            continue;
        }
        // Whole rows are whole blocks of both types: the reader checked the input's, and
        // `fitting_format` the output's.
        let too_large = || tensor_error(input, p.info, "rows too large to convert".into());
        let src_row = p
            .info
            .ggml_type
            .bytes_for(row)
            .and_then(|b| usize::try_from(b).ok());
        let row = usize::try_from(row).map_err(|_| too_large())?;
        let (Some(src_row), Some(dst_row)) = (src_row, p.to.bytes_for(row)) else {
            return Err(too_large());
        };
        let rows_per_job = (CHUNK_VALUES as usize / row).max(1);
        let chunks = p
            .data
            .chunks(rows_per_job * src_row)
            .zip(buffer.chunks_mut(rows_per_job * dst_row));
        for (src, dst) in chunks {
            jobs.push(Job {
                tensor: i,
                from: p.info.ggml_type,
                to: p.to,
                n_values: src.len() / src_row * row,
                src,
                dst,
            });
        }
    }
    Ok(jobs)
}

/// llama.cpp's `general.file_type` (`llama_ftype`) for files whose matrices are mostly
/// `format`; `None` for Hearth's own formats, which it has no number for.
fn llama_file_type(format: Format) -> Option<u32> {
    match format {
        Format::F32 => Some(0),
        Format::F16 => Some(1),
        Format::Q4 => Some(3),
        Format::Q8 => Some(7),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let yes = [
            ("output.weight", "output.weight"),
            ("*", "anything.at.all"),
            ("*", ""),
            ("blk.*.ffn_down.weight", "blk.12.ffn_down.weight"),
            ("*ffn*", "blk.0.ffn_up.weight"),
            ("blk.1*", "blk.1.attn_q.weight"),
            ("blk.1*", "blk.15.attn_q.weight"),
            ("*.weight", "token_embd.weight"),
            ("a*b*c", "abc"),
            ("a*b*c", "a_b_b_c_c"),
            ("**x", "x"),
        ];
        let no = [
            ("output.weight", "output.weight2"),
            ("output", "output.weight"),
            ("blk.*.ffn_down.weight", "blk.0.ffn_up.weight"),
            ("*.bias", "token_embd.weight"),
            ("a*b*c", "acb"),
            ("ab*ba", "aba"),
            ("x*", ""),
        ];
        for (p, n) in yes {
            assert!(glob_match(p, n), "{p} should match {n}");
        }
        for (p, n) in no {
            assert!(!glob_match(p, n), "{p} should not match {n}");
        }
    }

    #[test]
    fn head_defaults_to_q8_below_eight_bits() {
        assert_eq!(QuantizeOptions::new(Format::Q3H).head_format(), Format::Q8);
        assert_eq!(QuantizeOptions::new(Format::Q6).head_format(), Format::Q8);
        assert_eq!(QuantizeOptions::new(Format::Q8).head_format(), Format::Q8);
        assert_eq!(QuantizeOptions::new(Format::F16).head_format(), Format::F16);
        let mut o = QuantizeOptions::new(Format::Q3H);
        o.output_format = Some(Format::Q4);
        assert_eq!(o.head_format(), Format::Q4);
    }

    #[test]
    fn formats_fall_back_to_the_closest_that_fits() {
        // Rows of 64 fit every format.
        for f in Format::ALL {
            assert_eq!(fitting_format(f, 64), f);
        }
        // Rows of 96 fit the 32-value formats only; Q3 has Q3H's bits per weight.
        assert_eq!(fitting_format(Format::Q3H, 96), Format::Q3);
        assert_eq!(fitting_format(Format::Q4B64, 96), Format::Q4);
        assert_eq!(fitting_format(Format::Q5, 96), Format::Q4);
        // Rows of 40 fit no block: only the plain floats remain, and F16 is closer.
        assert_eq!(fitting_format(Format::Q8, 40), Format::F16);
        assert_eq!(fitting_format(Format::Q2, 40), Format::F16);
        // Every fallback fits.
        for f in Format::ALL {
            for row in [1, 8, 32, 48, 96, 160, 576] {
                assert_eq!(row % fitting_format(f, row).block_size() as u64, 0);
            }
        }
    }
}
