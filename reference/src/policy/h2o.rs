//! H2O on the reference (`kv::h2o`): decode steps past the dense layers attend to the
//! positions each KV head keeps; every step's attention adds to the masses, and the heads
//! evict after it.

use std::any::Any;

use super::{attend, CpuPolicy, LayerValues};
use hearth_model::kv::h2o::H2o;
use hearth_model::kv::infinigen::{IgParams, IgStats};
use hearth_model::kv::policy::{KvPolicyKind, KvPolicyStats};
use hearth_model::ModelConfig;

pub(crate) struct CpuH2o {
    pub(crate) h2o: H2o,
    stats: IgStats,
}

impl CpuH2o {
    /// From layer `dense_layers` on, each KV head keeps at most `params.budget_tokens(len)`
    /// positions: the recent half of that budget and the heavy hitters among older ones. Of
    /// the `len` positions already cached, with no attention mass yet, each head keeps the
    /// newest budget's worth.
    pub(super) fn start(c: &ModelConfig, params: IgParams, len: usize, n_ctx: usize) -> Self {
        Self {
            h2o: H2o::new(params, c.n_layer, c.n_head_kv, n_ctx, len),
            stats: IgStats::default(),
        }
    }
}

impl CpuPolicy for CpuH2o {
    fn stats(&self) -> Option<KvPolicyStats> {
        Some(KvPolicyStats {
            policy: KvPolicyKind::H2o,
            tokens: self.stats,
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn attention(&mut self, at: &LayerValues) -> Vec<f32> {
        let (l, h2o) = (at.l, &mut self.h2o);
        // A local layer reads its window, densely.
        if !h2o.applies(l) || at.config.window(l).is_some() {
            return attend(at, None, |_, _, _| {});
        }
        let history = at.decode().then(|| {
            let kept: Vec<Vec<u32>> = (0..at.config.n_head_kv)
                .map(|g| h2o.kept(l, g).to_vec())
                .collect();
            for k in &kept {
                self.stats.record(k.len(), at.pos0);
            }
            kept
        });
        let att = attend(at, history.as_deref(), |g, positions, probs| {
            h2o.add_mass(l, g, positions, probs)
        });
        h2o.end_step(l, at.pos0..at.pos0 + at.n);
        att
    }

    fn truncate(&mut self, old: usize, len: usize) -> usize {
        let len = old.min(len);
        self.h2o.truncate(len);
        len
    }
}
