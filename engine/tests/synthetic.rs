//! Synthetic models: every preset's metadata and tensors resolve as a Llama model (checked on
//! scaled-down copies, so no test builds gigabytes), every format builds, an unknown preset
//! names the presets, and a tiny synthetic model loads through the engine on Vulkan and
//! computes and generates as the CPU reference does. Outside CI a machine without a Vulkan device skips the Vulkan test; in CI
//! (`CI=true`) a missing device fails it.

use hearth_cpu::Activations;
use hearth_engine::sample::SamplerParams;
use hearth_engine::session::{FinishReason, GenerateParams};
use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_kernels::vk::{Device, DeviceDesc};
use hearth_model::{Logits, ModelConfig};
use hearth_models::synthetic::{self, Family, Shape, ShapeExperts, PRESETS};
use hearth_models::{resolve_gguf, Tokenizer};
use hearth_quant::Format;

/// [`Shape::TINY`] with 128 tokens of context.
const TINY: Shape = Shape {
    n_ctx_train: 128,
    ..Shape::TINY
};

/// Qwen2: q/k/v biases.
const QWEN2: Shape = Shape {
    family: Family::Qwen2,
    ..TINY
};

/// Qwen3: a per-head query/key norm, with a head width of its own.
const QWEN3: Shape = Shape {
    family: Family::Qwen3,
    key_length: Some(32),
    ..TINY
};

/// Gemma 2, every other layer local with a window (8) shorter than the 19-token prompt.
const GEMMA2: Shape = Shape {
    family: Family::Gemma2,
    n_layer: 4,
    key_length: Some(32),
    tied_embeddings: true,
    sliding_window: Some(8),
    ..TINY
};

/// Gemma 3: five local layers to a global one, the local ones rotating with their own base.
const GEMMA3: Shape = Shape {
    family: Family::Gemma3,
    n_layer: 6,
    key_length: Some(32),
    tied_embeddings: true,
    sliding_window: Some(8),
    rope_base: 1_000_000.0,
    ..TINY
};

/// Phi-3: q/k/v and gate/up each in one matrix, every layer local.
const PHI3: Shape = Shape {
    family: Family::Phi3,
    sliding_window: Some(8),
    ..TINY
};

/// 2 of 4 experts.
const EXPERTS: Option<ShapeExperts> = Some(ShapeExperts {
    count: 4,
    used: 2,
    n_ff: TINY.n_ff,
});

/// Mixtral: Llama with 2 of 4 experts.
const MIXTRAL: Shape = Shape {
    experts: EXPERTS,
    ..TINY
};

/// Qwen3-MoE: experts and the query/key norm.
const QWEN3MOE: Shape = Shape {
    experts: EXPERTS,
    ..QWEN3
};

/// `shape` with one layer and width 64 (or the least multiple of 64 its heads divide into
/// even head dimensions), keeping its heads, vocabulary, context and tied embeddings.
fn scaled_down(shape: &Shape) -> Shape {
    let mut n_embd = 64;
    while n_embd % shape.n_head != 0 || (n_embd / shape.n_head) % 2 != 0 {
        n_embd += 64;
    }
    Shape {
        n_layer: 1,
        n_embd,
        n_ff: 64,
        experts: shape.experts.map(|x| ShapeExperts { n_ff: 64, ..x }),
        ..*shape
    }
}

/// Builds `shape` and checks that the runtime resolves it to exactly that shape.
fn check_resolves(shape: &Shape, format: Format) {
    let file = shape.build("test", format).unwrap();
    let model = resolve_gguf(&file).unwrap();
    assert_eq!(model.architecture, shape.architecture());
    assert!(
        model.unused_tensors.is_empty(),
        "{:?}",
        model.unused_tensors
    );
    assert_eq!(model.tensors.tied_embeddings, shape.tied_embeddings);
    let config = ModelConfig::from_resolved(&file, &model).unwrap();
    let want = (
        shape.n_layer,
        shape.n_embd,
        shape.n_ff,
        shape.n_head,
        shape.n_head_kv,
        shape.head_dim(),
        shape.n_vocab,
        shape.n_ctx_train,
    );
    let got = (
        config.n_layer,
        config.n_embd,
        config.n_ff,
        config.n_head,
        config.n_head_kv,
        config.head_dim,
        config.n_vocab,
        config.n_ctx_train,
    );
    assert_eq!(got, want, "{format}");
    let rope = config.rope.unwrap();
    assert_eq!((rope.base, rope.dims), (shape.rope_base, shape.head_dim()));
    assert_eq!(config.norm_eps, shape.norm_eps);
    let experts = config.experts.map(|x| (x.count, x.used, x.n_ff));
    assert_eq!(experts, shape.experts.map(|x| (x.count, x.used, x.n_ff)));
    assert_eq!(config.n_params(shape.tied_embeddings), shape.n_params());
    let data: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
    assert_eq!(Some(data), shape.file_bytes(format), "{format}");
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(tokenizer.vocab_size(), shape.n_vocab);
}

#[test]
fn every_preset_resolves_scaled_down() {
    for p in PRESETS {
        check_resolves(&scaled_down(&p.shape), Format::Q4);
    }
}

#[test]
fn every_format_builds_and_resolves() {
    // The k-quants' 256-value blocks need rows of 256.
    let wide = Shape {
        n_embd: 256,
        n_ff: 256,
        ..TINY
    };
    for f in Format::ALL {
        let shape = if f.block_size() > TINY.n_embd {
            &wide
        } else {
            &TINY
        };
        check_resolves(shape, f);
    }
}

#[test]
fn presets_have_the_published_sizes() {
    // Parameter counts of the published models (embedding and head counted once when tied).
    let expected = [
        ("smollm2-135m", 134_515_008),
        ("llama-1b", 1_235_814_400),
        ("llama-3b", 3_212_749_824),
        ("llama-7b", 6_738_415_616),
        ("qwen2.5-7b", 7_615_616_512),
        ("llama-3-8b", 8_030_261_248),
        ("llama-3.1-8b", 8_030_261_248),
        ("qwen3-8b", 8_190_735_360),
        ("gemma-2-9b", 9_241_705_984),
        ("llama-13b", 13_015_864_320),
        ("qwen3-30b-a3b", 30_532_122_624),
        ("mixtral-8x7b", 46_702_792_704),
    ];
    for (name, n_params) in expected {
        let p = synthetic::preset(name).unwrap();
        assert_eq!(p.shape.n_params(), n_params, "{name}");
        // Every matrix in Q4 (5 bits per weight); the norm gains stay F32.
        let bytes = p.shape.file_bytes(Format::Q4).unwrap();
        assert!(
            bytes > n_params * 5 / 8 && bytes < n_params * 5 / 8 + (2 << 20),
            "{name}"
        );
    }
    assert_eq!(synthetic::preset("LLAMA-7B").unwrap().name, "llama-7b");
}

#[test]
fn unknown_preset_lists_the_presets() {
    let message = synthetic::preset("llama-70b").unwrap_err().to_string();
    assert!(message.contains("llama-70b"), "{message}");
    for p in PRESETS {
        assert!(message.contains(p.name), "{message}");
    }
}

#[test]
fn bad_shapes_are_refused() {
    let cases = [
        (
            "3 key/value heads for 4 heads",
            Shape {
                n_head_kv: 3,
                ..TINY
            },
        ),
        (
            "rows of 96 in 64-value blocks",
            Shape { n_embd: 96, ..TINY },
        ),
        ("no layers", Shape { n_layer: 0, ..TINY }),
        ("no room for <unk>, <s>, </s>", Shape { n_vocab: 2, ..TINY }),
        (
            "head dimension 1",
            Shape {
                n_head: 64,
                n_head_kv: 64,
                ..TINY
            },
        ),
    ];
    for (why, shape) in cases {
        let err = shape.build("bad", Format::Q4B64).unwrap_err().to_string();
        assert!(err.starts_with("synthetic shape:"), "{why}: {err}");
    }
}

#[test]
fn tiny_model_generates_on_vulkan() {
    if !validated_device() {
        return;
    }
    for format in [Format::Q4, Format::Q3H] {
        check_vulkan_matches_reference(&TINY, format);
    }
}

/// Qwen2's q/k/v biases and Qwen3's per-head query/key norm (with a head width of its own)
/// on the device, against the CPU reference.
#[test]
fn qwen_families_match_the_reference_on_vulkan() {
    if !validated_device() {
        return;
    }
    for shape in [QWEN2, QWEN3] {
        let file = shape.build_random("tiny", Format::Q8, 5).unwrap();
        let model = resolve_gguf(&file).unwrap();
        assert_eq!(model.architecture, shape.architecture());
        assert!(
            model.unused_tensors.is_empty(),
            "{:?}",
            model.unused_tensors
        );
        check_vulkan_matches_reference(&shape, Format::Q8);
    }
}

/// Gemma 2's atoms on the device against the CPU reference: embeddings scaled by
/// sqrt(n_embd), norms after attention and MLP, a GELU-gated MLP, soft-capped scores and
/// logits, and every other layer local with a window (8) shorter than the 19-token prompt
/// and the generation after it.
#[test]
fn gemma2_matches_the_reference_on_vulkan() {
    if !validated_device() {
        return;
    }
    let file = GEMMA2.build_random("tiny", Format::Q8, 5).unwrap();
    let model = resolve_gguf(&file).unwrap();
    let window = model.hparams.sliding_window.clone().unwrap();
    assert_eq!(window.size, 8);
    assert_eq!(window.layers, [true, false, true, false]);
    assert_eq!(model.hparams.attn_softcap, Some(50.0));
    assert_eq!(model.hparams.final_softcap, Some(30.0));
    assert!(
        model.unused_tensors.is_empty(),
        "{:?}",
        model.unused_tensors
    );
    check_vulkan_matches_reference(&GEMMA2, Format::Q8);
}

/// Gemma 3 (query/key norm, five local layers to a global one, local layers rotating with
/// their own base) and Phi-3 (q/k/v and gate/up each in one matrix, every layer local) on the
/// device against the CPU reference.
#[test]
fn gemma3_and_phi3_match_the_reference_on_vulkan() {
    if !validated_device() {
        return;
    }
    for (shape, local) in [(GEMMA3, 5), (PHI3, 2)] {
        let file = shape.build_random("tiny", Format::Q8, 5).unwrap();
        let model = resolve_gguf(&file).unwrap();
        assert!(
            model.unused_tensors.is_empty(),
            "{:?}",
            model.unused_tensors
        );
        let window = model.hparams.sliding_window.clone().unwrap();
        assert_eq!(window.layers.iter().filter(|&&l| l).count(), local);
        check_vulkan_matches_reference(&shape, Format::Q8);
    }
    let rope = resolve_gguf(&GEMMA3.build("tiny", Format::Q8).unwrap())
        .unwrap()
        .hparams
        .rope
        .unwrap();
    assert_eq!((rope.base, rope.local_base), (1_000_000.0, Some(10_000.0)));
}

/// Mixtures of experts, Mixtral's (Llama with 2 of 4 experts) and Qwen3-MoE's (with the
/// query/key norm), on the device against the CPU reference: decode takes one slot a pass
/// and the prompt eight.
#[test]
fn mixtures_of_experts_match_the_reference_on_vulkan() {
    if !validated_device() {
        return;
    }
    for shape in [MIXTRAL, QWEN3MOE] {
        check_vulkan_matches_reference(&shape, Format::Q8);
    }
}

/// Whether a Vulkan device with the validation layer opens (a skip, counted, where none does;
/// a failure in CI).
fn validated_device() -> bool {
    let device = Device::new(DeviceDesc {
        index: None,
        validation: true,
    });
    hearth_testkit::or_skip(device, "Vulkan device").is_some()
}

/// Every family's atoms on the native CPU executor (with f32 activations) against the CPU
/// reference: Qwen2's biases, Qwen3's query/key norm, Gemma 2's scaled embeddings, post-norms,
/// GELU, soft-caps and local layers, Gemma 3's local RoPE base, Phi-3's fused matrices, and
/// Mixtral's and Qwen3-MoE's experts. No Vulkan device is needed.
#[test]
fn every_family_matches_the_reference_on_the_cpu_executor() {
    let shapes = [TINY, QWEN2, QWEN3, GEMMA2, GEMMA3, PHI3, MIXTRAL, QWEN3MOE];
    for shape in shapes {
        check_matches_reference(BackendKind::Cpu, &shape, Format::Q8);
    }
}

/// Decode over a long context on the CPU executor, where attention splits each KV head's
/// positions into parts with their own softmax and merges them: the logits are the CPU
/// reference's up to summation order, at a depth where the parts are several (600 positions,
/// four threads, two KV heads).
#[test]
fn split_attention_over_a_long_context_matches_the_reference() {
    let shape = Shape {
        n_ctx_train: 1024,
        ..TINY
    };
    let load = |backend| {
        let file = shape.build_random("tiny", Format::Q8, 5).unwrap();
        let options = EngineOptions {
            backend,
            n_ctx: Some(1024),
            activations: Activations::F32,
            threads: Some(4),
            ..EngineOptions::default()
        };
        Engine::load_file(file, &options, &mut |_| true).unwrap()
    };
    let (mut cpu, mut reference) = (load(BackendKind::Cpu), load(BackendKind::Reference));
    let prompt: Vec<u32> = (0..600).map(|i| 1 + (i * 37 % 250) as u32).collect();
    let logits = |e: &mut Engine| {
        let backend = e.session_mut().fresh_backend();
        let mut last = backend.forward(&prompt, Logits::Last).unwrap();
        for t in [7, 3, 11] {
            last.extend(backend.forward(&[t], Logits::All).unwrap());
        }
        last
    };
    let (got, want) = (logits(&mut cpu), logits(&mut reference));
    hearth_testkit::assert_logits_close(&got, &want, 1e-3, "long context");
}

/// Q4_K rows that the CPU executor interleaves eight at a time where its instruction set
/// reads them so (x86-64 with AVX2), a dense model's and a mixture's (whose products read one
/// expert's rows): their logits are the same executor's on plain rows (the portable kernels,
/// the same 8-bit activations) over a prompt (unpacked into panels) and decode steps. The
/// two sum floats in different orders, so an activation that lands within a last bit of a
/// rounding step is rounded to neighbouring levels by the two, moving later logits by about a
/// step times a weight (up to 9e-4 of the largest here); a wrong kernel moves them by more
/// than the logits' size.
#[test]
fn interleaved_q4_k_rows_compute_what_plain_rows_do() {
    let wide = Shape {
        n_embd: 256,
        n_ff: 512,
        ..TINY
    };
    let experts = Shape {
        experts: Some(ShapeExperts {
            count: 4,
            used: 2,
            n_ff: 512,
        }),
        ..wide
    };
    for shape in [wide, experts] {
        let load = |isa| {
            let file = shape.build_random("tiny", Format::Q4_K, 5).unwrap();
            let options = EngineOptions {
                backend: BackendKind::Cpu,
                n_ctx: Some(64),
                activations: Activations::Q8,
                isa,
                ..EngineOptions::default()
            };
            Engine::load_file(file, &options, &mut |_| true).unwrap()
        };
        let (mut best, mut plain) = (load(None), load(Some(hearth_cpu::Isa::Portable)));
        let prompt: Vec<u32> = (1..20).collect();
        let logits = |e: &mut Engine| {
            let backend = e.session_mut().fresh_backend();
            let mut all = backend.forward(&prompt, Logits::All).unwrap();
            for t in [7, 3, 11] {
                all.extend(backend.forward(&[t], Logits::All).unwrap());
            }
            all
        };
        let (got, want) = (logits(&mut best), logits(&mut plain));
        hearth_testkit::assert_logits_close(&got, &want, 1e-2, "Q4_K interleaved");
    }
}

/// `shape` built with random rows in `format`: the Vulkan executor's logits are the CPU
/// reference's up to summation order, and greedy generation picks the same tokens.
fn check_vulkan_matches_reference(shape: &Shape, format: Format) {
    check_matches_reference(BackendKind::Vulkan, shape, format)
}

/// `shape` built with random rows in `format`: `backend`'s logits (the CPU executor's with
/// f32 activations) are the CPU reference's up to summation order, and greedy generation
/// picks the same tokens.
fn check_matches_reference(backend: BackendKind, shape: &Shape, format: Format) {
    // Random rows, so that tokens differ and greedy choices are clear.
    let load = |backend| {
        let file = shape.build_random("tiny", format, 5).unwrap();
        let options = EngineOptions {
            backend,
            validate: true,
            n_ctx: Some(64),
            activations: Activations::F32,
            ..EngineOptions::default()
        };
        Engine::load_file(file, &options, &mut |_| true).unwrap()
    };
    let mut engine = load(backend);
    let mut reference = load(BackendKind::Reference);
    let info = engine.info();
    assert_eq!(info.name, "tiny");
    assert_eq!(info.n_params, shape.n_params());
    let formats: Vec<Format> = info.weight_formats.iter().map(|(f, _)| *f).collect();
    assert_eq!(formats, [format]);

    // The device's logits are the CPU reference's up to summation order.
    let prompt: Vec<u32> = (1..20).collect();
    let logits = |e: &mut Engine| {
        e.session_mut()
            .fresh_backend()
            .forward(&prompt, Logits::All)
            .unwrap()
    };
    let (got, want) = (logits(&mut engine), logits(&mut reference));
    assert_eq!(got.len(), prompt.len() * shape.n_vocab);
    hearth_testkit::assert_logits_close(&got, &want, 1e-3, &format.to_string());

    // Greedy generation picks the reference's tokens.
    let params = GenerateParams {
        max_tokens: Some(8),
        sampler: SamplerParams::greedy(),
        ignore_eos: true,
        ..GenerateParams::default()
    };
    let generation = engine.generate(&prompt, &params, &mut |_| true).unwrap();
    let expected = reference.generate(&prompt, &params, &mut |_| true).unwrap();
    assert_eq!(generation.tokens.len(), 8, "{format}");
    assert_eq!(generation.finish, FinishReason::Length);
    assert_eq!(generation.tokens, expected.tokens, "{format}");
}

/// Llama 3's `rope_freqs.weight` divides each rotated pair's frequency: the RoPE table holds
/// angle pos * base^(-2i / d) / factor_i, the factors change the logits, and the Vulkan
/// executor computes what the CPU reference does with them.
#[test]
fn rope_frequency_factors_are_applied() {
    let pairs = TINY.head_dim() / 2;
    let factors: Vec<f32> = (0..pairs).map(|i| 1.0 + 3.0 * i as f32).collect();
    let build = |factors: Option<&[f32]>| match factors {
        Some(f) => TINY.build_random_with_rope_factors("llama3", Format::Q8, 5, f),
        None => TINY.build_random("llama3", Format::Q8, 5),
    };
    let file = build(Some(&factors)).unwrap();
    let model = resolve_gguf(&file).unwrap();
    assert!(
        model.unused_tensors.is_empty(),
        "{:?}",
        model.unused_tensors
    );
    let config = ModelConfig::from_resolved(&file, &model).unwrap();
    let table = config.rope_table(40).unwrap();
    for pos in [1, 17, 39] {
        for (i, f) in factors.iter().enumerate() {
            let base = TINY.rope_base as f64;
            let angle = pos as f64 * base.powf(-2.0 * i as f64 / (2 * pairs) as f64) / *f as f64;
            let [c, s] = table[pos * pairs + i];
            assert!(
                (c as f64 - angle.cos()).abs() < 1e-6 && (s as f64 - angle.sin()).abs() < 1e-6,
                "position {pos}, pair {i}"
            );
        }
    }

    let prompt: Vec<u32> = (1..40).collect();
    let logits = |factors: Option<&[f32]>, backend| {
        let options = EngineOptions {
            backend,
            validate: true,
            n_ctx: Some(64),
            ..EngineOptions::default()
        };
        let file = build(factors).unwrap();
        let mut engine = Engine::load_file(file, &options, &mut |_| true).unwrap();
        let backend = engine.session_mut().fresh_backend();
        backend.forward(&prompt, Logits::All).unwrap()
    };
    let max_diff =
        |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    let want = logits(Some(&factors), BackendKind::Reference);
    let plain = logits(None, BackendKind::Reference);
    let scale = want.iter().fold(0f32, |m, l| m.max(l.abs()));
    assert!(
        max_diff(&want, &plain) > 1e-2 * scale,
        "the factors changed nothing"
    );

    if !validated_device() {
        return;
    }
    let got = logits(Some(&factors), BackendKind::Vulkan);
    hearth_testkit::assert_logits_close(&got, &want, 1e-3, "Vulkan with the factors");
}

#[test]
fn rope_frequency_factors_must_be_positive() {
    let zeros = vec![0.0; TINY.head_dim() / 2];
    let file = TINY
        .build_random_with_rope_factors("llama3", Format::Q8, 5, &zeros)
        .unwrap();
    let model = resolve_gguf(&file).unwrap();
    let err = ModelConfig::from_resolved(&file, &model)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rope_freqs.weight") && err.contains("positive"),
        "{err}"
    );
}

/// LongRoPE factors where the spec does not name them (a Llama file) are refused, naming the
/// tensor, rather than run without them; a Phi-3 file with only the long set names the short
/// one it lacks.
#[test]
fn stray_or_half_longrope_factors_are_refused_by_name() {
    let with_long_factors = |shape: Shape| {
        let file = shape.build("tiny", Format::F32).unwrap();
        let mut w = hearth_models::gguf::GgufWriter::new();
        for (k, v) in file.metadata().iter() {
            w.set_metadata(k, v.clone());
        }
        for t in file.tensors() {
            let data = file.tensor_data(t).unwrap().to_vec();
            w.add_tensor(&t.name, t.ggml_type, &t.shape, data).unwrap();
        }
        let half = (shape.head_dim() / 2) as u64;
        let ones: Vec<u8> = (0..half).flat_map(|_| 1f32.to_le_bytes()).collect();
        w.add_tensor(
            "rope_factors_long.weight",
            hearth_models::GgmlType::F32,
            &[half],
            ones,
        )
        .unwrap();
        hearth_models::GgufFile::from_bytes("long.gguf", w.to_bytes().unwrap()).unwrap()
    };
    let file = with_long_factors(TINY);
    let model = resolve_gguf(&file).unwrap();
    let err = ModelConfig::from_resolved(&file, &model)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("long.gguf") && err.contains("rope_factors_long.weight"),
        "{err}"
    );
    let phi3 = Shape {
        family: Family::Phi3,
        ..TINY
    };
    let err = resolve_gguf(&with_long_factors(phi3))
        .unwrap_err()
        .to_string();
    assert!(err.contains("rope_factors_short.weight"), "{err}");
}

/// `--chat-template-file`: a template of the user's replaces the file's; a broken one is an
/// error that names the option.
#[test]
fn a_chat_template_of_the_user_s_replaces_the_file_s() {
    let load = |template: &str| {
        let file = TINY.build_random("tiny", Format::Q8, 7).unwrap();
        let options = EngineOptions {
            backend: BackendKind::Reference,
            n_ctx: Some(64),
            chat_template: Some(template.to_string()),
            ..EngineOptions::default()
        };
        Engine::load_file(file, &options, &mut |_| true)
    };
    let engine = load("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}").unwrap();
    assert_eq!(
        engine.chat_template().source(),
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    );
    let ids = engine
        .tokenize_chat(&[hearth_models::ChatMessage::new("user", "hi")])
        .unwrap();
    // The synthetic vocabulary spells a leading space as SentencePiece does.
    assert!(engine.tokenizer().decode(&ids, false).ends_with("<user>hi"));
    let err = load("{% for %}").err().unwrap().to_string();
    assert!(err.contains("--chat-template-file"), "{err}");
}
