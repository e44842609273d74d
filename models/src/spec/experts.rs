//! A mixture of experts as a file describes it: how many experts, how many run each token,
//! their width, the router's gating and a shared expert.

use super::{Gating, ModelSpec};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// A mixture of experts' sizes and routing.
#[derive(Clone, Copy, Debug, PartialEq)]
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
    /// The chosen experts' weights times this (`{arch}.expert_weights_scale`; 1 where
    /// absent): GLM-4.5's `routed_scaling_factor`.
    pub scale: f32,
    /// Experts in `groups` equal groups of which only the `groups_used` best take part
    /// (`{arch}.expert_group_count`, `expert_group_used_count`; 1 and 1 where absent), each
    /// group scored as [`group_score`](Self::group_score) says.
    pub groups: usize,
    pub groups_used: usize,
    /// The first blocks, whose MLP is dense rather than the mixture
    /// (`{arch}.leading_dense_block_count`; 0 where absent).
    pub leading_dense: usize,
}

impl Experts {
    /// Whether block `layer`'s MLP is the mixture (not one of the leading dense blocks).
    pub fn at(&self, layer: usize) -> bool {
        layer >= self.leading_dense
    }

    /// How a group is scored where only the best groups take part: by the sum of its two
    /// best selection scores under sigmoid gating (DeepSeek-V3's `noaux_tc`, GLM-4.5), by its
    /// best score under softmax gating (DeepSeek-V2's `group_limited_greedy`, as transformers
    /// and DeepSeek's own code run it). llama.cpp sums the two best under either gating, so
    /// it chooses DeepSeek-V2's (236B, V2.5) groups otherwise; files carry no key that says.
    pub fn group_score(&self) -> GroupScore {
        match self.gating {
            Gating::Softmax => GroupScore::Best,
            Gating::Sigmoid => GroupScore::TopTwoSum,
        }
    }

    /// Rows of the router: one logit per expert, and the shared expert's gate where it has
    /// one.
    pub fn router_rows(&self) -> usize {
        self.count + self.shared.is_some_and(|sh| sh.gated) as usize
    }
}

/// What a group of experts is scored by ([`Experts::group_score`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupScore {
    /// Its best expert's score.
    Best,
    /// The sum of its two best experts' scores.
    TopTwoSum,
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
                let shared_count_key = key("expert_shared_count");
                let key = key("expert_shared_feed_forward_length");
                Some(SharedExpert {
                    n_ff: match file.get::<u32>(&key)? {
                        Some(0) => {
                            return Err(Error::metadata(path, &key, "must be positive, found 0"))
                        }
                        Some(n) => n as usize,
                        // As many experts' widths as the file counts shared experts
                        // (GLM-4.5), else the dense MLP's width.
                        None => match file.get::<u32>(&shared_count_key)? {
                            Some(k) if k > 0 => n_ff * k as usize,
                            _ => n_ff_dense,
                        },
                    },
                    gated: layer.ffn_gate_inp_shexp.is_some(),
                })
            }
            false => None,
        };
        let scale_key = key("expert_weights_scale");
        let scale = match file.get::<f32>(&scale_key)? {
            None => 1.0,
            Some(s) if s.is_finite() && s > 0.0 => s,
            Some(s) => {
                return Err(Error::metadata(
                    path,
                    &scale_key,
                    format!("{s} is not a positive number"),
                ))
            }
        };
        let groups_key = key("expert_group_count");
        let groups = file.get::<u32>(&groups_key)?.unwrap_or(1).max(1) as usize;
        let groups_used_key = key("expert_group_used_count");
        let groups_used = file.get::<u32>(&groups_used_key)?.unwrap_or(1) as usize;
        let per_group = count as usize / groups;
        if count as usize % groups != 0 || (groups > 1 && per_group < 2) {
            return Err(Error::metadata(
                path,
                &groups_key,
                format!("{groups} groups do not divide the {count} experts in groups of 2 or more"),
            ));
        }
        if !(1..=groups).contains(&groups_used) || groups_used * per_group < used {
            return Err(Error::metadata(
                path,
                &groups_used_key,
                format!(
                    "{groups_used} of {groups} groups of {per_group} experts cannot give {used}"
                ),
            ));
        }
        Ok(Some(Experts {
            count: count as usize,
            used,
            n_ff,
            gating,
            normalize: file
                .get::<bool>(&key("expert_weights_norm"))?
                .unwrap_or(moe.normalize),
            shared,
            scale,
            groups,
            groups_used,
            leading_dense: file
                .get::<u32>(&key("leading_dense_block_count"))?
                .unwrap_or(0) as usize,
        }))
    }
}
