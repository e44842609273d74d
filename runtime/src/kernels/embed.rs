//! Embedding row gather from an f32 or f16 table.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{EMBED_F16, EMBED_F32};

use super::{check_sizes, linear_groups, workgroup_size, WeightFormat};
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct EmbedPush {
    dim: u32,
    vocab: u32,
    n: u32,
}

pub struct Embed {
    pipeline: Arc<Pipeline>,
    format: WeightFormat,
}

impl Embed {
    pub fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        let kernel = match format {
            WeightFormat::F32 => EMBED_F32,
            WeightFormat::F16 => EMBED_F16,
        };
        Ok(Self {
            pipeline: device.pipeline(kernel, &[workgroup_size(device.info())])?,
            format,
        })
    }

    /// out[t, :] = table[ids[t], :] for table [vocab, dim], ids [tokens] (u32), out [tokens, dim].
    /// The caller validates ids against `vocab`.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        table: &'a Buffer,
        ids: &'a Buffer,
        out: &'a Buffer,
        tokens: u32,
        vocab: u32,
        dim: u32,
    ) -> Result<()> {
        let n = tokens as u64 * dim as u64;
        check_sizes(
            self.pipeline.name,
            &[
                ("table", table, self.format.bytes(vocab as u64 * dim as u64)),
                ("ids", ids, tokens as u64 * 4),
                ("out", out, n * 4),
            ],
        )?;
        let groups = linear_groups(rec.device().info(), n, self.pipeline.workgroup_size());
        let push = EmbedPush {
            dim,
            vocab,
            n: n as u32,
        };
        rec.dispatch(&self.pipeline, &[table, ids, out], &push, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{device, finish, random, run, upload, zeros};
    use half::f16;

    #[test]
    fn gathers_rows_exactly() {
        let Some(dev) = device() else { return };
        for format in [WeightFormat::F32, WeightFormat::F16] {
            let kernel = Embed::new(&dev, format).unwrap();
            for &(vocab, dim, tokens) in &[(1, 1, 1), (10, 7, 3), (97, 64, 13), (300, 577, 5)] {
                let table = random(vocab * dim, 13, 1.0);
                let ids: Vec<u32> = (0..tokens as u32)
                    .map(|t| (t * 7 + 3) % vocab as u32)
                    .collect();
                let (tb, want): (Buffer, Vec<f32>) = match format {
                    WeightFormat::F32 => (upload(&dev, &table), table.clone()),
                    WeightFormat::F16 => {
                        let h: Vec<f16> = table.iter().map(|&v| f16::from_f32(v)).collect();
                        let back = h.iter().map(|v| v.to_f32()).collect();
                        (Buffer::from_slice(&dev, "table", &h).unwrap(), back)
                    }
                };
                let ib = Buffer::from_slice(&dev, "ids", &ids).unwrap();
                let ob = zeros(&dev, tokens * dim);
                run(&dev, |rec| {
                    kernel
                        .record(rec, &tb, &ib, &ob, tokens as u32, vocab as u32, dim as u32)
                        .unwrap()
                });
                let got = ob.download::<f32>(tokens * dim).unwrap();
                for (t, &id) in ids.iter().enumerate() {
                    let id = id as usize;
                    assert_eq!(
                        got[t * dim..(t + 1) * dim],
                        want[id * dim..(id + 1) * dim],
                        "{format:?} token {t}"
                    );
                }
            }
        }
        finish(&dev);
    }
}
