//! `attn_sparse`: decode attention over the gathered selections plus each token's own
//! position.

use std::sync::Arc;

use hearth_shaders::kv_kernels;

use super::{IgBatch, IgPush, IgShape, QueryAt};
use crate::attention::{
    decode_shape, head_workgroups, heads_per_workgroup, rolled_keys, AttnShape, Scores, Split,
};
use crate::kv::{KvLayer, KvType};
use crate::vk::{Buffer, Device, Recorder, Result, VkError};
use crate::{check_sizes, shaped_kind, Pipe};

/// The buffers of one sparse attention: the tokens' queries, the layer's pool (for each
/// token's own entry), the gathered K/V and their counts (as `KvGather` fills them), and the
/// output.
#[derive(Clone, Copy)]
pub struct SparseArgs<'a> {
    pub q: QueryAt<'a>,
    pub kv: KvLayer<'a>,
    pub k_scratch: &'a Buffer,
    pub v_scratch: &'a Buffer,
    pub sel_count: &'a Buffer,
    pub o: &'a Buffer,
}

/// Decode attention over the gathered selections plus each token's own position.
pub struct AttnSparse {
    pipe: Pipe,
    split: Split,
    head_dim: u32,
    kv_type: KvType,
    /// Query heads per workgroup (`QH` in the shader).
    heads_per_group: u32,
}

impl AttnSparse {
    /// For a model whose KV heads are each shared by `group` query heads, and a pool of
    /// `kv_type` (the gathered K/V are f32); shaped as `AttnDecode` is.
    pub fn new(device: &Arc<Device>, head_dim: u32, group: u32, kv_type: KvType) -> Result<Self> {
        let kind = shaped_kind(device.info());
        let kernel = kv_kernels(kv_type).attn_sparse;
        let heads_per_group = heads_per_workgroup(kind, group);
        let (wg, subgroups) =
            decode_shape(kernel.name, device, kind, head_dim, heads_per_group - 1)?;
        let spec = [
            wg,
            head_dim,
            subgroups,
            heads_per_group,
            rolled_keys(kind) as u32,
        ];
        Ok(Self {
            pipe: Pipe::specialized(device, kernel, &spec)?,
            split: Split::new(device, head_dim, kind, heads_per_group)?,
            head_dim,
            kv_type,
            heads_per_group,
        })
    }

    /// o[q.token + t] = attention of token t of `batch` (its query `q`, post-RoPE) over
    /// k/v_scratch[t][g][0 .. sel_count[t][g]] in stored order, then its own entry in the
    /// pool; `o` is [tokens, n_head * head_dim], as `AttnDecode` writes it.
    pub fn record<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        args: SparseArgs<'a>,
        s: IgShape,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let SparseArgs {
            q,
            kv,
            k_scratch,
            v_scratch,
            sel_count,
            o,
        } = args;
        let name = self.pipe.name;
        s.check(name)?;
        kv.check_type(name, self.kv_type)?;
        if s.head_dim != self.head_dim {
            return Err(VkError::Kernel {
                kernel: name,
                message: format!(
                    "built for head_dim {}, called with {}",
                    self.head_dim, s.head_dim
                ),
            });
        }
        let tokens = batch.tokens();
        q.check(name, s, tokens)?;
        batch.check(name)?;
        batch.check_positions(name, &s, &kv)?;
        let heads = (s.n_head * s.head_dim) as u64;
        let bindings = [
            ("q", q.buffer, 0),
            ("o", o, (q.token + tokens) as u64 * heads * 4),
            ("k", kv.k, 0),
            ("v", kv.v, 0),
            ("tables", kv.tables, 0),
            ("k_scratch", k_scratch, s.scratch_bytes(tokens)),
            ("v_scratch", v_scratch, s.scratch_bytes(tokens)),
            ("sel_count", sel_count, s.sel_count_bytes(tokens)),
            ("part", &self.split.partials, 0),
            ("steps", batch.buffer, 0),
        ];
        if tokens == 0 {
            return check_sizes(name, &bindings);
        }
        let workgroups = head_workgroups(name, self.heads_per_group, s.n_head, s.n_head_kv)?;
        // A selection holds at most cap entries and the history, and the token's own comes
        // after them.
        let longest = s.cap.min(batch.longest()) + 1;
        let runs = self.split.runs(workgroups * tokens, longest);
        let push = IgPush {
            token: q.token,
            tokens,
            q_stride: q.stride,
            max_blocks: kv.max_blocks,
            splits: runs,
            ..s.push()
        };
        self.pipe
            .dispatch(rec, bindings, &push, [workgroups, tokens, runs])?;
        let shape = AttnShape {
            tokens,
            t0: q.token,
            n_head: s.n_head,
            n_head_kv: s.n_head_kv,
            head_dim: s.head_dim,
            scores: Scores::plain(s.head_dim),
        };
        self.split.merge(rec, o, None, shape, runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infinigen::testing::{shape, steps_buffer, u32_buffer, Pool};
    use crate::infinigen::{GatherArgs, IgStep, IgToken, KvGather, QueryAt};
    use crate::shaped::shaped_as;
    use crate::testing::{assert_close, device, finish, random, run, upload, zeros};
    use crate::vk::DeviceKind;
    use crate::{AttnDecode, AttnIo, StepToken};

    /// Attention of one query (post-RoPE) over positions `history` then `pos` of `row`, in f64.
    fn reference_sparse(
        pool: &Pool,
        q: &[f32],
        s: IgShape,
        row: usize,
        pos: usize,
        history: &[Vec<u32>],
    ) -> Vec<f32> {
        let (nh, nkv, hd) = (s.n_head as usize, s.n_head_kv as usize, s.head_dim as usize);
        let mut out = vec![0f32; nh * hd];
        for h in 0..nh {
            let g = h / (nh / nkv);
            let positions: Vec<usize> = history[g]
                .iter()
                .map(|&p| p as usize)
                .chain([pos])
                .collect();
            let qh = &q[h * hd..][..hd];
            let scores: Vec<f64> = positions
                .iter()
                .map(|&p| {
                    qh.iter()
                        .zip(pool.k(row, p, g))
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        / (hd as f64).sqrt()
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for d in 0..hd {
                let acc: f64 = positions
                    .iter()
                    .zip(&e)
                    .map(|(&p, w)| w * pool.v(row, p, g)[d] as f64)
                    .sum();
                out[h * hd + d] = (acc / sum) as f32;
            }
        }
        out
    }

    /// A token of [`run_sparse`]: its row and index, and the history positions it attends to
    /// per KV head.
    struct SparseToken {
        row: u32,
        index: u32,
        history: Vec<Vec<u32>>,
    }

    /// Gathers each token's history per KV head and runs attn_sparse over all of them in one
    /// dispatch each, token t's query being row t of `qkv` (`q` on the host); returns the
    /// output ([tokens, n_head * head_dim]) and the reference.
    fn run_sparse(
        kind: DeviceKind,
        pool: &Pool,
        s: IgShape,
        qkv: &Buffer,
        q: &[f32],
        tokens: &[SparseToken],
    ) -> (Vec<f32>, Vec<f32>) {
        let dev = device().unwrap();
        let (cap, n_kv) = (s.cap as usize, s.n_head_kv as usize);
        let mut idx = vec![0u32; tokens.len() * n_kv * cap];
        let mut counts = Vec::new();
        for (t, token) in tokens.iter().enumerate() {
            for (g, list) in token.history.iter().enumerate() {
                idx[(t * n_kv + g) * cap..][..list.len()].copy_from_slice(list);
                counts.push(list.len() as u32);
            }
        }
        let idx_b = u32_buffer(&dev, &idx);
        let count_b = u32_buffer(&dev, &counts);
        let steps: Vec<IgStep> = tokens
            .iter()
            .map(|t| IgStep::new(IgToken::new(t.row, t.index), 0))
            .collect();
        let steps_b = steps_buffer(&dev, &steps);
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        let n = (s.scratch_bytes(tokens.len() as u32) / 4) as usize;
        let (k_b, v_b) = (zeros(&dev, n), zeros(&dev, n));
        let heads = (s.n_head * s.head_dim) as usize;
        let o = zeros(&dev, tokens.len() * heads);
        let fetches_b = u32_buffer(&dev, &vec![0; 2 * s.n_ctx as usize]);
        let (group, kv_type) = (s.n_head / s.n_head_kv, pool.kv_type());
        let gather = shaped_as(kind, || KvGather::new(&dev, kv_type)).unwrap();
        let attn = shaped_as(kind, || AttnSparse::new(&dev, s.head_dim, group, kv_type)).unwrap();
        let stride = ((s.n_head + 2 * s.n_head_kv) * s.head_dim) as usize;
        let query = QueryAt {
            buffer: qkv,
            token: 0,
            stride: stride as u32,
        };
        run(&dev, |rec| {
            gather
                .record(
                    rec,
                    GatherArgs {
                        kv: pool.layer(),
                        sel_idx: &idx_b,
                        sel_count: &count_b,
                        fetches: &fetches_b,
                        k_scratch: &k_b,
                        v_scratch: &v_b,
                    },
                    s,
                    batch,
                )
                .unwrap();
            let args = SparseArgs {
                q: query,
                kv: pool.layer(),
                k_scratch: &k_b,
                v_scratch: &v_b,
                sel_count: &count_b,
                o: &o,
            };
            attn.record(rec, args, s, batch).unwrap();
        });
        let want: Vec<f32> = tokens
            .iter()
            .enumerate()
            .flat_map(|(t, token)| {
                let (row, index) = (token.row as usize, token.index as usize);
                let q = &q[t * stride..][..heads];
                reference_sparse(pool, q, s, row, index, &token.history)
            })
            .collect();
        (o.download(want.len()).unwrap(), want)
    }

    #[test]
    fn sparse_attention_matches_reference() {
        let Some(dev) = device() else { return };
        let s = shape(6, 3, 230, 160);
        let pos = 203u32;
        for kv_type in crate::kv::KvType::ALL {
            sparse_matches_reference(
                &dev,
                s,
                pos,
                &Pool::new(s, &[40, pos as usize + 1], kv_type),
            );
        }
        finish(&dev);
    }

    fn sparse_matches_reference(
        dev: &std::sync::Arc<crate::vk::Device>,
        s: IgShape,
        pos: u32,
        pool: &Pool,
    ) {
        let dev = dev.clone();
        // Token 0 is row 1's; token 1 is row 0's, with a short history.
        let stride = ((s.n_head + 2 * s.n_head_kv) * s.head_dim) as usize;
        let qkv = random(2 * stride, 21, 1.5);
        let qkv_b = upload(&dev, &qkv);
        let keep = random(pos as usize, 22, 1.0);
        // Head 0: about half the history, ascending; head 1: a few, not in order; head 2: none.
        let tokens = [
            SparseToken {
                row: 1,
                index: pos,
                history: vec![
                    (0..pos).filter(|&t| keep[t as usize] > 0.0).collect(),
                    vec![202, 3, 150, 77],
                    vec![],
                ],
            },
            SparseToken {
                row: 0,
                index: 39,
                history: vec![vec![], (0..39).rev().collect(), vec![38, 0]],
            },
        ];
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let (got, want) = run_sparse(kind, pool, s, &qkv_b, &qkv, &tokens);
            // As for attn_decode: outputs are O(1) averages of |v| <= 1 over a few hundred
            // positions, computed in f32.
            assert_close(
                &format!("sparse attention ({kind:?} shape, {} pool)", pool.kv_type()),
                &got,
                &want,
                |_| 2e-5,
            );
        }
    }

    #[test]
    fn sparse_attention_over_everything_matches_attn_decode() {
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 300, 300);
        let pos = 277u32;
        let pool = Pool::new(s, &[100, pos as usize + 1], crate::kv::KvType::Q8);
        let qkv = random(
            ((s.n_head + 2 * s.n_head_kv) * s.head_dim) as usize,
            31,
            1.5,
        );
        let qkv_b = upload(&dev, &qkv);
        let steps = Buffer::from_slice(&dev, "steps", &[StepToken::new(1, pos)]).unwrap();
        let tokens = [SparseToken {
            row: 1,
            index: pos,
            history: vec![(0..pos).collect::<Vec<_>>(); 2],
        }];
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let group = s.n_head / s.n_head_kv;
            let dense = shaped_as(kind, || {
                AttnDecode::new(&dev, s.head_dim, group, pool.kv_type())
            })
            .unwrap();
            let o = zeros(&dev, (s.n_head * s.head_dim) as usize);
            let shape = AttnShape {
                tokens: 1,
                t0: 0,
                n_head: s.n_head,
                n_head_kv: s.n_head_kv,
                head_dim: s.head_dim,
                scores: Scores::plain(s.head_dim),
            };
            let io = AttnIo {
                qkv: &qkv_b,
                kv: pool.layer(),
                steps: &steps,
                o: &o,
                sinks: None,
            };
            run(&dev, |rec| dense.record(rec, io, shape, pos + 1).unwrap());
            let dense_out: Vec<f32> = o.download((s.n_head * s.head_dim) as usize).unwrap();
            let (got, want) = run_sparse(kind, &pool, s, &qkv_b, &qkv, &tokens);
            let what = format!("({kind:?} shape)");
            assert_close(
                &format!("sparse vs attn_decode {what}"),
                &got,
                &dense_out,
                |_| 2e-5,
            );
            assert_close(&format!("sparse vs reference {what}"), &got, &want, |_| {
                2e-5
            });
        }
        finish(&dev);
    }
}
