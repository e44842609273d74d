//! End-to-end checks on a real model, SmolLM2-135M-Instruct (Q4_1; `scripts/setup` fetches it):
//! the Vulkan executor against the CPU reference, position by position, and generation through
//! a session on both and on the native CPU executor (the generation test keeps its KV cache in host memory, `--kv-offload full`),
//! and generation through an InfiniGen pool that evicts (`--kv-pool-capacity`).
//!
//! Both paths use the same f16-rounded weights, so differences come only from the order of
//! floating-point operations. Outside CI a machine without the model or a Vulkan device skips
//! these tests; in CI either missing fails them.

use std::path::PathBuf;
use std::sync::Arc;

use hearth_cpu::{Activations, CpuOptions, NativeModel};
use hearth_engine::sample::SamplerParams;
use hearth_engine::session::{FinishReason, GenerateParams, Session};
use hearth_engine::Error;
use hearth_engine::{Engine, EngineOptions, InfinigenOptions};
use hearth_kernels::vk::{Device, DeviceDesc};
use hearth_model::kv::infinigen::evict::PoolCapacity;
use hearth_model::kv::policy::KvPolicyKind::Infinigen;
use hearth_model::kv::{KvPlacement, KvType};
use hearth_model::{Backend, Logits};
use hearth_models::{resolve_gguf, GgufFile, Tokenizer};
use hearth_reference::CpuModel;
use hearth_vulkan::{VkModel, VkModelOptions};

fn model_path() -> Option<PathBuf> {
    hearth_testkit::model(hearth_testkit::SMOLLM2)
}

fn device() -> Option<Arc<Device>> {
    let device = Device::new(DeviceDesc {
        index: None,
        validation: true,
    });
    hearth_testkit::or_skip(device, "Vulkan device")
}

fn load(
    n_ctx: usize,
    max_chunk: usize,
    kv_placement: KvPlacement,
) -> Option<(Tokenizer, CpuModel, VkModel)> {
    let path = model_path()?;
    let dev = device()?;
    let file = GgufFile::open(&path).unwrap();
    let model = resolve_gguf(&file).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    // K/V in f32 on both sides: the comparisons below are of the arithmetic, and f16
    // storage would round keys that differ in their last bits apart.
    let mut cpu = CpuModel::load(&file, &model, n_ctx, &mut |_| true).unwrap();
    cpu.set_kv_type(KvType::F32);
    let options = VkModelOptions {
        n_ctx,
        max_chunk,
        kv_placement,
        kv_type: KvType::F32,
        ..VkModelOptions::default()
    };
    let vk = VkModel::load(&dev, &file, &model, options, &mut |_| true).unwrap();
    Some((tokenizer, cpu, vk))
}

fn text() -> String {
    // Debian ships this with base-files; it is long, public and plain English.
    std::fs::read_to_string("/usr/share/common-licenses/GPL-3").unwrap()
}

/// log-softmax in f64.
fn log_probs(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    row.iter().map(|&v| v as f64 - max - sum.ln()).collect()
}

fn argmax(row: &[f32]) -> usize {
    (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best })
}

#[test]
fn vulkan_logits_match_the_cpu_reference_at_every_position() {
    // Chunks of 64 make the first 192 tokens run as three prefill steps, so prefill also
    // attends over positions cached by earlier chunks; then come four one-token decode steps
    // and one four-token step on the decode path.
    let Some((tokenizer, mut cpu, mut vk)) = load(256, 64, KvPlacement::Device) else {
        return;
    };
    let tokens: Vec<u32> = tokenizer.encode(&text())[..200].to_vec();
    let n_vocab = cpu.config().n_vocab;

    let want = cpu.forward(&tokens, Logits::All).unwrap();
    let mut got = vk.forward(&tokens[..192], Logits::All).unwrap();
    for &t in &tokens[192..196] {
        got.extend(vk.forward(&[t], Logits::All).unwrap());
    }
    got.extend(vk.forward(&tokens[196..], Logits::All).unwrap());
    assert_eq!(got.len(), want.len());
    assert!(vk.device().take_validation_messages().is_empty());

    let (mut max_diff, mut max_kl, mut mean_kl) = (0f32, 0f64, 0f64);
    for pos in 0..tokens.len() {
        let (w, g) = (
            &want[pos * n_vocab..][..n_vocab],
            &got[pos * n_vocab..][..n_vocab],
        );
        assert_eq!(argmax(g), argmax(w), "argmax differs at position {pos}");
        for (a, b) in w.iter().zip(g) {
            max_diff = max_diff.max((a - b).abs());
        }
        let (lw, lg) = (log_probs(w), log_probs(g));
        let kl: f64 = lw.iter().zip(&lg).map(|(p, q)| p.exp() * (p - q)).sum();
        max_kl = max_kl.max(kl);
        mean_kl += kl / tokens.len() as f64;
    }
    eprintln!("max |logit difference| {max_diff:e}, KL max {max_kl:e}, mean {mean_kl:e}");
    // Logits are O(10); f32 sums over 576-1536 products taken in different orders differ
    // by ~1e-4 (measured on lavapipe: 1.6e-4, KL 3.4e-10).
    assert!(max_diff < 1e-3, "max |logit difference| {max_diff}");
    assert!(max_kl < 1e-8, "max KL divergence {max_kl}");
}

#[test]
fn greedy_generation_is_the_same_on_both_paths() {
    let Some((tokenizer, cpu, vk)) = load(128, 256, KvPlacement::Host) else {
        return;
    };
    let prompt = tokenizer.encode("The capital of France is");
    let params = GenerateParams {
        max_tokens: Some(16),
        sampler: SamplerParams::greedy(),
        ..GenerateParams::default()
    };
    // The native CPU executor with f32 activations, the Vulkan path's precision.
    let path = model_path().unwrap();
    let file = GgufFile::open(&path).unwrap();
    let options = CpuOptions {
        n_ctx: 128,
        kv_type: KvType::F32,
        activations: Activations::F32,
        ..CpuOptions::default()
    };
    let native = NativeModel::load(&file, &resolve_gguf(&file).unwrap(), options, &mut |_| true);
    let mut texts = Vec::new();
    let backends: [Box<dyn Backend + Send>; 3] =
        [Box::new(cpu), Box::new(vk), Box::new(native.unwrap())];
    for backend in backends {
        let mut session = Session::new(backend);
        let mut streamed = String::new();
        let g = session
            .generate(&tokenizer, &prompt, &params, &mut |t| {
                streamed.push_str(t);
                true
            })
            .unwrap();
        assert_eq!(streamed, g.text, "streamed text is the whole text");
        assert_eq!(g.tokens.len(), 16);
        assert_eq!(g.finish, FinishReason::Length);

        // The same request again reuses the cached prompt and gives the same tokens.
        let again = session
            .generate(&tokenizer, &prompt, &params, &mut |_| true)
            .unwrap();
        assert_eq!(again.tokens, g.tokens);
        assert_eq!(again.timings.cached_tokens, prompt.len() - 1);
        texts.push(g.text);
    }
    assert_eq!(
        texts[0], texts[1],
        "CPU reference and Vulkan continuations differ"
    );
    assert_eq!(
        texts[2], texts[1],
        "CPU executor and Vulkan continuations differ"
    );
    assert!(
        texts[0].contains("Paris"),
        "unexpected continuation {:?}",
        texts[0]
    );
}

/// f16 K/V (the default) give the same greedy continuation as f32 on a short prompt; q8's
/// is printed beside them (its values move by up to 1/254 of each block's largest).
#[test]
fn greedy_generation_is_the_same_with_f16_and_f32_kv() {
    let (Some(path), Some(dev)) = (model_path(), device()) else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let model = resolve_gguf(&file).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let prompt = tokenizer.encode("The capital of France is");
    let params = GenerateParams {
        max_tokens: Some(24),
        sampler: SamplerParams::greedy(),
        ..GenerateParams::default()
    };
    let mut texts = Vec::new();
    for kv_type in [KvType::F32, KvType::F16, KvType::Q8] {
        let options = VkModelOptions {
            n_ctx: 64,
            kv_type,
            ..VkModelOptions::default()
        };
        let vk = VkModel::load(&dev, &file, &model, options, &mut |_| true).unwrap();
        let mut session = Session::new(Box::new(vk));
        let g = session
            .generate(&tokenizer, &prompt, &params, &mut |_| true)
            .unwrap();
        eprintln!("{kv_type}: {:?}", g.text);
        texts.push(g.text);
    }
    assert_eq!(texts[0], texts[1], "f32 and f16 K/V continuations differ");
}

#[test]
fn a_request_longer_than_the_context_fails_before_any_work() {
    let Some(path) = model_path() else { return };
    let file = GgufFile::open(&path).unwrap();
    let model = resolve_gguf(&file).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let cpu = CpuModel::load(&file, &model, 16, &mut |_| true).unwrap();
    let mut session = Session::new(Box::new(cpu));
    let prompt = tokenizer.encode("one two three four five six seven eight");
    let params = GenerateParams {
        max_tokens: Some(16),
        ..GenerateParams::default()
    };
    let err = session
        .generate(&tokenizer, &prompt, &params, &mut |_| true)
        .unwrap_err();
    assert!(matches!(err, Error::ContextFull { n_ctx: 16, .. }), "{err}");
    assert!(session.backend().is_empty(), "nothing ran");

    // Cancelling loading stops it with a clear error.
    let err = CpuModel::load(&file, &model, 16, &mut |_| false).err();
    assert!(matches!(err, Some(Error::Cancelled)));
}

/// Through the engine, generation runs past an InfiniGen pool of 128 tokens; a request that
/// shares only a few words with the cached one goes back past evicted tokens, so the row
/// starts over and answers as a fresh engine does; batching is refused with a clear error.
#[test]
fn generation_runs_past_an_evicting_pool() {
    let Some(path) = model_path() else { return };
    if device().is_none() {
        return;
    }
    let options = EngineOptions {
        n_ctx: Some(512),
        kv_placement: KvPlacement::Host,
        infinigen: Some(InfinigenOptions {
            pool_capacity: Some(PoolCapacity::Tokens(128)),
            ..InfinigenOptions::default()
        }),
        ..EngineOptions::default()
    };
    let load = || Engine::load(&path, &options, &mut |_| true).unwrap();
    let mut engine = load();
    let prompt = engine.tokenize("Once upon a time, in a small village by the sea, there lived");
    let long = GenerateParams {
        max_tokens: Some(200),
        sampler: SamplerParams::greedy(),
        ignore_eos: true,
        ..GenerateParams::default()
    };
    let g = engine.generate(&prompt, &long, &mut |_| true).unwrap();
    assert_eq!(g.tokens.len(), 200);
    // Every token but the last one generated went through the pool.
    let stored = prompt.len() + 199;
    let stats = engine
        .kv_policy_stats()
        .and_then(|s| s.of(Infinigen))
        .unwrap();
    assert_eq!(stats.evicted as usize, stored - 128);
    assert_eq!(engine.kv_usage().unwrap().blocks_used, 8);

    let other = engine.tokenize("Once upon a time, there was a dragon who");
    let short = GenerateParams {
        max_tokens: Some(24),
        ..long
    };
    let again = engine.generate(&other, &short, &mut |_| true).unwrap();
    let fresh = load().generate(&other, &short, &mut |_| true).unwrap();
    assert_eq!(again.tokens, fresh.tokens);
    assert_eq!(again.timings.cached_tokens, 0, "the row started over");

    let err = engine.scheduler().err().expect("batching is refused");
    assert!(err.to_string().contains("kv-pool-capacity"), "{err}");
}
