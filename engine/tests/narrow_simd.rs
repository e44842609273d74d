//! A CPU device with 4-lane SIMD (lavapipe on a CPU without AVX, here forced with
//! LP_NATIVE_VECTOR_WIDTH=128) computes the same logits as the f32 CPU reference. The
//! lane-per-row matrix-vector product hands x round among eight lanes, so such a device must
//! get another shape. Its own test binary: the width is read when the device is created.
//! Outside CI a machine without a Vulkan device skips the test; in CI (`CI=true`) a missing
//! device fails it.

use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_kernels::vk::{Device, DeviceDesc, DeviceKind};
use hearth_model::Logits;
use hearth_models::synthetic::{Family, Shape};
use hearth_quant::Format;

/// 2 layers, width 128 (four Q4 blocks per row), 4 query heads sharing 2 key/value heads.
const SMALL: Shape = Shape {
    family: Family::Llama,
    n_layer: 2,
    n_embd: 128,
    n_ff: 256,
    n_head: 4,
    n_head_kv: 2,
    n_vocab: 320,
    n_ctx_train: 128,
    rope_base: 10_000.0,
    norm_eps: 1e-5,
    tied_embeddings: true,
    key_length: None,
    sliding_window: None,
    experts: None,
};

fn logits(backend: BackendKind, prompt: &[u32]) -> Vec<f32> {
    let file = SMALL.build("small", Format::Q4).unwrap();
    let options = EngineOptions {
        backend,
        validate: backend == BackendKind::Vulkan,
        n_ctx: Some(64),
        ..EngineOptions::default()
    };
    let mut engine = Engine::load_file(file, &options, &mut |_| true).unwrap();
    let backend = engine.session_mut().fresh_backend();
    // The prompt as prefill, then one more token as decode.
    let mut all = backend
        .forward(&prompt[..prompt.len() - 1], Logits::All)
        .unwrap();
    all.extend(
        backend
            .forward(&prompt[prompt.len() - 1..], Logits::All)
            .unwrap(),
    );
    all
}

#[test]
fn four_lane_cpu_device_matches_the_reference() {
    // The only test in this binary: nothing else reads the environment meanwhile.
    std::env::set_var("LP_NATIVE_VECTOR_WIDTH", "128");
    let device = Device::new(DeviceDesc {
        index: None,
        validation: true,
    });
    let Some(device) = hearth_testkit::or_skip(device, "Vulkan device") else {
        return;
    };
    let info = device.info();
    if info.kind == DeviceKind::Cpu {
        assert_eq!(
            info.subgroup.size, 4,
            "{} ignored the SIMD width",
            info.name
        );
    }
    drop(device);

    let prompt: Vec<u32> = (0..21)
        .map(|i| ((i * 37 + 5) % SMALL.n_vocab) as u32)
        .collect();
    let want = logits(BackendKind::Reference, &prompt);
    let got = logits(BackendKind::Vulkan, &prompt);
    assert_eq!(got.len(), want.len());
    // f32 sums over at most 256 products in another order: a few ulps of the largest logit.
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * scale.max(1.0),
            "logit {i} (token {}): {g} against {w}",
            i / SMALL.n_vocab
        );
    }
}
