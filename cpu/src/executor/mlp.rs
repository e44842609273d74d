//! A block's MLP on the native executor: the gated MLP, or a mixture of experts whose tokens
//! are grouped by expert, so each expert's rows are read once per step.

use super::work::Work;
use super::CpuLayer;
use crate::dot::Kernels;
use crate::product::{project, project_rows, Input, Output};
use crate::weights::CpuProjection;
use hearth_model::{ops, Mlp, ModelConfig};

/// The MLP of the normed `xn` ([n, n_embd]) into `w.out`.
pub(super) fn forward(k: &Kernels, c: &ModelConfig, layer: &CpuLayer, xn: &[f32], w: &mut Work) {
    let e = c.n_embd;
    let n = xn.len() / e;
    w.out.clear();
    w.out.resize(n * e, 0.0);
    match &layer.mlp {
        Mlp::Dense { gate_up, down } => {
            gated(
                k,
                c,
                (gate_up, 0..gate_up.rows(), None),
                (down, 0..e, None),
                xn,
                w,
                None,
            );
        }
        Mlp::Experts {
            router,
            gate_up,
            down,
            shared,
        } => {
            let Some(x) = c.experts else { return };
            let width = x.router_rows();
            let mut logits = vec![0f32; n * width];
            let mut input = Input::new(xn, e, &mut w.act, w.mode);
            let o = Output {
                out: &mut logits,
                stride: width,
                col0: 0,
            };
            project(k, router, &mut input, o, &mut w.transposed);
            let bias = layer.expert_bias.as_ref();
            if let Some(b) = bias {
                // The experts' logits only, never a shared expert's gate.
                for row in logits.chunks_mut(width) {
                    ops::add_bias(&mut row[..x.count], &b.router);
                }
            }
            let select_bias = layer.expert_select_bias.as_deref();
            // Each expert's tokens and their weights.
            let mut by_expert: Vec<Vec<(usize, f32)>> = vec![Vec::new(); x.count];
            for (t, logits) in logits.chunks(width).enumerate() {
                for (expert, weight) in ops::route(&logits[..x.count], &x, select_bias) {
                    by_expert[expert].push((t, weight));
                }
            }
            let mut rows = Vec::new();
            for (expert, picked) in by_expert.iter().enumerate() {
                if picked.is_empty() {
                    continue;
                }
                rows.clear();
                for &(t, _) in picked {
                    rows.extend_from_slice(&xn[t * e..][..e]);
                }
                let ff = 2 * x.n_ff;
                let gu = expert * ff..(expert + 1) * ff;
                let dn = expert * e..(expert + 1) * e;
                let gu_bias = bias.map(|b| &b.gate_up[gu.clone()]);
                let dn_bias = bias.map(|b| &b.down[dn.clone()]);
                let (gu, dn) = ((gate_up, gu, gu_bias), (down, dn, dn_bias));
                gated(k, c, gu, dn, &rows, w, Some(picked));
            }
            if let (Some(sh), Some(weights)) = (x.shared, shared) {
                let gates: Vec<(usize, f32)> = (0..n)
                    .map(|t| {
                        // Scaled by the sigmoid of its gate's logit where it has one.
                        let weight = match sh.gated {
                            true => 1.0 / (1.0 + (-logits[t * width + x.count]).exp()),
                            false => 1.0,
                        };
                        (t, weight)
                    })
                    .collect();
                let gu = (&weights.gate_up, 0..weights.gate_up.rows(), None);
                let dn = (&weights.down, 0..e, None);
                gated(k, c, gu, dn, xn, w, Some(&gates));
            }
        }
    }
}

/// Some rows of a projection, and their bias ([rows]) where they have one.
type Rows<'a> = (&'a CpuProjection, std::ops::Range<usize>, Option<&'a [f32]>);

/// `down(act(gate x) * up x)` for the rows of `x` ([n, n_embd]), rows `gate_up.1` of the gate/up
/// projection (gate rows, then up rows) and `down.1` of the down projection, each plus its
/// bias (`.2`, one value per row taken) where it has one. Added to
/// `w.out`: whole for a dense MLP (`targets` `None`), or for each row `i` of `x` into token
/// `targets[i].0`'s row times `targets[i].1`.
fn gated(
    k: &Kernels,
    c: &ModelConfig,
    gate_up: Rows<'_>,
    down: Rows<'_>,
    x: &[f32],
    w: &mut Work,
    targets: Option<&[(usize, f32)]>,
) {
    let e = c.n_embd;
    let n = x.len() / e;
    let ff2 = gate_up.1.len();
    let n_ff = ff2 / 2;
    w.gate_up.resize(n * ff2, 0.0);
    let o = Output {
        out: &mut w.gate_up,
        stride: ff2,
        col0: 0,
    };
    let mut act = std::mem::take(&mut w.act);
    let mut input = Input::new(x, e, &mut act, w.mode);
    project_rows(k, gate_up.0, gate_up.1, &mut input, o, &mut w.transposed);
    w.act = act;
    if let Some(b) = gate_up.2 {
        ops::add_bias(&mut w.gate_up, b);
    }
    w.hidden.clear();
    for row in w.gate_up.chunks(ff2) {
        let (g, u) = row.split_at(n_ff);
        w.hidden.extend(c.mlp_act.apply(g, u));
    }
    let mut act = std::mem::take(&mut w.act2);
    let mut input = Input::new(&w.hidden, n_ff, &mut act, w.mode);
    match targets {
        None => {
            let o = Output {
                out: &mut w.out,
                stride: e,
                col0: 0,
            };
            project_rows(k, down.0, down.1, &mut input, o, &mut w.transposed);
            if let Some(b) = down.2 {
                ops::add_bias(&mut w.out, b);
            }
        }
        Some(targets) => {
            let mut part = vec![0f32; n * e];
            let o = Output {
                out: &mut part,
                stride: e,
                col0: 0,
            };
            project_rows(k, down.0, down.1, &mut input, o, &mut w.transposed);
            if let Some(b) = down.2 {
                ops::add_bias(&mut part, b);
            }
            for (&(t, weight), y) in targets.iter().zip(part.chunks(e)) {
                for (o, v) in w.out[t * e..][..e].iter_mut().zip(y) {
                    *o += weight * v;
                }
            }
        }
    }
    w.act2 = act;
}
