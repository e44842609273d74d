//! The H2O kernels against the CPU reference's `kv::h2o`.

use std::sync::Arc;

use super::*;
use crate::infinigen::{IgStep, IgToken};
use crate::kv::h2o::Head;
use crate::kv::stored::{encode_row, round_row};
use crate::kv::{blocks_for, KvCache, KvPlacement, KvShape, KvType, BLOCK_TOKENS};
use crate::shaped::shaped_as;
use crate::testing::{assert_close, device, finish, random, run, upload};
use crate::StepToken;

/// 6 query heads sharing 2 KV heads of 64 dimensions.
const N_HEAD: usize = 6;
const N_KV: usize = 2;
const HD: usize = 64;
const GROUP: usize = N_HEAD / N_KV;
/// Floats per token of q: the query heads, then the key heads (values left out).
const Q_STRIDE: usize = (N_HEAD + N_KV) * HD;

fn shape(n_ctx: u32, cap: u32) -> IgShape {
    IgShape {
        n_head: N_HEAD as u32,
        n_head_kv: N_KV as u32,
        head_dim: HD as u32,
        partial: 4,
        n_ctx,
        cap,
        scale: 1.0 / (HD as f32).sqrt(),
        softcap: None,
    }
}

fn u32s(dev: &Arc<Device>, data: &[u32]) -> Buffer {
    Buffer::from_slice(dev, "test u32", data).unwrap()
}

/// Softmax of the group's query heads of KV head g (from the q row `q`) over `keys`, each
/// head's probabilities added to `mass[positions[j]]` in head order, in f64.
fn add_group_attention(
    q: &[f32],
    g: usize,
    keys: &[&[f32]],
    positions: &[usize],
    mass: &mut [f64],
) {
    let scale = 1.0 / (HD as f64).sqrt();
    for h in g * GROUP..(g + 1) * GROUP {
        let qh = &q[h * HD..(h + 1) * HD];
        let s: Vec<f64> = keys
            .iter()
            .map(|k| {
                qh.iter()
                    .zip(*k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = s.iter().map(|x| (x - max).exp()).sum();
        for (&p, x) in positions.iter().zip(&s) {
            mass[p] += (x - max).exp() / sum;
        }
    }
}

/// Three rows' tokens in one dispatch (rows out of order): one with nothing kept yet, one
/// at its budget (one leaves) and one over it by three (a truncated cache). The masses
/// match an f64 reference, and what each head keeps is what the CPU reference's eviction
/// keeps given the device's masses.
#[test]
fn update_matches_reference() {
    let Some(dev) = device() else { return };
    let (n_ctx, cap) = (300usize, 61usize);
    let s = shape(n_ctx as u32, cap as u32);
    let rows = 3;
    // (row, entries before the token, kept count, budget once the token is in).
    let cases = [
        (2usize, 250usize, 50usize, 50usize),
        (0, 0, 0, 1),
        (1, 200, 58, 56),
    ];
    let q = random(cases.len() * Q_STRIDE, 1, 1.0);
    let k_scratch = random(cases.len() * N_KV * cap * HD, 2, 1.0);
    let mass: Vec<f32> = random(rows * N_KV * n_ctx, 3, 1.0)
        .iter()
        .map(|x| x.abs())
        .collect();
    let mut kept = vec![0u32; rows * N_KV * cap];
    let mut counts = vec![0u32; rows * N_KV];
    for (c, &(row, len, count, _)) in cases.iter().enumerate() {
        for g in 0..N_KV {
            let list = row * N_KV + g;
            // Every third position, newest first (the kernel keeps no order).
            let positions: Vec<u32> = (0..len as u32).rev().step_by(3).take(count).collect();
            assert_eq!(positions.len(), count, "case {c}");
            kept[list * cap..list * cap + count].copy_from_slice(&positions);
            counts[list] = count as u32;
        }
    }
    let steps: Vec<IgStep> = cases
        .iter()
        .map(|&(row, len, _, budget)| {
            IgStep::new(IgToken::new(row as u32, len as u32), budget as u32)
        })
        .collect();
    let (qb, kb) = (upload(&dev, &q), upload(&dev, &k_scratch));
    let state_bufs = (u32s(&dev, &kept), u32s(&dev, &counts), upload(&dev, &mass));
    let state = H2oState {
        kept: &state_bufs.0,
        kept_count: &state_bufs.1,
        mass: &state_bufs.2,
    };
    let steps_b = Buffer::from_slice(&dev, "test steps", &steps).unwrap();
    let update = H2oUpdate::new(&dev, HD as u32, GROUP as u32).unwrap();
    let q_at = QueryAt {
        buffer: &qb,
        token: 0,
        stride: Q_STRIDE as u32,
    };
    run(&dev, |rec| {
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        update.record(rec, q_at, &kb, state, s, batch).unwrap();
    });
    let got_mass: Vec<f32> = state.mass.download(mass.len()).unwrap();
    let got_kept: Vec<u32> = state.kept.download(kept.len()).unwrap();
    let got_counts: Vec<u32> = state.kept_count.download(counts.len()).unwrap();

    let mut want_mass: Vec<f64> = mass.iter().map(|&m| m as f64).collect();
    for (t, &(row, len, count, budget)) in cases.iter().enumerate() {
        let qt = &q[t * Q_STRIDE..(t + 1) * Q_STRIDE];
        for g in 0..N_KV {
            let list = row * N_KV + g;
            let mut positions: Vec<usize> = kept[list * cap..list * cap + count]
                .iter()
                .map(|&p| p as usize)
                .collect();
            let mut keys: Vec<&[f32]> = (0..count)
                .map(|j| &k_scratch[((t * N_KV + g) * cap + j) * HD..][..HD])
                .collect();
            positions.push(len);
            keys.push(&qt[(N_HEAD + g) * HD..(N_HEAD + g + 1) * HD]);
            add_group_attention(
                qt,
                g,
                &keys,
                &positions,
                &mut want_mass[list * n_ctx..(list + 1) * n_ctx],
            );

            // The reference's eviction, given the device's masses.
            let mut head = Head {
                kept: kept[list * cap..list * cap + count].to_vec(),
                mass: got_mass[list * n_ctx..(list + 1) * n_ctx].to_vec(),
            };
            head.kept.sort_unstable();
            head.end_step(len..len + 1, budget);
            let n = got_counts[list] as usize;
            let mut got: Vec<u32> = got_kept[list * cap..list * cap + n].to_vec();
            got.sort_unstable();
            assert_eq!(got, head.kept, "row {row} head {g}");
            assert!(n <= budget);
        }
    }
    let want: Vec<f32> = want_mass.iter().map(|&m| m as f32).collect();
    assert_close("mass", &got_mass, &want, |i| 1e-5 * (1.0 + want[i].abs()));
    finish(&dev);
}

/// A run of 70 tokens at entries 40.. of a row (earlier entries from a previous chunk),
/// starting at token 3 of its step: h2o_lse and h2o_mass add to every entry the softmax
/// probabilities the run's query heads gave it, as an f64 reference does, shaped both
/// for CPU devices (queries in registers) and for GPUs (queries in shared memory), over a
/// cache of each KV type (the reference reads the keys rounded as the cache holds them).
#[test]
fn dense_masses_match_reference() {
    for kv_type in KvType::ALL {
        dense_masses_for(kv_type);
    }
}

fn dense_masses_for(kv_type: KvType) {
    let Some(dev) = device() else { return };
    let (n_ctx, first, tokens, t0) = (200usize, 40usize, 70usize, 3usize);
    let len = first + tokens;
    let s = shape(n_ctx as u32, 8);
    let kv_shape = KvShape {
        n_layer: 1,
        n_head_kv: N_KV,
        head_dim: HD,
        blocks: blocks_for(n_ctx),
        rows: 2,
        n_ctx,
        kv_type,
        values_in_keys: false,
    };
    let mut cache = KvCache::new(&dev, kv_shape, KvPlacement::Device).unwrap();
    // Row 1 holds the run; row 0 takes a block first so row 1's do not start at 0.
    cache.append(0, 1).unwrap();
    cache.append(1, len).unwrap();
    cache.sync_tables().unwrap();
    let layer = cache.layer(0);
    let max_blocks = layer.max_blocks as usize;
    let tables: Vec<u32> = layer.tables.download(2 * max_blocks).unwrap();
    let kv_dim = N_KV * HD;
    let mut k = random(len * kv_dim, 4, 1.0);
    round_row(kv_type, &mut k);
    let entry = kv_shape.entry_bytes();
    for p in 0..len {
        let slot = tables[max_blocks + p / BLOCK_TOKENS] as usize * BLOCK_TOKENS + p % BLOCK_TOKENS;
        let words = encode_row(kv_type, &k[p * kv_dim..][..kv_dim]);
        layer.k.upload(slot as u64 * entry, &words).unwrap();
    }
    let q = random((t0 + tokens) * Q_STRIDE, 5, 1.0);
    let steps: Vec<StepToken> = (0..t0 + tokens)
        .map(|t| StepToken::new(1, (first + t).saturating_sub(t0) as u32))
        .collect();
    let mass: Vec<f32> = random(2 * N_KV * n_ctx, 6, 1.0)
        .iter()
        .map(|x| x.abs())
        .collect();
    let qb = upload(&dev, &q);
    let steps_b = Buffer::from_slice(&dev, "test steps", &steps).unwrap();
    let (counts, kept) = (u32s(&dev, &[0; 2 * N_KV]), u32s(&dev, &[0; 2 * N_KV * 8]));
    let run_of = DenseRun {
        q: QueryAt {
            buffer: &qb,
            token: t0 as u32,
            stride: Q_STRIDE as u32,
        },
        steps: &steps_b,
        run: &steps[t0..],
    };
    let masses_for = |kind: DeviceKind| -> Vec<f32> {
        let mass_b = upload(&dev, &mass);
        let stats = upload(&dev, &vec![0.0; (t0 + tokens) * N_HEAD * 2]);
        let state = H2oState {
            kept: &kept,
            kept_count: &counts,
            mass: &mass_b,
        };
        let (hd, group) = (HD as u32, GROUP as u32);
        let (lse, mass_k) = shaped_as(kind, || {
            let lse = H2oLse::new(&dev, hd, group, kv_type);
            (
                lse.unwrap(),
                H2oMass::new(&dev, hd, group, kv_type).unwrap(),
            )
        });
        run(&dev, |rec| {
            lse.record(rec, layer, run_of, &stats, s).unwrap();
            mass_k.record(rec, layer, run_of, &stats, state, s).unwrap();
        });
        mass_b.download(mass.len()).unwrap()
    };

    let mut want: Vec<f64> = mass.iter().map(|&m| m as f64).collect();
    for i in 0..tokens {
        let qt = &q[(t0 + i) * Q_STRIDE..][..Q_STRIDE];
        for g in 0..N_KV {
            let positions: Vec<usize> = (0..=first + i).collect();
            let keys: Vec<&[f32]> = positions
                .iter()
                .map(|&p| &k[p * kv_dim + g * HD..][..HD])
                .collect();
            let at = (N_KV + g) * n_ctx;
            add_group_attention(qt, g, &keys, &positions, &mut want[at..at + n_ctx]);
        }
    }
    let want: Vec<f32> = want.iter().map(|&m| m as f32).collect();
    for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
        let got = masses_for(kind);
        let what = format!("mass ({kind:?} shape, {kv_type} cache)");
        assert_close(&what, &got, &want, |i| 1e-5 * (1.0 + want[i].abs()));
    }
    finish(&dev);
}

/// A shape the kernel was not built for, a query row without its keys, and a budget that
/// leaves the new entry no slot are errors naming the kernel, before anything is recorded.
#[test]
fn shapes_are_checked() {
    let Some(dev) = device() else { return };
    let s = shape(64, 9);
    let update = H2oUpdate::new(&dev, HD as u32, GROUP as u32).unwrap();
    let q = upload(&dev, &vec![0.0; Q_STRIDE]);
    let scratch = upload(&dev, &vec![0.0; N_KV * 9 * HD]);
    let (kept, counts, mass) = (
        u32s(&dev, &[0; N_KV * 9]),
        u32s(&dev, &[0; N_KV]),
        upload(&dev, &vec![0.0; N_KV * 64]),
    );
    let state = H2oState {
        kept: &kept,
        kept_count: &counts,
        mass: &mass,
    };
    let record = |s: IgShape, stride: usize, budget: u32| {
        let steps = [IgStep::new(IgToken::new(0, 5), budget)];
        let steps_b = Buffer::from_slice(&dev, "test steps", &steps).unwrap();
        let mut rec = Recorder::new(&dev).unwrap();
        let q_at = QueryAt {
            buffer: &q,
            token: 0,
            stride: stride as u32,
        };
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        let result = update.record(&mut rec, q_at, &scratch, state, s, batch);
        result.map_err(|e| e.to_string())
    };
    assert!(record(s, Q_STRIDE, 8).is_ok());
    let other_group = IgShape { n_head: 4, ..s };
    for (what, err) in [
        ("group", record(other_group, Q_STRIDE, 8)),
        ("stride", record(s, N_HEAD * HD, 8)),
        ("budget", record(s, Q_STRIDE, 9)),
    ] {
        let err = err.expect_err(what);
        assert!(err.contains("h2o_update"), "{what}: {err}");
    }
    finish(&dev);
}
