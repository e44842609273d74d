//! InfiniGen on the CPU reference: skewing leaves attention scores unchanged, selecting every
//! token reproduces dense decoding exactly, and the default settings fetch a fraction of the
//! tokens while the next-token distribution stays close to dense. In the Vulkan executor:
//! selecting every token matches dense decoding, and at a small budget the device fetches what
//! the reference fetches and predicts the same distribution (without a Vulkan device these
//! skip outside CI and fail in CI). With a pool smaller than the sequence, the device evicts
//! and fetches what the reference does, and a step of several sequences (one sharing another's
//! prefix) runs each as it runs alone. H2O, the baseline: keeping everything is dense, a small
//! budget keeps the recent window and never takes back a token; on the device it keeps and
//! predicts what the reference does, one sequence or several in a step.

use std::sync::Arc;

use hearth_kernels::vk::{Device, DeviceDesc};
use hearth_model::kv::infinigen::{self, IgParams, IgStats, Skew};
use hearth_model::kv::policy::KvPolicyChoice;
use hearth_model::kv::policy::KvPolicyKind::{H2o, Infinigen};
use hearth_model::kv::KvBudget;
use hearth_model::kv::KvPlacement;
use hearth_model::{Backend, Logits, SeqStep};
use hearth_models::synthetic::{Family, Shape};
use hearth_models::{resolve_gguf, GgufFile};
use hearth_quant::Format;
use hearth_reference::CpuModel;
use hearth_vulkan::{VkModel, VkModelOptions};
use rand::{Rng, SeedableRng};

/// 4 layers, 6 query heads sharing 2 KV heads of 32 dimensions.
const SMALL: Shape = Shape {
    family: Family::Llama,
    n_layer: 4,
    n_embd: 192,
    n_ff: 256,
    n_head: 6,
    n_head_kv: 2,
    n_vocab: 256,
    n_ctx_train: 512,
    rope_base: 10_000.0,
    norm_eps: 1e-5,
    tied_embeddings: false,
    key_length: None,
    sliding_window: None,
    experts: None,
};

fn model(n_ctx: usize) -> CpuModel {
    cpu(&file(), n_ctx)
}

fn tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| rng.gen_range(0..SMALL.n_vocab as u32))
        .collect()
}

/// A calibration with no tokens, or with keys of other tokens than its queries, is an error
/// that names the calibration.
#[test]
fn broken_calibrations_are_refused() {
    let mut m = model(64);
    let config = m.config().clone();
    let good = m.calibrate(&tokens(16, 1)).unwrap();
    let mut short_keys = good.clone();
    short_keys.keys[2].truncate(config.n_head_kv * config.head_dim * 15);
    let mut empty = good.clone();
    empty.queries.iter_mut().for_each(Vec::clear);
    let mut missing_layer = good.clone();
    missing_layer.queries.pop();
    for broken in [short_keys, empty, missing_layer] {
        let err = Skew::from_calibration(&config, &broken).unwrap_err();
        assert!(err.to_string().contains("calibration"), "{err}");
    }
    assert!(Skew::from_calibration(&config, &good).is_ok());
}

/// Every layer's skew matrix is orthogonal, so (Q A)(K A)^T = Q K^T.
#[test]
fn skewing_leaves_attention_scores_unchanged() {
    let mut m = model(256);
    let config = m.config().clone();
    let calibration = m.calibrate(&tokens(96, 1)).unwrap();
    let skew = Skew::from_calibration(&config, &calibration).unwrap();
    let hd = config.head_dim;
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    for l in 0..config.n_layer {
        for g in 0..config.n_head_kv {
            let a = &skew.matrices[l][g * hd * hd..][..hd * hd];
            let q: Vec<f32> = (0..hd).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let k: Vec<f32> = (0..hd).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let skewed = |x: &[f32]| -> Vec<f32> {
                (0..hd)
                    .map(|c| (0..hd).map(|i| x[i] * a[i * hd + c]).sum())
                    .collect()
            };
            let plain: f32 = q.iter().zip(&k).map(|(x, y)| x * y).sum();
            let (qs, ks) = (skewed(&q), skewed(&k));
            let after: f32 = qs.iter().zip(&ks).map(|(x, y)| x * y).sum();
            assert!(
                (plain - after).abs() <= 1e-5 * (1.0 + plain.abs()),
                "layer {l} head {g}: {plain} vs {after}"
            );
        }
    }
    // The first columns carry the query-key products: on this random model 20% of the
    // columns hold over 1.25 times their share of sum |q_c| * sum |k_c|, the order's measure,
    // over the calibration as skewing sees it (moved to positions across the context, where
    // RoPE's turning spreads a random model's products more evenly than a trained one's).
    let spread = infinigen::spread_positions(&config, &calibration);
    let (q, k) = (&spread.queries[1], &spread.keys[1]);
    let (q_dim, kv_dim, r) = (
        config.n_head * hd,
        config.n_head_kv * hd,
        skew.partial_dims(0.2),
    );
    let group = config.n_head / config.n_head_kv;
    let a = &skew.matrices[1];
    let skewed = |x: &[f32], g: usize, c: usize| -> f64 {
        (0..hd)
            .map(|i| (x[i] * a[(g * hd + i) * hd + c]) as f64)
            .sum::<f64>()
            .abs()
    };
    let (mut head, mut total) = (0f64, 0f64);
    for g in 0..config.n_head_kv {
        for c in 0..hd {
            let sq: f64 = q
                .chunks(q_dim)
                .flat_map(|t| (0..group).map(move |i| (t, g * group + i)))
                .map(|(t, h)| skewed(&t[h * hd..][..hd], g, c))
                .sum();
            let sk: f64 = k
                .chunks(kv_dim)
                .map(|t| skewed(&t[g * hd..][..hd], g, c))
                .sum();
            total += sq * sk;
            if c < r {
                head += sq * sk;
            }
        }
    }
    assert!(
        head / total > 1.25 * r as f64 / hd as f64,
        "first {r} of {hd} columns hold {:.2}",
        head / total
    );
}

/// Decode with InfiniGen at an alpha and budget that select every token gives exactly the
/// dense logits.
#[test]
fn selecting_everything_equals_dense() {
    let prompt = tokens(40, 3);
    let mut dense = model(128);
    let mut sparse = model(128);
    let config = sparse.config().clone();
    let calibration = sparse.calibrate(&tokens(64, 4)).unwrap();
    let skew = Skew::from_calibration(&config, &calibration).unwrap();
    let params = select_everything();
    sparse
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
    assert_same_greedy_decoding(&mut dense, &mut sparse, &prompt, 24);
    let stats = sparse
        .kv_policy_stats()
        .and_then(|s| s.of(Infinigen))
        .unwrap();
    assert_eq!(stats.fetched, stats.available);
    // Layers 2 and 3, 2 KV heads, 24 steps.
    assert_eq!(stats.selections, 2 * 2 * 24);
}

/// At a small budget only that many tokens (and the recent window) are fetched, and the
/// next-token distribution stays near dense's: the speculated tokens are the ones that matter.
#[test]
fn a_small_budget_fetches_few_tokens() {
    let prompt = tokens(200, 5);
    let mut dense = model(256);
    let mut sparse = model(256);
    let config = sparse.config().clone();
    let calibration = sparse.calibrate(&tokens(128, 6)).unwrap();
    let skew = Skew::from_calibration(&config, &calibration).unwrap();
    let params = small_budget();
    sparse
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
    let _ = dense.forward(&prompt, Logits::Last).unwrap();
    let _ = sparse.forward(&prompt, Logits::Last).unwrap();
    let next = tokens(8, 7);
    for &t in &next {
        let a = dense.forward(&[t], Logits::Last).unwrap();
        let b = sparse.forward(&[t], Logits::Last).unwrap();
        let kl = kl_divergence(&a, &b);
        assert!(kl < 0.05, "KL {kl}");
    }
    let stats = sparse
        .kv_policy_stats()
        .and_then(|s| s.of(Infinigen))
        .unwrap();
    // At most a quarter of the (at most 207) earlier tokens, plus the 8 newest.
    assert!(
        stats.max_fetched as usize <= 207usize.div_ceil(4) + 8,
        "{stats:?}"
    );
    assert!(stats.fetched_fraction() <= 0.30, "{stats:?}");
}

/// H2O with a budget that keeps every token gives exactly the dense logits.
#[test]
fn h2o_keeping_everything_equals_dense() {
    let prompt = tokens(40, 3);
    let mut dense = model(128);
    let mut h2o = model(128);
    h2o.set_kv_policy(KvPolicyChoice::H2o(IgParams {
        budget: 1.0,
        ..IgParams::paper(true)
    }))
    .unwrap();
    assert_same_greedy_decoding(&mut dense, &mut h2o, &prompt, 24);
    let stats = h2o.kv_policy_stats().and_then(|s| s.of(H2o)).unwrap();
    assert_eq!(stats.fetched, stats.available);
    // Layers 2 and 3, 2 KV heads, 24 steps.
    assert_eq!(stats.selections, 2 * 2 * 24);
    assert!(h2o
        .kv_policy_stats()
        .and_then(|s| s.of(Infinigen))
        .is_none());
}

/// Kept positions per layer and KV head, [n_layer][n_head_kv] (empty for dense layers).
type Kept = Vec<Vec<Vec<u32>>>;

/// H2O at budget 0.2 over a prompt of 60 and 40 decode steps: the cache length and the kept
/// positions after the prompt and after every step.
fn h2o_run() -> (CpuModel, IgParams, Vec<(usize, Kept)>) {
    let params = IgParams {
        budget: 0.2,
        min_budget: 8,
        ..IgParams::paper(true)
    };
    let mut m = model(128);
    m.set_kv_policy(KvPolicyChoice::H2o(params)).unwrap();
    let _ = m.forward(&tokens(60, 8), Logits::Last).unwrap();
    let mut runs = vec![(m.len(), kept(&m))];
    for t in tokens(40, 9) {
        let logits = m.forward(&[t], Logits::Last).unwrap();
        assert!(logits.iter().all(|x| x.is_finite()));
        runs.push((m.len(), kept(&m)));
    }
    (m, params, runs)
}

fn kept(m: &CpuModel) -> Kept {
    let h2o = m.h2o().unwrap();
    (0..SMALL.n_layer)
        .map(|l| {
            let heads = if h2o.applies(l) { SMALL.n_head_kv } else { 0 };
            (0..heads).map(|g| h2o.kept(l, g).to_vec()).collect()
        })
        .collect()
}

/// Each KV head keeps (and so the next step attends to) at most the budget, always including
/// the most recent half of it.
#[test]
fn h2o_stays_within_budget_and_keeps_the_recent_window() {
    let (m, params, runs) = h2o_run();
    for (len, kept) in &runs {
        let budget = params.budget_tokens(*len);
        for (l, heads) in kept.iter().enumerate().skip(params.dense_layers) {
            for (g, k) in heads.iter().enumerate() {
                assert!(k.len() <= budget, "len {len} layer {l} head {g}: {k:?}");
                assert!(k.windows(2).all(|w| w[0] < w[1]));
                assert!(k.iter().all(|&p| (p as usize) < *len));
                let recent = (len - budget / 2) as u32..*len as u32;
                assert!(
                    recent.clone().all(|p| k.contains(&p)),
                    "len {len} layer {l} head {g}: {recent:?} not all in {k:?}"
                );
            }
        }
    }
    // Something was evicted: a budget of 20 out of 100 keeps 20.
    let (len, kept) = runs.last().unwrap();
    assert_eq!(*len, 100);
    assert!(kept[params.dense_layers].iter().all(|k| k.len() == 20));
    let stats = m.kv_policy_stats().and_then(|s| s.of(H2o)).unwrap();
    assert_eq!(stats.selections, 2 * 2 * 40);
    assert!(stats.max_fetched as usize <= params.budget_tokens(99));
    assert!(stats.fetched_fraction() <= 0.21, "{stats:?}");
}

/// An evicted position is never kept again, not after more steps and not after truncating
/// the cache and decoding on.
#[test]
fn h2o_never_brings_back_an_evicted_token() {
    let (mut m, _, runs) = h2o_run();
    // Per layer and KV head, the positions dropped so far.
    let mut evicted: Kept = runs[0]
        .1
        .iter()
        .map(|h| vec![Vec::new(); h.len()])
        .collect();
    let check = |evicted: &mut Kept, len: usize, kept: &Kept| {
        for (l, (gone, heads)) in evicted.iter_mut().zip(kept).enumerate() {
            for (g, (gone, k)) in gone.iter_mut().zip(heads).enumerate() {
                assert!(
                    gone.iter().all(|p| !k.contains(p)),
                    "len {len} layer {l} head {g}: an evicted position is back in {k:?}"
                );
                *gone = (0..len as u32).filter(|p| !k.contains(p)).collect();
            }
        }
    };
    for (len, kept) in &runs {
        check(&mut evicted, *len, kept);
    }
    assert!(evicted.iter().flatten().any(|gone| !gone.is_empty()));
    // Truncating forgets the last 10 positions; decoding goes on from there.
    m.truncate(90);
    assert!(kept(&m).iter().flatten().flatten().all(|&p| p < 90));
    for gone in evicted.iter_mut().flatten() {
        gone.retain(|&p| p < 90);
    }
    for t in tokens(10, 10) {
        let _ = m.forward(&[t], Logits::Last).unwrap();
        check(&mut evicted, m.len(), &kept(&m));
    }
}

/// Feeds `prompt`, then `steps` tokens chosen greedily from `a`'s logits, to both models, and
/// checks that their logits are identical throughout.
fn assert_same_greedy_decoding(a: &mut CpuModel, b: &mut CpuModel, prompt: &[u32], steps: usize) {
    let mut want = a.forward(prompt, Logits::Last).unwrap();
    assert_eq!(want, b.forward(prompt, Logits::Last).unwrap(), "prompt");
    for step in 0..steps {
        let next = argmax(&want);
        want = a.forward(&[next], Logits::Last).unwrap();
        assert_eq!(
            want,
            b.forward(&[next], Logits::Last).unwrap(),
            "step {step}"
        );
    }
}

fn argmax(x: &[f32]) -> u32 {
    x.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap()
}

fn kl_divergence(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    let softmax = |x: &[f32]| -> Vec<f64> {
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let e: Vec<f64> = x.iter().map(|&v| (v as f64 - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.into_iter().map(|v| v / s).collect()
    };
    let (p, q) = (softmax(p_logits), softmax(q_logits));
    p.iter()
        .zip(&q)
        .filter(|(p, _)| **p > 0.0)
        .map(|(p, q)| p * (p / q.max(1e-300)).ln())
        .sum()
}

/// A device with the validation layer on, synchronization checks included (where the layer
/// is installed, as in CI): InfiniGen's fetch runs without barriers around it.
fn device() -> Option<Arc<Device>> {
    let device = Device::new(DeviceDesc {
        validation: true,
        ..DeviceDesc::default()
    });
    hearth_testkit::or_skip(device, "Vulkan device")
}

fn no_validation_messages(dev: &Device) {
    let messages = dev.take_validation_messages();
    assert!(messages.is_empty(), "{}", messages.join("\n"));
}

fn file() -> GgufFile {
    SMALL.build_random("small", Format::Q8, 11).unwrap()
}

fn cpu(file: &GgufFile, n_ctx: usize) -> CpuModel {
    let resolved = resolve_gguf(file).unwrap();
    CpuModel::load(file, &resolved, n_ctx, &mut |_| true).unwrap()
}

fn vulkan(dev: &Arc<Device>, file: &GgufFile, n_ctx: usize) -> VkModel {
    vulkan_with(dev, file, n_ctx, None)
}

fn vulkan_with(
    dev: &Arc<Device>,
    file: &GgufFile,
    n_ctx: usize,
    kv_budget: Option<KvBudget>,
) -> VkModel {
    vulkan_rows(dev, file, n_ctx, kv_budget, 1)
}

fn vulkan_rows(
    dev: &Arc<Device>,
    file: &GgufFile,
    n_ctx: usize,
    kv_budget: Option<KvBudget>,
    n_seq: usize,
) -> VkModel {
    let resolved = resolve_gguf(file).unwrap();
    let options = VkModelOptions {
        n_ctx,
        n_seq,
        kv_budget,
        kv_placement: KvPlacement::Host,
        ..VkModelOptions::default()
    };
    VkModel::load(dev, file, &resolved, options, &mut |_| true).unwrap()
}

/// `file` on the CPU reference and on the device (256 positions), both running InfiniGen with
/// `params` over the skew matrices calibrated on the reference, which come back too.
fn with_infinigen(
    dev: &Arc<Device>,
    file: &GgufFile,
    params: IgParams,
) -> (CpuModel, VkModel, Skew) {
    let skew = skew(file);
    let infinigen = KvPolicyChoice::Infinigen {
        skew: &skew,
        params,
    };
    let mut reference = cpu(file, 256);
    reference.set_kv_policy(infinigen).unwrap();
    let mut device_model = vulkan(dev, file, 256);
    device_model.set_kv_policy(infinigen).unwrap();
    (reference, device_model, skew)
}

fn skew(file: &GgufFile) -> Skew {
    let mut m = cpu(file, 128);
    let config = m.config().clone();
    Skew::from_calibration(&config, &m.calibrate(&tokens(96, 4)).unwrap()).unwrap()
}

/// An alpha and budget that select every token, with no floor or window, so the sparse path
/// runs rather than the dense shortcut.
fn select_everything() -> IgParams {
    IgParams {
        alpha: f32::INFINITY,
        budget: 1.0,
        min_budget: 0,
        recent: 0,
        ..IgParams::paper(true)
    }
}

/// A quarter of the tokens, the 8 newest besides and no floor: sparse from the first step.
fn small_budget() -> IgParams {
    IgParams {
        budget: 0.25,
        min_budget: 0,
        recent: 8,
        ..IgParams::paper(true)
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// With an alpha and budget that select every token, the sparse path (speculation,
/// selection, gather, sparse attention) gives the dense logits up to summation order.
#[test]
fn selecting_everything_matches_dense_on_the_device() {
    let Some(dev) = device() else { return };
    let file = file();
    let skew = skew(&file);
    let mut dense = vulkan(&dev, &file, 256);
    let mut sparse = vulkan(&dev, &file, 256);
    let params = select_everything();
    sparse
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
    let prompt = tokens(70, 3);
    let mut a = dense.forward(&prompt, Logits::Last).unwrap();
    let mut b = sparse.forward(&prompt, Logits::Last).unwrap();
    assert!(max_diff(&a, &b) == 0.0, "prefill is dense in both");
    for step in 0..20 {
        let next = tokens(1, 100 + step)[0];
        a = dense.forward(&[next], Logits::Last).unwrap();
        b = sparse.forward(&[next], Logits::Last).unwrap();
        let d = max_diff(&a, &b);
        assert!(d < 1e-4, "step {step}: logits differ by {d}");
    }
    let stats = sparse
        .kv_policy_stats()
        .and_then(|s| s.of(Infinigen))
        .unwrap();
    assert_eq!(stats.fetched, stats.available);
    assert_eq!(stats.selections, 2 * 2 * 20);
    no_validation_messages(&dev);
}

/// At a small budget (and a recent window), the device fetches what the CPU reference fetches
/// and predicts the same distribution.
#[test]
fn sparse_decoding_matches_the_cpu_reference() {
    let Some(dev) = device() else { return };
    let file = file();
    let skew = skew(&file);
    let params = small_budget();
    let mut reference = cpu(&file, 256);
    reference
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
    let mut device_model = vulkan(&dev, &file, 256);
    device_model
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
    // The same with each fetch recorded apart (`--ig-serial-fetch`): only the ordering
    // changes, so the logits are the same to the bit.
    let mut serial = vulkan(&dev, &file, 256);
    let serial_params = IgParams {
        serial_fetch: true,
        ..params
    };
    serial
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params: serial_params,
        })
        .unwrap();
    let prompt = tokens(150, 5);
    // Prefill attends densely on every executor.
    let a = reference.forward(&prompt, Logits::Last).unwrap();
    let b = device_model.forward(&prompt, Logits::Last).unwrap();
    let c = serial.forward(&prompt, Logits::Last).unwrap();
    assert_eq!((a.len(), b.len()), (SMALL.n_vocab, SMALL.n_vocab));
    let d = max_diff(&a, &b);
    assert!(d < 2e-3, "prefill: logits differ by {d}");
    assert!(
        max_diff(&b, &c) == 0.0,
        "prefill: serial fetch changed the logits"
    );
    for (step, &t) in tokens(12, 6).iter().enumerate() {
        let a = reference.forward(&[t], Logits::Last).unwrap();
        let b = device_model.forward(&[t], Logits::Last).unwrap();
        let d = max_diff(&a, &b);
        assert!(d < 2e-3, "step {step}: logits differ by {d}");
        let c = serial.forward(&[t], Logits::Last).unwrap();
        assert!(
            max_diff(&b, &c) == 0.0,
            "step {step}: serial fetch changed the logits"
        );
    }
    let (want, got) = (
        reference
            .kv_policy_stats()
            .and_then(|s| s.of(Infinigen))
            .unwrap(),
        device_model
            .kv_policy_stats()
            .and_then(|s| s.of(Infinigen))
            .unwrap(),
    );
    assert_eq!(got.selections, want.selections);
    assert_eq!(
        got.fetched, want.fetched,
        "device {got:?}, reference {want:?}"
    );
    // A quarter of the (at most 161) earlier tokens and the 8 newest.
    assert!(
        got.max_fetched as usize <= 161usize.div_ceil(4) + 8,
        "{got:?}"
    );
    // Every fetch kernel (speculate, select, gather for each sparse layer and step) was
    // recorded with no barrier between it and some kernel of the layer before, and the
    // synchronization checks found no race in that.
    let sparse_layers = SMALL.n_layer - params.dense_layers;
    assert_eq!(
        device_model.fetch_alongside(),
        (3 * sparse_layers * 12, 3 * sparse_layers * 12)
    );
    assert_eq!(serial.fetch_alongside(), (3 * sparse_layers * 12, 0));
    no_validation_messages(&dev);
}

/// While the floor and the recent window cover the whole history, decode attends densely
/// (no speculation) on both executors, and every token counts as fetched.
#[test]
fn short_histories_attend_densely() {
    let file = file();
    let skew = skew(&file);
    let params = IgParams::paper(true);
    let short = params.min_budget + params.recent - 12;
    let prompt = tokens(short, 8);
    let mut dense = cpu(&file, 128);
    let mut sparse = cpu(&file, 128);
    sparse
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
    let dev = device();
    let mut on_device = dev.as_ref().map(|d| {
        let mut m = vulkan(d, &file, 128);
        m.set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
        (vulkan(d, &file, 128), m)
    });
    let _ = dense.forward(&prompt, Logits::Last).unwrap();
    let _ = sparse.forward(&prompt, Logits::Last).unwrap();
    if let Some((d, s)) = &mut on_device {
        d.forward(&prompt, Logits::Last).unwrap();
        s.forward(&prompt, Logits::Last).unwrap();
    }
    for &t in &tokens(12, 9) {
        let a = dense.forward(&[t], Logits::Last).unwrap();
        let b = sparse.forward(&[t], Logits::Last).unwrap();
        assert_eq!(a, b);
        if let Some((d, s)) = &mut on_device {
            let (a, b) = (
                d.forward(&[t], Logits::Last).unwrap(),
                s.forward(&[t], Logits::Last).unwrap(),
            );
            assert_eq!(a, b, "the device's dense shortcut");
        }
    }
    let stats = sparse
        .kv_policy_stats()
        .and_then(|s| s.of(Infinigen))
        .unwrap();
    assert_eq!(
        (stats.fetched, stats.selections),
        (stats.available, 2 * 2 * 12)
    );
    if let Some((_, s)) = &on_device {
        assert_eq!(
            s.kv_policy_stats().and_then(|s| s.of(Infinigen)).unwrap(),
            stats
        );
    }
    if let Some(dev) = &dev {
        no_validation_messages(dev);
    }
}

/// A pool of 100 tokens (7 blocks) serves a sequence of 150: past 100, every step evicts
/// the least fetched token outside the recent window. The device evicts, fetches and predicts
/// as the reference does; a pool as large as the run changes nothing; and truncation keeps
/// what came after the last eviction, or starts over.
#[test]
fn pool_eviction_matches_the_cpu_reference() {
    let file = file();
    let skew = skew(&file);
    let params = IgParams {
        pool_capacity: Some(100),
        ..small_budget()
    };
    let mut reference = cpu(&file, 256);
    reference
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
    let mut roomy = cpu(&file, 256);
    let roomy_params = IgParams {
        pool_capacity: Some(256),
        ..params
    };
    roomy
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params: roomy_params,
        })
        .unwrap();
    let mut unbounded = cpu(&file, 256);
    unbounded
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params: IgParams {
                pool_capacity: None,
                ..params
            },
        })
        .unwrap();
    let dev = device();
    let mut on_device = dev.as_ref().map(|d| {
        let mut m = vulkan_with(d, &file, 256, Some(KvBudget::Tokens(100)));
        m.set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
        m
    });
    let prompt = tokens(90, 12);
    for m in [&mut reference, &mut roomy, &mut unbounded] {
        m.forward(&prompt, Logits::Last).unwrap();
    }
    if let Some(m) = &mut on_device {
        m.forward(&prompt, Logits::Last).unwrap();
    }
    for (step, &t) in tokens(60, 13).iter().enumerate() {
        let a = reference.forward(&[t], Logits::Last).unwrap();
        assert_eq!(
            roomy.forward(&[t], Logits::Last).unwrap(),
            unbounded.forward(&[t], Logits::Last).unwrap(),
            "step {step}: a pool that never fills"
        );
        if let Some(m) = &mut on_device {
            let b = m.forward(&[t], Logits::Last).unwrap();
            let d = max_diff(&a, &b);
            assert!(d < 2e-3, "step {step}: logits differ by {d}");
        }
    }
    let want = reference
        .kv_policy_stats()
        .and_then(|s| s.of(Infinigen))
        .unwrap();
    assert_eq!(want.evicted, 50);
    assert_eq!(
        roomy
            .kv_policy_stats()
            .and_then(|s| s.of(Infinigen))
            .unwrap()
            .evicted,
        0
    );
    // Past 100 tokens, a quarter of the 100 held and the 8 newest.
    assert!(want.max_fetched as usize <= 25 + 8, "{want:?}");
    assert_eq!(reference.len(), 150);
    if let Some(m) = &mut on_device {
        assert_eq!(
            m.kv_policy_stats().and_then(|s| s.of(Infinigen)).unwrap(),
            want
        );
        assert_eq!(m.len(), 150);
        assert_eq!(m.kv_usage().blocks_used, 7);
    }
    // The last token came after the last eviction: it can go. Going further back cannot be
    // undone, so the sequence starts over.
    reference.truncate(149);
    assert_eq!(reference.len(), 149);
    reference.truncate(120);
    assert_eq!(reference.len(), 0);
    if let Some(m) = &mut on_device {
        m.truncate(149);
        assert_eq!(m.len(), 149);
        m.truncate(120);
        assert_eq!((m.len(), m.kv_usage().blocks_used), (0, 0));
        // It starts over cleanly: the same prompt gives the reference's logits again.
        let mut fresh = cpu(&file, 256);
        fresh
            .set_kv_policy(KvPolicyChoice::Infinigen {
                skew: &skew,
                params,
            })
            .unwrap();
        let a = fresh.forward(&prompt, Logits::Last).unwrap();
        let b = m.forward(&prompt, Logits::Last).unwrap();
        assert!(max_diff(&a, &b) < 2e-3);
    }
    if let Some(dev) = &dev {
        no_validation_messages(dev);
    }
}

/// A decode step of three sequences runs InfiniGen for each, in one submission: one row
/// shares the first 64 positions of another (forked, with its partial keys), and every row
/// fetches and predicts what it does decoding alone.
#[test]
fn batched_sparse_decoding_matches_one_sequence_at_a_time() {
    let Some(dev) = device() else { return };
    let file = file();
    let skew = skew(&file);
    let params = small_budget();
    let a = tokens(120, 20);
    let b: Vec<u32> = a[..64].iter().copied().chain(tokens(40, 21)).collect();
    let c = tokens(90, 22);
    let mut batched = vulkan_rows(&dev, &file, 256, None, 3);
    batched
        .set_kv_policy(KvPolicyChoice::Infinigen {
            skew: &skew,
            params,
        })
        .unwrap();
    fn step(row: usize, tokens: &[u32], logits: Option<Logits>) -> SeqStep<'_> {
        SeqStep {
            row,
            tokens,
            logits,
            beam: None,
        }
    }
    batched.step_batch(&[step(0, &a, None)]).unwrap();
    batched.fork(0, 1, 64);
    batched
        .step_batch(&[step(1, &b[64..], None), step(2, &c, None)])
        .unwrap();
    let mut alone: Vec<VkModel> = [&a, &b, &c]
        .iter()
        .map(|prompt| {
            let mut m = vulkan(&dev, &file, 256);
            m.set_kv_policy(KvPolicyChoice::Infinigen {
                skew: &skew,
                params,
            })
            .unwrap();
            m.forward(prompt, Logits::Last).unwrap();
            m
        })
        .collect();
    for i in 0..10u64 {
        let next: Vec<Vec<u32>> = (0..3).map(|r| tokens(1, 100 * r + i)).collect();
        let steps: Vec<SeqStep> = (0..3)
            .map(|r| step(r, &next[r], Some(Logits::Last)))
            .collect();
        let together = batched.step_batch(&steps).unwrap();
        for (r, m) in alone.iter_mut().enumerate() {
            let want = m.forward(&next[r], Logits::Last).unwrap();
            let d = max_diff(&together[r], &want);
            assert!(d < 1e-4, "step {i}, row {r}: logits differ by {d}");
        }
    }
    let got = batched
        .kv_policy_stats()
        .and_then(|s| s.of(Infinigen))
        .unwrap();
    let want = alone
        .iter()
        .map(|m| m.kv_policy_stats().and_then(|s| s.of(Infinigen)).unwrap())
        .fold((0, 0, 0), |(s, f, a), x| {
            (s + x.selections, f + x.fetched, a + x.available)
        });
    assert_eq!((got.selections, got.fetched, got.available), want);
    // One dispatch of each fetch kernel per layer serves the three sequences (each with its
    // own slices of the scores, selection and scratch, and its own row of fetch counters),
    // and it runs alongside the previous layer.
    let sparse_layers = SMALL.n_layer - params.dense_layers;
    let all = 3 * sparse_layers * 10;
    assert_eq!(batched.fetch_alongside(), (all, all));
    no_validation_messages(&dev);
}

/// H2O at budget 0.2 with a floor of 8 (sparse from the first decode step).
fn h2o_small_budget() -> IgParams {
    IgParams {
        budget: 0.2,
        min_budget: 8,
        ..IgParams::paper(true)
    }
}

/// H2O on the device attends to what the CPU reference keeps and predicts the same
/// distribution: a prompt in three chunks (dense, evicting once after the last, which would
/// have been a lone token in chunks of 64), decode steps
/// (evicting on the device), then a truncation and more steps.
#[test]
fn h2o_on_the_device_matches_the_cpu_reference() {
    let Some(dev) = device() else { return };
    let file = file();
    let params = h2o_small_budget();
    let mut reference = cpu(&file, 256);
    reference
        .set_kv_policy(KvPolicyChoice::H2o(params))
        .unwrap();
    let resolved = resolve_gguf(&file).unwrap();
    let options = VkModelOptions {
        n_ctx: 256,
        max_chunk: 64,
        ..VkModelOptions::default()
    };
    let mut device_model = VkModel::load(&dev, &file, &resolved, options, &mut |_| true).unwrap();
    device_model
        .set_kv_policy(KvPolicyChoice::H2o(params))
        .unwrap();
    let prompt = tokens(129, 5);
    let a = reference.forward(&prompt, Logits::Last).unwrap();
    let b = device_model.forward(&prompt, Logits::Last).unwrap();
    assert!(max_diff(&a, &b) < 2e-3, "prompt");
    let compare = |reference: &mut CpuModel, device_model: &mut VkModel, seed: u64| {
        for (step, &t) in tokens(12, seed).iter().enumerate() {
            let a = reference.forward(&[t], Logits::Last).unwrap();
            let b = device_model.forward(&[t], Logits::Last).unwrap();
            let d = max_diff(&a, &b);
            assert!(d < 2e-3, "seed {seed} step {step}: logits differ by {d}");
            let (want, got) = (
                reference.kv_policy_stats().and_then(|s| s.of(H2o)).unwrap(),
                device_model
                    .kv_policy_stats()
                    .and_then(|s| s.of(H2o))
                    .unwrap(),
            );
            assert_eq!(got, want, "seed {seed} step {step}");
            let h2o = reference.h2o().unwrap();
            for l in params.dense_layers..SMALL.n_layer {
                for g in 0..SMALL.n_head_kv {
                    let head = device_model.h2o_head(0, l, g).unwrap().unwrap();
                    assert_eq!(
                        head.kept,
                        h2o.kept(l, g),
                        "seed {seed} step {step} layer {l}"
                    );
                }
            }
        }
    };
    compare(&mut reference, &mut device_model, 6);
    // At 140 tokens each KV head keeps ceil(0.2 * 140) = 28 of them.
    let stats = device_model
        .kv_policy_stats()
        .and_then(|s| s.of(H2o))
        .unwrap();
    assert_eq!(stats.max_fetched, 28, "{stats:?}");
    reference.truncate(120);
    device_model.truncate(120);
    compare(&mut reference, &mut device_model, 7);
    no_validation_messages(&dev);
}

/// With several sequences in one step (one sharing another's prefix), H2O on the device
/// decodes each as it decodes alone.
#[test]
fn batched_h2o_matches_one_sequence_at_a_time() {
    let Some(dev) = device() else { return };
    let file = file();
    let params = h2o_small_budget();
    let a = tokens(120, 20);
    let b: Vec<u32> = a[..64].iter().copied().chain(tokens(40, 21)).collect();
    let c = tokens(90, 22);
    let mut batched = vulkan_rows(&dev, &file, 256, None, 3);
    batched.set_kv_policy(KvPolicyChoice::H2o(params)).unwrap();
    fn step(row: usize, tokens: &[u32], logits: Option<Logits>) -> SeqStep<'_> {
        SeqStep {
            row,
            tokens,
            logits,
            beam: None,
        }
    }
    batched.step_batch(&[step(0, &a, None)]).unwrap();
    batched.fork(0, 1, 64);
    batched
        .step_batch(&[step(1, &b[64..], None), step(2, &c, None)])
        .unwrap();
    let mut alone: Vec<VkModel> = [&a, &a, &c]
        .iter()
        .map(|prompt| {
            let mut m = vulkan(&dev, &file, 256);
            m.set_kv_policy(KvPolicyChoice::H2o(params)).unwrap();
            m.forward(prompt, Logits::Last).unwrap();
            m
        })
        .collect();
    // Row 1 took row 0's state for its first 64 entries, then its own 40 tokens.
    alone[1].truncate(64);
    alone[1].forward(&b[64..], Logits::Last).unwrap();
    for i in 0..10u64 {
        let next: Vec<Vec<u32>> = (0..3).map(|r| tokens(1, 100 * r + i)).collect();
        let steps: Vec<SeqStep> = (0..3)
            .map(|r| step(r, &next[r], Some(Logits::Last)))
            .collect();
        let together = batched.step_batch(&steps).unwrap();
        for (r, m) in alone.iter_mut().enumerate() {
            let want = m.forward(&next[r], Logits::Last).unwrap();
            let d = max_diff(&together[r], &want);
            assert!(d < 1e-4, "step {i}, row {r}: logits differ by {d}");
        }
    }
    let got = batched.kv_policy_stats().and_then(|s| s.of(H2o)).unwrap();
    let want = alone
        .iter()
        .map(|m| m.kv_policy_stats().and_then(|s| s.of(H2o)).unwrap())
        .fold(0, |f, x| f + x.fetched);
    assert_eq!(got.fetched, want);
    no_validation_messages(&dev);
}

/// A model with local layers (a window of 24 on every layer here, as Mistral's spec has it):
/// InfiniGen attends over each local layer's window densely, on the device as on the CPU
/// reference, and the sparse policies refuse what they cannot run, naming it.
#[test]
fn local_layers_attend_over_their_window_under_infinigen() {
    let Some(dev) = device() else { return };
    let windowed = Shape {
        sliding_window: Some(24),
        ..SMALL
    };
    let file = windowed.build_random("small", Format::Q8, 11).unwrap();
    let params = small_budget();
    let (mut reference, mut device_model, skew) = with_infinigen(&dev, &file, params);
    let mut dense = vulkan(&dev, &file, 256);
    let prompt = tokens(100, 5);
    let logits = |m: &mut dyn Backend, t: &[u32]| m.forward(t, Logits::Last).unwrap();
    let (a, b, c) = (
        logits(&mut reference, &prompt),
        logits(&mut device_model, &prompt),
        logits(&mut dense, &prompt),
    );
    assert!(max_diff(&a, &b) < 2e-3, "prefill: {}", max_diff(&a, &b));
    assert_eq!(b, c, "prefill: InfiniGen changed a windowed model's logits");
    for &t in &tokens(6, 6) {
        let (a, b, c) = (
            logits(&mut reference, &[t]),
            logits(&mut device_model, &[t]),
            logits(&mut dense, &[t]),
        );
        assert!(max_diff(&a, &b) < 2e-3, "decode: {}", max_diff(&a, &b));
        assert_eq!(b, c, "decode: InfiniGen changed a windowed model's logits");
    }

    let refused = |m: &mut dyn Backend, choice: KvPolicyChoice| {
        m.set_kv_policy(choice).unwrap_err().to_string()
    };
    let capacity = KvPolicyChoice::Infinigen {
        skew: &skew,
        params: IgParams {
            pool_capacity: Some(64),
            ..params
        },
    };
    for m in [&mut reference as &mut dyn Backend, &mut device_model] {
        let err = refused(m, capacity);
        assert!(
            err.contains("pool capacity") && err.contains("window of 24"),
            "{err}"
        );
        let err = refused(m, KvPolicyChoice::H2o(params));
        assert!(
            err.contains("H2O") && err.contains("4 local layers"),
            "{err}"
        );
    }
    no_validation_messages(&dev);
}

/// Gemma 2's scores, scaled by its own factor and soft-capped: InfiniGen speculates and
/// attends with them as dense attention does (in the global layers, every other one), and the
/// device's decode agrees with the CPU reference's, fetches included. H2O's kernels score
/// plainly, so H2O refuses the model.
#[test]
fn infinigen_caps_scores_as_dense_attention_does() {
    let gemma2 = Shape {
        family: Family::Gemma2,
        tied_embeddings: true,
        sliding_window: Some(24),
        ..SMALL
    };
    let file = gemma2.build_random("small", Format::Q8, 11).unwrap();
    let mut m = cpu(&file, 64);
    assert!(m.config().attn_softcap.is_some());
    let err = m
        .set_kv_policy(KvPolicyChoice::H2o(small_budget()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("soft-capped"), "{err}");

    let Some(dev) = device() else { return };
    let got = sparse_decode_follows_the_reference(&dev, &file);
    // One sparse layer (layer 3: global, past the two dense ones) of 2 KV heads, every step.
    assert_eq!(got.selections, 8 * 2, "{got:?}");
    no_validation_messages(&dev);
}

/// `file` under InfiniGen at the small budget on the device and the CPU reference: a
/// 150-token prompt and 8 decode steps give logits within 2e-3 and the same fetches; returns
/// the device's counts.
fn sparse_decode_follows_the_reference(dev: &Arc<Device>, file: &GgufFile) -> IgStats {
    let (mut reference, mut device_model, _) = with_infinigen(dev, file, small_budget());
    let prompt = tokens(150, 5);
    let a = reference.forward(&prompt, Logits::Last).unwrap();
    let b = device_model.forward(&prompt, Logits::Last).unwrap();
    assert!(max_diff(&a, &b) < 2e-3, "prefill: {}", max_diff(&a, &b));
    for t in tokens(8, 6) {
        let a = reference.forward(&[t], Logits::Last).unwrap();
        let b = device_model.forward(&[t], Logits::Last).unwrap();
        assert!(max_diff(&a, &b) < 2e-3, "decode: {}", max_diff(&a, &b));
    }
    let stats = |m: &dyn Backend| m.kv_policy_stats().and_then(|s| s.of(Infinigen)).unwrap();
    let (want, got) = (stats(&reference), stats(&device_model));
    assert_eq!(
        got.fetched, want.fetched,
        "device {got:?}, reference {want:?}"
    );
    got
}

/// Gemma 3's pattern (five local layers to a global one): InfiniGen attends sparsely in the
/// global layer only, and the device's decode agrees with the CPU reference's, fetches
/// included.
#[test]
fn infinigen_attends_sparsely_in_the_global_layers_only() {
    let Some(dev) = device() else { return };
    let gemma3 = Shape {
        family: Family::Gemma3,
        n_layer: 6,
        tied_embeddings: true,
        sliding_window: Some(16),
        ..SMALL
    };
    let file = gemma3.build_random("small", Format::Q8, 11).unwrap();
    let got = sparse_decode_follows_the_reference(&dev, &file);
    // One sparse layer (the global one, past the two dense ones) of 2 KV heads, every step.
    assert_eq!(got.selections, 8 * 2, "{got:?}");
    // A quarter of the (at most 157) earlier tokens and the 8 newest.
    assert!(
        got.max_fetched as usize <= 157usize.div_ceil(4) + 8,
        "{got:?}"
    );
    no_validation_messages(&dev);
}
