//! The attention kernels against a CPU reference, over a paged cache whose rows' blocks are
//! scattered, for every KV type: the reference rounds K and V as the cache stores them
//! (`kv::stored`), so each type is held to the same tolerances as f32.

use super::*;
use crate::kv::stored::{decode_row, encode_row, round_row};
use crate::kv::{KvCache, KvPlacement, KvShape};
use crate::shaped::shaped_as;
use crate::testing::{assert_close, device, finish, random, run, upload};
use crate::vk::{Buffer, DeviceKind};
use hearth_reference::ops;

/// Heads of the test shape.
#[derive(Clone, Copy)]
struct Heads {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
}

impl Heads {
    fn stride(&self) -> usize {
        ((self.n_head + 2 * self.n_head_kv) * self.head_dim) as usize
    }
    fn kv_dim(&self) -> usize {
        (self.n_head_kv * self.head_dim) as usize
    }
    fn shape(&self, tokens: u32, t0: u32) -> AttnShape {
        AttnShape {
            tokens,
            t0,
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim: self.head_dim,
            scores: Scores::plain(self.head_dim),
        }
    }
}

/// Logical K/V of every row: [row][pos * kv_dim + i].
struct Logical {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

/// The KV types a test runs for a head_dim (q8 needs whole blocks of 32).
fn kv_types(head_dim: u32) -> impl Iterator<Item = KvType> {
    KvType::ALL
        .into_iter()
        .filter(move |t| head_dim as usize % t.group() == 0)
}

/// Rotates q and k heads of `qkv` and appends k, v at each token's row and position, as
/// `rope_kv.comp` does: both rounded as a cache of `kv_type` keeps them, the key also in qkv
/// (the value there stays as it was).
fn reference_rope_kv(
    qkv: &mut [f32],
    kv: &mut Logical,
    steps: &[StepToken],
    h: Heads,
    rot_dim: usize,
    table: &[[f32; 2]],
    kv_type: KvType,
) {
    let (nh, nkv, hd) = (h.n_head as usize, h.n_head_kv as usize, h.head_dim as usize);
    for (row, st) in qkv.chunks_mut(h.stride()).zip(steps) {
        let (qk, v) = row.split_at_mut((nh + nkv) * hd);
        ops::rope(
            qk,
            &[st.pos],
            nh + nkv,
            hd,
            rot_dim,
            RopeLayout::Gptj,
            table,
        );
        round_row(kv_type, &mut qk[nh * hd..]);
        let at = st.pos as usize * h.kv_dim();
        kv.k[st.row as usize][at..at + nkv * hd].copy_from_slice(&qk[nh * hd..]);
        let v_row = &mut kv.v[st.row as usize][at..at + nkv * hd];
        v_row.copy_from_slice(v);
        round_row(kv_type, v_row);
    }
}

/// Causal attention of every token over its sequence's history (its window's part, on a
/// local layer), scored as `scores` says, in f64; `source(t, p)` is the row holding position
/// p for token t.
fn reference_attention(
    qkv: &[f32],
    kv: &Logical,
    steps: &[StepToken],
    h: Heads,
    scores: Scores,
    source: &dyn Fn(usize, usize) -> usize,
) -> Vec<f32> {
    reference_attention_sunk(qkv, kv, steps, h, scores, None, source)
}

/// [`reference_attention`] with each query head's sink, where given, in its softmax's
/// maximum and denominator.
fn reference_attention_sunk(
    qkv: &[f32],
    kv: &Logical,
    steps: &[StepToken],
    h: Heads,
    scores: Scores,
    sinks: Option<&[f32]>,
    source: &dyn Fn(usize, usize) -> usize,
) -> Vec<f32> {
    let (nh, nkv, hd) = (h.n_head as usize, h.n_head_kv as usize, h.head_dim as usize);
    let mut out = vec![0f32; steps.len() * nh * hd];
    for (t, st) in steps.iter().enumerate() {
        let n_kv = st.pos as usize + 1;
        let first = scores.window.map_or(0, |w| n_kv.saturating_sub(w as usize));
        for hh in 0..nh {
            let kvh = hh / (nh / nkv);
            let at = |p: usize| (p * nkv + kvh) * hd;
            let q = &qkv[t * h.stride() + hh * hd..][..hd];
            let logits: Vec<f64> = (first..n_kv)
                .map(|p| {
                    let kr = &kv.k[source(t, p)][at(p)..][..hd];
                    let dot: f64 = q.iter().zip(kr).map(|(&a, &b)| a as f64 * b as f64).sum();
                    let s = dot * scores.scale as f64;
                    scores
                        .softcap
                        .map_or(s, |c| c as f64 * (s / c as f64).tanh())
                })
                .collect();
            let sink = sinks.map(|s| s[hh] as f64);
            let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let max = sink.map_or(max, |s| max.max(s));
            let e: Vec<f64> = logits.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
            for d in 0..hd {
                let acc: f64 = (first..n_kv)
                    .zip(&e)
                    .map(|(p, e)| e * kv.v[source(t, p)][at(p) + d] as f64)
                    .sum();
                out[t * nh * hd + hh * hd + d] = (acc / sum) as f32;
            }
        }
    }
    out
}

/// A cache of `rows` rows whose blocks are scattered through the pool (another row takes
/// and frees blocks in between), each holding `lens[r]` positions of random K/V that the
/// returned `Logical` mirrors (rounded as `kv_type` stores them).
fn scattered_cache(h: Heads, lens: &[usize], n_ctx: usize, kv_type: KvType) -> (KvCache, Logical) {
    let dev = device().unwrap();
    let rows = lens.len() + 1;
    let shape = KvShape {
        n_layer: 1,
        n_head_kv: h.n_head_kv as usize,
        head_dim: h.head_dim as usize,
        blocks: rows * crate::kv::blocks_for(n_ctx) + 2,
        rows,
        n_ctx,
        kv_type,
        values_in_keys: false,
    };
    let mut cache = KvCache::new(&dev, shape, KvPlacement::Device).unwrap();
    let spare = rows - 1;
    let mut logical = Logical {
        k: Vec::new(),
        v: Vec::new(),
    };
    for (r, &len) in lens.iter().enumerate() {
        cache.append(spare, n_ctx.min(20)).unwrap();
        cache.append(r, len).unwrap();
        cache.clear(spare);
        for (seed, into) in [(10, &mut logical.k), (20, &mut logical.v)] {
            let mut values = random(n_ctx * h.kv_dim(), seed + r as u64, 1.0);
            round_row(kv_type, &mut values);
            into.push(values);
        }
    }
    cache.sync_tables().unwrap();
    write_logical(&cache, &logical, lens, h);
    (cache, logical)
}

/// Stores positions 0..lens[r] of every row's logical K/V in their pool slots.
fn write_logical(cache: &KvCache, kv: &Logical, lens: &[usize], h: Heads) {
    let layer = cache.layer(0);
    let bytes = cache.shape().entry_bytes();
    let kv_type = layer.kv_type;
    let tables: Vec<u32> = layer
        .tables
        .download(lens.len() * layer.max_blocks as usize)
        .unwrap();
    for (r, &len) in lens.iter().enumerate() {
        for p in 0..len {
            let block = tables[r * layer.max_blocks as usize + p / BLOCK] as usize;
            let slot = (block * BLOCK + p % BLOCK) as u64;
            let at = p * h.kv_dim();
            let words = |values: &[f32]| encode_row(kv_type, &values[at..][..h.kv_dim()]);
            layer.k.upload(slot * bytes, &words(&kv.k[r])).unwrap();
            layer.v.upload(slot * bytes, &words(&kv.v[r])).unwrap();
        }
    }
}

/// Reads positions 0..len of `row` back from the pool.
fn read_row(cache: &KvCache, row: usize, len: usize) -> (Vec<f32>, Vec<f32>) {
    let layer = cache.layer(0);
    let tables: Vec<u32> = layer
        .tables
        .download((row + 1) * layer.max_blocks as usize)
        .unwrap();
    let all = |b: &Buffer| -> Vec<u32> { b.download((b.size() / 4) as usize).unwrap() };
    let (k, v) = (all(layer.k), all(layer.v));
    let words = cache.shape().entry_bytes() as usize / 4;
    let (mut ko, mut vo) = (Vec::new(), Vec::new());
    for p in 0..len {
        let block = tables[row * layer.max_blocks as usize + p / BLOCK] as usize;
        let at = (block * BLOCK + p % BLOCK) * words;
        ko.extend(decode_row(layer.kv_type, &k[at..at + words]));
        vo.extend(decode_row(layer.kv_type, &v[at..at + words]));
    }
    (ko, vo)
}

const BLOCK: usize = crate::kv::BLOCK_TOKENS;

/// Runs rope_kv then decode or prefill attention for `tokens` new tokens of one sequence
/// already holding `pos0` positions in scattered blocks, and checks the output and the
/// cache against the reference.
fn check(decode: bool, tokens: u32, pos0: u32, n_head: u32, n_head_kv: u32, head_dim: u32) {
    let h = Heads {
        n_head,
        n_head_kv,
        head_dim,
    };
    check_scored(decode, tokens, pos0, h, Scores::plain(head_dim));
}

/// [`check`] for attention scored as `scores` says.
fn check_scored(decode: bool, tokens: u32, pos0: u32, h: Heads, scores: Scores) {
    for kv_type in kv_types(h.head_dim) {
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            check_shaped((kind, kv_type), decode, tokens, pos0, h, scores, None);
        }
    }
}

/// [`check_scored`] with the kernels shaped for a device of `kind`, over a cache of
/// `kv_type`.
fn check_shaped(
    (kind, kv_type): (DeviceKind, KvType),
    decode: bool,
    tokens: u32,
    pos0: u32,
    h: Heads,
    scores: Scores,
    sinks: Option<&[f32]>,
) {
    let Some(dev) = device() else { return };
    let (n_head, n_head_kv, head_dim) = (h.n_head, h.n_head_kv, h.head_dim);
    let (rot_dim, n_ctx) = (head_dim - 4, (pos0 + tokens + 3) as usize);
    let (mut cache, mut logical) = scattered_cache(h, &[pos0 as usize], n_ctx, kv_type);
    cache.append(0, tokens as usize).unwrap();
    cache.sync_tables().unwrap();
    let steps: Vec<StepToken> = (0..tokens).map(|t| StepToken::new(0, pos0 + t)).collect();
    let mut qkv = random(tokens as usize * h.stride(), 3, 1.5);
    let table = ops::rope_table(n_ctx, rot_dim as usize, 10000.0);
    let qkv_b = upload(&dev, &qkv);
    let table_b = Buffer::from_slice(&dev, "t", &table).unwrap();
    let steps_b = Buffer::from_slice(&dev, "steps", &steps).unwrap();
    let o = upload(&dev, &vec![0f32; (tokens * n_head * head_dim) as usize]);
    let sinks_b = sinks.map(|s| upload(&dev, s));

    let rope_kv = RopeKv::new(&dev, kv_type).unwrap();
    let rope = RopeSpec {
        rot_dim,
        layout: RopeLayout::Gptj,
    };
    let s = AttnShape {
        scores,
        ..h.shape(tokens, 0)
    };
    let group = n_head / n_head_kv;
    let (decode_kernel, prefill_kernel) = shaped_as(kind, || {
        let decode = AttnDecode::new(&dev, head_dim, group, kv_type);
        let prefill = AttnPrefill::new(&dev, head_dim, group, kv_type);
        (decode.unwrap(), prefill.unwrap())
    });
    let layer = cache.layer(0);
    let io = AttnIo {
        qkv: &qkv_b,
        kv: layer,
        steps: &steps_b,
        o: &o,
        sinks: sinks_b.as_ref(),
    };
    let rope = RopeTable {
        table: &table_b,
        spec: rope,
    };
    let fused = decode && tokens == 1;
    let longest = pos0 + tokens;
    run(&dev, |rec| {
        if fused {
            decode_kernel
                .record_fused(rec, io, s, rope, longest)
                .unwrap();
            return;
        }
        rope_kv
            .record(rec, &qkv_b, layer, &steps_b, s, rope)
            .unwrap();
        if decode {
            decode_kernel.record(rec, io, s, longest).unwrap();
        } else {
            prefill_kernel.record(rec, io, s).unwrap();
        }
    });
    let qkv_before = qkv.clone();

    let rot = rot_dim as usize;
    reference_rope_kv(&mut qkv, &mut logical, &steps, h, rot, &table, kv_type);
    let what = format!(
        "{} tokens={tokens} pos0={pos0} heads={n_head}/{n_head_kv} hd={head_dim} {scores:?} \
         sinks {sinks:?} ({kind:?} shape, {kv_type} cache)",
        if decode { "decode" } else { "prefill" }
    );
    let valid = (pos0 + tokens) as usize * h.kv_dim();
    let exact = |_| 1e-6;
    // The fused kernel rotates in registers and leaves qkv as it was.
    let qkv_want = if fused { &qkv_before } else { &qkv };
    assert_close(
        &format!("{what}: qkv"),
        &qkv_b.download(qkv.len()).unwrap(),
        qkv_want,
        exact,
    );
    let (k_got, v_got) = read_row(&cache, 0, (pos0 + tokens) as usize);
    assert_close(
        &format!("{what}: k cache"),
        &k_got,
        &logical.k[0][..valid],
        exact,
    );
    assert_close(
        &format!("{what}: v cache"),
        &v_got,
        &logical.v[0][..valid],
        exact,
    );
    let want = reference_attention_sunk(&qkv, &logical, &steps, h, scores, sinks, &|_, _| 0);
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
    // Long enough for GPU shapes to split positions over workgroups (a short last run).
    check(true, 1, 1100, 9, 3, 64);
    check(true, 2, 700, 6, 2, 32);
}

#[test]
fn prefill_attention_matches_reference() {
    check(false, 1, 0, 2, 1, 16);
    check(false, 13, 0, 6, 2, 24);
    check(false, 70, 9, 6, 3, 32);
    check(false, 33, 40, 9, 3, 64);
}

/// Local layers (a window shorter than the history, down to one entry), a scale other than
/// 1 / sqrt(head_dim) and soft-capped scores (Gemma 2), in decode (fused, split over runs on
/// GPU shapes) and prefill (tiles wholly outside some queries' windows).
#[test]
fn windowed_and_capped_attention_matches_reference() {
    let h = |n_head, n_head_kv, head_dim| Heads {
        n_head,
        n_head_kv,
        head_dim,
    };
    let scored = |window: Option<u32>, softcap: Option<f32>| Scores {
        scale: 0.35,
        softcap,
        window,
    };
    check_scored(true, 1, 37, h(6, 2, 24), scored(Some(16), Some(1.5)));
    check_scored(true, 2, 130, h(4, 2, 32), scored(Some(1), None));
    check_scored(true, 1, 1100, h(9, 3, 64), scored(Some(700), Some(2.0)));
    check_scored(false, 70, 9, h(6, 3, 32), scored(Some(24), Some(1.5)));
    check_scored(false, 33, 40, h(4, 2, 32), scored(Some(5), None));
    check_scored(false, 13, 0, h(6, 2, 24), scored(None, Some(1.0)));
    // A window longer than the history changes nothing.
    check_scored(false, 13, 3, h(6, 2, 24), scored(Some(500), None));
}

/// Attention sinks (GPT-OSS: a learned logit per query head in each softmax's denominator),
/// one head's far above its scores so that it holds the maximum: in fused, batched and split
/// decode (GPU shapes cut 1100 positions into runs, and the merge adds the sink once) and in
/// prefill, on global and local layers.
#[test]
fn attention_with_sinks_matches_reference() {
    let h = |n_head, n_head_kv, head_dim| Heads {
        n_head,
        n_head_kv,
        head_dim,
    };
    let scored = |window: Option<u32>| Scores {
        scale: 0.35,
        softcap: None,
        window,
    };
    let sinks = |n: u32| -> Vec<f32> {
        let mut s: Vec<f32> = (0..n).map(|i| -2.0 + 5.0 * i as f32 / n as f32).collect();
        s[1] = 6.0;
        s
    };
    let cases = [
        (true, 1, 37, h(6, 2, 24), scored(None)),
        (true, 2, 130, h(4, 2, 32), scored(Some(24))),
        (true, 1, 1100, h(9, 3, 64), scored(None)),
        (true, 1, 1100, h(9, 3, 64), scored(Some(700))),
        (false, 70, 9, h(6, 3, 32), scored(Some(24))),
        (false, 33, 40, h(4, 2, 32), scored(None)),
    ];
    for (decode, tokens, pos0, h, scores) in cases {
        let sinks = sinks(h.n_head);
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let kv = (kind, KvType::F32);
            check_shaped(kv, decode, tokens, pos0, h, scores, Some(&sinks));
        }
    }
}

/// One decode step for three sequences of different lengths, one of them reading part of
/// its history through a beam table from another row (the indirect KV cache).
#[test]
fn batched_decode_reads_each_sequence_and_beam_table() {
    for kv_type in KvType::ALL {
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            batched_decode_shaped((kind, kv_type), [33, 5, 40]);
            // GPU shapes split the long sequences' positions; the short one has idle runs.
            batched_decode_shaped((kind, kv_type), [633, 5, 640]);
        }
    }
}

fn batched_decode_shaped((kind, kv_type): (DeviceKind, KvType), lens: [usize; 3]) {
    let Some(dev) = device() else { return };
    let h = Heads {
        n_head: 6,
        n_head_kv: 2,
        head_dim: 32,
    };
    let n_ctx = lens[2] + 8;
    let (mut cache, mut logical) = scattered_cache(h, &lens, n_ctx, kv_type);
    for r in 0..lens.len() {
        cache.append(r, 1).unwrap();
    }
    cache.sync_tables().unwrap();
    // Row 2's sequence took positions 0..30 from row 0 (its ancestor's lane), and the
    // rest, including its new position, from its own row. As in beam search, it reads
    // nothing that another sequence writes in the same step (row 0 writes position
    // lens[0]).
    let beam_rows: Vec<u32> = (0..=lens[2]).map(|p| if p < 30 { 0 } else { 2 }).collect();
    let mut beams: Vec<u32> = beam_rows.clone();
    beams.resize(n_ctx, 0);
    let base = cache.set_beams(2, &beams).unwrap();
    let mut steps: Vec<StepToken> = lens
        .iter()
        .enumerate()
        .map(|(r, &len)| StepToken::new(r as u32, len as u32))
        .collect();
    steps[2].beam = base;

    let mut qkv = random(steps.len() * h.stride(), 4, 1.5);
    let table = ops::rope_table(n_ctx, 16, 10000.0);
    let qkv_b = upload(&dev, &qkv);
    let table_b = Buffer::from_slice(&dev, "t", &table).unwrap();
    let steps_b = Buffer::from_slice(&dev, "steps", &steps).unwrap();
    let o = upload(
        &dev,
        &vec![0f32; steps.len() * (h.n_head * h.head_dim) as usize],
    );
    let rope = RopeSpec {
        rot_dim: 16,
        layout: RopeLayout::Gptj,
    };
    let s = h.shape(steps.len() as u32, 0);
    let group = h.n_head / h.n_head_kv;
    let attn = shaped_as(kind, || AttnDecode::new(&dev, h.head_dim, group, kv_type)).unwrap();
    let io = AttnIo {
        qkv: &qkv_b,
        kv: cache.layer(0),
        steps: &steps_b,
        o: &o,
        sinks: None,
    };
    let rope = RopeTable {
        table: &table_b,
        spec: rope,
    };
    // One new token per sequence: the fused kernel rotates and stores K/V itself.
    run(&dev, |rec| {
        let longest = lens[2] as u32 + 1;
        attn.record_fused(rec, io, s, rope, longest).unwrap();
    });
    reference_rope_kv(&mut qkv, &mut logical, &steps, h, 16, &table, kv_type);
    let source = |t: usize, p: usize| if t == 2 { beam_rows[p] as usize } else { t };
    let scores = Scores::plain(h.head_dim);
    let want = reference_attention(&qkv, &logical, &steps, h, scores, &source);
    assert_close(
        &format!("batched decode, lengths {lens:?} ({kind:?} shape, {kv_type} cache)"),
        &o.download(want.len()).unwrap(),
        &want,
        |_| 2e-5,
    );
    finish(&dev);
}

#[test]
fn shapes_are_checked() {
    let Some(dev) = device() else { return };
    let h = Heads {
        n_head: 4,
        n_head_kv: 2,
        head_dim: 16,
    };
    let (cache, _) = scattered_cache(h, &[4], 8, KvType::F16);
    let buf = upload(&dev, &[0.0; 1024]);
    let kernel = AttnPrefill::new(&dev, 16, 2, KvType::F16).unwrap();
    // Built for two query heads per KV head, as a CPU device groups them.
    let decode = shaped_as(DeviceKind::Cpu, || {
        AttnDecode::new(&dev, 16, 2, KvType::F16)
    })
    .unwrap();
    let mut rec = Recorder::new(&dev).unwrap();
    let io = AttnIo {
        qkv: &buf,
        kv: cache.layer(0),
        steps: &buf,
        o: &buf,
        sinks: None,
    };
    let err = kernel.record(&mut rec, io, h.shape(40, 0)).unwrap_err();
    assert!(err.to_string().contains("holds"), "{err}");
    let bad = AttnShape {
        n_head_kv: 3,
        ..h.shape(4, 0)
    };
    let err = kernel.record(&mut rec, io, bad).unwrap_err();
    assert!(err.to_string().contains("do not divide"), "{err}");
    let three = AttnShape {
        n_head: 3,
        n_head_kv: 1,
        ..h.shape(1, 0)
    };
    let err = decode.record(&mut rec, io, three, 1).unwrap_err();
    assert!(err.to_string().contains("query heads per KV head"), "{err}");
    // A kernel runs only on a cache of the type it was built for.
    let f32_kernel = AttnPrefill::new(&dev, 16, 2, KvType::F32).unwrap();
    let err = f32_kernel.record(&mut rec, io, h.shape(4, 0)).unwrap_err();
    assert!(
        err.to_string().contains("built for a f32 KV cache"),
        "{err}"
    );
    drop(rec);
    // q8 stores blocks of 32 values: a head_dim of 16 is refused, naming the way out.
    let shape = KvShape {
        kv_type: KvType::Q8,
        ..cache.shape()
    };
    let err = KvCache::new(&dev, shape, KvPlacement::Device)
        .err()
        .unwrap();
    assert!(err.to_string().contains("not a multiple of 32"), "{err}");
    finish(&dev);
}
