//! H2O, the heavy-hitter oracle (Zhang et al. 2023): the baseline InfiniGen is measured
//! against at the same token budget.
//!
//! Every cached position accumulates the attention it receives: per layer and KV head, the
//! softmax probabilities of the head's query heads, summed over steps. After a step, a KV head
//! that keeps more than [`IgParams::budget_tokens`] positions evicts, among those older than
//! the recent half of the budget, the ones with the least mass. Eviction is permanent: unlike
//! InfiniGen, which may fetch any cached token, H2O never attends to an evicted token again
//! while it decodes.
//!
//! Like InfiniGen, the first `dense_layers` layers run dense. A decode step (one token)
//! attends to the kept positions and itself. A step of several tokens (a prompt, or a later
//! message) attends densely, as prefill does; its rows add to the masses and the cache then
//! evicts down to the budget. The Vulkan executor keeps the same state on the device
//! (`hearth_vulkan`'s `executor::policy::h2o`), with this module's [`Head`] as its host-side view.

use std::ops::Range;

use super::infinigen::IgParams;

/// What H2O knows about one KV head of one layer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Head {
    /// [n_ctx]: attention mass each position has received.
    pub mass: Vec<f32>,
    /// Positions still kept, ascending.
    pub kept: Vec<u32>,
}

impl Head {
    /// Ends a step that wrote positions `new`: they join the kept positions, and the head
    /// evicts down to `budget` (the budget for `new.end` cached tokens).
    pub fn end_step(&mut self, new: Range<usize>, budget: usize) {
        self.kept.extend(new.start as u32..new.end as u32);
        evict(self, new.end, budget);
    }

    /// Forgets positions from `len` on. Positions evicted before `len` stay evicted.
    pub fn truncate(&mut self, len: usize) {
        self.kept.retain(|&p| (p as usize) < len);
        let end = len.min(self.mass.len());
        self.mass[end..].fill(0.0);
    }
}

/// H2O's state for one sequence: every sparse layer's KV heads.
#[derive(Clone, Debug)]
pub struct H2o {
    params: IgParams,
    n_kv: usize,
    /// [(n_layer - dense_layers) * n_kv], layer-major.
    heads: Vec<Head>,
}

impl H2o {
    /// State for a cache of `n_ctx` positions whose first `len` are already there, with no
    /// mass yet: each head keeps the budget's worth of them, the newest.
    pub fn new(params: IgParams, n_layer: usize, n_kv: usize, n_ctx: usize, len: usize) -> Self {
        let sparse_layers = n_layer.saturating_sub(params.dense_layers);
        let mut head = Head {
            mass: vec![0.0; n_ctx],
            kept: Vec::new(),
        };
        head.end_step(0..len, params.budget_tokens(len));
        Self {
            params,
            n_kv,
            heads: vec![head; sparse_layers * n_kv],
        }
    }

    pub fn params(&self) -> &IgParams {
        &self.params
    }

    /// Whether layer `l` runs H2O rather than dense attention.
    pub fn applies(&self, l: usize) -> bool {
        l >= self.params.dense_layers
            && (l - self.params.dense_layers) * self.n_kv < self.heads.len()
    }

    /// Positions KV head `g` of layer `l` still keeps, ascending.
    pub fn kept(&self, l: usize, g: usize) -> &[u32] {
        &self.head(l, g).kept
    }

    /// Attention mass position `p` has received in KV head `g` of layer `l`.
    pub fn mass(&self, l: usize, g: usize, p: usize) -> f32 {
        self.head(l, g).mass[p]
    }

    /// Adds the probabilities one query row gave `positions` to their mass.
    pub fn add_mass(&mut self, l: usize, g: usize, positions: &[usize], probs: &[f32]) {
        let mass = &mut self.head_mut(l, g).mass;
        for (&p, &s) in positions.iter().zip(probs) {
            mass[p] += s;
        }
    }

    /// Ends a step of layer `l` that wrote positions `new`: they join every KV head's kept
    /// positions, and each head evicts down to the budget for `new.end` cached tokens.
    pub fn end_step(&mut self, l: usize, new: Range<usize>) {
        let budget = self.params.budget_tokens(new.end);
        for g in 0..self.n_kv {
            self.head_mut(l, g).end_step(new.clone(), budget);
        }
    }

    /// Forgets positions from `len` on. Positions evicted before `len` stay evicted.
    pub fn truncate(&mut self, len: usize) {
        for head in &mut self.heads {
            head.truncate(len);
        }
    }

    fn head(&self, l: usize, g: usize) -> &Head {
        &self.heads[(l - self.params.dense_layers) * self.n_kv + g]
    }

    fn head_mut(&mut self, l: usize, g: usize) -> &mut Head {
        &mut self.heads[(l - self.params.dense_layers) * self.n_kv + g]
    }
}

/// Evicts from `head`, of `len` cached positions, the least-mass positions older than the
/// recent half of `budget` (the earlier one among equals) until it keeps at most `budget`.
fn evict(head: &mut Head, len: usize, budget: usize) {
    let excess = head.kept.len().saturating_sub(budget);
    if excess == 0 {
        return;
    }
    let recent_start = len - budget / 2;
    let mut old: Vec<u32> = head
        .kept
        .iter()
        .copied()
        .filter(|&p| (p as usize) < recent_start)
        .collect();
    let mass = &head.mass;
    old.sort_by(|&a, &b| {
        mass[a as usize]
            .total_cmp(&mass[b as usize])
            .then(a.cmp(&b))
    });
    // At most budget / 2 kept positions are recent, so at least `excess` are old.
    let mut gone = old[..excess].to_vec();
    gone.sort_unstable();
    head.kept.retain(|p| gone.binary_search(p).is_err());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(budget: f32) -> IgParams {
        IgParams {
            budget,
            min_budget: 0,
            dense_layers: 1,
            ..IgParams::paper(true)
        }
    }

    #[test]
    fn evicts_the_lightest_old_positions_and_keeps_the_recent_half() {
        // 2 layers, the first dense; 1 KV head; 10 positions from a prompt.
        let mut h = H2o::new(params(0.4), 2, 1, 16, 0);
        assert!(!h.applies(0) && h.applies(1) && !h.applies(2));
        let positions: Vec<usize> = (0..10).collect();
        // Position 9 is light but recent; 0 and 5 are the heaviest old ones.
        let probs = [0.3, 0.01, 0.2, 0.02, 0.03, 0.25, 0.04, 0.05, 0.06, 0.0];
        h.add_mass(1, 0, &positions, &probs);
        h.end_step(1, 0..10);
        // Budget 4 of 10: the recent 2 (8, 9) and the 2 heaviest older ones (0, 5).
        assert_eq!(h.kept(1, 0), [0, 5, 8, 9]);

        // The next token attends to 8 and itself; at 11 tokens the budget is 5, recent 2.
        h.add_mass(1, 0, &[0, 5, 8, 9, 10], &[0.0, 0.0, 0.5, 0.0, 0.5]);
        h.end_step(1, 10..11);
        assert_eq!(h.kept(1, 0), [0, 5, 8, 9, 10]);
        // At 12 the budget is 5 again: 9 has left the recent window and is the lightest.
        h.add_mass(1, 0, &[0, 5, 8, 9, 10, 11], &[0.0; 6]);
        h.end_step(1, 11..12);
        assert_eq!(h.kept(1, 0), [0, 5, 8, 10, 11]);

        // Truncating forgets later positions; 9, evicted, stays evicted.
        h.truncate(10);
        assert_eq!(h.kept(1, 0), [0, 5, 8]);
        assert_eq!(h.mass(1, 0, 10), 0.0);
        h.end_step(1, 10..11);
        assert_eq!(h.kept(1, 0), [0, 5, 8, 10]);
    }

    #[test]
    fn equal_mass_evicts_the_earlier_position() {
        let mut h = H2o::new(params(0.5), 2, 1, 8, 0);
        h.end_step(1, 0..6);
        // Budget 3 of 6: the recent 1 (5), and of the equally light old ones the earliest go.
        assert_eq!(h.kept(1, 0), [3, 4, 5]);
    }
}
