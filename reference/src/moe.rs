//! A mixture of experts on the reference: each token's router logits pick the experts that
//! run it, and their gated MLPs' outputs are summed with the router's weights (Mixtral,
//! Qwen3-MoE), with a shared expert's output besides where the model has one (Qwen2-MoE).

use hearth_model::ops::{add_bias, route};

use super::matmul::matmul;
use hearth_model::{ExpertBias, ModelConfig};

/// One block's experts as f32: the router [n_expert, n_embd] (and the shared expert's gate
/// row after it, where it has one), the stacked gate and up [n_expert * 2 n_ff_exp, n_embd]
/// (each expert's gate rows, then its up rows) and down [n_expert * n_embd, n_ff_exp]
/// projections, and the shared expert's gate/up [2 n_ff_shexp, n_embd] and down.
pub(super) struct ExpertWeights<'a> {
    pub router: &'a [f32],
    pub gate_up: &'a [f32],
    pub down: &'a [f32],
    pub shared: Option<(&'a [f32], &'a [f32])>,
    /// The router's and every expert's biases, where the model has them (GPT-OSS).
    pub bias: Option<&'a ExpertBias<Vec<f32>>>,
    /// The experts' selection bias, where the model has one (GLM-4.5).
    pub select_bias: Option<&'a [f32]>,
}

impl ExpertWeights<'_> {
    /// The block's MLP output for `xn` ([tokens, n_embd], normed): [tokens, n_embd].
    pub fn forward(&self, xn: &[f32], c: &ModelConfig) -> Vec<f32> {
        let Some(x) = c.experts else {
            return Vec::new();
        };
        let e = c.n_embd;
        let width = x.router_rows();
        let mut logits = matmul(xn, self.router, width, e); // (tokens, n_expert [+ 1])
        if let Some(b) = self.bias {
            // The router's bias covers the experts' rows only, never a shared expert's gate.
            for row in logits.chunks_mut(width) {
                add_bias(&mut row[..b.router.len()], &b.router);
            }
        }
        let mut out = vec![0f32; xn.len()];
        for ((row, logits), y) in xn
            .chunks(e)
            .zip(logits.chunks(width))
            .zip(out.chunks_mut(e))
        {
            for (expert, weight) in route(&logits[..x.count], &x, self.select_bias) {
                let gate_up = &self.gate_up[expert * 2 * x.n_ff * e..][..2 * x.n_ff * e];
                let down = &self.down[expert * e * x.n_ff..][..e * x.n_ff];
                let bias = self.bias.map(|b| {
                    (
                        &b.gate_up[expert * 2 * x.n_ff..][..2 * x.n_ff],
                        &b.down[expert * e..][..e],
                    )
                });
                add_gated_mlp(y, weight, row, (gate_up, down), bias, x.n_ff, c);
            }
            if let (Some(sh), Some(weights)) = (x.shared, self.shared) {
                // The shared expert, scaled by the sigmoid of its gate's logit where it has one.
                let weight = match sh.gated {
                    true => 1.0 / (1.0 + (-logits[x.count]).exp()),
                    false => 1.0,
                };
                add_gated_mlp(y, weight, row, weights, None, sh.n_ff, c);
            }
        }
        out
    }
}

/// y += weight * down(act(gate x) * (up x)) for one token's x, with `gate_up` [2 n_ff, n_embd]
/// (gate rows, then up rows) and `down` [n_embd, n_ff], and their biases where given
/// ([2 n_ff] and [n_embd]).
#[allow(clippy::too_many_arguments)]
fn add_gated_mlp(
    y: &mut [f32],
    weight: f32,
    x: &[f32],
    (gate_up, down): (&[f32], &[f32]),
    bias: Option<(&[f32], &[f32])>,
    n_ff: usize,
    c: &ModelConfig,
) {
    let e = c.n_embd;
    let mut both = matmul(x, gate_up, 2 * n_ff, e);
    if let Some((b, _)) = bias {
        add_bias(&mut both, b);
    }
    let (g, u) = both.split_at(n_ff);
    let hidden = c.mlp_act.apply(g, u);
    let mut out = matmul(&hidden, down, e, n_ff);
    if let Some((_, b)) = bias {
        add_bias(&mut out, b);
    }
    for (y, v) in y.iter_mut().zip(out) {
        *y += weight * v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_models::spec::{Experts, Gating};

    fn experts(used: usize, gating: Gating, normalize: bool) -> Experts {
        Experts {
            count: 4,
            used,
            n_ff: 8,
            gating,
            normalize,
            shared: None,
            scale: 1.0,
            groups: 1,
            groups_used: 1,
            leading_dense: 0,
        }
    }

    #[test]
    fn the_heaviest_experts_run_with_their_softmax_weights() {
        let logits = [0.0, 2.0, 1.0, 2.0f32.ln() + 1.0];
        let softmax: Vec<f32> = {
            let e: Vec<f32> = logits.iter().map(|l| l.exp()).collect();
            let s: f32 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        };
        let picked = route(&logits, &experts(2, Gating::Softmax, false), None);
        assert_eq!(picked, [(1, softmax[1]), (3, softmax[3])]);
        let picked = route(&logits, &experts(2, Gating::Softmax, true), None);
        let sum = softmax[1] + softmax[3];
        assert_eq!(picked, [(1, softmax[1] / sum), (3, softmax[3] / sum)]);
    }

    #[test]
    fn equal_weights_go_to_the_lower_index() {
        let picked = route(
            &[1.0, 3.0, 3.0, 3.0],
            &experts(2, Gating::Sigmoid, false),
            None,
        );
        let s = 1.0 / (1.0 + (-3.0f32).exp());
        assert_eq!(picked, [(1, s), (2, s)]);
    }

    /// GLM-4.5's routing: the selection bias chooses, the group with the better two scores
    /// alone takes part, and the chosen sigmoids without the bias are renormalized and
    /// scaled.
    #[test]
    fn the_selection_bias_and_groups_choose_and_the_scale_weighs() {
        let sig = |l: f32| 1.0 / (1.0 + (-l).exp());
        // Groups {0, 1} and {2, 3}; experts 0 and 1 lead on the logits alone.
        let logits = [2.0, 1.5, 1.0, 0.0f32];
        let x = Experts {
            groups: 2,
            groups_used: 1,
            scale: 2.5,
            ..experts(2, Gating::Sigmoid, true)
        };
        let picked = route(&logits, &x, None);
        let sum = sig(2.0) + sig(1.5);
        assert_eq!(
            picked,
            [(0, sig(2.0) / sum * 2.5), (1, sig(1.5) / sum * 2.5)]
        );
        // A bias that lifts group {2, 3} above (1.83 against 1.70): both its experts run,
        // in the order of their scores with the bias, weighed without it.
        let bias = [0.0, 0.0, 0.0, 0.6f32];
        let picked = route(&logits, &x, Some(&bias));
        let sum = sig(1.0) + sig(0.0);
        assert_eq!(
            picked,
            [(3, sig(0.0) / sum * 2.5), (2, sig(1.0) / sum * 2.5)]
        );
        // Without groups the same bias picks across them: 3 (1.1), then 0 (0.88).
        let flat = Experts { groups: 1, ..x };
        let ids: Vec<usize> = route(&logits, &flat, Some(&bias))
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(ids, [3, 0]);
    }

    /// DeepSeek-V2's routing: under softmax a group is scored by its best expert, so the
    /// group holding the single best takes part though the other's two best sum higher.
    #[test]
    fn softmax_groups_are_scored_by_their_best_expert() {
        // Groups {0, 1} (best 2.0, two best 2.0 + -2.0) and {2, 3} (1.5 + 1.4).
        let logits = [2.0, -2.0, 1.5, 1.4f32];
        let x = Experts {
            groups: 2,
            groups_used: 1,
            scale: 1.5,
            ..experts(2, Gating::Softmax, false)
        };
        let softmax: Vec<f32> = {
            let max = 2.0f32;
            let e: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
            let s: f32 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        };
        let picked = route(&logits, &x, None);
        assert_eq!(picked, [(0, softmax[0] * 1.5), (1, softmax[1] * 1.5)]);
        // Under sigmoid the same logits choose the other group, by its two best.
        let sigmoid = Experts {
            gating: Gating::Sigmoid,
            ..x
        };
        let ids: Vec<usize> = route(&logits, &sigmoid, None).iter().map(|p| p.0).collect();
        assert_eq!(ids, [2, 3]);
    }
}
