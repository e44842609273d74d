//! An encoder-decoder (T5) on the native executor: the model crate's host forward pass over
//! this executor's products, each matrix packed as the file holds it and multiplied on the
//! thread pool with activations quantized as for decoders.

use std::sync::Arc;

use hearth_model::seq2seq::{read_seq2seq, Product, Seq2SeqConfig, Seq2SeqModel};
use hearth_model::{ProgressFn, Result};
use hearth_models::{GgufFile, ResolvedModel};

use crate::act::{ActQ8, Activations};
use crate::dot::Kernels;
use crate::executor::{kernels_and_pool, CpuOptions};
use crate::interleave::ROWS;
use crate::isa::Isa;
use crate::product::{project, Input, Output};
use crate::weights::CpuProjection;

/// What every matrix's product shares: the kernels, the pool and the activations' mode.
struct Compute {
    kernels: Kernels,
    pool: rayon::ThreadPool,
    mode: Activations,
}

/// A packed matrix and what multiplies by it.
pub struct NativeProduct {
    w: CpuProjection,
    compute: Arc<Compute>,
}

impl Product for NativeProduct {
    fn product(&self, x: &[f32], n: usize) -> Vec<f32> {
        let (rows, cols) = (self.w.rows(), x.len() / n.max(1));
        let mut y = vec![0f32; n * rows];
        let c = &self.compute;
        c.pool.install(|| {
            let mut act = ActQ8::default();
            let mut transposed = Vec::new();
            let mut input = Input::new(x, cols, &mut act, c.mode);
            let out = Output {
                out: &mut y,
                stride: rows,
                col0: 0,
            };
            project(&c.kernels, &self.w, &mut input, out, &mut transposed);
        });
        y
    }
}

/// An encoder-decoder on the native executor.
pub struct NativeSeq2Seq {
    pub model: Seq2SeqModel<NativeProduct>,
    /// The instruction set the kernels use, and the pool's threads.
    pub isa: Isa,
    pub threads: usize,
}

impl NativeSeq2Seq {
    /// Loads `model`; of `options`, the threads, instruction set and activations apply.
    pub fn load(
        file: &GgufFile,
        model: &ResolvedModel,
        options: CpuOptions,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let config = Seq2SeqConfig::from_resolved(file, model)?;
        let (kernels, pool) = kernels_and_pool(&options)?;
        let compute = Arc::new(Compute {
            kernels,
            pool,
            mode: options.activations,
        });
        let weights = read_seq2seq(file, model, &config, progress)?;
        let weights = compute.pool.install(|| {
            weights.map_matrices(|p| NativeProduct {
                w: CpuProjection::for_kernels(&compute.kernels, compute.mode, p, ROWS),
                compute: compute.clone(),
            })
        });
        Ok(Self {
            model: Seq2SeqModel::new(config, weights),
            isa: compute.kernels.isa(),
            threads: compute.pool.current_num_threads(),
        })
    }
}
