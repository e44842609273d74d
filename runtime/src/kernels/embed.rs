//! Embedding row gather from a table in any weight format.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::{
    check_sizes, format_kernels, linear_groups, matrix_bytes, workgroup_size, WeightFormat,
};
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct EmbedPush {
    dim: u32,
    vocab: u32,
    chunks: u32,
    scale: f32,
}

/// The buffers and sizes of one embedding lookup.
#[derive(Clone, Copy)]
pub struct EmbedArgs<'a> {
    /// [vocab, dim] in the kernel's weight format.
    pub table: &'a Buffer,
    /// [tokens] u32
    pub ids: &'a Buffer,
    /// [tokens, dim] f32
    pub out: &'a Buffer,
    pub tokens: u32,
    pub vocab: u32,
    pub dim: u32,
    /// A factor on every value (1: the rows as they are).
    pub scale: f32,
}

pub struct Embed {
    pipeline: Arc<Pipeline>,
    format: WeightFormat,
}

impl Embed {
    pub fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        let kernel = format_kernels(format).embed;
        Ok(Self {
            pipeline: device.pipeline(kernel, &[workgroup_size(device.info())])?,
            format,
        })
    }

    /// out[t, :] = table[ids[t], :] * scale. The caller validates ids against `vocab`.
    pub fn record<'a>(&self, rec: &mut Recorder<'a>, args: EmbedArgs<'a>) -> Result<()> {
        let EmbedArgs {
            table,
            ids,
            out,
            tokens,
            vocab,
            dim,
            scale,
        } = args;
        let n = tokens as u64 * dim as u64;
        let table_bytes = matrix_bytes(self.pipeline.name, self.format, vocab as u64, dim as u64)?;
        check_sizes(
            self.pipeline.name,
            &[
                ("table", table, table_bytes),
                ("ids", ids, tokens as u64 * 4),
                ("out", out, n * 4),
            ],
        )?;
        let chunks = n / 8;
        let groups = linear_groups(rec.device().info(), chunks, self.pipeline.workgroup_size());
        let push = EmbedPush {
            dim,
            vocab,
            chunks: chunks as u32,
            scale,
        };
        rec.dispatch(&self.pipeline, &[table, ids, out], &push, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{device, finish, random, run, upload_weights, zeros};

    #[test]
    fn gathers_rows_exactly() {
        let Some(dev) = device() else { return };
        for format in WeightFormat::ALL {
            let kernel = Embed::new(&dev, format).unwrap();
            let block = super::super::shader_block(format) as usize;
            for &(vocab, dim, tokens) in &[(1, 1, 1), (10, 3, 3), (97, 9, 13), (300, 5, 5)] {
                let dim = dim * block;
                let (tb, want) = upload_weights(&dev, &random(vocab * dim, 13, 1.0), format);
                let ids: Vec<u32> = (0..tokens as u32)
                    .map(|t| (t * 7 + 3) % vocab as u32)
                    .collect();
                let ib = Buffer::from_slice(&dev, "ids", &ids).unwrap();
                let ob = zeros(&dev, tokens * dim);
                let args = EmbedArgs {
                    table: &tb,
                    ids: &ib,
                    out: &ob,
                    tokens: tokens as u32,
                    vocab: vocab as u32,
                    dim: dim as u32,
                    scale: 1.0,
                };
                // Scaling by a power of two is exact too.
                for scale in [1.0f32, 4.0] {
                    run(&dev, |rec| {
                        kernel.record(rec, EmbedArgs { scale, ..args }).unwrap()
                    });
                    let got = ob.download::<f32>(tokens * dim).unwrap();
                    for (t, &id) in ids.iter().enumerate() {
                        let id = id as usize;
                        let want: Vec<f32> = want[id * dim..(id + 1) * dim]
                            .iter()
                            .map(|v| v * scale)
                            .collect();
                        assert_eq!(got[t * dim..(t + 1) * dim], want, "{format} token {t}");
                    }
                }
            }
        }
        finish(&dev);
    }
}
