//! Checking the tensors a spec names against a file's index: each must exist with the shape
//! the hyperparameters give, and every one checked is recorded as used.

use std::collections::HashSet;

use super::{Linear, NormTensors};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// Checks tensors against the file's index and records which ones the model uses.
pub(super) struct Checker<'f> {
    pub file: &'f GgufFile,
    pub used: HashSet<String>,
}

impl Checker<'_> {
    /// `name` must exist with shape `expected` (ggml order); `meaning` explains the shape.
    pub fn require(&mut self, name: &str, expected: &[u64], meaning: &str) -> Result<String> {
        let path = self.file.path();
        let t = self.file.tensor(name).ok_or_else(|| {
            Error::tensor(path, name, "required by the model spec but not in the file")
        })?;
        // ggml drops trailing dimensions of 1, so compare with those trimmed on both sides.
        let trim = |s: &[u64]| -> Vec<u64> {
            let end = s.iter().rposition(|&d| d != 1).map_or(0, |p| p + 1);
            s[..end].to_vec()
        };
        if trim(&t.shape) != trim(expected) {
            return Err(Error::tensor(
                path,
                name,
                format!(
                    "shape {:?} disagrees with the spec: expected {expected:?} ({meaning})",
                    t.shape
                ),
            ));
        }
        self.used.insert(name.to_string());
        Ok(name.to_string())
    }

    /// A weight of shape [n_in, n_out] and, if `bias`, its [n_out] bias.
    pub fn linear(&mut self, weight: &str, n_in: u64, n_out: u64, bias: bool) -> Result<Linear> {
        let meaning = format!("{n_in} inputs x {n_out} outputs");
        let weight = self.require(weight, &[n_in, n_out], &meaning)?;
        let bias = if bias {
            Some(self.require(&bias_name(&weight), &[n_out], "one per output")?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// A norm's [n] gain and, if `with_bias`, its shift; `meaning` names n in errors.
    pub fn norm(
        &mut self,
        weight: &str,
        n: u64,
        with_bias: bool,
        meaning: &str,
    ) -> Result<NormTensors> {
        let weight = self.require(weight, &[n], meaning)?;
        let bias = if with_bias {
            Some(self.require(&bias_name(&weight), &[n], meaning)?)
        } else {
            None
        };
        Ok(NormTensors { weight, bias })
    }
}

/// `blk.0.attn_q.weight` -> `blk.0.attn_q.bias` (the spec checked the suffix).
fn bias_name(weight: &str) -> String {
    format!("{}.bias", weight.strip_suffix(".weight").unwrap_or(weight))
}
