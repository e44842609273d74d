//! Elementwise kernels: gated activations (SwiGLU, GeGLU), GELU, and add/multiply with a
//! broadcast second operand.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{BINARY, GELU, SWIGLU};

use super::{check_sizes, linear_groups, workgroup_size};
use crate::cpu::ops::GatedAct;
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result, VkError};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SwiGluPush {
    n: u32,
    cols: u32,
    stride: u32,
    up_offset: u32,
    gelu: u32,
}

pub struct SwiGlu {
    pipeline: Arc<Pipeline>,
}

impl SwiGlu {
    pub fn new(device: &Device) -> Result<Self> {
        Ok(Self {
            pipeline: device.pipeline(SWIGLU, &[workgroup_size(device.info())])?,
        })
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
        check_sizes(
            SWIGLU.name,
            &[
                ("gate", gate, bytes),
                ("up", up, bytes),
                ("out", out, bytes),
            ],
        )?;
        let groups = linear_groups(
            rec.device().info(),
            n as u64,
            self.pipeline.workgroup_size(),
        );
        let push = SwiGluPush {
            n,
            cols: n,
            stride: n,
            up_offset: 0,
            gelu: 0,
        };
        rec.dispatch(&self.pipeline, &[gate, up, out], &push, groups)
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
        check_sizes(
            SWIGLU.name,
            &[("gate_up", gate_up, 2 * n * 4), ("out", out, n * 4)],
        )?;
        let groups = linear_groups(rec.device().info(), n, self.pipeline.workgroup_size());
        let push = SwiGluPush {
            n: n as u32,
            cols,
            stride: 2 * cols,
            up_offset: cols,
            gelu: (act == GatedAct::GeluTanh) as u32,
        };
        rec.dispatch(&self.pipeline, &[gate_up, gate_up, out], &push, groups)
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct GeluPush {
    n: u32,
    exact: u32,
}

pub struct Gelu {
    pipeline: Arc<Pipeline>,
}

impl Gelu {
    pub fn new(device: &Device) -> Result<Self> {
        Ok(Self {
            pipeline: device.pipeline(GELU, &[workgroup_size(device.info())])?,
        })
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
        check_sizes(GELU.name, &[("x", x, n as u64 * 4), ("y", y, n as u64 * 4)])?;
        let groups = linear_groups(
            rec.device().info(),
            n as u64,
            self.pipeline.workgroup_size(),
        );
        rec.dispatch(
            &self.pipeline,
            &[x, y],
            &GeluPush {
                n,
                exact: exact as u32,
            },
            groups,
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add = 0,
    Mul = 1,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BinaryPush {
    n: u32,
    b_len: u32,
    op: u32,
}

/// The operands of one `Binary` dispatch: out[i] = a[i] (op) b[i % b_len] for i < n.
#[derive(Clone, Copy)]
pub struct BinaryArgs<'a> {
    /// [n]
    pub a: &'a Buffer,
    /// [b_len], repeated over a.
    pub b: &'a Buffer,
    /// [n]
    pub out: &'a Buffer,
    pub n: u32,
    pub b_len: u32,
}

pub struct Binary {
    pipeline: Arc<Pipeline>,
}

impl Binary {
    pub fn new(device: &Device) -> Result<Self> {
        Ok(Self {
            pipeline: device.pipeline(BINARY, &[workgroup_size(device.info())])?,
        })
    }

    /// out[i] = a[i] (op) b[i % b_len] over `n` elements; `b_len` must divide `n`.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        op: BinaryOp,
        args: BinaryArgs<'a>,
    ) -> Result<()> {
        let BinaryArgs {
            a,
            b,
            out,
            n,
            b_len,
        } = args;
        if b_len == 0 || n % b_len != 0 {
            return Err(VkError::Kernel {
                kernel: BINARY.name,
                message: format!("b_len {b_len} does not divide n {n}"),
            });
        }
        let bytes = n as u64 * 4;
        check_sizes(
            BINARY.name,
            &[
                ("a", a, bytes),
                ("b", b, b_len as u64 * 4),
                ("out", out, bytes),
            ],
        )?;
        let groups = linear_groups(
            rec.device().info(),
            n as u64,
            self.pipeline.workgroup_size(),
        );
        rec.dispatch(
            &self.pipeline,
            &[a, b, out],
            &BinaryPush {
                n,
                b_len,
                op: op as u32,
            },
            groups,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ops;
    use crate::testing::{assert_close, device, finish, random, run, upload, zeros};

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

    #[test]
    fn add_and_mul_broadcast() {
        let Some(dev) = device() else { return };
        let kernel = Binary::new(&dev).unwrap();
        for &(rows, cols) in &[(1, 1), (3, 7), (5, 97), (1, 65_537)] {
            let n = rows * cols;
            let (a, b) = (random(n, 11, 3.0), random(cols, 12, 3.0));
            let (ab, bb) = (upload(&dev, &a), upload(&dev, &b));
            for op in [BinaryOp::Add, BinaryOp::Mul] {
                let ob = zeros(&dev, n);
                let args = BinaryArgs {
                    a: &ab,
                    b: &bb,
                    out: &ob,
                    n: n as u32,
                    b_len: cols as u32,
                };
                run(&dev, |rec| kernel.record(rec, op, args).unwrap());
                let want: Vec<f32> = (0..n)
                    .map(|i| {
                        if op == BinaryOp::Add {
                            a[i] + b[i % cols]
                        } else {
                            a[i] * b[i % cols]
                        }
                    })
                    .collect();
                // One f32 operation, as on the CPU: exact.
                assert_close(
                    &format!("{op:?} {rows}x{cols}"),
                    &ob.download(n).unwrap(),
                    &want,
                    |_| 0.0,
                );
            }
        }
        finish(&dev);
    }
}
