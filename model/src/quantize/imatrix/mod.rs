//! Importance matrices: for each weight matrix, the mean square of each input column over a
//! calibration text. Low-bit quantizers weigh each value's rounding error by its column's
//! importance, so the columns that move the product most keep the most precision.
//!
//! `hearth_tools::imatrix::collect` runs the CPU reference over windows of a text, as
//! `llama-imatrix` does, and [`file`] reads and writes llama.cpp's file format, so either
//! program reads the other's.

mod file;

use std::collections::BTreeMap;

use hearth_models::spec::{LatentQuery, MlpTensors, QkvTensors};
use hearth_models::ResolvedModel;

use crate::activations::{Activations, SquareSums};

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
                // The input's projections; the sums of the low-rank queries' and the
                // latent's expansions are not collected yet.
                QkvTensors::Latent(lt) => {
                    match &lt.q {
                        LatentQuery::Direct(q) => put(q, &a.qkv),
                        LatentQuery::LowRank { a: q_a, .. } => put(q_a, &a.qkv),
                    }
                    put(&lt.kv_a, &a.qkv);
                }
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
