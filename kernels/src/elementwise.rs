//! Elementwise kernels: gated activations (SwiGLU, GeGLU) and GELU.

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{GELU, SWIGLU};

use super::Pipe;
use crate::vk::{Buffer, Device, Recorder, Result};
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
struct GeluPush {
    n: u32,
    exact: u32,
}

pub struct Gelu(Pipe);

impl Gelu {
    pub fn new(device: &Device) -> Result<Self> {
        Pipe::new(device, GELU).map(Self)
    }

    /// y = gelu(x) over `n` elements; `exact` picks the erf form over the tanh approximation.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        x: &'a Buffer,
        y: &'a Buffer,
        n: u32,
        exact: bool,
    ) -> Result<()> {
        let bytes = n as u64 * 4;
        let push = GeluPush {
            n,
            exact: exact as u32,
        };
        self.0
            .dispatch_items(rec, [("x", x, bytes), ("y", y, bytes)], &push, n as u64)
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
    fn gelu_matches_reference_in_both_forms() {
        let Some(dev) = device() else { return };
        let kernel = Gelu::new(&dev).unwrap();
        for exact in [true, false] {
            for &n in SIZES {
                // Wide range: the tanh form must not overflow for large |x|.
                let x = random(n, 10, 30.0);
                let (xb, yb) = (upload(&dev, &x), zeros(&dev, n));
                run(&dev, |rec| {
                    kernel.record(rec, &xb, &yb, n as u32, exact).unwrap()
                });
                let want = ops::gelu(&x, exact);
                // The erf approximation is good to 1.5e-7 absolute.
                assert_close(
                    &format!("gelu exact={exact} {n}"),
                    &yb.download(n).unwrap(),
                    &want,
                    |i| 2e-6 * want[i].abs() + 1e-6,
                );
            }
        }
        finish(&dev);
    }
}
