//! A mixture of experts as a file describes it: how many experts, how many run each token,
//! their width, the router's gating and a shared expert.

use super::{Gating, ModelSpec};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// A mixture of experts' sizes and routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Experts {
    pub count: usize,
    /// Experts each token runs.
    pub used: usize,
    /// Each expert's MLP width.
    pub n_ff: usize,
    pub gating: Gating,
    pub normalize: bool,
    /// An expert every token runs besides its routed ones (Qwen2-MoE).
    pub shared: Option<SharedExpert>,
}

impl Experts {
    /// Rows of the router: one logit per expert, and the shared expert's gate where it has
    /// one.
    pub fn router_rows(&self) -> usize {
        self.count + self.shared.is_some_and(|sh| sh.gated) as usize
    }
}

/// A shared expert's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedExpert {
    /// Its MLP's width (`{arch}.expert_shared_feed_forward_length`, else the dense
    /// `feed_forward_length`, as llama.cpp reads it).
    pub n_ff: usize,
    /// Its output is scaled by sigmoid(x . ffn_gate_inp_shexp).
    pub gated: bool,
}

impl ModelSpec {
    /// The experts where the file has them (`{arch}.expert_count` above 0; Mixtral is
    /// converted as `llama`), routed as the spec's `[moe]` says unless the file says otherwise.
    pub(super) fn experts(
        &self,
        file: &GgufFile,
        key: &dyn Fn(&str) -> String,
        n_ff_dense: usize,
    ) -> Result<Option<Experts>> {
        let path = file.path();
        let count_key = key("expert_count");
        let Some(count) = file.get::<u32>(&count_key)?.filter(|&n| n > 0) else {
            return Ok(None);
        };
        let Some(moe) = &self.moe else {
            return Err(Error::metadata(
                path,
                &count_key,
                format!(
                    "{count} experts, a mixture the `{}` spec does not describe (no [moe])",
                    self.name
                ),
            ));
        };
        let used_key = key("expert_used_count");
        let used = match file.get::<u32>(&used_key)? {
            Some(u) if (1..=count).contains(&u) => u as usize,
            Some(u) => {
                return Err(Error::metadata(
                    path,
                    &used_key,
                    format!("{u} is not between 1 and the {count} experts"),
                ))
            }
            None => return Err(Error::metadata(path, &used_key, "missing")),
        };
        let ff_key = key("expert_feed_forward_length");
        let n_ff = match file.get::<u32>(&ff_key)? {
            Some(0) => return Err(Error::metadata(path, &ff_key, "must be positive, found 0")),
            Some(n) => n as usize,
            None => n_ff_dense,
        };
        let gating_key = key("expert_gating_func");
        let gating = match file.get::<u32>(&gating_key)? {
            None => moe.gating,
            Some(1) => Gating::Softmax,
            Some(2) => Gating::Sigmoid,
            Some(other) => {
                return Err(Error::metadata(
                    path,
                    &gating_key,
                    format!("{other} is not a known gating (1 softmax, 2 sigmoid)"),
                ))
            }
        };
        let layer = &self.tensors.layer;
        let shared = match layer.ffn_up_shexp.is_some() {
            true => {
                let key = key("expert_shared_feed_forward_length");
                Some(SharedExpert {
                    n_ff: match file.get::<u32>(&key)? {
                        Some(0) => {
                            return Err(Error::metadata(path, &key, "must be positive, found 0"))
                        }
                        Some(n) => n as usize,
                        None => n_ff_dense,
                    },
                    gated: layer.ffn_gate_inp_shexp.is_some(),
                })
            }
            false => None,
        };
        Ok(Some(Experts {
            count: count as usize,
            used,
            n_ff,
            gating,
            normalize: file
                .get::<bool>(&key("expert_weights_norm"))?
                .unwrap_or(moe.normalize),
            shared,
        }))
    }
}
