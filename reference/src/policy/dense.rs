//! Dense attention on the reference: every token attends to every cached position.

use std::any::Any;

use super::{attend, CpuPolicy, LayerValues};
use hearth_model::kv::policy::KvPolicyStats;

pub(crate) struct Dense;

impl CpuPolicy for Dense {
    fn stats(&self) -> Option<KvPolicyStats> {
        None
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn attention(&mut self, at: &LayerValues) -> Vec<f32> {
        attend(at, None, |_, _, _| {})
    }
}
