//! Dense attention on the reference: every token attends to every cached position.

use std::any::Any;

use super::{attend, CpuPolicy, LayerAt};
use crate::kv::policy::KvPolicyStats;

pub(in crate::cpu) struct Dense;

impl CpuPolicy for Dense {
    fn stats(&self) -> Option<KvPolicyStats> {
        None
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn attention(&mut self, at: &LayerAt) -> Vec<f32> {
        attend(at, None, |_, _, _| {})
    }
}
