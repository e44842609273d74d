//! `attn_encoder`: an encoder's attention, full (bidirectional) within each text of a batch
//! whose texts' tokens are stacked, over q, k and v straight from the fused projection (an
//! encoder keeps no cache: a text is one step).

use bytemuck::{Pod, Zeroable};
use hearth_shaders::ATTN_ENCODER;

use super::{check_sizes, workgroup_size, Pipe};
use crate::vk::{Buffer, Device, Recorder, Result, VkError};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttnEncoderPush {
    tokens: u32,
    n_head: u32,
    scale: f32,
}

/// The rows of one text among a step's stacked tokens, as the kernel reads them per token
/// (`uvec2`): its text's rows are `first..end`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
pub struct TextSpan {
    pub first: u32,
    pub end: u32,
}

impl TextSpan {
    /// One span per token of texts of `lengths` stacked in order.
    pub fn per_token(lengths: impl IntoIterator<Item = usize>) -> Vec<TextSpan> {
        let mut spans = Vec::new();
        let mut first = 0u32;
        for n in lengths {
            let end = first + n as u32;
            spans.extend(std::iter::repeat_n(TextSpan { first, end }, n));
            first = end;
        }
        spans
    }
}

/// What one dispatch reads and writes: `qkv` [tokens, 3 n_head head_dim] (each row its
/// queries, then keys, then values, head by head), `spans` [tokens] and `o` [tokens, n_head
/// head_dim].
#[derive(Clone, Copy)]
pub struct EncoderAttnIo<'a> {
    pub qkv: &'a Buffer,
    pub spans: &'a Buffer,
    pub o: &'a Buffer,
}

/// Full attention within each text, tiled over keys with an online softmax (see
/// `attn_encoder.comp`); scores scaled by 1 / sqrt(head_dim).
pub struct AttnEncoder {
    pipe: Pipe,
    head_dim: u32,
}

impl AttnEncoder {
    pub fn new(device: &Device, head_dim: u32) -> Result<Self> {
        let info = device.info();
        let fail = |message: String| {
            Err(VkError::Kernel {
                kernel: ATTN_ENCODER.name,
                message,
            })
        };
        if head_dim == 0 || head_dim % 4 != 0 {
            return fail(format!("head_dim {head_dim} is not a multiple of 4"));
        }
        // The K and V tiles live in shared memory: `tile` rows of head_dim each.
        let tile_bytes = |tile: u64| 2 * tile * head_dim as u64 * 4;
        let mut tile = 32;
        while tile > 1 && tile_bytes(tile) > info.limits.max_shared_memory as u64 {
            tile /= 2;
        }
        if tile_bytes(tile) > info.limits.max_shared_memory as u64 {
            return fail(format!("head_dim {head_dim} does not fit in shared memory"));
        }
        let spec = [workgroup_size(info).min(64), head_dim, tile as u32];
        Ok(Self {
            pipe: Pipe::specialized(device, ATTN_ENCODER, &spec)?,
            head_dim,
        })
    }

    /// Attention of `tokens` stacked rows over `n_head` heads.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        io: EncoderAttnIo<'a>,
        tokens: u32,
        n_head: u32,
    ) -> Result<()> {
        let name = self.pipe.name;
        let row = n_head as u64 * self.head_dim as u64 * 4;
        let needs = [
            ("qkv", io.qkv, tokens as u64 * 3 * row),
            ("spans", io.spans, tokens as u64 * 8),
            ("o", io.o, tokens as u64 * row),
        ];
        check_sizes(name, &needs)?;
        if tokens == 0 || n_head == 0 {
            return Ok(());
        }
        let push = AttnEncoderPush {
            tokens,
            n_head,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
        };
        let groups = [tokens.div_ceil(self.pipe.workgroup_size()), n_head, 1];
        self.pipe.dispatch(rec, needs, &push, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, device, finish, random, run, upload, zeros};

    /// Each token's attention over its own text, in f64: softmax(q k^T / sqrt(hd)) v.
    fn reference(qkv: &[f32], lengths: &[usize], n_head: usize, hd: usize) -> Vec<f32> {
        let e = n_head * hd;
        let rows: usize = lengths.iter().sum();
        let mut out = vec![0f32; rows * e];
        let at = |t: usize, part: usize, h: usize| &qkv[t * 3 * e + part * e + h * hd..][..hd];
        let scale = 1.0 / (hd as f64).sqrt();
        let mut first = 0;
        for &n in lengths {
            for h in 0..n_head {
                for i in first..first + n {
                    let scores: Vec<f64> = (first..first + n)
                        .map(|j| {
                            let dot: f64 = at(i, 0, h)
                                .iter()
                                .zip(at(j, 1, h))
                                .map(|(&a, &b)| a as f64 * b as f64)
                                .sum();
                            dot * scale
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = weights.iter().sum();
                    for d in 0..hd {
                        let v: f64 = (first..first + n)
                            .zip(&weights)
                            .map(|(j, w)| w * at(j, 2, h)[d] as f64)
                            .sum();
                        out[i * e + h * hd + d] = (v / sum) as f32;
                    }
                }
            }
            first += n;
        }
        out
    }

    #[test]
    fn attn_encoder_matches_reference() {
        let Some(dev) = device() else { return };
        // Texts of one token, several within a workgroup, and long ones crossing workgroups
        // and tiles; heads as narrow as a vec4 and as wide as a large model's.
        let cases: &[(&[usize], usize, usize)] = &[
            (&[1], 1, 4),
            (&[5, 1, 3], 2, 8),
            (&[7, 70, 2, 130, 1], 3, 32),
            (&[33, 17], 2, 64),
            (&[40, 9], 2, 128),
        ];
        for &(lengths, n_head, hd) in cases {
            let kernel = AttnEncoder::new(&dev, hd as u32).unwrap();
            let rows: usize = lengths.iter().sum();
            // Large enough scores that the softmax is far from uniform.
            let qkv = random(rows * 3 * n_head * hd, 7, 2.0);
            let spans = TextSpan::per_token(lengths.iter().copied());
            let (qkv_b, o) = (upload(&dev, &qkv), zeros(&dev, rows * n_head * hd));
            let spans_b = Buffer::from_slice(&dev, "spans", &spans).unwrap();
            let io = EncoderAttnIo {
                qkv: &qkv_b,
                spans: &spans_b,
                o: &o,
            };
            run(&dev, |rec| {
                kernel.record(rec, io, rows as u32, n_head as u32).unwrap()
            });
            let want = reference(&qkv, lengths, n_head, hd);
            // Weighted means of values in [-2, 2] with f32 exponentials and sums.
            assert_close(
                &format!("attn_encoder {lengths:?} x {n_head} heads of {hd}"),
                &o.download(rows * n_head * hd).unwrap(),
                &want,
                |_| 2e-5,
            );
        }
        finish(&dev);
    }

    #[test]
    fn attn_encoder_rejects_short_buffers() {
        let Some(dev) = device() else { return };
        let kernel = AttnEncoder::new(&dev, 8).unwrap();
        let small = zeros(&dev, 4);
        let io = EncoderAttnIo {
            qkv: &small,
            spans: &small,
            o: &small,
        };
        let mut rec = Recorder::new(&dev).unwrap();
        let err = kernel.record(&mut rec, io, 2, 1).unwrap_err();
        assert!(err.to_string().contains("`qkv`"), "{err}");
        assert!(AttnEncoder::new(&dev, 6).is_err());
        finish(&dev);
    }
}
