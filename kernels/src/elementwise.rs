//! Elementwise kernels: gated activations (SwiGLU, GeGLU, GPT-OSS's clamped SwiGLU, with a
//! mixture of experts' per-expert biases where it has them), and a bias with an activation
//! (an encoder's linear layers, a projection's bias).

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{BIAS_ACT, SWIGLU};

use super::Pipe;
use crate::vk::{Buffer, Device, Recorder, Result};
use hearth_model::encoder::EncoderActivation;
use hearth_model::ops::{GatedAct, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SwiGluPush {
    n: u32,
    cols: u32,
    stride: u32,
    up_offset: u32,
    act: u32,
    biased: u32,
    alpha: f32,
    limit: f32,
}

impl SwiGluPush {
    /// `n` values of `act`, rows of `cols` whose gate and up values are `stride` apart and
    /// `up_offset` from each other, without biases.
    fn new(n: u32, cols: u32, (stride, up_offset): (u32, u32), act: GatedAct) -> Self {
        Self {
            n,
            cols,
            stride,
            up_offset,
            act: match act {
                GatedAct::Silu => 0,
                GatedAct::GeluTanh => 1,
                GatedAct::SwigluOai => 2,
            },
            biased: 0,
            alpha: SWIGLU_OAI_ALPHA,
            limit: SWIGLU_OAI_LIMIT,
        }
    }
}

/// The biases of a mixture of experts' gated products, added before the activation: `bias`
/// [n_expert * 2 cols] (expert e's gate biases at e * 2 cols, then its up biases) and the
/// expert of every slot, `experts` (moe_route's `RouteOut::experts`).
#[derive(Clone, Copy)]
pub struct ExpertBiases<'a> {
    pub bias: &'a Buffer,
    pub experts: &'a Buffer,
}

pub struct SwiGlu(Pipe);

impl SwiGlu {
    pub fn new(device: &Device) -> Result<Self> {
        Pipe::new(device, SWIGLU).map(Self)
    }

    /// out = silu(gate) * up over `n` elements.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        gate: &'a Buffer,
        up: &'a Buffer,
        out: &'a Buffer,
        n: u32,
    ) -> Result<()> {
        let bytes = n as u64 * 4;
        let push = SwiGluPush::new(n, n, (n, 0), GatedAct::Silu);
        // The bias bindings are unread; gate fills them.
        let bindings = [
            ("gate", gate, bytes),
            ("up", up, bytes),
            ("out", out, bytes),
            ("bias", gate, 0),
            ("experts", gate, 0),
        ];
        self.0.dispatch_items(rec, bindings, &push, n as u64)
    }

    /// out [tokens, cols] = act(gate) * up where `gate_up` is [tokens, 2 * cols], each row
    /// holding gate then up (the output of one fused projection).
    pub fn record_fused<'a>(
        &self,
        rec: &mut Recorder<'a>,
        gate_up: &'a Buffer,
        out: &'a Buffer,
        tokens: u32,
        cols: u32,
        act: GatedAct,
    ) -> Result<()> {
        self.record_experts(rec, gate_up, out, (tokens, cols), act, None)
    }

    /// [`record_fused`](Self::record_fused) over a mixture of experts' slots (`slots` rows),
    /// each slot's expert's biases added to its gate and up values first where `biases` are
    /// given.
    pub fn record_experts<'a>(
        &self,
        rec: &mut Recorder<'a>,
        gate_up: &'a Buffer,
        out: &'a Buffer,
        (slots, cols): (u32, u32),
        act: GatedAct,
        biases: Option<ExpertBiases<'a>>,
    ) -> Result<()> {
        let n = slots as u64 * cols as u64;
        let push = SwiGluPush {
            biased: biases.is_some() as u32,
            ..SwiGluPush::new(n as u32, cols, (2 * cols, cols), act)
        };
        // Gate and up are both read from the one buffer; without biases it fills their
        // bindings too, unread.
        let gate_up = ("gate_up", gate_up, 2 * n * 4);
        let (bias, experts) = match biases {
            Some(b) => (
                ("bias", b.bias, 2 * cols as u64 * 4),
                ("experts", b.experts, slots as u64 * 4),
            ),
            None => (gate_up, gate_up),
        };
        let bindings = [gate_up, gate_up, ("out", out, n * 4), bias, experts];
        self.0.dispatch_items(rec, bindings, &push, n)
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BiasActPush {
    n: u32,
    cols: u32,
    act: u32,
}

/// A linear layer's output finished in place: its bias added, then an activation.
pub struct BiasAct(Pipe);

impl BiasAct {
    pub fn new(device: &Device) -> Result<Self> {
        Pipe::new(device, BIAS_ACT).map(Self)
    }

    /// y = act(y + bias) for y [rows, cols] and bias [cols]; `act` `None` adds the bias only.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        y: &'a Buffer,
        bias: &'a Buffer,
        (rows, cols): (u32, u32),
        act: Option<EncoderActivation>,
    ) -> Result<()> {
        let n = rows as u64 * cols as u64;
        let push = BiasActPush {
            n: n as u32,
            cols,
            act: match act {
                None => 0,
                Some(EncoderActivation::Gelu) => 1,
                Some(EncoderActivation::GeluTanh) => 2,
                Some(EncoderActivation::Relu) => 3,
            },
        };
        let bindings = [("y", y, n * 4), ("bias", bias, cols as u64 * 4)];
        self.0.dispatch_items(rec, bindings, &push, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, device, finish, random, run, upload, zeros};
    use hearth_reference::ops;

    const SIZES: &[usize] = &[1, 7, 64, 97, 1000, 65_537];

    #[test]
    fn swiglu_matches_reference() {
        let Some(dev) = device() else { return };
        let kernel = SwiGlu::new(&dev).unwrap();
        for &n in SIZES {
            let (g, u) = (random(n, 8, 6.0), random(n, 9, 2.0));
            let (gb, ub, ob) = (upload(&dev, &g), upload(&dev, &u), zeros(&dev, n));
            run(&dev, |rec| {
                kernel.record(rec, &gb, &ub, &ob, n as u32).unwrap()
            });
            let want = ops::swiglu(&g, &u);
            assert_close(
                &format!("swiglu {n}"),
                &ob.download(n).unwrap(),
                &want,
                |i| 2e-6 * want[i].abs() + 1e-7,
            );
        }
        finish(&dev);
    }

    /// The fused layout ([rows, 2 cols]: gate, then up) for every gated activation, GPT-OSS's
    /// clamped SwiGLU over values on both sides of its clamps, and per-expert biases on the
    /// slots of a mixture of experts.
    #[test]
    fn fused_gated_activations_match_reference() {
        let Some(dev) = device() else { return };
        let kernel = SwiGlu::new(&dev).unwrap();
        let (rows, cols, n_expert) = (5usize, 97usize, 3usize);
        let both = random(rows * 2 * cols, 12, 12.0);
        let bias = random(n_expert * 2 * cols, 13, 3.0);
        let experts: Vec<u32> = (0..rows as u32).map(|r| (r * 2 + 1) % 3).collect();
        let (bb, biasb) = (upload(&dev, &both), upload(&dev, &bias));
        let eb = Buffer::from_slice(&dev, "experts", &experts).unwrap();
        for act in [GatedAct::Silu, GatedAct::GeluTanh, GatedAct::SwigluOai] {
            for biased in [false, true] {
                let ob = zeros(&dev, rows * cols);
                let biases = biased.then_some(ExpertBiases {
                    bias: &biasb,
                    experts: &eb,
                });
                let shape = (rows as u32, cols as u32);
                run(&dev, |rec| {
                    kernel
                        .record_experts(rec, &bb, &ob, shape, act, biases)
                        .unwrap()
                });
                let mut want = Vec::new();
                for (r, row) in both.chunks(2 * cols).enumerate() {
                    let mut row = row.to_vec();
                    if biased {
                        let e = experts[r] as usize;
                        ops::add_bias(&mut row, &bias[e * 2 * cols..][..2 * cols]);
                    }
                    want.extend(act.apply(&row[..cols], &row[cols..]));
                }
                assert_close(
                    &format!("{act:?} biased {biased}"),
                    &ob.download(rows * cols).unwrap(),
                    &want,
                    // GELU's far tail: the shader's tanh form gives -0 below -10.
                    |i| 2e-6 * want[i].abs() + 1e-5,
                );
            }
        }
        finish(&dev);
    }

    #[test]
    fn bias_act_matches_reference_for_every_activation() {
        let Some(dev) = device() else { return };
        let kernel = BiasAct::new(&dev).unwrap();
        let acts = [
            None,
            Some(EncoderActivation::Gelu),
            Some(EncoderActivation::GeluTanh),
            Some(EncoderActivation::Relu),
        ];
        for act in acts {
            for &(rows, cols) in &[(1, 1), (3, 7), (1, 97), (5, 384), (2, 1536), (1, 65_537)] {
                // Wide range: the tanh form must not overflow for large |x|.
                let (y, bias) = (random(rows * cols, 10, 30.0), random(cols, 11, 2.0));
                let (yb, bb) = (upload(&dev, &y), upload(&dev, &bias));
                let shape = (rows as u32, cols as u32);
                run(&dev, |rec| {
                    kernel.record(rec, &yb, &bb, shape, act).unwrap()
                });
                let mut want: Vec<f32> = y
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v + bias[i % cols])
                    .collect();
                if let Some(act) = act {
                    act.apply(&mut want);
                }
                // The erf approximation is good to 1.5e-7 absolute.
                assert_close(
                    &format!("bias_act {act:?} {rows}x{cols}"),
                    &yb.download(rows * cols).unwrap(),
                    &want,
                    |i| 2e-6 * want[i].abs() + 1e-6,
                );
            }
        }
        finish(&dev);
    }
}
