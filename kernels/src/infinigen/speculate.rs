//! `ig_speculate`: each token's approximate scores over its history, from its partial query
//! and the partial key cache.

use hearth_shaders::IG_SPECULATE;

use super::{kernel_error, IgBatch, IgPush, IgShape, QueryAt};
use crate::attention::{head_workgroups, heads_per_workgroup};
use crate::vk::{Buffer, Device, DeviceKind, Recorder, Result};
use crate::{check_sizes, shaped_kind, workgroup_size, Pipe, RopeTable};
use hearth_model::ops::RopeLayout;

/// The buffers of one speculation (shapes in [`IgShape`]): the tokens' queries before RoPE,
/// the rotation, the skew columns and partial key cache, and the scores it writes.
#[derive(Clone, Copy)]
pub struct SpeculateArgs<'a> {
    pub q_raw: QueryAt<'a>,
    pub rope: RopeTable<'a>,
    pub skew: &'a Buffer,
    pub pkeys: &'a Buffer,
    pub scores: &'a Buffer,
}

/// Speculated attention scores of each token over its history.
pub struct IgSpeculate {
    pipe: Pipe,
    /// The head_dim and partial columns it was built for.
    head_dim: u32,
    partial: u32,
    /// Positions each invocation scores (`SPAN` in the shader).
    span: u32,
    /// Query heads per workgroup (`QH`).
    heads_per_group: u32,
}

impl IgSpeculate {
    /// For a model of shape `s`, whose KV heads are each shared by n_head / n_head_kv query
    /// heads.
    pub fn new(device: &Device, s: IgShape) -> Result<Self> {
        s.check(IG_SPECULATE.name)?;
        let kind = shaped_kind(device.info());
        // Each workgroup first projects its head's query on the skew. A CPU device also pays
        // a fixed cost per workgroup, so it takes longer spans: on lavapipe, eight sequences
        // at 2048 tokens, 4.1 -> 3.0 ms per dispatch going from 4 to 16 (32 is no faster).
        let span = match kind {
            DeviceKind::Cpu => 16,
            _ => 4,
        };
        // On a CPU device a workgroup scores all the query heads of a KV head, loading each
        // partial key once for them: on lavapipe, eight sequences at 2048 tokens, 3.0 -> 2.0
        // ms per dispatch.
        let heads_per_group = heads_per_workgroup(kind, s.n_head / s.n_head_kv);
        let spec = [
            workgroup_size(device.info()),
            s.head_dim,
            span,
            heads_per_group,
            s.partial / 4,
        ];
        Ok(Self {
            pipe: Pipe::specialized(device, IG_SPECULATE, &spec)?,
            head_dim: s.head_dim,
            partial: s.partial,
            span,
            heads_per_group,
        })
    }

    /// scores[t][h][i] for i < index of token t of `batch`: its query before RoPE (`q_raw`)
    /// rotated at its position as [`super::RopeKv`] does, projected on the skew, dotted with
    /// pkeys[row][i], times 1/sqrt(head_dim). The rope table must hold every token's
    /// position. Scores at the index and beyond are left as they were.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        args: SpeculateArgs<'a>,
        s: IgShape,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let SpeculateArgs {
            q_raw,
            rope: RopeTable { table, spec: rope },
            skew,
            pkeys,
            scores,
        } = args;
        let name = IG_SPECULATE.name;
        s.check(name)?;
        if (s.head_dim, s.partial) != (self.head_dim, self.partial) {
            return Err(kernel_error(
                IG_SPECULATE,
                format!(
                    "built for head_dim {} and {} partial columns, called with {} and {}",
                    self.head_dim, self.partial, s.head_dim, s.partial
                ),
            ));
        }
        if rope.rot_dim % 2 != 0 || rope.rot_dim > s.head_dim {
            return Err(kernel_error(
                IG_SPECULATE,
                format!("rot_dim {} must be even and at most head_dim", rope.rot_dim),
            ));
        }
        batch.check(name)?;
        batch.check_indices(IG_SPECULATE, &s)?;
        let tokens = batch.tokens();
        q_raw.check(name, s, tokens)?;
        let last_pos = batch.steps.iter().map(|st| st.pos).max().unwrap_or(0);
        let table_bytes = (last_pos as u64 + 1) * (rope.rot_dim / 2) as u64 * 8;
        let bindings = [
            ("q", q_raw.buffer, 0),
            ("table", table, table_bytes),
            ("skew", skew, s.skew_bytes()),
            ("pkeys", pkeys, s.pkeys_bytes(batch.rows())),
            ("scores", scores, s.scores_bytes(tokens)),
            ("steps", batch.buffer, 0),
        ];
        let longest = batch.longest();
        if longest == 0 {
            return check_sizes(name, &bindings);
        }
        let push = IgPush {
            token: q_raw.token,
            tokens,
            q_stride: q_raw.stride,
            rot_dim: rope.rot_dim,
            mode: match rope.layout {
                RopeLayout::Neox => 0,
                RopeLayout::Gptj => 1,
            },
            ..s.push()
        };
        let heads = head_workgroups(name, self.heads_per_group, s.n_head, s.n_head_kv)?;
        let per_group = self.span * self.pipe.workgroup_size();
        let groups = [longest.div_ceil(per_group), heads, tokens];
        self.pipe.dispatch(rec, bindings, &push, groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infinigen::testing::{shape, steps_buffer, Pool};
    use crate::infinigen::{IgPartialKeys, IgStep, IgToken, PartialKeysArgs};
    use crate::shaped::shaped_as;
    use crate::testing::{assert_close, device, finish, random, run, upload, zeros};
    use crate::{RopeSpec, StepToken};
    use hearth_reference::ops;

    const EPS: f64 = f32::EPSILON as f64;

    /// x · skew[g][.., c] for every column c, in f64, each with the sum of its terms' absolute
    /// values.
    fn project(x: &[f32], skew: &[f32], g: usize, r: usize) -> Vec<(f64, f64)> {
        let hd = x.len();
        (0..r)
            .map(|c| {
                let terms = (0..hd).map(|i| x[i] as f64 * skew[(g * hd + i) * r + c] as f64);
                terms.fold((0.0, 0.0), |(sum, abs), t| (sum + t, abs + t.abs()))
            })
            .collect()
    }

    #[test]
    fn partial_keys_and_speculated_scores_match_reference() {
        // The partial keys come from the keys as each type's pool holds them (`Pool` rounds
        // its mirror alike), so every type meets the same bounds.
        for kv_type in crate::kv::KvType::ALL {
            partial_keys_and_speculated_scores(kv_type);
        }
    }

    fn partial_keys_and_speculated_scores(kv_type: crate::kv::KvType) {
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 300, 300);
        let (nh, nkv, hd, r) = (6usize, 2usize, 64usize, s.partial as usize);
        let lens = [150usize, 272];
        let pool = Pool::new(s, &lens, kv_type);
        // Entries of an orthogonal head_dim matrix are about 1/sqrt(head_dim). As for a model,
        // 13 columns are zero-filled to the shape's 16.
        let mut skew = random(nkv * hd * r, 5, 0.125);
        for row in skew.chunks_mut(r) {
            row[13..].fill(0.0);
        }
        let skew_b = upload(&dev, &skew);
        let pkeys_b = zeros(&dev, (s.pkeys_bytes(2) / 4) as usize);
        let partial = IgPartialKeys::new(&dev, kv_type).unwrap();
        let (row, pos) = (1usize, 271u32);
        // Two dispatches, each over tokens of both rows in no order.
        let written = [(0usize, 17..40u32), (1, 0..100), (1, 100..pos + 1)];
        let tokens: Vec<StepToken> = written
            .iter()
            .flat_map(|(row, range)| range.clone().map(|p| StepToken::new(*row as u32, p)))
            .rev()
            .collect();
        let (first, second) = tokens.split_at(50);
        let first_b = Buffer::from_slice(&dev, "tokens", first).unwrap();
        let second_b = Buffer::from_slice(&dev, "tokens", second).unwrap();
        run(&dev, |rec| {
            for (b, list) in [(&first_b, first), (&second_b, second)] {
                let args = PartialKeysArgs {
                    kv: pool.layer(),
                    skew: &skew_b,
                    pkeys: &pkeys_b,
                    steps: b,
                };
                partial.record(rec, args, s, list).unwrap();
            }
        });
        // Every f32 sum of n products is within n * eps/2 * (sum of |products|) of the exact
        // value, whatever the order; eps rather than eps/2 leaves room for FMA contraction.
        let pk_len = (s.pkeys_bytes(2) / 4) as usize;
        let (mut want, mut tol) = (vec![0f32; pk_len], vec![0f32; pk_len]);
        for (row, range) in &written {
            for p in range.clone() {
                for g in 0..nkv {
                    let at = ((row * s.n_ctx as usize + p as usize) * nkv + g) * r;
                    let k = pool.k(*row, p as usize, g);
                    for (c, (v, abs)) in project(k, &skew, g, r).into_iter().enumerate() {
                        want[at + c] = v as f32;
                        tol[at + c] = (hd as f64 * EPS * abs) as f32;
                    }
                }
            }
        }
        let pkeys: Vec<f32> = pkeys_b.download(pk_len).unwrap();
        assert_close(&format!("partial keys ({kv_type})"), &pkeys, &want, |i| {
            tol[i]
        });

        // The raw queries are tokens 1 and 2 of a fused projection output: token 0 of the
        // dispatch is row 1's, token 1 row 0's (a shorter history).
        let stride = (nh + 2 * nkv) * hd;
        let qkv = random(3 * stride, 7, 1.5);
        let qkv_b = upload(&dev, &qkv);
        let shapes = [DeviceKind::Cpu, DeviceKind::Discrete];
        let plain = (1.0 / (hd as f32).sqrt(), None);
        // The third case is a row whose pool evicted 500 tokens: RoPE turns the query by its
        // position, past its index. The last scales and soft-caps scores as Gemma 2 does.
        let cases = [
            (64u32, RopeLayout::Neox, pos, plain),
            (48, RopeLayout::Gptj, pos, plain),
            (64, RopeLayout::Neox, pos + 500, plain),
            (64, RopeLayout::Neox, pos, (0.3, Some(2.0f32))),
        ];
        let per_token = nh * s.n_ctx as usize;
        for ((rot_dim, layout, seq_pos, (scale, softcap)), kind) in
            cases.into_iter().flat_map(|c| shapes.map(|k| (c, k)))
        {
            let s = IgShape {
                scale,
                softcap,
                ..s
            };
            let scale = scale as f64;
            let speculate = shaped_as(kind, || IgSpeculate::new(&dev, s)).unwrap();
            let table = ops::rope_table(seq_pos as usize + 1, rot_dim as usize, 10000.0);
            let table_b = Buffer::from_slice(&dev, "rope table", &table).unwrap();
            let scores_b = upload(&dev, &vec![9.0; 2 * per_token]);
            let q = QueryAt {
                buffer: &qkv_b,
                token: 1,
                stride: stride as u32,
            };
            let rope = RopeSpec { rot_dim, layout };
            let ats = [
                IgToken {
                    row: row as u32,
                    index: pos,
                    pos: seq_pos,
                },
                IgToken::new(0, 40),
            ];
            let steps: Vec<IgStep> = ats.iter().map(|&at| IgStep::new(at, 0)).collect();
            let steps_b = steps_buffer(&dev, &steps);
            let batch = IgBatch {
                buffer: &steps_b,
                steps: &steps,
            };
            let args = SpeculateArgs {
                q_raw: q,
                rope: RopeTable {
                    table: &table_b,
                    spec: rope,
                },
                skew: &skew_b,
                pkeys: &pkeys_b,
                scores: &scores_b,
            };
            run(&dev, |rec| speculate.record(rec, args, s, batch).unwrap());
            let mut want = vec![9f32; 2 * per_token];
            let mut tol = vec![0f32; want.len()];
            for (tk, at) in ats.iter().enumerate() {
                let mut q_rot = qkv[(1 + tk) * stride..][..nh * hd].to_vec();
                ops::rope(
                    &mut q_rot,
                    &[at.pos],
                    nh,
                    hd,
                    rot_dim as usize,
                    layout,
                    &table,
                );
                for h in 0..nh {
                    let g = h / (nh / nkv);
                    let (qp, qp_abs): (Vec<f64>, Vec<f64>) =
                        project(&q_rot[h * hd..][..hd], &skew, g, r)
                            .into_iter()
                            .unzip();
                    let row = at.row as usize;
                    for t in 0..at.index as usize {
                        let pk = &pkeys[((row * s.n_ctx as usize + t) * nkv + g) * r..][..r];
                        let dot: f64 = (0..r).map(|c| qp[c] * pk[c] as f64).sum();
                        let abs: f64 = (0..r).map(|c| qp_abs[c] * pk[c].abs() as f64).sum();
                        let at = tk * per_token + h * s.n_ctx as usize + t;
                        want[at] = match softcap {
                            Some(c) => c as f64 * (scale * dot / c as f64).tanh(),
                            None => scale * dot,
                        } as f32;
                        // The rotation's two products, qp's head_dim terms, the score's r
                        // terms (the cap's slope is at most 1), and the cap's own rounding.
                        tol[at] = (scale * (hd + r + 4) as f64 * EPS * abs
                            + softcap.map_or(0.0, |c| 8.0 * EPS * c as f64))
                            as f32;
                    }
                }
            }
            let got: Vec<f32> = scores_b.download(want.len()).unwrap();
            assert_close(
                &format!(
                    "scores ({layout:?}, rot_dim {rot_dim}, position {seq_pos}, cap {softcap:?}, \
                     {kind:?} shape)"
                ),
                &got,
                &want,
                |i| tol[i],
            );
        }
        finish(&dev);
    }
}
