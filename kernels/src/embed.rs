//! Embedding row gather from a table in any weight format.

use bytemuck::{Pod, Zeroable};

use super::{format_kernels, matrix_bytes, Pipe, WeightFormat};
use crate::vk::{Buffer, Device, Recorder, Result};

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
    pipe: Pipe,
    format: WeightFormat,
}

impl Embed {
    pub fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        Ok(Self {
            pipe: Pipe::new(device, format_kernels(format).embed)?,
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
        let table_bytes = matrix_bytes(self.pipe.name, self.format, vocab as u64, dim as u64)?;
        let chunks = n / 8;
        let push = EmbedPush {
            dim,
            vocab,
            chunks: chunks as u32,
            scale,
        };
        let bindings = [
            ("table", table, table_bytes),
            ("ids", ids, tokens as u64 * 4),
            ("out", out, n * 4),
        ];
        self.pipe.dispatch_items(rec, bindings, &push, chunks)
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
