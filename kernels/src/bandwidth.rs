//! A streaming read of a large buffer: the device's achievable read bandwidth, the ceiling
//! memory-bound kernels (decode matvec) are measured against.

use bytemuck::{Pod, Zeroable};
use hearth_shaders::BANDWIDTH_READ;

use super::Pipe;
use crate::vk::{Buffer, Device, Recorder, Result};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ReadPush {
    n4: u32,
    threads: u32,
}

pub struct ReadBandwidth {
    pipe: Pipe,
    threads: u32,
}

impl ReadBandwidth {
    pub fn new(device: &Device) -> Result<Self> {
        let pipe = Pipe::new(device, BANDWIDTH_READ)?;
        // Enough invocations to keep every core or compute unit streaming.
        let threads = pipe.workgroup_size() * 1024;
        Ok(Self { pipe, threads })
    }

    /// Bytes of scratch `dst` must hold.
    pub fn scratch_bytes(&self) -> u64 {
        self.threads as u64 * 4
    }

    /// Reads all of `src` (its size rounded down to 16 bytes), writing partial sums to `dst`.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        src: &'a Buffer,
        dst: &'a Buffer,
    ) -> Result<()> {
        let push = ReadPush {
            n4: (src.size() / 16) as u32,
            threads: self.threads,
        };
        let bindings = [("src", src, 0), ("dst", dst, self.scratch_bytes())];
        self.pipe
            .dispatch_items(rec, bindings, &push, self.threads as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{device, finish, run, zeros};

    #[test]
    fn reads_every_element() {
        let Some(dev) = device() else { return };
        let kernel = ReadBandwidth::new(&dev).unwrap();
        let n = 1_000_003 * 4;
        let src = Buffer::from_slice(&dev, "src", &vec![1f32; n]).unwrap();
        let dst = zeros(&dev, kernel.scratch_bytes() as usize / 4);
        run(&dev, |rec| kernel.record(rec, &src, &dst).unwrap());
        let total: f64 = dst
            .download::<f32>(kernel.scratch_bytes() as usize / 4)
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .sum();
        assert_eq!(total, n as f64);
        finish(&dev);
    }
}
