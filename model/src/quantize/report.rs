//! What quantizing reports: progress while it runs, and per tensor and per format what it did.

use std::path::PathBuf;
use std::time::Duration;

use hearth_models::GgmlType;
use hearth_quant::Format;

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
