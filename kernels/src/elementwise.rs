//! Elementwise kernels: gated activations (SwiGLU, GeGLU), and a bias with an activation
//! (an encoder's linear layers).

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{BIAS_ACT, SWIGLU};

use super::Pipe;
use crate::vk::{Buffer, Device, Recorder, Result, VkError};
use hearth_model::encoder::EncoderActivation;
use hearth_model::ops::GatedAct;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SwiGluPush {
    n: u32,
    cols: u32,
    stride: u32,
    up_offset: u32,
    gelu: u32,
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
        let push = SwiGluPush {
            n,
            cols: n,
            stride: n,
            up_offset: 0,
            gelu: 0,
        };
        let bindings = [
            ("gate", gate, bytes),
            ("up", up, bytes),
            ("out", out, bytes),
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
        if act == GatedAct::SwigluOai {
            return Err(VkError::Kernel {
                kernel: SWIGLU.name,
                message: "no variant for the clamped SwiGLU".into(),
            });
        }
        let n = tokens as u64 * cols as u64;
        let push = SwiGluPush {
            n: n as u32,
            cols,
            stride: 2 * cols,
            up_offset: cols,
            gelu: (act == GatedAct::GeluTanh) as u32,
        };
        // Gate and up are both read from the one buffer.
        let gate_up = ("gate_up", gate_up, 2 * n * 4);
        let bindings = [gate_up, gate_up, ("out", out, n * 4)];
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
