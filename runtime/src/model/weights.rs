//! Reading weights out of a model file into f32 host memory, in the layout the executors use:
//! q/k/v fused into one [qkv_dim, n_embd] matrix and gate/up into one [2 n_ff, n_embd] matrix,
//! so each becomes a single projection. Quantized tensors are dequantized with `hearth-quant`.
//!
//! `Precision` rounds every weight to what the device stores, so the CPU reference computes
//! with exactly the values the Vulkan kernels see.

use half::f16;
use hearth_models::spec::{LayerTensors, QkvTensors};
use hearth_models::{GgufFile, ResolvedModel};

use super::config::ModelConfig;
use crate::error::{Error, Result};

/// The precision weights carry after loading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// The dequantized values as they are.
    F32,
    /// Rounded to IEEE half (what f16 device buffers hold).
    F16,
}

/// Where loading stands, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct LoadProgress<'a> {
    /// Tensor being read.
    pub tensor: &'a str,
    /// Bytes of the file's tensor data read so far, out of `total_bytes`.
    pub done_bytes: u64,
    pub total_bytes: u64,
}

/// Called as loading advances; returning `false` cancels the load.
pub type ProgressFn<'a> = dyn FnMut(LoadProgress) -> bool + 'a;

/// One block's weights. Matrices are row-major [out, in].
pub struct LayerWeights {
    /// [n_embd]
    pub attn_norm: Vec<f32>,
    /// [(n_head + 2 n_head_kv) * head_dim, n_embd]: q rows, then k rows, then v rows.
    pub wqkv: Vec<f32>,
    /// [n_embd, n_head * head_dim]
    pub wo: Vec<f32>,
    /// [n_embd]
    pub ffn_norm: Vec<f32>,
    /// [2 n_ff, n_embd]: gate rows, then up rows.
    pub w_gate_up: Vec<f32>,
    /// [n_embd, n_ff]
    pub w_down: Vec<f32>,
}

/// Reads tensors of one file, tracking progress.
pub struct WeightReader<'a> {
    file: &'a GgufFile,
    model: &'a ResolvedModel,
    config: &'a ModelConfig,
    precision: Precision,
    done: u64,
    total: u64,
    progress: &'a mut ProgressFn<'a>,
}

impl<'a> WeightReader<'a> {
    pub fn new(
        file: &'a GgufFile,
        model: &'a ResolvedModel,
        config: &'a ModelConfig,
        precision: Precision,
        progress: &'a mut ProgressFn<'a>,
    ) -> Self {
        let t = &model.tensors;
        let mut names: Vec<&str> = vec![&t.token_embd, &t.output_norm.weight];
        if !t.tied_embeddings {
            names.push(&t.output);
        }
        for l in &t.layers {
            names.extend(layer_tensor_names(l));
        }
        let total = names
            .iter()
            .filter_map(|n| file.tensor(n))
            .map(|i| i.n_bytes)
            .sum();
        Self {
            file,
            model,
            config,
            precision,
            done: 0,
            total,
            progress,
        }
    }

    /// A tensor of `rows` x `cols` values, as f32 in the reader's precision.
    pub fn tensor(&mut self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
        let fail = |reason: String| Error::Tensor {
            path: self.file.path().to_path_buf(),
            tensor: name.to_string(),
            reason,
        };
        let view = self.file.tensor_view(name)?;
        let n = view.info.n_elements();
        if n != (rows * cols) as u64 || view.info.shape.first() != Some(&(cols as u64)) {
            return Err(fail(format!(
                "shape {:?} where the model needs [{cols}, {rows}]",
                view.info.shape
            )));
        }
        if !(self.progress)(LoadProgress {
            tensor: name,
            done_bytes: self.done,
            total_bytes: self.total,
        }) {
            return Err(Error::Cancelled);
        }
        let mut out = vec![0f32; rows * cols];
        dequantize_parallel(view.info.ggml_type.id(), view.data, &mut out, cols)
            .map_err(|e| fail(e.to_string()))?;
        if self.precision == Precision::F16 {
            for v in &mut out {
                *v = f16::from_f32(*v).to_f32();
            }
        }
        self.done += view.info.n_bytes;
        Ok(out)
    }

    pub fn token_embd(&mut self) -> Result<Vec<f32>> {
        // Copying the `&'a` references out of `self` lets tensor names borrow from the model
        // while `self` is borrowed mutably.
        let (c, t) = (self.config, &self.model.tensors);
        self.tensor(&t.token_embd, c.n_vocab, c.n_embd)
    }

    pub fn output_norm(&mut self) -> Result<Vec<f32>> {
        let (c, t) = (self.config, &self.model.tensors);
        self.tensor(&t.output_norm.weight, 1, c.n_embd)
    }

    /// The output head, or `None` when it is the token embedding (tied).
    pub fn output(&mut self) -> Result<Option<Vec<f32>>> {
        let (c, t) = (self.config, &self.model.tensors);
        if t.tied_embeddings {
            return Ok(None);
        }
        self.tensor(&t.output, c.n_vocab, c.n_embd).map(Some)
    }

    pub fn layer(&mut self, layer: usize) -> Result<LayerWeights> {
        let c = self.config;
        let t = &self.model.tensors.layers[layer];
        let (e, kv) = (c.n_embd, c.n_head_kv * c.head_dim);
        let wqkv = match &t.qkv {
            QkvTensors::Separate { q, k, v } => {
                let mut w = self.tensor(&q.weight, c.attn_dim(), e)?;
                w.extend(self.tensor(&k.weight, kv, e)?);
                w.extend(self.tensor(&v.weight, kv, e)?);
                w
            }
            QkvTensors::Fused(qkv) => self.tensor(&qkv.weight, c.qkv_dim(), e)?,
        };
        let Some(gate) = &t.ffn_gate else {
            return Err(Error::Unsupported {
                path: self.file.path().to_path_buf(),
                what: format!("layer {layer} without a gate projection"),
            });
        };
        let mut w_gate_up = self.tensor(&gate.weight, c.n_ff, e)?;
        w_gate_up.extend(self.tensor(&t.ffn_up.weight, c.n_ff, e)?);
        Ok(LayerWeights {
            attn_norm: self.tensor(&t.attn_norm.weight, 1, e)?,
            wqkv,
            wo: self.tensor(&t.attn_output.weight, e, c.attn_dim())?,
            ffn_norm: self.tensor(&t.ffn_norm.weight, 1, e)?,
            w_gate_up,
            w_down: self.tensor(&t.ffn_down.weight, e, c.n_ff)?,
        })
    }

    /// Reports the end of loading.
    pub fn finish(&mut self) -> Result<()> {
        let done = (self.progress)(LoadProgress {
            tensor: "",
            done_bytes: self.total,
            total_bytes: self.total,
        });
        if done {
            Ok(())
        } else {
            Err(Error::Cancelled)
        }
    }
}

fn layer_tensor_names(l: &LayerTensors) -> Vec<&str> {
    let mut names = vec![
        l.attn_norm.weight.as_str(),
        &l.attn_output.weight,
        &l.ffn_norm.weight,
        &l.ffn_up.weight,
        &l.ffn_down.weight,
    ];
    match &l.qkv {
        QkvTensors::Separate { q, k, v } => names.extend([&*q.weight, &k.weight, &v.weight]),
        QkvTensors::Fused(qkv) => names.push(&qkv.weight),
    }
    if let Some(g) = &l.ffn_gate {
        names.push(&g.weight);
    }
    names
}

/// Dequantizes row by row on every core: rows are independent and whole blocks.
fn dequantize_parallel(
    type_id: u32,
    data: &[u8],
    out: &mut [f32],
    cols: usize,
) -> std::result::Result<(), hearth_quant::Error> {
    let rows = out.len() / cols.max(1);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if rows < 64 || threads == 1 || data.len() % rows != 0 {
        return hearth_quant::dequantize_ggml(type_id, data, out);
    }
    let row_bytes = data.len() / rows;
    let rows_per = rows.div_ceil(threads);
    std::thread::scope(|s| {
        let jobs: Vec<_> = out
            .chunks_mut(rows_per * cols)
            .zip(data.chunks(rows_per * row_bytes))
            .map(|(o, d)| s.spawn(move || hearth_quant::dequantize_ggml(type_id, d, o)))
            .collect();
        jobs.into_iter()
            .try_for_each(|j| j.join().expect("dequantization thread panicked"))
    })
}
