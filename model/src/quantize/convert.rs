//! Converting tensors: each planned conversion cut into chunks of whole rows that every core
//! works through, progress reported on the calling thread as chunks finish.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, PoisonError};

use hearth_models::GgmlType;
use hearth_quant::{Format, Rounding};

use super::plan::Plan;
use super::{tensor_error, QuantizeProgress, QuantizeStage};
use crate::error::{Error, Result};

/// Converts every planned tensor that is not a copy, returning its output bytes (`None` for
/// copies, which borrow the input mapping). `progress` returning `false` cancels.
pub(super) fn convert_all(
    plans: &[Plan],
    input: &Path,
    progress: &mut dyn FnMut(QuantizeProgress) -> bool,
) -> Result<Vec<Option<Vec<u8>>>> {
    // One output buffer per converted tensor; copied tensors borrow the input mapping.
    let mut buffers: Vec<Option<Vec<u8>>> = Vec::with_capacity(plans.len());
    for p in plans {
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
    let jobs = split_into_jobs(plans, &mut buffers, input)?;

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
    match failure {
        Some(e) => Err(e),
        None => Ok(buffers),
    }
}

/// One chunk of rows of one tensor: read `src`, write `dst`.
struct Job<'a> {
    tensor: usize,
    from: GgmlType,
    to: Format,
    src: &'a [u8],
    dst: &'a mut [u8],
    n_values: usize,
    /// Per column, when an importance matrix guides the quantizer.
    importance: Option<&'a [f32]>,
    rounding: Rounding,
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
        match self.importance {
            Some(w) if self.to.uses_importance() => self.to.quantize_weighted(scratch, self.dst, w),
            _ => self.to.quantize_with(scratch, self.dst, self.rounding),
        }
        .map_err(|e| format!("encoding as {}: {e}", self.to))
    }
}

/// Values per job: big enough that handing out jobs costs nothing, small enough that progress
/// moves and a cancel is noticed within a fraction of a second.
const CHUNK_VALUES: u64 = 1 << 18;

/// Cuts every converted tensor into jobs of whole rows, each writing its own part of the
/// tensor's output buffer.
fn split_into_jobs<'a>(
    plans: &'a [Plan<'a>],
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
        // `Format::fitting` the output's.
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
                importance: p.importance.as_deref(),
                rounding: p.rounding,
            });
        }
    }
    Ok(jobs)
}
