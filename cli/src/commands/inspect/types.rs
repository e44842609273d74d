//! Bytes and bits per weight of each tensor type in a file.
use hearth_models::{GgmlType, GgufFile};
use serde_json::{json, Value};

/// The tensors of one type: how many, how many weights, how many bytes.
pub(super) struct TypeTotal {
    pub(super) ggml_type: GgmlType,
    pub(super) tensors: usize,
    pub(super) elements: u64,
    pub(super) bytes: u64,
}

impl TypeTotal {
    pub(super) fn bits_per_weight(&self) -> f64 {
        if self.elements == 0 {
            0.0
        } else {
            self.bytes as f64 * 8.0 / self.elements as f64
        }
    }

    /// All of `totals` together (its type is meaningless).
    pub(super) fn sum(totals: &[TypeTotal]) -> TypeTotal {
        TypeTotal {
            ggml_type: GgmlType::F32,
            tensors: totals.iter().map(|t| t.tensors).sum(),
            elements: totals.iter().map(|t| t.elements).sum(),
            bytes: totals.iter().map(|t| t.bytes).sum(),
        }
    }

    pub(super) fn to_json(&self) -> Value {
        json!({
            "type": self.ggml_type.name(),
            "tensors": self.tensors,
            "weights": self.elements,
            "bytes": self.bytes,
            "bits_per_weight": self.bits_per_weight(),
        })
    }
}

/// Totals per tensor type, most bytes first.
pub(super) fn type_totals(file: &GgufFile) -> Vec<TypeTotal> {
    let mut totals: Vec<TypeTotal> = Vec::new();
    for t in file.tensors() {
        let i = match totals.iter().position(|x| x.ggml_type == t.ggml_type) {
            Some(i) => i,
            None => {
                totals.push(TypeTotal {
                    ggml_type: t.ggml_type,
                    tensors: 0,
                    elements: 0,
                    bytes: 0,
                });
                totals.len() - 1
            }
        };
        totals[i].tensors += 1;
        totals[i].elements += t.n_elements();
        totals[i].bytes += t.n_bytes;
    }
    totals.sort_by_key(|t| std::cmp::Reverse(t.bytes));
    totals
}
