//! Each model family against Hugging Face transformers. `scripts/conformance/build` makes, per
//! family, a small random-weight model from that family's config with transformers, converts it
//! to GGUF with llama.cpp's own converter (so tensor names and metadata are those of real GGUF
//! files), and records transformers' f32 logits at every position of a fixed token sequence:
//! a 64-token prompt and 16 more tokens. Hearth runs the prompt as one step and the rest as 16
//! decode steps, on the Vulkan device (lavapipe in CI) and on the CPU reference (GPT-OSS on
//! the native CPU executor besides), and must match
//! at every position: the largest absolute difference of the logits and the largest KL
//! divergence of the next-token distributions are printed and bounded.
//!
//! The same tokenizer that transformers uses (built from llama.cpp's vocabulary file for the
//! family) gives the ids of a few texts; Hearth's tokenizer, built from the GGUF file, must give
//! the same ids.

use std::path::Path;

use hearth_cpu::Activations;
use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_kernels::vk::{Device, DeviceDesc};
use hearth_model::kv::KvType;
use hearth_model::Logits;
use hearth_models::synthetic::Llama3Rope;
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    tokens: Vec<u32>,
    prompt: usize,
    decode: usize,
    n_vocab: usize,
    tokenized: Vec<Tokenized>,
    /// False where llama.cpp's file leaves out something transformers runs (Mistral's
    /// window): only the folder is checked against the logits.
    #[serde(default = "yes")]
    gguf_runs: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct Tokenized {
    text: String,
    ids: Vec<u32>,
}

/// Both bounds hold at every position. The models compute in f32 on both sides, from the same
/// f32 weights: only the order of operations differs.
const MAX_ABS: f32 = 1e-5;
const MAX_KL: f64 = 1e-10;

/// Little-endian f32 values.
fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// KL(p || q) of the softmax distributions of two logit rows, in nats.
fn kl(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    let log_softmax = |l: &[f32]| -> Vec<f64> {
        let max = l.iter().fold(f32::MIN, |a, &b| a.max(b)) as f64;
        let sum: f64 = l.iter().map(|&v| (v as f64 - max).exp()).sum();
        l.iter().map(|&v| v as f64 - max - sum.ln()).collect()
    };
    let (lp, lq) = (log_softmax(p_logits), log_softmax(q_logits));
    lp.iter()
        .zip(&lq)
        .map(|(a, b)| a.exp() * (a - b))
        .sum::<f64>()
        .max(0.0)
}

fn check_family(name: &str) {
    check_family_on(name, Executors::VulkanAndReference);
}

/// Which executors a family is checked on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Executors {
    /// llama.cpp's file on Vulkan and the reference, and the folder on Vulkan (the folder on
    /// the reference only where llama.cpp's file does not run).
    VulkanAndReference,
    /// Both files on the Vulkan device, the reference and the native CPU executor (f32
    /// activations).
    All,
    /// Both files on the reference and the native CPU executor, where the Vulkan executor
    /// refuses the model.
    Cpu,
}

fn check_family_on(name: &str, executors: Executors) {
    let Some(dir) = hearth_testkit::conformance_model(name) else {
        return;
    };
    let reference: Reference =
        serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let want = f32s(&std::fs::read(dir.join("reference.f32")).unwrap());
    let (n, v) = (reference.tokens.len(), reference.n_vocab);
    assert_eq!(n, reference.prompt + reference.decode);
    assert_eq!(want.len(), n * v, "{name}: reference.f32 size");

    // Only a missing device skips (a failure in CI); the model failing to load fails.
    if executors != Executors::Cpu {
        let device = Device::new(DeviceDesc::default());
        if hearth_testkit::or_skip(device, "Vulkan device").is_none() {
            return;
        }
    }
    // llama.cpp's GGUF file on both executors, and the Hugging Face folder it was converted
    // from, which Hearth converts itself as it loads.
    let sources = match (executors, reference.gguf_runs) {
        (Executors::VulkanAndReference, true) => vec![
            (BackendKind::Vulkan, "model.gguf"),
            (BackendKind::Reference, "model.gguf"),
            (BackendKind::Vulkan, "hf"),
        ],
        (Executors::VulkanAndReference, false) => {
            vec![(BackendKind::Vulkan, "hf"), (BackendKind::Reference, "hf")]
        }
        (Executors::All, _) => vec![
            (BackendKind::Vulkan, "model.gguf"),
            (BackendKind::Vulkan, "hf"),
            (BackendKind::Reference, "model.gguf"),
            (BackendKind::Cpu, "model.gguf"),
            (BackendKind::Reference, "hf"),
            (BackendKind::Cpu, "hf"),
        ],
        (Executors::Cpu, _) => vec![
            (BackendKind::Reference, "model.gguf"),
            (BackendKind::Cpu, "model.gguf"),
            (BackendKind::Reference, "hf"),
            (BackendKind::Cpu, "hf"),
        ],
    };
    for (backend, source) in sources {
        // The KV cache in f32, as transformers keeps it, and the native executor's products
        // in f32.
        let options = EngineOptions {
            backend,
            n_ctx: Some(128),
            kv_type: KvType::F32,
            activations: Activations::F32,
            ..EngineOptions::default()
        };
        let mut engine = Engine::load(Path::new(&dir.join(source)), &options, &mut |_| true)
            .unwrap_or_else(|e| panic!("{name} on {backend:?} from {source}: {e}"));
        assert_eq!(engine.info().config.n_vocab, v, "{name}: vocabulary");
        if backend == BackendKind::Vulkan || executors != Executors::VulkanAndReference {
            // The tokenizer from the GGUF vocabulary, llama.cpp's or Hearth's conversion.
            for t in &reference.tokenized {
                let opts = hearth_models::EncodeOptions {
                    add_special: false,
                    parse_special: false,
                };
                let ids = engine.tokenizer().encode_with(&t.text, opts);
                assert_eq!(ids, t.ids, "{name}: tokens of {:?}", t.text);
            }
        }
        let model = engine.session_mut().fresh_backend();
        let (prompt, rest) = reference.tokens.split_at(reference.prompt);
        let mut got = model.forward(prompt, Logits::All).unwrap();
        for &token in rest {
            got.extend(model.forward(&[token], Logits::Last).unwrap());
        }
        assert_eq!(got.len(), n * v);

        let mut worst_abs = 0f32;
        let mut worst_kl = 0f64;
        for (pos, (g, w)) in got.chunks(v).zip(want.chunks(v)).enumerate() {
            let abs = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let kl = kl(w, g);
            worst_abs = worst_abs.max(abs);
            worst_kl = worst_kl.max(kl);
            assert!(
                abs <= MAX_ABS && kl <= MAX_KL,
                "{name} on {backend:?} from {source}, position {pos}: max |diff| {abs:.2e}, KL {kl:.2e}"
            );
        }
        let scale = want.iter().fold(0f32, |a, &b| a.max(b.abs()));
        eprintln!(
            "conformance {name:8} {backend:?} {source:10}: {n} positions, max |diff| {worst_abs:.2e} \
             (logits up to {scale:.2}), max KL {worst_kl:.2e}"
        );
    }
}

#[test]
fn llama3_matches_transformers() {
    check_family("llama3");
}

/// The frequency divisors llama.cpp's converter wrote for the llama3 family's `rope_scaling`
/// (families.py: factor 8, low 1, high 4, original context 32; head width 32, base 10000) are
/// what `synthetic::Llama3Rope` computes for the llama-3.1-8b preset's file.
#[test]
fn llama3_rope_factors_are_the_converters() {
    let Some(dir) = hearth_testkit::conformance_model("llama3") else {
        return;
    };
    let file = hearth_models::GgufFile::open(dir.join("model.gguf")).unwrap();
    let view = file.tensor_view("rope_freqs.weight").unwrap();
    let written = f32s(view.data);
    let rule = Llama3Rope {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_context: 32,
    };
    let ours = rule.factors(32, 10_000.0);
    assert_eq!(ours.len(), written.len());
    for (i, (a, b)) in ours.iter().zip(&written).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * b,
            "pair {i}: {a} vs the converter's {b}"
        );
    }
    // Some pairs kept, some divided by the full factor, some blended.
    assert!(written.contains(&1.0) && written.contains(&8.0));
    assert!(written.iter().any(|&f| f > 1.0 && f < 8.0));
}

/// Granite 3.x: the multipliers on scores, embeddings, residual branches and logits (run as
/// a stream divided by the residual multiplier, norms' epsilon divided by its square).
#[test]
fn granite_matches_transformers() {
    check_family("granite");
}

/// SmolLM3: its fourth layer rotates nothing. InfiniGen, which speculates every layer's
/// keys as rotated, refuses it with the reason; H2O runs.
#[test]
fn smollm3_matches_transformers() {
    check_family("smollm3");
    let Some(dir) = hearth_testkit::conformance_model("smollm3") else {
        return;
    };
    let options = EngineOptions {
        backend: BackendKind::Reference,
        infinigen: Some(hearth_engine::InfinigenOptions::default()),
        ..EngineOptions::default()
    };
    let err = Engine::load(&dir.join("model.gguf"), &options, &mut |_| true)
        .err()
        .expect("infinigen refuses layers without RoPE");
    assert!(err.to_string().contains("without RoPE"), "{err}");
    let options = EngineOptions {
        backend: BackendKind::Reference,
        h2o: Some(hearth_engine::H2oOptions::default()),
        ..EngineOptions::default()
    };
    let mut engine = Engine::load(&dir.join("model.gguf"), &options, &mut |_| true).unwrap();
    let tokens = engine.tokenize("Hello there, how are you?");
    let backend = engine.session_mut().fresh_backend();
    assert!(backend.forward(&tokens, Logits::Last).is_ok());
}

/// Phi-4-mini: partial rotary (24 of 32 dimensions), tied embeddings.
#[test]
fn phi4mini_matches_transformers() {
    check_family("phi4mini");
}

/// GLM-4: q/k/v biases, half of each head rotated in adjacent pairs, sandwich norms, fused
/// gate and up.
#[test]
fn glm4_matches_transformers() {
    check_family("glm4");
}

#[test]
fn qwen2_matches_transformers() {
    check_family("qwen2");
}

#[test]
fn qwen3_matches_transformers() {
    check_family("qwen3");
}

/// Gemma 2: local attention on every other layer with a window (24) shorter than the prompt,
/// soft-capped scores and logits, scaled and tied embeddings, norms after each block and a
/// GELU-gated MLP; a SentencePiece tokenizer without the dummy prefix.
#[test]
fn gemma2_matches_transformers() {
    check_family("gemma2");
}

/// Gemma 3: five local layers (window 24) to a global one, local layers rotating with their
/// own base (10000) and global ones with 1000000 scaled linearly by 8, the per-head
/// query/key norm, a soft-capped output, sandwich norms and a GELU-gated MLP.
#[test]
fn gemma3_matches_transformers() {
    check_family("gemma3");
}

/// Mistral 7B: every layer local, a window (24) shorter than the prompt, from the Hugging Face
/// folder (llama.cpp's conversion drops the window).
#[test]
fn mistral_matches_transformers() {
    check_family("mistral");
}

/// Phi-3: q/k/v in one projection and gate/up in another, every layer local (window 24);
/// Phi-3's vocabulary with its chat tokens.
#[test]
fn phi3_matches_transformers() {
    check_family("phi3");
}

/// YaRN on a Qwen2 block: factor 4 over an original context of 32, 80 positions.
#[test]
fn yarn_matches_transformers() {
    check_family("yarn");
}

/// LongRoPE on a Phi-3 block: the long divisors past an original context of 32 (80
/// positions) and cos and sin scaled by sqrt(1 + ln 8 / ln 32).
#[test]
fn longrope_matches_transformers() {
    check_family("longrope");
}

/// Mixtral (converted as `llama`): 2 of 4 experts per token, softmax weights renormalized.
#[test]
fn mixtral_matches_transformers() {
    check_family("mixtral");
}

/// Qwen2-MoE: 2 of 4 experts of width 64 per token, softmax weights as they are, and a
/// shared expert of width 96 scaled by the sigmoid of its gate.
#[test]
fn qwen2moe_matches_transformers() {
    check_family("qwen2moe");
}

/// OLMoE: the query/key norm over the whole projections, and 2 of 4 experts per token with
/// softmax weights as they are.
#[test]
fn olmoe_matches_transformers() {
    check_family("olmoe");
}

/// Qwen3-MoE: 2 of 4 experts of width 64 per token, with Qwen3's query/key norm.
#[test]
fn qwen3moe_matches_transformers() {
    check_family("qwen3moe");
}

/// GPT-OSS: four layers, local (window 24) and global in turn, a learned sink per head in
/// every softmax, YaRN with its correction range unrounded, biases on q, k, v and o, and 2 of
/// 4 experts per token with biases on the router and every product and the clamped SwiGLU.
/// On the Vulkan device and both CPU executors.
#[test]
fn gptoss_matches_transformers() {
    check_family_on("gptoss", Executors::All);
    let Some(dir) = hearth_testkit::conformance_model("gptoss") else {
        return;
    };
    // InfiniGen and H2O refuse it, with the reason.
    assert_refused(&dir, &policies(), "attention sinks");
}

/// Options that load a model on the reference with InfiniGen, and with H2O.
fn policies() -> [EngineOptions; 2] {
    [
        EngineOptions {
            backend: BackendKind::Reference,
            infinigen: Some(hearth_engine::InfinigenOptions::default()),
            ..EngineOptions::default()
        },
        EngineOptions {
            backend: BackendKind::Reference,
            h2o: Some(hearth_engine::H2oOptions::default()),
            ..EngineOptions::default()
        },
    ]
}

/// Loading llama.cpp's file in `dir` with each of `options` fails with an error that names
/// `reason`.
fn assert_refused(dir: &Path, options: &[EngineOptions], reason: &str) {
    for options in options {
        let err = Engine::load(&dir.join("model.gguf"), options, &mut |_| true)
            .err()
            .unwrap_or_else(|| panic!("{:?} refuses it: {reason}", options.backend));
        assert!(err.to_string().contains(reason), "{err}");
    }
}

/// GLM-4.5: three layers, the first dense, the others 2 of 8 experts per token chosen by
/// their sigmoid scores plus a correction bias within the better of 2 groups, weighed by the
/// scores without it renormalized times 2.5, and a shared expert; q/k/v biases, the per-head
/// query/key norm, half of each head rotated as halves. llama.cpp's file counts a NextN layer
/// as a fourth block, which decoding leaves out. On Vulkan, the reference and the native CPU
/// executor.
#[test]
fn glm4moe_matches_transformers() {
    check_family_on("glm4moe", Executors::All);
}

/// DeepSeek-V3: latent attention with low-rank queries, YaRN's mscale on the scores, and
/// sigmoid routing with a selection bias within the best groups (by their two best), on the
/// reference and the CPU executor, from llama.cpp's file and from the folder. The Vulkan
/// executor, InfiniGen and H2O refuse it, naming latent attention.
#[test]
fn deepseek3_matches_transformers() {
    check_family_on("deepseek3", Executors::Cpu);
    let Some(dir) = hearth_testkit::conformance_model("deepseek3") else {
        return;
    };
    let vulkan = EngineOptions {
        backend: BackendKind::Vulkan,
        ..EngineOptions::default()
    };
    assert_refused(&dir, &[vulkan], "latent attention");
    assert_refused(&dir, &policies(), "latent attention");
}

/// DeepSeek-V2 (V2-Lite's queries): latent attention without low-rank queries, and softmax
/// routing within the best groups by their best expert, weights scaled and not renormalized.
#[test]
fn deepseek2_matches_transformers() {
    check_family_on("deepseek2", Executors::Cpu);
}

/// Logits at every position of `tokens` (the first `prompt` as one step, then one a step) of
/// the model at `path` loaded with `options`, and the formats its weights loaded in.
fn logits_of(
    path: &Path,
    options: &EngineOptions,
    tokens: &[u32],
    prompt: usize,
) -> (Vec<f32>, Vec<(hearth_quant::Format, u64)>) {
    let mut engine = Engine::load(path, options, &mut |_| true)
        .unwrap_or_else(|e| panic!("{path:?} on {:?}: {e}", options.backend));
    let formats = engine.info().weight_formats.clone();
    let model = engine.session_mut().fresh_backend();
    let (prompt, rest) = tokens.split_at(prompt);
    let mut got = model.forward(prompt, Logits::All).unwrap();
    for &token in rest {
        got.extend(model.forward(&[token], Logits::Last).unwrap());
    }
    (got, formats)
}

/// GPT-OSS's weights in MXFP4, as gpt-oss ships its experts (every product's, quantized as
/// the file loads): the Vulkan device runs the packed blocks as the reference runs their
/// values, prompt and decode, within the f32 bounds of the conformance check.
#[test]
fn gptoss_in_mxfp4_runs_on_vulkan_as_on_the_reference() {
    let Some(dir) = hearth_testkit::conformance_model("gptoss") else {
        return;
    };
    if hearth_testkit::or_skip(Device::new(DeviceDesc::default()), "Vulkan device").is_none() {
        return;
    }
    let reference: Reference =
        serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let v = reference.n_vocab;
    let run = |backend| {
        let options = EngineOptions {
            backend,
            n_ctx: Some(128),
            kv_type: KvType::F32,
            load_format: Some(hearth_quant::Format::MXFP4),
            ..EngineOptions::default()
        };
        let path = dir.join("model.gguf");
        logits_of(&path, &options, &reference.tokens, reference.prompt)
    };
    let ((got, formats), (want, _)) = (run(BackendKind::Vulkan), run(BackendKind::Reference));
    assert!(
        formats
            .iter()
            .any(|&(f, b)| f == hearth_quant::Format::MXFP4 && b > 0),
        "weights in {formats:?}"
    );
    assert_eq!(got.len(), want.len());
    let mut worst_abs = 0f32;
    let mut worst_kl = 0f64;
    for (pos, (g, w)) in got.chunks(v).zip(want.chunks(v)).enumerate() {
        let abs = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let kl = kl(w, g);
        worst_abs = worst_abs.max(abs);
        worst_kl = worst_kl.max(kl);
        assert!(
            abs <= MAX_ABS && kl <= MAX_KL,
            "gptoss in MXFP4, position {pos}: max |diff| {abs:.2e}, KL {kl:.2e}"
        );
    }
    eprintln!(
        "gptoss in MXFP4, Vulkan against the reference: max |diff| {worst_abs:.2e}, max KL \
         {worst_kl:.2e} (weights in {formats:?})"
    );
}
