//! Which positions of the KV cache attention reads: every one (dense), the ones InfiniGen
//! speculates, or the ones H2O keeps. A backend runs one policy at a time
//! (`Backend::set_kv_policy`) and reports what it read (`Backend::kv_policy_stats`); each
//! executor implements the policies behind one interface of its own (`model::vulkan::policy`,
//! `cpu::policy`).

use std::fmt;

use super::infinigen::{IgParams, IgStats, Skew};

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
