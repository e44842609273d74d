//! Importance matrices: for each weight matrix, the mean square of each input column over a
//! calibration text. Low-bit quantizers weigh each value's rounding error by its column's
//! importance, so the columns that move the product most keep the most precision.
//!
//! [`collect`] runs the CPU reference over windows of a text, as `llama-imatrix` does, and
//! [`file`] reads and writes llama.cpp's file format, so either program reads the other's.

mod file;

use std::collections::BTreeMap;
use std::path::Path;

use hearth_models::spec::{MlpTensors, QkvTensors};
use hearth_models::{resolve_gguf, GgufFile, ResolvedModel};

use crate::cpu::activations::{Activations, SquareSums};
use crate::engine::{BackendKind, Engine, EngineOptions};
use crate::error::{Error, Result};
use crate::model::{Backend, Logits};

/// An importance matrix: per weight tensor name, its columns' sums of squared inputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImportanceMatrix {
    pub entries: BTreeMap<String, SquareSums>,
    /// The texts it was computed from.
    pub datasets: Vec<String>,
    /// Windows of `chunk_size` tokens run.
    pub chunk_count: u32,
    pub chunk_size: u32,
}

impl ImportanceMatrix {
    /// The matrices' entries from what the reference collected: Q, K and V share their input,
    /// as gate and up do. The output head is left out, as llama.cpp leaves it.
    pub fn from_activations(model: &ResolvedModel, activations: &Activations) -> Self {
        let mut entries = BTreeMap::new();
        for (names, a) in model.tensors.layers.iter().zip(&activations.layers) {
            let mut put = |name: &str, sums: &SquareSums| {
                if sums.tokens > 0 {
                    entries.insert(name.to_string(), sums.clone());
                }
            };
            match &names.qkv {
                QkvTensors::Separate { q, k, v } => {
                    for t in [q, k, v] {
                        put(&t.weight, &a.qkv);
                    }
                }
                QkvTensors::Fused(qkv) => put(&qkv.weight, &a.qkv),
            }
            put(&names.attn_output.weight, &a.attn_output);
            match &names.mlp {
                MlpTensors::Dense { gate, up, down } => {
                    if let Some(gate) = gate {
                        put(&gate.weight, &a.gate_up);
                    }
                    put(&up.weight, &a.gate_up);
                    put(&down.weight, &a.down);
                }
                // The router reads the MLP's input; the experts' sums are not collected yet.
                MlpTensors::Experts { router, .. } => put(router, &a.gate_up),
            }
        }
        Self {
            entries,
            ..Self::default()
        }
    }

    /// The importance of each column of `tensor`: the mean square of its inputs. `None` for a
    /// tensor the matrix has nothing on.
    pub fn weights(&self, tensor: &str) -> Option<Vec<f32>> {
        let e = self.entries.get(tensor)?;
        if e.tokens == 0 {
            return Some(vec![1.0; e.sums.len()]);
        }
        Some(
            e.sums
                .iter()
                .map(|s| (s / e.tokens as f64) as f32)
                .collect(),
        )
    }
}

/// How [`collect`] reads the text.
#[derive(Clone, Debug)]
pub struct CollectOptions {
    /// Tokens per window; each window runs from an empty cache.
    pub window: usize,
    /// Most windows to run; `None`: the whole text.
    pub max_windows: Option<usize>,
    /// The text's name, recorded in the file.
    pub dataset: String,
}

/// The importance matrix of the model in `path` over `text`: the text is cut into windows of
/// `opts.window` tokens, each run through the CPU reference from an empty cache, and every
/// token's inputs to every matrix are summed. `progress(done, total)` after each window; it
/// returning `false` cancels.
pub fn collect(
    path: &Path,
    text: &str,
    opts: &CollectOptions,
    progress: &mut dyn FnMut(usize, usize) -> bool,
) -> Result<ImportanceMatrix> {
    if opts.window < 2 {
        return Err(Error::options(
            "ctx-size",
            "a window needs at least 2 tokens",
        ));
    }
    let file = GgufFile::open(path)?;
    let model = resolve_gguf(&file)?;
    let options = EngineOptions {
        backend: BackendKind::Cpu,
        n_ctx: Some(opts.window),
        ..EngineOptions::default()
    };
    let mut engine = Engine::load(path, &options, &mut |_| true)?;
    let tokens = engine.tokenize(text);
    let available = tokens.len() / opts.window;
    let windows = opts.max_windows.map_or(available, |n| n.min(available));
    if windows == 0 {
        return Err(Error::options(
            "file",
            format!(
                "the text has {} tokens; a window needs {} (lower --ctx-size)",
                tokens.len(),
                opts.window
            ),
        ));
    }
    let backend = engine.session_mut().fresh_backend();
    let cpu = backend
        .as_cpu_mut()
        .ok_or_else(|| Error::options("backend", "importance matrices run on the CPU reference"))?;
    cpu.collect_activations();
    for (w, window) in tokens.chunks_exact(opts.window).take(windows).enumerate() {
        cpu.truncate(0);
        cpu.forward(window, Logits::Last)?;
        if !progress(w + 1, windows) {
            return Err(Error::Cancelled);
        }
    }
    let activations = cpu.take_activations().unwrap_or_default();
    Ok(ImportanceMatrix {
        datasets: vec![opts.dataset.clone()],
        chunk_count: windows as u32,
        chunk_size: opts.window as u32,
        ..ImportanceMatrix::from_activations(&model, &activations)
    })
}
