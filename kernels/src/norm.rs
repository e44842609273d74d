//! RMSNorm and LayerNorm over rows: one workgroup per row.

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{LAYERNORM, RMSNORM};

use super::Pipe;
use crate::vk::{Buffer, Device, Recorder, Result};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct NormPush {
    n: u32,
    eps: f32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RmsNormPush {
    n: u32,
    eps: f32,
    accumulate: u32,
}

/// The rows a norm runs over: `rows` rows of `n` values, normalised with epsilon `eps`.
#[derive(Clone, Copy, Debug)]
pub struct NormShape {
    pub rows: u32,
    pub n: u32,
    pub eps: f32,
}

impl NormShape {
    /// Bytes of the rows, and of one row (a gain or bias).
    fn bytes(&self) -> (u64, u64) {
        let row = self.n as u64 * 4;
        (self.rows as u64 * row, row)
    }
}

pub struct RmsNorm(Pipe);

impl RmsNorm {
    pub fn new(device: &Device) -> Result<Self> {
        Pipe::new(device, RMSNORM).map(Self)
    }

    /// y = rmsnorm(x) * w for x, y [rows, n] and w [n].
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        x: &'a Buffer,
        w: &'a Buffer,
        y: &'a Buffer,
        shape: NormShape,
    ) -> Result<()> {
        self.dispatch(rec, x, w, y, shape, false)
    }

    /// y += rmsnorm(x) * w: a normed block output added to the residual stream y.
    pub fn record_add<'a>(
        &self,
        rec: &mut Recorder<'a>,
        x: &'a Buffer,
        w: &'a Buffer,
        y: &'a Buffer,
        shape: NormShape,
    ) -> Result<()> {
        self.dispatch(rec, x, w, y, shape, true)
    }

    fn dispatch<'a>(
        &self,
        rec: &mut Recorder<'a>,
        x: &'a Buffer,
        w: &'a Buffer,
        y: &'a Buffer,
        shape: NormShape,
        accumulate: bool,
    ) -> Result<()> {
        let NormShape { rows, n, eps } = shape;
        let (bytes, vec) = shape.bytes();
        let push = RmsNormPush {
            n,
            eps,
            accumulate: accumulate as u32,
        };
        let bindings = [("x", x, bytes), ("w", w, vec), ("y", y, bytes)];
        self.0.dispatch(rec, bindings, &push, [rows, 1, 1])
    }
}

pub struct LayerNorm(Pipe);

impl LayerNorm {
    pub fn new(device: &Device) -> Result<Self> {
        Pipe::new(device, LAYERNORM).map(Self)
    }

    /// y = layernorm(x) * w + b for x, y [rows, n] and w, b [n].
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        x: &'a Buffer,
        w: &'a Buffer,
        b: &'a Buffer,
        y: &'a Buffer,
        shape: NormShape,
    ) -> Result<()> {
        let NormShape { rows, n, eps } = shape;
        let (bytes, vec) = shape.bytes();
        let bindings = [
            ("x", x, bytes),
            ("w", w, vec),
            ("b", b, vec),
            ("y", y, bytes),
        ];
        self.0
            .dispatch(rec, bindings, &NormPush { n, eps }, [rows, 1, 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, device, finish, random, run, upload, zeros};
    use hearth_reference::ops;

    fn shape(rows: usize, n: usize) -> NormShape {
        NormShape {
            rows: rows as u32,
            n: n as u32,
            eps: 1e-5,
        }
    }

    #[test]
    fn rmsnorm_matches_reference() {
        let Some(dev) = device() else { return };
        let kernel = RmsNorm::new(&dev).unwrap();
        for &(rows, n) in &[(1, 1), (3, 7), (2, 64), (5, 97), (1, 576), (4, 4099)] {
            let (x, w) = (random(rows * n, 1, 2.0), random(n, 2, 1.0));
            let (xb, wb, yb) = (upload(&dev, &x), upload(&dev, &w), zeros(&dev, rows * n));
            run(&dev, |rec| {
                let shape = shape(rows, n);
                kernel.record(rec, &xb, &wb, &yb, shape).unwrap()
            });
            let want = ops::rmsnorm(&x, &w, n, 1e-5);
            // An f32 sum of squares and inversesqrt: a few ulps, relative.
            let got = yb.download(rows * n).unwrap();
            assert_close(&format!("rmsnorm {rows}x{n}"), &got, &want, |i| {
                2e-6 * want[i].abs() + 1e-7
            });
        }
        finish(&dev);
    }

    #[test]
    fn layernorm_matches_reference() {
        let Some(dev) = device() else { return };
        let kernel = LayerNorm::new(&dev).unwrap();
        for &(rows, n) in &[(1, 1), (3, 7), (2, 64), (5, 97), (2, 384), (4, 4099)] {
            // An offset of 3 checks that the variance is taken about the mean.
            let x: Vec<f32> = random(rows * n, 3, 1.0).iter().map(|v| v + 3.0).collect();
            let (w, b) = (random(n, 4, 1.0), random(n, 5, 0.5));
            let (xb, wb, bb) = (upload(&dev, &x), upload(&dev, &w), upload(&dev, &b));
            let yb = zeros(&dev, rows * n);
            run(&dev, |rec| {
                let shape = shape(rows, n);
                kernel.record(rec, &xb, &wb, &bb, &yb, shape).unwrap()
            });
            let want = ops::layernorm(&x, &w, &b, n, 1e-5);
            let got = yb.download(rows * n).unwrap();
            assert_close(&format!("layernorm {rows}x{n}"), &got, &want, |i| {
                1e-5 * want[i].abs() + 2e-6
            });
        }
        finish(&dev);
    }

    #[test]
    fn rejects_undersized_buffers() {
        let Some(dev) = device() else { return };
        let kernel = RmsNorm::new(&dev).unwrap();
        let small = upload(&dev, &[0.0; 4]);
        let mut rec = Recorder::new(&dev).unwrap();
        let err = kernel
            .record(&mut rec, &small, &small, &small, shape(2, 4))
            .unwrap_err();
        assert!(
            err.to_string().contains("rmsnorm") && err.to_string().contains("`x`"),
            "{err}"
        );
        finish(&dev);
    }
}
