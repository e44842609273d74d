//! all-MiniLM-L6-v2 (BERT) on the Vulkan executor, on whatever device the host has (lavapipe
//! in CI, under the validation layer): its hidden states against the CPU reference's for a
//! batch of texts of different lengths, its embeddings against sentence-transformers', and
//! the same encoder with its block matrices quantized to Q8_0 and Q4_K against the reference
//! given the same quantized weights.
//!
//! Bounds: hidden states within 1e-4 of the largest magnitude of the reference's (f32
//! throughout; what is left is the order of f32 sums, and the A&S erf of `bias_act`, good to
//! 1.5e-7), quantized or not; embeddings at cosine 1 - 1e-4 or better from
//! sentence-transformers'.

use std::sync::Arc;

use hearth_engine::embed::cosine;
use hearth_engine::{BackendKind, Embedder, EngineOptions};
use hearth_kernels::vk::{list_devices, Device, DeviceDesc};
use hearth_model::encoder::{Encoder, EncoderInput};
use hearth_models::{resolve_with, GgufFile, ResolvedModel};
use hearth_reference::RefEncoder;
use hearth_vulkan::VkEncoder;

const FIXTURE: &str = include_str!("fixtures/minilm_embeddings.json");

/// The validated test device: `HEARTH_DEVICE`'s index, else the first.
fn device_index() -> Option<usize> {
    let devices = hearth_testkit::or_skip(list_devices(), "Vulkan device")?;
    if devices.is_empty() {
        hearth_testkit::skip("no Vulkan device");
        return None;
    }
    let index = std::env::var("HEARTH_DEVICE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Some(index)
}

fn device(index: usize) -> Arc<Device> {
    Device::new(DeviceDesc {
        index: Some(index),
        validation: true,
    })
    .unwrap()
}

fn minilm() -> Option<(GgufFile, ResolvedModel)> {
    let dir = hearth_testkit::model(hearth_testkit::MINILM)?;
    let file = hearth_models::open_model(&dir).unwrap();
    let model = resolve_with(&file, None).unwrap();
    Some((file, model))
}

/// Texts of 1 to 70 tokens, ids spread over the vocabulary, the first with token types.
fn batch() -> Vec<EncoderInput> {
    [9, 1, 70, 23, 2, 40]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut tokens = vec![101];
            tokens.extend((1..n.max(2) - 1).map(|j| (1000 + 7919 * (i * 97 + j)) as u32 % 30000));
            tokens.push(102);
            tokens.truncate(n);
            let types = match i {
                0 => (0..n).map(|j| (j >= n / 2) as u32).collect(),
                _ => Vec::new(),
            };
            EncoderInput { tokens, types }
        })
        .collect()
}

/// Every text's hidden states within `tolerance` times the largest magnitude of the
/// reference's; returns the worst difference so relative.
#[track_caller]
fn assert_states_close(got: &[Vec<f32>], want: &[Vec<f32>], tolerance: f32, what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: texts");
    let mut worst = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: text {i}'s states");
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
        let diff = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            diff <= tolerance * scale,
            "{what}: text {i} differs by {diff} (largest {scale})"
        );
        worst = worst.max(diff / scale);
    }
    worst
}

#[test]
fn minilm_hidden_states_match_the_reference() {
    let Some(index) = device_index() else { return };
    let Some((file, model)) = minilm() else {
        return;
    };
    let dev = device(index);
    let mut vk = VkEncoder::load(&dev, &file, &model, &mut |_| true).unwrap();
    let mut reference = RefEncoder::load(&file, &model, &mut |_| true).unwrap();
    let batch = batch();
    let want = reference.encode(&batch).unwrap();
    let got = vk.encode(&batch).unwrap();
    let worst = assert_states_close(&got, &want, 1e-4, "MiniLM f32");
    eprintln!(
        "MiniLM on {}: worst difference {worst:e} relative",
        dev.info().name
    );
    // One text alone gets the states it gets in the batch.
    let alone = vk.encode(&batch[2..3]).unwrap();
    assert_states_close(&alone, &got[2..3], 1e-5, "alone");
    let messages = dev.take_validation_messages();
    assert!(messages.is_empty(), "validation: {}", messages.join("\n"));
}

#[test]
fn minilm_embeddings_on_vulkan_match_sentence_transformers() {
    let Some(index) = device_index() else { return };
    let Some(dir) = hearth_testkit::model(hearth_testkit::MINILM) else {
        return;
    };
    let options = EngineOptions {
        backend: BackendKind::Vulkan,
        device: Some(index),
        validate: true,
        ..EngineOptions::default()
    };
    let mut m = Embedder::load(&dir, &options, &mut |_| true).unwrap();
    assert!(!m.info().device.starts_with("CPU"), "{}", m.info().device);
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let got = m.embed(&texts).unwrap();
    let mut worst = 1f32;
    for (c, v) in cases.iter().zip(&got) {
        let want: Vec<f32> = c["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let sim = cosine(v, &want);
        assert!(sim >= 1.0 - 1e-4, "{:?}: cosine {sim}", c["text"]);
        worst = worst.min(sim);
    }
    eprintln!(
        "MiniLM embeddings on {}: cosine >= {worst}",
        m.info().device
    );
}

/// MiniLM's matrices quantized in memory, Q8_0 and Q4_K (whose 256-value blocks fit only the
/// down projection's rows; the others take the format the fitting rule picks), on the device
/// against the reference reading the same packed matrices: within 1e-4 of the largest
/// magnitude, as in f32 (the reference dequantizes once and multiplies in f32, the device
/// unpacks in its products and sums in f32).
#[test]
fn quantized_minilm_matches_the_reference() {
    use hearth_model::quantize::{quantize_in_memory, QuantizeOptions};
    use hearth_quant::Format;
    let Some(index) = device_index() else { return };
    let Some((file, _)) = minilm() else {
        return;
    };
    let dev = device(index);
    let batch = batch();
    for format in [Format::Q8, Format::Q4_K] {
        let quantized =
            quantize_in_memory(&file, &QuantizeOptions::new(format), &mut |_| true).unwrap();
        let model = resolve_with(&quantized, None).unwrap();
        let mut vk = VkEncoder::load(&dev, &quantized, &model, &mut |_| true).unwrap();
        let mut reference = RefEncoder::load(&quantized, &model, &mut |_| true).unwrap();
        let want = reference.encode(&batch).unwrap();
        let got = vk.encode(&batch).unwrap();
        let worst = assert_states_close(&got, &want, 1e-4, &format!("MiniLM {format:?}"));
        eprintln!("MiniLM {format:?}: worst difference {worst:e} relative");
    }
    let messages = dev.take_validation_messages();
    assert!(messages.is_empty(), "validation: {}", messages.join("\n"));
}

/// A Vulkan choice naming no device runs on the best Vulkan device, as a decoder does
/// (frontends pick the CPU executor for CPU-only hosts through `Placement`).
#[test]
fn an_unnamed_vulkan_device_is_the_best_one() {
    let Some(dir) = hearth_testkit::model(hearth_testkit::MINILM) else {
        return;
    };
    if device_index().is_none() {
        return;
    }
    let options = EngineOptions {
        backend: BackendKind::Vulkan,
        ..EngineOptions::default()
    };
    let m = Embedder::load(&dir, &options, &mut |_| true).unwrap();
    assert!(!m.info().device.starts_with("CPU"), "{}", m.info().device);
}

/// The conformance suite's random-weight cross-encoder on the device: scores within 1e-4 of
/// transformers' logits.
#[test]
fn a_cross_encoder_on_the_device_scores_as_transformers_does() {
    let Some(dir) = hearth_testkit::conformance_model("bert-rerank") else {
        return;
    };
    let Some(index) = device_index() else { return };
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let cases = reference["cases"].as_array().unwrap();
    let docs: Vec<&str> = cases
        .iter()
        .map(|c| c["document"].as_str().unwrap())
        .collect();
    let options = EngineOptions {
        backend: BackendKind::Vulkan,
        device: Some(index),
        ..EngineOptions::default()
    };
    let mut m = Embedder::load(&dir.join("hf"), &options, &mut |_| true).unwrap();
    let scores = m
        .rerank(reference["query"].as_str().unwrap(), &docs)
        .unwrap();
    for (c, s) in cases.iter().zip(&scores) {
        let want = c["score"].as_f64().unwrap() as f32;
        assert!((s - want).abs() < 1e-4, "{s} against {want}");
    }
}
