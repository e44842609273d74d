//! Which positions of the KV cache attention reads: every one (dense), the ones InfiniGen
//! speculates, or the ones H2O keeps. A backend runs one policy at a time
//! (`Backend::set_kv_policy`) and reports what it read (`Backend::kv_policy_stats`); each
//! executor implements the policies behind one interface of its own (`hearth_vulkan`'s `executor::policy`,
//! `hearth_reference`'s `policy`).

use std::fmt;

use super::infinigen::{IgParams, IgStats, Skew};
use crate::error::{Error, Result};
use crate::ModelConfig;

/// A KV policy and its settings, as a backend is asked to run it.
#[derive(Clone, Copy, Debug)]
pub enum KvPolicyChoice<'a> {
    /// Every cached position, every step.
    Dense,
    /// InfiniGen: decode steps attend to the tokens speculation selects with `skew`'s
    /// partial columns (`kv::infinigen`).
    Infinigen { skew: &'a Skew, params: IgParams },
    /// H2O, the heavy-hitter eviction baseline, at InfiniGen's budget (`kv::h2o`).
    H2o(IgParams),
}

impl KvPolicyChoice<'_> {
    pub fn kind(&self) -> KvPolicyKind {
        match self {
            Self::Dense => KvPolicyKind::Dense,
            Self::Infinigen { .. } => KvPolicyKind::Infinigen,
            Self::H2o(_) => KvPolicyKind::H2o,
        }
    }
}

impl KvPolicyChoice<'_> {
    /// Refuses a sparse policy for a model whose attention it cannot run: its sparse kernels
    /// score with 1 / sqrt(head_dim) and no soft-capping; H2O keeps no state for local
    /// (windowed) layers; and an InfiniGen pool that evicts tokens would move a local layer's
    /// window. InfiniGen runs local layers densely over their windows.
    pub fn check_model(&self, c: &ModelConfig) -> Result<()> {
        let params = match self {
            Self::Dense => return Ok(()),
            Self::Infinigen { params, .. } | Self::H2o(params) => params,
        };
        let refuse = |why: String| {
            Err(Error::options(
                "kv-policy",
                format!("{} {why}", self.kind()),
            ))
        };
        // Both read keys of one head's width that RoPE rotated whole, and values of their own:
        // latent attention's cache holds one latent per position whose keys only exist once
        // each head's query is taken into it, and whose values are the latent itself.
        if c.latent.is_some() {
            return refuse(
                "does not run multi-head latent attention (DeepSeek-V2/V3): its cache holds \
                 one latent per position rather than keys and values per head, which \
                 InfiniGen's speculation (partial key columns skewed per head) and H2O's \
                 per-head scores do not apply to; use dense attention"
                    .into(),
            );
        }
        // Neither speculates, selects nor evicts with a sink in the softmax's denominator.
        if c.attn_sinks {
            return refuse(
                "does not run models with attention sinks (a learned logit in every softmax's \
                 denominator, which its selection and scores leave out); use dense attention"
                    .into(),
            );
        }
        // InfiniGen scores as dense attention does; H2O's kernels know the plain scale only.
        let plain_scale = (c.attn_scale - 1.0 / (c.head_dim as f32).sqrt()).abs() <= 1e-7;
        if matches!(self, Self::H2o(_)) && (c.attn_softcap.is_some() || !plain_scale) {
            return refuse(
                "does not run models whose attention scores are soft-capped or \
                 scaled other than by 1 / sqrt(head_dim) yet; use dense attention"
                    .into(),
            );
        }
        let Some(window) = &c.sliding_window else {
            return Ok(());
        };
        let local = window.layers.iter().filter(|&&l| l).count();
        let what = format!(
            "this model's {local} local layers (window of {})",
            window.size
        );
        match self {
            Self::H2o(_) => refuse(format!("does not run {what} yet")),
            _ if params.pool_capacity.is_some() => refuse(format!(
                "with a pool capacity would evict tokens from {what}; leave the capacity out"
            )),
            _ => Ok(()),
        }
    }
}

/// Which policy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvPolicyKind {
    Dense,
    Infinigen,
    H2o,
}

impl KvPolicyKind {
    /// What the policy does to the tokens its sparse layers attend to ("fetched", "attended"),
    /// for reports.
    pub fn verb(self) -> &'static str {
        match self {
            Self::Dense => "read",
            Self::Infinigen => "fetched",
            Self::H2o => "attended",
        }
    }
}

impl fmt::Display for KvPolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Dense => "dense",
            Self::Infinigen => "InfiniGen",
            Self::H2o => "H2O",
        })
    }
}

/// What a sparse policy read so far: the tokens its sparse layers attended to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvPolicyStats {
    pub policy: KvPolicyKind,
    pub tokens: IgStats,
}

impl KvPolicyStats {
    /// The counts, when `policy` is the one that ran.
    pub fn of(self, policy: KvPolicyKind) -> Option<IgStats> {
        (self.policy == policy).then_some(self.tokens)
    }
}
