//! A block's MLP recorded into a step: the dense gated MLP, and the mixture of experts (the
//! router, the chosen experts' grouped products, a shared expert) summed with the router's
//! weights.

use hearth_model::ops::GatedAct;
use hearth_model::{Error, ExpertBias, Mlp, Result, SharedMlp};

use super::policy::{Beside, RecordingLayer};
use super::{DeviceMatrix, VkModel};
use hearth_kernels::vk::{Buffer, Recorder};
use hearth_kernels::{
    slots_per_token, ExpertBiases, ExpertSlots, MatmulArgs, MatvecArgs, NormShape, OutputCols,
    RouteOut,
};

/// A block's experts on the device (`Mlp::Experts`).
#[derive(Clone, Copy)]
struct ExpertsAt<'a> {
    router: &'a [DeviceMatrix],
    gate_up: &'a [DeviceMatrix],
    down: &'a [DeviceMatrix],
    shared: Option<&'a SharedMlp<Vec<DeviceMatrix>>>,
    /// The router's and every expert's biases (GPT-OSS).
    bias: Option<&'a ExpertBias<Buffer>>,
}

/// A gated MLP to record: its input, and its norm gain where the input is to be normed;
/// gate/up and down weights; its width; the [tokens, 2 n_ff] gate/up output (prefill) and
/// [tokens, n_ff] hidden scratch; and where its output goes (+= where accumulating).
struct GatedMlp<'a> {
    x: &'a Buffer,
    norm: Option<&'a Buffer>,
    weights: (&'a [DeviceMatrix], &'a [DeviceMatrix]),
    n_ff: u32,
    scratch: (&'a Buffer, &'a Buffer),
    out: (&'a Buffer, bool, OutputCols),
}

impl VkModel {
    /// The MLP block, down(act(gate(xn)) * up(xn)) added to x (normed first where the model
    /// has a post-norm), with a piece of `beside` between its two products.
    pub(super) fn record_mlp<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &RecordingLayer<'a>,
        beside: &mut Beside<'a>,
    ) -> Result<()> {
        let (c, s, w) = (at.config, at.scratch, at.weights());
        // The down projection adds to x, or lands in xn for a post-norm.
        let post = w.ffn_post_norm.as_ref();
        let (out, accumulate) = match post {
            Some(_) => (&s.xn, false),
            None => (&s.x, !at.partial),
        };
        match &w.mlp {
            Mlp::Dense { gate_up, down } => {
                let mlp = GatedMlp {
                    x: &s.x,
                    norm: Some(&w.ffn_norm),
                    weights: (gate_up, down),
                    n_ff: c.n_ff as u32,
                    scratch: (&s.gate_up, &s.hidden),
                    out: (out, accumulate, OutputCols::default()),
                };
                self.record_gated_mlp(rec, at, Some(beside), mlp)?;
            }
            Mlp::Experts {
                router,
                gate_up,
                down,
                shared,
            } => {
                let experts = ExpertsAt {
                    router,
                    gate_up,
                    down,
                    shared: shared.as_ref(),
                    bias: w.expert_bias.as_ref(),
                };
                self.record_experts(rec, at, beside, experts, (out, accumulate))?;
            }
        }
        self.record_post_norm(rec, at, post)
    }

    /// A gated MLP, down(act(gate(x')) * up(x')) into `mlp.out`, x' the norm of x where
    /// `mlp.norm` is given, with a piece of `beside` between the two products.
    fn record_gated_mlp<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &RecordingLayer<'a>,
        mut beside: Option<&mut Beside<'a>>,
        mlp: GatedMlp<'a>,
    ) -> Result<()> {
        let (c, k, s) = (at.config, at.kernels, at.scratch);
        let t = at.plan.steps.len() as u32;
        let (e, n_ff, eps) = (c.n_embd as u32, mlp.n_ff, c.norm_eps);
        let (w_gate_up, w_down) = mlp.weights;
        let (gate_up, hidden) = mlp.scratch;
        let (out, accumulate, cols) = mlp.out;
        let mut between = |rec: &mut Recorder<'a>| match &mut beside {
            Some(b) => b.step(rec),
            None => Ok(()),
        };
        // The gated product reads gate and up rows together, in one format: gate and up in
        // different formats, and the clamped SwiGLU, which it has no variant for, take the
        // separate products and the activation between them.
        if at.plan.streaming && w_gate_up.len() == 1 && c.mlp_act != GatedAct::SwigluOai {
            let args = MatvecArgs::plain(&w_gate_up[0].buffer, mlp.x, hidden, n_ff, e, t);
            let norm = mlp.norm.map(|g| (g, eps));
            let gated = Some(c.mlp_act);
            k.matvec(
                rec,
                w_gate_up,
                MatvecArgs {
                    norm,
                    gated,
                    ..args
                },
            )?;
            between(rec)?;
            let args = MatvecArgs::plain(&w_down[0].buffer, hidden, out, e, n_ff, t);
            k.matvec(
                rec,
                w_down,
                MatvecArgs {
                    accumulate,
                    cols,
                    ..args
                },
            )?;
        } else {
            let x = match mlp.norm {
                Some(gain) => {
                    let shape = NormShape { rows: t, n: e, eps };
                    k.rmsnorm.record(rec, mlp.x, gain, &s.xn, shape)?;
                    &s.xn
                }
                None => mlp.x,
            };
            let args = MatmulArgs {
                x,
                c: gate_up,
                n: t,
                m: 2 * n_ff,
                k: e,
                accumulate: false,
                cols: OutputCols::default(),
            };
            k.matmul(rec, w_gate_up, args)?;
            between(rec)?;
            k.swiglu
                .record_fused(rec, gate_up, hidden, t, n_ff, c.mlp_act)?;
            let down = MatmulArgs {
                x: hidden,
                c: out,
                n: t,
                m: e,
                k: n_ff,
                accumulate,
                cols,
            };
            k.matmul(rec, w_down, down)?;
        }
        Ok(())
    }

    /// A mixture of experts' MLP block: the router's logits from the normed x (with their
    /// bias where the model has one), each token's experts chosen and grouped by expert, the
    /// chosen experts' gated products and down products, the shared expert's MLP where the
    /// model has one, and their outputs summed with the router's weights into `out` (each
    /// expert's output with its down bias where the model has them).
    fn record_experts<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &RecordingLayer<'a>,
        beside: &mut Beside<'a>,
        w: ExpertsAt<'a>,
        (out, accumulate): (&'a Buffer, bool),
    ) -> Result<()> {
        let (c, k, s) = (at.config, at.kernels, at.scratch);
        let (Some(x), Some(m), Some((route, combine))) = (&c.experts, &s.moe, &k.moe) else {
            return Err(Error::options(
                "experts",
                "a mixture of experts without its kernels",
            ));
        };
        let t = at.plan.steps.len() as u32;
        let (e, n_ff, used, count) = (
            c.n_embd as u32,
            x.n_ff as u32,
            x.used as u32,
            x.count as u32,
        );
        let stride = slots_per_token(x);
        let slots = t * stride;
        let router_rows = x.router_rows() as u32;
        let shape = NormShape {
            rows: t,
            n: e,
            eps: c.norm_eps,
        };
        k.rmsnorm
            .record(rec, &s.x, &at.weights().ffn_norm, &s.xn, shape)?;
        let io = (&s.xn, &m.router);
        self.record_projection(rec, at, w.router, io, (router_rows, e), false)?;
        if let Some(b) = w.bias {
            // The router's bias covers the experts' logits; no model has it with a shared
            // expert's gate beside them.
            if router_rows != count {
                return Err(Error::options(
                    "experts",
                    "a router's bias beside a shared expert's gate",
                ));
            }
            k.bias(rec.device())?
                .record(rec, &m.router, &b.router, (t, count), None)?;
        }
        let (gate_up, down) = match (w.gate_up, w.down) {
            ([gate_up], [down]) => (gate_up, down),
            _ => {
                return Err(Error::options(
                    "experts",
                    "experts' matrices of several formats in one tensor",
                ))
            }
        };
        let device = rec.device();
        let routes = RouteOut {
            weights: &m.weights,
            experts: &m.experts,
            order: &m.order,
            tiles: &m.tiles,
        };
        // A prompt on a GPU: tiled products over each expert's slots (up to 64 a tile), the
        // gated activation between them. Otherwise weight-streaming products taking one or
        // eight slots a pass, the activation folded into the first, except where the experts
        // have biases or the clamped SwiGLU: their gate/up product lands whole in
        // `separate` and the activation adds the biases and runs between the products.
        let separate = match (
            w.bias.is_some() || c.mlp_act == GatedAct::SwigluOai,
            &m.gate_up,
        ) {
            (false, _) => None,
            (true, Some(buffer)) => Some(buffer),
            (true, None) => {
                return Err(Error::options(
                    "experts",
                    "experts with biases or the clamped SwiGLU without their gate/up scratch",
                ))
            }
        };
        let up_biases = w.bias.map(|b| ExpertBiases {
            bias: &b.gate_up,
            experts: &m.experts,
        });
        let grouped = match (&m.gate_up, at.plan.streaming) {
            (Some(buffer), false) => Some((
                buffer,
                k.of(gate_up.format).grouped_experts_kernel(device)?,
                k.of(down.format).grouped_experts_kernel(device)?,
            )),
            _ => None,
        };
        let streamed = match grouped {
            Some(_) => None,
            None => Some((
                k.of(gate_up.format)
                    .experts_kernel(device, t * used, count)?,
                k.of(down.format).experts_kernel(device, t * used, count)?,
            )),
        };
        // Both products cut the slots the same way.
        let tile = match streamed {
            Some((up, down)) => up.tokens().min(down.tokens()),
            None => hearth_kernels::MATMUL_TILE,
        };
        let logits = (&m.router, at.weights().expert_select_bias.as_ref());
        let max_tiles = route.record(rec, logits, routes, (t, x, tile))?;
        beside.step(rec)?;
        let slots_at = ExpertSlots {
            tiles: &m.tiles,
            order: &m.order,
            max_tiles,
            experts: count,
            x_per: stride,
        };
        let down_at = ExpertSlots {
            x_per: 1,
            ..slots_at
        };
        if let Some((up_kernel, down_kernel)) = streamed {
            match separate {
                Some(both) => {
                    let args = MatvecArgs::plain(&gate_up.buffer, &s.xn, both, 2 * n_ff, e, slots);
                    up_kernel.record_experts(rec, args, slots_at)?;
                    let shape = (slots, n_ff);
                    k.swiglu
                        .record_experts(rec, both, &m.hidden, shape, c.mlp_act, up_biases)?;
                }
                None => {
                    let args = MatvecArgs {
                        gated: Some(c.mlp_act),
                        ..MatvecArgs::plain(&gate_up.buffer, &s.xn, &m.hidden, n_ff, e, slots)
                    };
                    up_kernel.record_experts(rec, args, slots_at)?;
                }
            }
            let args = MatvecArgs::plain(&down.buffer, &m.hidden, &m.out, e, n_ff, slots);
            down_kernel.record_experts(rec, args, down_at)?;
        }
        if let Some((both, up_kernel, down_kernel)) = grouped {
            let product = |x, c, m, k| MatmulArgs {
                x,
                c,
                n: slots,
                m,
                k,
                accumulate: false,
                cols: OutputCols::default(),
            };
            let args = product(&s.xn, both, 2 * n_ff, e);
            up_kernel.record_experts(rec, &gate_up.buffer, args, slots_at)?;
            let shape = (slots, n_ff);
            k.swiglu
                .record_experts(rec, both, &m.hidden, shape, c.mlp_act, up_biases)?;
            let args = product(&m.hidden, &m.out, e, n_ff);
            down_kernel.record_experts(rec, &down.buffer, args, down_at)?;
        }
        // The shared expert's output is each token's last slot.
        if let (Some(sh), Some(weights), Some(scratch)) = (x.shared, w.shared, &m.shared) {
            let mlp = GatedMlp {
                x: &s.xn,
                norm: None,
                weights: (&weights.gate_up, &weights.down),
                n_ff: sh.n_ff as u32,
                scratch: (&scratch.0, &scratch.1),
                out: (
                    &m.out,
                    false,
                    OutputCols {
                        first: used * e,
                        width: stride * e,
                    },
                ),
            };
            self.record_gated_mlp(rec, at, None, mlp)?;
        }
        let down_biases = w.bias.map(|b| ExpertBiases {
            bias: &b.down,
            experts: &m.experts,
        });
        let shape = (t, e, stride);
        combine.record(
            rec,
            (&m.out, &m.weights),
            out,
            shape,
            accumulate,
            down_biases,
        )?;
        Ok(())
    }
}
