//! InfiniGen in the Vulkan executor against the CPU reference, on a random-weight model:
//! selecting every token matches dense decoding, and at a small budget the device fetches the
//! same number of tokens as the reference and gives the same next-token distribution.
//!
//! Without a Vulkan device these tests skip outside CI and fail in CI (`CI=true`).

use std::sync::Arc;

use hearth_models::{resolve_gguf, GgufFile};
use hearth_quant::Format;
use hearth_runtime::cpu::CpuModel;
use hearth_runtime::kv::infinigen::{IgParams, Skew};
use hearth_runtime::kv::KvPlacement;
use hearth_runtime::model::{Backend, Logits, VkModel, VkModelOptions};
use hearth_runtime::synthetic::Shape;
use hearth_runtime::vk::{Device, DeviceDesc};
use rand::{Rng, SeedableRng};

/// 4 layers, 6 query heads sharing 2 KV heads of 32 dimensions.
const SMALL: Shape = Shape {
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
};

fn device() -> Option<Arc<Device>> {
    match Device::new(DeviceDesc::default()) {
        Ok(d) => Some(d),
        Err(e) => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(!ci, "CI needs a Vulkan device: {e}");
            eprintln!("skipping: no Vulkan device: {e}");
            None
        }
    }
}

fn file() -> GgufFile {
    SMALL.build_random("small", Format::Q8, 11).unwrap()
}

fn cpu(file: &GgufFile, n_ctx: usize) -> CpuModel {
    let resolved = resolve_gguf(file).unwrap();
    CpuModel::load(file, &resolved, n_ctx, &mut |_| true).unwrap()
}

fn vulkan(dev: &Arc<Device>, file: &GgufFile, n_ctx: usize) -> VkModel {
    let resolved = resolve_gguf(file).unwrap();
    let options = VkModelOptions {
        n_ctx,
        kv_placement: KvPlacement::Host,
        ..VkModelOptions::default()
    };
    VkModel::load(dev, file, &resolved, options, &mut |_| true).unwrap()
}

fn tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| rng.gen_range(0..SMALL.n_vocab as u32))
        .collect()
}

fn skew(file: &GgufFile) -> Skew {
    let mut m = cpu(file, 128);
    let config = m.config().clone();
    Skew::from_calibration(&config, &m.calibrate(&tokens(96, 4)).unwrap()).unwrap()
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
    let params = IgParams {
        alpha: f32::INFINITY,
        budget: 1.0,
        ..IgParams::defaults(true)
    };
    sparse.set_infinigen(Some((&skew, params))).unwrap();
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
    let stats = sparse.infinigen_stats().unwrap();
    assert_eq!(stats.fetched, stats.available);
    assert_eq!(stats.selections, 2 * 2 * 20);
}

/// At a small budget (and a recent window), the device fetches what the CPU reference fetches
/// and predicts the same distribution.
#[test]
fn sparse_decoding_matches_the_cpu_reference() {
    let Some(dev) = device() else { return };
    let file = file();
    let skew = skew(&file);
    let params = IgParams {
        budget: 0.25,
        min_budget: 0,
        recent: 8,
        ..IgParams::defaults(true)
    };
    let mut reference = cpu(&file, 256);
    reference.enable_infinigen(Some((&skew, params)));
    let mut device_model = vulkan(&dev, &file, 256);
    device_model.set_infinigen(Some((&skew, params))).unwrap();
    let prompt = tokens(150, 5);
    let _ = reference.forward(&prompt, Logits::Last).unwrap();
    let _ = device_model.forward(&prompt, Logits::Last).unwrap();
    for (step, &t) in tokens(12, 6).iter().enumerate() {
        let a = reference.forward(&[t], Logits::Last).unwrap();
        let b = device_model.forward(&[t], Logits::Last).unwrap();
        let d = max_diff(&a, &b);
        assert!(d < 2e-3, "step {step}: logits differ by {d}");
    }
    let (want, got) = (
        reference.infinigen_stats().unwrap(),
        device_model.infinigen_stats().unwrap(),
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
}
