//! Attention over the KV cache: `RopeKv` rotates the fused projection's queries and keys and
//! appends keys and values to the cache; `AttnDecode` and `AttnPrefill` attend over it.
//!
//! All three read the projection output `qkv` [tokens, (n_head + 2 n_head_kv) * head_dim]
//! (query heads, then key heads, then value heads) and write `o` [tokens, n_head * head_dim].

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{ATTN_DECODE, ATTN_PREFILL, ROPE_KV};

use super::{check_sizes, linear_groups, workgroup_size};
use crate::cpu::ops::RopeLayout;
use crate::kv::KvLayer;
use crate::vk::{Buffer, Device, DeviceKind, Pipeline, Recorder, Result, VkError};

/// The shape of one attention step: `tokens` new tokens at positions pos0, pos0 + 1, ...
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub tokens: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    pub pos0: u32,
    /// Positions the cache holds; pos0 + tokens must not exceed it.
    pub n_ctx: u32,
}

impl AttnShape {
    fn q_stride(&self) -> u64 {
        (self.n_head + 2 * self.n_head_kv) as u64 * self.head_dim as u64
    }

    fn check(&self, kernel: &'static str, qkv: &Buffer, o: &Buffer, kv: KvLayer) -> Result<()> {
        let fail = |message: String| Err(VkError::Kernel { kernel, message });
        if self.n_head_kv == 0 || self.n_head % self.n_head_kv != 0 {
            return fail(format!(
                "{} KV heads do not divide {} query heads",
                self.n_head_kv, self.n_head
            ));
        }
        if self.pos0 as u64 + self.tokens as u64 > self.n_ctx as u64 {
            return fail(format!(
                "positions {}..{} exceed the cache's {}",
                self.pos0,
                self.pos0 as u64 + self.tokens as u64,
                self.n_ctx
            ));
        }
        let tokens = self.tokens as u64;
        let cache = self.n_ctx as u64 * self.n_head_kv as u64 * self.head_dim as u64 * 4;
        check_sizes(
            kernel,
            &[
                ("qkv", qkv, tokens * self.q_stride() * 4),
                ("o", o, tokens * (self.n_head * self.head_dim) as u64 * 4),
                ("k cache", kv.k, cache),
                ("v cache", kv.v, cache),
            ],
        )
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RopeKvPush {
    tokens: u32,
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    rot_dim: u32,
    mode: u32,
    pos0: u32,
}

/// How the keys and queries rotate; `rot_dim` 0 means no rotary embedding.
#[derive(Clone, Copy, Debug)]
pub struct RopeSpec {
    pub rot_dim: u32,
    pub layout: RopeLayout,
}

pub struct RopeKv {
    pipeline: Arc<Pipeline>,
}

impl RopeKv {
    pub fn new(device: &Device) -> Result<Self> {
        Ok(Self {
            pipeline: device.pipeline(ROPE_KV, &[workgroup_size(device.info())])?,
        })
    }

    /// Rotates q and k of `qkv` in place and stores k and v at positions pos0.. of the cache.
    /// `table` is `cpu::ops::rope_table(n_ctx, rot_dim, base)` (any buffer when rot_dim is 0).
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        qkv: &'a Buffer,
        table: &'a Buffer,
        kv: KvLayer<'a>,
        s: AttnShape,
        rope: RopeSpec,
    ) -> Result<()> {
        if rope.rot_dim % 2 != 0 || rope.rot_dim > s.head_dim || s.head_dim % 2 != 0 {
            return Err(VkError::Kernel {
                kernel: ROPE_KV.name,
                message: format!(
                    "rot_dim {} and head_dim {} must be even, rot_dim at most head_dim",
                    rope.rot_dim, s.head_dim
                ),
            });
        }
        s.check(ROPE_KV.name, qkv, qkv, kv)?;
        if rope.rot_dim > 0 {
            let rows = s.n_ctx as u64 * rope.rot_dim as u64 / 2;
            check_sizes(ROPE_KV.name, &[("table", table, rows * 8)])?;
        }
        let pairs = s.tokens as u64 * s.q_stride() / 2;
        let push = RopeKvPush {
            tokens: s.tokens,
            n_head: s.n_head,
            n_head_kv: s.n_head_kv,
            head_dim: s.head_dim,
            rot_dim: rope.rot_dim,
            mode: match rope.layout {
                RopeLayout::Neox => 0,
                RopeLayout::Gptj => 1,
            },
            pos0: s.pos0,
        };
        let groups = linear_groups(rec.device().info(), pairs, self.pipeline.workgroup_size());
        rec.dispatch(&self.pipeline, &[qkv, table, kv.k, kv.v], &push, groups)
    }
}

/// Push constants of both attention kernels (`attn_decode.comp`, `attn_prefill.comp`).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttnPush {
    tokens: u32,
    n_head: u32,
    n_head_kv: u32,
    pos0: u32,
    q_stride: u32,
    scale: f32,
}

/// Checks the shape and records one attention dispatch over `groups`.
fn record_attention<'a>(
    rec: &mut Recorder<'a>,
    pipeline: &Pipeline,
    built_head_dim: u32,
    [qkv, o]: [&'a Buffer; 2],
    kv: KvLayer<'a>,
    s: AttnShape,
    groups: [u32; 3],
) -> Result<()> {
    if built_head_dim != s.head_dim {
        return Err(VkError::Kernel {
            kernel: pipeline.name,
            message: format!(
                "built for head_dim {built_head_dim}, called with {}",
                s.head_dim
            ),
        });
    }
    s.check(pipeline.name, qkv, o, kv)?;
    let push = AttnPush {
        tokens: s.tokens,
        n_head: s.n_head,
        n_head_kv: s.n_head_kv,
        pos0: s.pos0,
        q_stride: s.q_stride() as u32,
        scale: 1.0 / (s.head_dim as f32).sqrt(),
    };
    rec.dispatch(pipeline, &[qkv, o, kv.k, kv.v], &push, groups)
}

/// Decode attention: each new token against every cached position up to its own.
pub struct AttnDecode {
    pipeline: Arc<Pipeline>,
    head_dim: u32,
}

impl AttnDecode {
    pub fn new(device: &Device, head_dim: u32) -> Result<Self> {
        let info = device.info();
        // On CPU devices one subgroup per workgroup: no barriers (coroutine switches there)
        // and no cross-subgroup merge; positions are spread over its lanes.
        let wg = match info.kind {
            DeviceKind::Cpu => info.subgroup.size.max(1),
            _ => workgroup_size(info),
        };
        let subgroups = wg.div_ceil(info.subgroup.min_size.max(1));
        let shared = (head_dim + subgroups * head_dim + wg) as u64 * 4;
        if shared > info.limits.max_shared_memory as u64 {
            return Err(VkError::Kernel {
                kernel: ATTN_DECODE.name,
                message: format!(
                    "head_dim {head_dim} needs {shared} bytes of shared memory; the device has {}",
                    info.limits.max_shared_memory
                ),
            });
        }
        Ok(Self {
            pipeline: device.pipeline(ATTN_DECODE, &[wg, head_dim, subgroups])?,
            head_dim,
        })
    }

    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        qkv: &'a Buffer,
        kv: KvLayer<'a>,
        o: &'a Buffer,
        s: AttnShape,
    ) -> Result<()> {
        let groups = [s.n_head, s.tokens, 1];
        record_attention(rec, &self.pipeline, self.head_dim, [qkv, o], kv, s, groups)
    }
}

/// Causal prefill attention, tiled over keys with an online softmax (see `attn_prefill.comp`).
pub struct AttnPrefill {
    pipeline: Arc<Pipeline>,
    head_dim: u32,
}

impl AttnPrefill {
    pub fn new(device: &Device, head_dim: u32) -> Result<Self> {
        let info = device.info();
        let wg = workgroup_size(info).min(64);
        // The K and V tiles live in shared memory: BC rows of head_dim each.
        let mut tile = 32;
        while tile > 1 && 2 * tile * head_dim as u64 * 4 > info.limits.max_shared_memory as u64 {
            tile /= 2;
        }
        if 2 * tile * head_dim as u64 * 4 > info.limits.max_shared_memory as u64 {
            return Err(VkError::Kernel {
                kernel: ATTN_PREFILL.name,
                message: format!("head_dim {head_dim} does not fit in shared memory"),
            });
        }
        Ok(Self {
            pipeline: device.pipeline(ATTN_PREFILL, &[wg, head_dim, tile as u32])?,
            head_dim,
        })
    }

    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        qkv: &'a Buffer,
        kv: KvLayer<'a>,
        o: &'a Buffer,
        s: AttnShape,
    ) -> Result<()> {
        let groups = [
            s.tokens.div_ceil(self.pipeline.workgroup_size()),
            s.n_head,
            1,
        ];
        record_attention(rec, &self.pipeline, self.head_dim, [qkv, o], kv, s, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ops;
    use crate::kv::{KvCache, KvShape};
    use crate::testing::{assert_close, device, finish, random, run, upload};

    /// Rotates q and k heads of `qkv` and appends k, v to the caches, as `rope_kv.comp` does.
    #[allow(clippy::too_many_arguments)]
    fn reference_rope_kv(
        qkv: &mut [f32],
        k_cache: &mut [f32],
        v_cache: &mut [f32],
        s: AttnShape,
        rot_dim: usize,
        layout: RopeLayout,
        table: &[[f32; 2]],
    ) {
        let (nh, nkv, hd) = (s.n_head as usize, s.n_head_kv as usize, s.head_dim as usize);
        let stride = (nh + 2 * nkv) * hd;
        for (t, row) in qkv.chunks_mut(stride).enumerate() {
            let pos = [s.pos0 + t as u32];
            let (qk, v) = row.split_at_mut((nh + nkv) * hd);
            ops::rope(qk, &pos, nh + nkv, hd, rot_dim, layout, table);
            let at = pos[0] as usize * nkv * hd;
            k_cache[at..at + nkv * hd].copy_from_slice(&qk[nh * hd..]);
            v_cache[at..at + nkv * hd].copy_from_slice(v);
        }
    }

    /// Causal attention of every new token over the cache, accumulating in f64.
    fn reference_attention(qkv: &[f32], k: &[f32], v: &[f32], s: AttnShape) -> Vec<f32> {
        let (nh, nkv, hd) = (s.n_head as usize, s.n_head_kv as usize, s.head_dim as usize);
        let stride = (nh + 2 * nkv) * hd;
        let mut out = vec![0f32; s.tokens as usize * nh * hd];
        for t in 0..s.tokens as usize {
            let n_kv = s.pos0 as usize + t + 1;
            for h in 0..nh {
                let kvh = h / (nh / nkv);
                let q = &qkv[t * stride + h * hd..][..hd];
                let scores: Vec<f64> = (0..n_kv)
                    .map(|p| {
                        let kr = &k[(p * nkv + kvh) * hd..][..hd];
                        q.iter()
                            .zip(kr)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for d in 0..hd {
                    let acc: f64 = (0..n_kv)
                        .map(|p| e[p] * v[(p * nkv + kvh) * hd + d] as f64)
                        .sum();
                    out[t * nh * hd + h * hd + d] = (acc / sum) as f32;
                }
            }
        }
        out
    }

    /// Runs rope_kv then decode or prefill attention on a cache already holding `pos0`
    /// positions, and checks the output and the cache against the reference.
    fn check(decode: bool, tokens: u32, pos0: u32, n_head: u32, n_head_kv: u32, head_dim: u32) {
        let Some(dev) = device() else { return };
        let (rot_dim, n_ctx) = (head_dim - 4, pos0 + tokens + 3);
        let s = AttnShape {
            tokens,
            n_head,
            n_head_kv,
            head_dim,
            pos0,
            n_ctx,
        };
        let kv_len = (n_ctx * n_head_kv * head_dim) as usize;
        let cache = KvCache::new(
            &dev,
            KvShape {
                n_layer: 1,
                n_head_kv: n_head_kv as usize,
                head_dim: head_dim as usize,
                n_ctx: n_ctx as usize,
            },
        )
        .unwrap();
        // Earlier positions hold random K/V; the rest is garbage the kernels must not read.
        let mut k_ref = random(kv_len, 1, 1.0);
        let mut v_ref = random(kv_len, 2, 1.0);
        let layer = cache.layer(0);
        layer.k.upload(0, &k_ref).unwrap();
        layer.v.upload(0, &v_ref).unwrap();
        let stride = ((n_head + 2 * n_head_kv) * head_dim) as usize;
        let mut qkv = random(tokens as usize * stride, 3, 1.5);
        let table = ops::rope_table(n_ctx as usize, rot_dim as usize, 10000.0);
        let (qkv_b, table_b) = (
            upload(&dev, &qkv),
            Buffer::from_slice(&dev, "t", &table).unwrap(),
        );
        let o = upload(&dev, &vec![0f32; (tokens * n_head * head_dim) as usize]);

        let rope_kv = RopeKv::new(&dev).unwrap();
        let rope = RopeSpec {
            rot_dim,
            layout: RopeLayout::Gptj,
        };
        let decode_kernel = AttnDecode::new(&dev, head_dim).unwrap();
        let prefill_kernel = AttnPrefill::new(&dev, head_dim).unwrap();
        run(&dev, |rec| {
            rope_kv
                .record(rec, &qkv_b, &table_b, layer, s, rope)
                .unwrap();
            if decode {
                decode_kernel.record(rec, &qkv_b, layer, &o, s).unwrap();
            } else {
                prefill_kernel.record(rec, &qkv_b, layer, &o, s).unwrap();
            }
        });

        reference_rope_kv(
            &mut qkv,
            &mut k_ref,
            &mut v_ref,
            s,
            rot_dim as usize,
            rope.layout,
            &table,
        );
        let what = format!(
            "{} tokens={tokens} pos0={pos0} heads={n_head}/{n_head_kv} hd={head_dim}",
            if decode { "decode" } else { "prefill" }
        );
        let valid = ((pos0 + tokens) * n_head_kv * head_dim) as usize;
        let exact = |_| 1e-6;
        assert_close(
            &format!("{what}: rotated qkv"),
            &qkv_b.download(qkv.len()).unwrap(),
            &qkv,
            exact,
        );
        let k_got: Vec<f32> = layer.k.download(kv_len).unwrap();
        let v_got: Vec<f32> = layer.v.download(kv_len).unwrap();
        assert_close(
            &format!("{what}: k cache"),
            &k_got[..valid],
            &k_ref[..valid],
            exact,
        );
        assert_close(
            &format!("{what}: v cache"),
            &v_got[..valid],
            &v_ref[..valid],
            exact,
        );
        let want = reference_attention(&qkv, &k_ref, &v_ref, s);
        // Softmax weights sum to 1 and |v| <= 1, so outputs are O(1): f32 exp and sums over
        // at most a few hundred positions stay within a few ulps times the length.
        assert_close(&what, &o.download(want.len()).unwrap(), &want, |_| 2e-5);
        finish(&dev);
    }

    #[test]
    fn decode_attention_matches_reference() {
        check(true, 1, 0, 4, 4, 16);
        check(true, 1, 37, 6, 2, 24);
        check(true, 2, 130, 9, 3, 64);
    }

    #[test]
    fn prefill_attention_matches_reference() {
        check(false, 1, 0, 2, 1, 16);
        check(false, 13, 0, 6, 2, 24);
        check(false, 70, 9, 6, 3, 32);
        check(false, 33, 40, 9, 3, 64);
    }

    #[test]
    fn shapes_are_checked() {
        let Some(dev) = device() else { return };
        let cache = KvCache::new(
            &dev,
            KvShape {
                n_layer: 1,
                n_head_kv: 2,
                head_dim: 16,
                n_ctx: 8,
            },
        )
        .unwrap();
        let buf = upload(&dev, &[0.0; 1024]);
        let s = AttnShape {
            tokens: 4,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 16,
            pos0: 6,
            n_ctx: 8,
        };
        let kernel = AttnPrefill::new(&dev, 16).unwrap();
        let mut rec = Recorder::new(&dev).unwrap();
        let err = kernel
            .record(&mut rec, &buf, cache.layer(0), &buf, s)
            .unwrap_err();
        assert!(err.to_string().contains("exceed the cache"), "{err}");
        let bad = AttnShape {
            n_head_kv: 3,
            pos0: 0,
            ..s
        };
        let err = kernel
            .record(&mut rec, &buf, cache.layer(0), &buf, bad)
            .unwrap_err();
        assert!(err.to_string().contains("do not divide"), "{err}");
    }
}
