//! The q/k/v projection's output adjusted in place before RoPE: q/k/v biases (Qwen2) and an
//! RMSNorm of queries and keys, per head (Qwen3) or over each whole projection (OLMoE). One
//! workgroup per (token, head), or per (token, part) for the whole projections.

use bytemuck::{Pod, Zeroable};
use hearth_shaders::QKV_ADJUST;

use super::Pipe;
use crate::vk::{Buffer, Device, Recorder, Result, VkError};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct QkvAdjustPush {
    heads: u32,
    q_heads: u32,
    normed: u32,
    head_dim: u32,
    has_bias: u32,
    eps: f32,
    whole: u32,
}

/// The heads of a q/k/v output: `n_head` query heads, then `n_head_kv` key and `n_head_kv`
/// value heads of `head_dim` values each, per token.
#[derive(Clone, Copy, Debug)]
pub struct QkvHeads {
    pub tokens: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
}

/// What to apply: a [qkv_dim] bias, and (query gains, key gains, epsilon) for the norm,
/// whose gains are [head_dim] each, or with `whole` [n_head x head_dim] and [n_head_kv x
/// head_dim]. At least one is present.
#[derive(Clone, Copy)]
pub struct QkvAdjustArgs<'a> {
    pub bias: Option<&'a Buffer>,
    pub qk_norm: Option<(&'a Buffer, &'a Buffer, f32)>,
    pub whole: bool,
}

pub struct QkvAdjust(Pipe);

impl QkvAdjust {
    pub fn new(device: &Device) -> Result<Self> {
        Pipe::new(device, QKV_ADJUST).map(Self)
    }

    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        qkv: &'a Buffer,
        shape: QkvHeads,
        args: QkvAdjustArgs<'a>,
    ) -> Result<()> {
        let QkvHeads {
            tokens,
            n_head,
            n_head_kv,
            head_dim,
        } = shape;
        if args.bias.is_none() && args.qk_norm.is_none() {
            return Err(VkError::Kernel {
                kernel: QKV_ADJUST.name,
                message: "neither a bias nor a norm to apply".into(),
            });
        }
        let heads = n_head + 2 * n_head_kv;
        let row = heads as u64 * head_dim as u64 * 4;
        let gain = |heads: u32| match args.whole {
            true => heads as u64 * head_dim as u64 * 4,
            false => head_dim as u64 * 4,
        };
        // An absent operand binds a buffer the kernel does not read, and needs nothing of it.
        let (q_gain, k_gain) = match args.qk_norm {
            Some((q, k, _)) => (("q_gain", q, gain(n_head)), ("k_gain", k, gain(n_head_kv))),
            None => (("q_gain", qkv, 0), ("k_gain", qkv, 0)),
        };
        let bias = args
            .bias
            .map_or(("bias", q_gain.1, 0), |b| ("bias", b, row));
        let push = QkvAdjustPush {
            heads,
            q_heads: n_head,
            normed: if args.qk_norm.is_some() {
                n_head + n_head_kv
            } else {
                0
            },
            head_dim,
            has_bias: args.bias.is_some() as u32,
            eps: args.qk_norm.map_or(0.0, |(_, _, eps)| eps),
            whole: args.whole as u32,
        };
        let groups = tokens * if args.whole { 3 } else { heads };
        let bindings = [("qkv", qkv, tokens as u64 * row), bias, q_gain, k_gain];
        self.0.dispatch(rec, bindings, &push, [groups, 1, 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, device, finish, random, run, upload};
    use hearth_reference::ops;

    #[test]
    fn qkv_adjust_matches_reference() {
        let Some(dev) = device() else { return };
        let kernel = QkvAdjust::new(&dev).unwrap();
        // (tokens, n_head, n_head_kv, head_dim): GQA, MHA, a head wider than a CPU workgroup.
        for &(tokens, n_head, n_head_kv, hd) in &[(1, 2, 1, 8), (5, 4, 2, 64), (3, 2, 2, 128)] {
            let qkv_dim = (n_head + 2 * n_head_kv) * hd;
            let x = random(tokens * qkv_dim, 1, 2.0);
            let bias = random(qkv_dim, 2, 1.0);
            // Gains wide enough for the whole projections; per head the first head_dim serve.
            let (qg, kg) = (random(n_head * hd, 3, 1.0), random(n_head_kv * hd, 4, 1.0));
            let shape = QkvHeads {
                tokens: tokens as u32,
                n_head: n_head as u32,
                n_head_kv: n_head_kv as u32,
                head_dim: hd as u32,
            };
            let cases = [
                (true, false, false),
                (false, true, false),
                (true, true, false),
                (false, true, true),
                (true, true, true),
            ];
            for (with_bias, with_norm, whole) in cases {
                let xb = upload(&dev, &x);
                let (bb, qb, kb) = (upload(&dev, &bias), upload(&dev, &qg), upload(&dev, &kg));
                let args = QkvAdjustArgs {
                    bias: with_bias.then_some(&bb),
                    qk_norm: with_norm.then_some((&qb, &kb, 1e-6)),
                    whole,
                };
                run(&dev, |rec| kernel.record(rec, &xb, shape, args).unwrap());
                let mut want = x.clone();
                let adjust = ops::QkvAdjust {
                    bias: with_bias.then_some(&bias[..]),
                    qk_norm: with_norm.then_some((&qg[..], &kg[..], 1e-6)),
                    whole,
                };
                ops::qkv_adjust(&mut want, adjust, n_head, n_head_kv, hd);
                let got = xb.download(tokens * qkv_dim).unwrap();
                let what = format!(
                    "{tokens}x({n_head}+2x{n_head_kv})x{hd} bias {with_bias} norm {with_norm} \
                     whole {whole}"
                );
                assert_close(&what, &got, &want, |i| 4e-6 * want[i].abs() + 1e-6);
            }
        }
        finish(&dev);
    }
}
