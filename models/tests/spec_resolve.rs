//! Resolving the shipped Llama spec against GGUF files: the real SmolLM2 model, and tiny
//! synthetic files that are broken one way at a time.

mod common;

use common::{tiny_llama, Tiny};
use hearth_models::gguf::{GgufFile, GgufWriter, MetaArray, MetaValue};
use hearth_models::spec::{MlpTensors, QkvTensors, RopeLayout, RopeScaling};
use hearth_models::{resolve_gguf, GgmlType, ResolvedModel};

fn resolve(w: &GgufWriter<'_>) -> hearth_models::Result<ResolvedModel> {
    let file = GgufFile::from_bytes("tiny.gguf", w.to_bytes().unwrap()).unwrap();
    resolve_gguf(&file)
}

fn expect_error(w: &GgufWriter<'_>, fragments: &[&str]) {
    let msg = resolve(w).expect_err("resolved a broken model").to_string();
    assert!(msg.contains("tiny.gguf"), "{msg}");
    for f in fragments {
        assert!(msg.contains(f), "error lacks {f:?}: {msg}");
    }
}

#[test]
fn smollm2_resolves_with_the_expected_hyperparameters() {
    let Some(path) = hearth_testkit::model(hearth_testkit::SMOLLM2) else {
        return;
    };
    let file = GgufFile::open(path).unwrap();
    let m = resolve_gguf(&file).unwrap();
    let hp = &m.hparams;
    assert_eq!(m.architecture, "llama");
    assert_eq!(m.spec.name, "llama");
    assert_eq!(
        (hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim),
        (30, 576, 9, 3, 64)
    );
    assert_eq!((hp.n_ff, hp.n_vocab, hp.n_ctx_train), (1536, 49152, 8192));
    assert!((hp.norm_eps - 1e-5).abs() < 1e-9);
    let rope = hp.rope.unwrap();
    assert_eq!(
        (rope.base, rope.dims, rope.layout),
        (100_000.0, 64, RopeLayout::Gptj)
    );
    assert!(m.tensors.tied_embeddings);
    assert_eq!(m.tensors.output, "token_embd.weight");
    assert_eq!(m.tensors.layers.len(), 30);
    assert!(m.unused_tensors.is_empty(), "{:?}", m.unused_tensors);
    let l29 = &m.tensors.layers[29];
    let MlpTensors::Dense { up, down, .. } = &l29.mlp else {
        panic!("SmolLM2 is dense");
    };
    assert_eq!(down.weight, "blk.29.ffn_down.weight");
    let QkvTensors::Separate { k, .. } = &l29.qkv else {
        panic!("llama has separate q/k/v");
    };
    assert_eq!(k.weight, "blk.29.attn_k.weight");
    assert_eq!(k.bias, None);
    assert_eq!(file.tensor(&up.weight).unwrap().ggml_type, GgmlType::Q4_1);
}

#[test]
fn tiny_model_resolves_and_ties_embeddings_only_without_output() {
    let mut w = tiny_llama(&Tiny::default());
    let m = resolve(&w).unwrap();
    assert_eq!(
        (m.hparams.n_layer, m.hparams.head_dim, m.hparams.n_vocab),
        (2, 4, 5)
    );
    assert_eq!(m.hparams.rope.unwrap().dims, 4);
    assert!(m.tensors.tied_embeddings);

    w.add_tensor("output.weight", GgmlType::F32, &[8, 5], vec![0u8; 160])
        .unwrap();
    w.add_tensor("rope_freqs.weight", GgmlType::F32, &[2], vec![0u8; 8])
        .unwrap();
    w.add_tensor("blk.0.extra.weight", GgmlType::F32, &[2], vec![0u8; 8])
        .unwrap();
    let m = resolve(&w).unwrap();
    assert!(!m.tensors.tied_embeddings);
    assert_eq!(m.tensors.output, "output.weight");
    assert_eq!(m.tensors.rope_freqs.as_deref(), Some("rope_freqs.weight"));
    assert_eq!(m.unused_tensors, vec!["blk.0.extra.weight".to_string()]);
}

#[test]
fn rope_freqs_of_the_wrong_length_name_the_tensor() {
    let mut w = tiny_llama(&Tiny::default());
    w.add_tensor("rope_freqs.weight", GgmlType::F32, &[3], vec![0u8; 12])
        .unwrap();
    expect_error(&w, &["rope_freqs.weight", "rope dimensions / 2"]);
}

#[test]
fn missing_hyperparameters_name_the_key() {
    let mut w = tiny_llama(&Tiny::default());
    w.set_metadata("llama.feed_forward_length", MetaValue::U32(0));
    expect_error(&w, &["`llama.feed_forward_length`", "positive"]);

    let mut w = tiny_llama(&Tiny::default());
    w.set_metadata("llama.block_count", MetaValue::String("two".into()));
    expect_error(&w, &["`llama.block_count`", "expected an integer"]);

    let full = tiny_llama(&Tiny::default()).to_bytes().unwrap();
    let file = GgufFile::from_bytes("tiny.gguf", full).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata().iter() {
        if k != "llama.context_length" {
            w.set_metadata(k, v.clone());
        }
    }
    expect_error(&w, &["`llama.context_length`", "missing"]);
}

#[test]
fn inconsistent_heads_name_the_key() {
    let mut w = tiny_llama(&Tiny::default());
    w.set_metadata("llama.attention.head_count", MetaValue::U32(3));
    expect_error(
        &w,
        &["`llama.attention.head_count`", "do not divide", "= 8"],
    );

    let mut w = tiny_llama(&Tiny::default());
    w.set_metadata("llama.attention.head_count_kv", MetaValue::U32(3));
    w.set_metadata("llama.attention.head_count", MetaValue::U32(4));
    expect_error(
        &w,
        &["`llama.attention.head_count_kv`", "3 does not divide"],
    );

    let mut w = tiny_llama(&Tiny::default());
    w.set_metadata("llama.vocab_size", MetaValue::U32(7));
    expect_error(&w, &["`llama.vocab_size`", "5 tokens"]);
}

#[test]
fn tensor_problems_name_the_tensor() {
    // K projection sized for 2 KV heads while the metadata says 1.
    let t = Tiny::default();
    let mut w = tiny_llama(&t);
    w.set_metadata("llama.attention.head_count_kv", MetaValue::U32(2));
    expect_error(
        &w,
        &["tensor `blk.0.attn_k.weight`", "[8, 4]", "expected [8, 8]"],
    );

    // A vocabulary larger than the embedding matrix.
    let mut w = tiny_llama(&t);
    let mut vocab = t.vocab.clone();
    vocab.push("c".into());
    w.set_metadata(
        "tokenizer.ggml.tokens",
        MetaValue::Array(hearth_models::MetaArray::String(vocab)),
    );
    expect_error(&w, &["tensor `token_embd.weight`", "n_vocab"]);

    // A missing layer tensor.
    let bytes = tiny_llama(&t).to_bytes().unwrap();
    let file = GgufFile::from_bytes("tiny.gguf", bytes).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata().iter() {
        w.set_metadata(k, v.clone());
    }
    for info in file.tensors() {
        if info.name != "blk.1.ffn_gate.weight" {
            let data = file.tensor_data(info).unwrap().to_vec();
            w.add_tensor(&info.name, info.ggml_type, &info.shape, data)
                .unwrap();
        }
    }
    expect_error(&w, &["tensor `blk.1.ffn_gate.weight`", "not in the file"]);
}

#[test]
fn unknown_architecture_lists_the_known_ones() {
    let mut w = tiny_llama(&Tiny::default());
    w.set_metadata("general.architecture", MetaValue::String("gpt9".into()));
    expect_error(
        &w,
        &[
            "`gpt9`",
            "shipped specs serve: llama, qwen2, qwen3",
            "docs/adding-a-model.md",
        ],
    );
}

/// A spec made of other atoms (fused biased QKV, layer norm, plain MLP, untied output) needs
/// only a TOML file: resolution derives the bias names and checks every shape.
#[test]
fn other_atoms_resolve_from_a_spec_file_alone() {
    let text = include_str!("../specs/llama.toml")
        .replace("architectures = [\"llama\"]", "architectures = [\"toy\"]")
        .replace(
            "tied_embeddings = \"when-output-absent\"",
            "tied_embeddings = \"never\"",
        )
        .replace("kind = \"rms\"", "kind = \"layer\"")
        .replace("qkv = \"separate\"", "qkv = \"fused\"")
        .replace("bias = false\noutput_bias", "bias = true\noutput_bias")
        .replace("kind = \"gated\"", "kind = \"plain\"")
        .replace(
            "attn_q = ",
            "attn_qkv = \"blk.{layer}.attn_qkv.weight\"\n# ",
        )
        .replace("ffn_gate = ", "# ");
    let spec = hearth_models::ModelSpec::from_toml("toy.toml", &text).unwrap();

    let (e, ff, v) = (8u64, 16u64, 5u64);
    let mut w = tiny_llama(&Tiny::default());
    w.set_metadata("general.architecture", MetaValue::String("toy".into()));
    let base = GgufFile::from_bytes("tiny.gguf", w.to_bytes().unwrap()).unwrap();
    let mut w = GgufWriter::new();
    for (k, val) in base.metadata().iter() {
        let k = k.replace(
            "llama.attention.layer_norm_rms_epsilon",
            "toy.attention.layer_norm_epsilon",
        );
        w.set_metadata(k.replace("llama.", "toy."), val.clone());
    }
    let mut add = |name: &str, shape: &[u64]| {
        let n: u64 = shape.iter().product();
        w.add_tensor(name, GgmlType::F32, shape, vec![0u8; 4 * n as usize])
            .unwrap();
    };
    add("token_embd.weight", &[e, v]);
    add("output.weight", &[e, v]);
    add("output_norm.weight", &[e]);
    add("output_norm.bias", &[e]);
    for i in 0..2 {
        // q: 2 heads x 4, k and v: 1 head x 4.
        add(&format!("blk.{i}.attn_qkv.weight"), &[e, 16]);
        add(&format!("blk.{i}.attn_qkv.bias"), &[16]);
        add(&format!("blk.{i}.attn_output.weight"), &[e, e]);
        for norm in ["attn_norm", "ffn_norm"] {
            add(&format!("blk.{i}.{norm}.weight"), &[e]);
            add(&format!("blk.{i}.{norm}.bias"), &[e]);
        }
        add(&format!("blk.{i}.ffn_up.weight"), &[e, ff]);
        add(&format!("blk.{i}.ffn_down.weight"), &[ff, e]);
    }
    let file = GgufFile::from_bytes("toy.gguf", w.to_bytes().unwrap()).unwrap();
    let m = spec.resolve_gguf(&file).unwrap();
    assert!(m.unused_tensors.is_empty(), "{:?}", m.unused_tensors);
    assert!(!m.tensors.tied_embeddings);
    let l1 = &m.tensors.layers[1];
    assert_eq!(l1.attn_norm.bias.as_deref(), Some("blk.1.attn_norm.bias"));
    assert!(matches!(l1.mlp, MlpTensors::Dense { gate: None, .. }));
    match &l1.qkv {
        QkvTensors::Fused(qkv) => assert_eq!(qkv.bias.as_deref(), Some("blk.1.attn_qkv.bias")),
        other => panic!("expected fused, got {other:?}"),
    }
}

#[test]
fn rope_scaling_is_read_and_bad_values_name_the_key() {
    let scaling = |entries: &[(&str, MetaValue)]| {
        let mut w = tiny_llama(&Tiny::default());
        for (k, v) in entries {
            w.set_metadata(*k, v.clone());
        }
        w
    };
    let kind = |s: &str| MetaValue::String(s.into());
    let w = scaling(&[
        ("llama.rope.scaling.type", kind("linear")),
        ("llama.rope.scaling.factor", MetaValue::F32(4.0)),
    ]);
    let rope = resolve(&w).unwrap().hparams.rope.unwrap();
    assert_eq!(rope.scaling, RopeScaling::Linear { factor: 4.0 });
    let w = scaling(&[("llama.rope.scale_linear", MetaValue::F32(2.0))]);
    let rope = resolve(&w).unwrap().hparams.rope.unwrap();
    assert_eq!(rope.scaling, RopeScaling::Linear { factor: 2.0 });
    let w = scaling(&[
        ("llama.rope.scaling.type", kind("yarn")),
        ("llama.rope.scaling.factor", MetaValue::F32(4.0)),
    ]);
    let rope = resolve(&w).unwrap().hparams.rope.unwrap();
    let RopeScaling::Yarn(yarn) = rope.scaling else {
        panic!("{:?}", rope.scaling)
    };
    // llama.cpp's defaults, the original context being the training one.
    assert_eq!(
        (
            yarn.factor,
            yarn.original_context,
            yarn.beta_fast,
            yarn.beta_slow
        ),
        (4.0, 64, 32.0, 1.0)
    );
    assert!((yarn.attn_factor - (1.0 + 0.1 * 4f32.ln())).abs() < 1e-6);
    let w = scaling(&[
        ("llama.rope.scaling.type", kind("yarn")),
        ("llama.rope.scaling.factor", MetaValue::F32(4.0)),
        (
            "llama.rope.scaling.original_context_length",
            MetaValue::U32(16),
        ),
        ("llama.rope.scaling.yarn_beta_fast", MetaValue::F32(16.0)),
        ("llama.rope.scaling.yarn_attn_factor", MetaValue::F32(1.0)),
    ]);
    let rope = resolve(&w).unwrap().hparams.rope.unwrap();
    let RopeScaling::Yarn(yarn) = rope.scaling else {
        panic!("{:?}", rope.scaling)
    };
    assert_eq!(
        (yarn.original_context, yarn.beta_fast, yarn.attn_factor),
        (16, 16.0, 1.0)
    );
    let rope = resolve(&tiny_llama(&Tiny::default())).unwrap().hparams.rope;
    assert_eq!(rope.unwrap().scaling, RopeScaling::None);

    let w = scaling(&[("llama.rope.scaling.type", kind("ntk"))]);
    expect_error(
        &w,
        &["`llama.rope.scaling.type`", "unknown RoPE scaling `ntk`"],
    );
    let w = scaling(&[("llama.rope.scaling.type", kind("linear"))]);
    expect_error(&w, &["`llama.rope.scaling.factor`", "missing"]);
    let w = scaling(&[
        ("llama.rope.scaling.type", kind("linear")),
        ("llama.rope.scaling.factor", MetaValue::F32(-1.0)),
    ]);
    expect_error(
        &w,
        &["`llama.rope.scaling.factor`", "not a positive number"],
    );
}

/// The window of local layers and the layers it covers (the spec's period, or the file's
/// per-layer flags or period), soft-caps and the attention scale; bad values name the key.
#[test]
fn windows_and_caps_are_read_and_bad_values_name_the_key() {
    let with = |entries: &[(&str, MetaValue)]| {
        let mut w = tiny_llama(&Tiny::default());
        for (k, v) in entries {
            w.set_metadata(*k, v.clone());
        }
        w
    };
    let window = |w: &GgufWriter<'_>| resolve(w).unwrap().hparams.sliding_window;
    assert_eq!(window(&with(&[])), None);
    assert_eq!(
        window(&with(&[(
            "llama.attention.sliding_window",
            MetaValue::U32(0)
        )])),
        None
    );
    // The llama spec windows every layer (Mistral).
    let size = ("llama.attention.sliding_window", MetaValue::U32(4));
    let w = window(&with(std::slice::from_ref(&size))).unwrap();
    assert_eq!((w.size, w.layers.as_slice()), (4, [true, true].as_slice()));
    assert_eq!((w.of_layer(0), w.of_layer(5)), (Some(4), None));
    let pattern = "llama.attention.sliding_window_pattern";
    let flags = MetaValue::Array(MetaArray::Bool(vec![false, true]));
    let w = window(&with(&[size.clone(), (pattern, flags)])).unwrap();
    assert_eq!(w.layers, [false, true]);
    let w = window(&with(&[size.clone(), (pattern, MetaValue::U32(2))])).unwrap();
    assert_eq!(w.layers, [true, false]);

    let three = MetaValue::Array(MetaArray::Bool(vec![true; 3]));
    expect_error(
        &with(&[size.clone(), (pattern, three)]),
        &[&format!("`{pattern}`"), "3 flags for 2 layers"],
    );
    expect_error(
        &with(&[size.clone(), (pattern, MetaValue::String("LG".into()))]),
        &[
            &format!("`{pattern}`"),
            "a flag per layer or a positive period",
        ],
    );
    let context = resolve(&with(&[])).unwrap().hparams.n_ctx_train as u32;
    expect_error(
        &with(&[(
            "llama.attention.sliding_window",
            MetaValue::U32(context + 1),
        )]),
        &[
            "`llama.attention.sliding_window`",
            "longer than the context",
            "llama.context_length",
        ],
    );

    let hp = resolve(&with(&[
        ("llama.attn_logit_softcapping", MetaValue::F32(50.0)),
        ("llama.final_logit_softcapping", MetaValue::F32(30.0)),
        ("llama.attention.scale", MetaValue::F32(0.125)),
    ]))
    .unwrap()
    .hparams;
    assert_eq!(
        (hp.attn_softcap, hp.final_softcap, hp.attn_scale),
        (Some(50.0), Some(30.0), Some(0.125))
    );
    assert_eq!(resolve(&with(&[])).unwrap().hparams.attn_softcap, None);
    expect_error(
        &with(&[("llama.final_logit_softcapping", MetaValue::F32(-30.0))]),
        &["`llama.final_logit_softcapping`", "not a positive number"],
    );
}

/// Local layers' own RoPE base (the spec's default, or `{arch}.rope.freq_base_swa`) and the
/// score scale of the sizes the spec lists by block count.
#[test]
fn local_rope_base_and_width_scale_come_from_spec_and_file() {
    let text = include_str!("../specs/llama.toml")
        .replace(
            "layout = \"gptj\"",
            "layout = \"gptj\"\nlocal_base_default = 500.0",
        )
        .replace(
            "causal = true",
            "causal = true\nwidth_scaled_block_counts = [2]",
        );
    let spec = hearth_models::ModelSpec::from_toml("local.toml", &text).unwrap();
    let resolve_with = |entries: &[(&str, MetaValue)]| {
        let mut w = tiny_llama(&Tiny::default());
        for (k, v) in entries {
            w.set_metadata(*k, v.clone());
        }
        let file = GgufFile::from_bytes("tiny.gguf", w.to_bytes().unwrap()).unwrap();
        spec.resolve_gguf(&file)
    };
    let hp = resolve_with(&[]).unwrap().hparams;
    assert_eq!(hp.rope.unwrap().local_base, Some(500.0));
    // Two layers, width 8 over 2 heads: 1 / sqrt(4).
    assert_eq!(hp.attn_scale, Some(0.5));
    let hp = resolve_with(&[
        ("llama.rope.freq_base_swa", MetaValue::F32(2000.0)),
        ("llama.attention.scale", MetaValue::F32(0.25)),
    ])
    .unwrap()
    .hparams;
    assert_eq!(hp.rope.unwrap().local_base, Some(2000.0));
    assert_eq!(hp.attn_scale, Some(0.25));
    let err = resolve_with(&[("llama.rope.freq_base_swa", MetaValue::F32(0.5))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`llama.rope.freq_base_swa`"), "{err}");
    // The shipped llama spec has neither.
    let hp = resolve(&tiny_llama(&Tiny::default())).unwrap().hparams;
    assert_eq!((hp.rope.unwrap().local_base, hp.attn_scale), (None, None));
}

/// A mixture-of-experts file (Mixtral is converted as `llama`): the experts' count and
/// routing come from the file and the spec's `[moe]`; a missing expert tensor, or a count of
/// experts used that the file does not have, is named.
#[test]
fn mixture_of_experts_files_resolve_and_bad_ones_name_the_fault() {
    let t = Tiny::default();
    let (e, ff) = (t.n_embd, 4u64);
    let moe = |used: u32, with_down: bool| {
        let full = tiny_llama(&t).to_bytes().unwrap();
        let dense = GgufFile::from_bytes("tiny.gguf", full).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in dense.metadata().iter() {
            w.set_metadata(k, v.clone());
        }
        w.set_metadata("llama.expert_count", MetaValue::U32(3));
        w.set_metadata("llama.expert_used_count", MetaValue::U32(used));
        w.set_metadata(
            "llama.expert_feed_forward_length",
            MetaValue::U32(ff as u32),
        );
        for info in dense.tensors().iter().filter(|t| !t.name.contains("ffn_")) {
            let data = dense.tensor_data(info).unwrap().to_vec();
            w.add_tensor(&info.name, info.ggml_type, &info.shape, data)
                .unwrap();
        }
        let mut add = |name: String, shape: &[u64]| {
            let n: u64 = shape.iter().product();
            w.add_tensor(&name, GgmlType::F32, shape, vec![0u8; 4 * n as usize])
                .unwrap();
        };
        for i in 0..t.n_layer {
            add(format!("blk.{i}.ffn_norm.weight"), &[e]);
            add(format!("blk.{i}.ffn_gate_inp.weight"), &[e, 3]);
            add(format!("blk.{i}.ffn_gate_exps.weight"), &[e, ff, 3]);
            add(format!("blk.{i}.ffn_up_exps.weight"), &[e, ff, 3]);
            if with_down || i == 0 {
                add(format!("blk.{i}.ffn_down_exps.weight"), &[ff, e, 3]);
            }
        }
        w
    };
    let m = resolve(&moe(2, true)).unwrap();
    let x = m.hparams.experts.unwrap();
    assert_eq!((x.count, x.used, x.n_ff, x.normalize), (3, 2, 4, true));
    assert!(m.unused_tensors.is_empty(), "{:?}", m.unused_tensors);
    assert!(
        matches!(&m.tensors.layers[1].mlp, MlpTensors::Experts { down, .. }
        if down == "blk.1.ffn_down_exps.weight")
    );
    expect_error(
        &moe(2, false),
        &["blk.1.ffn_down_exps.weight", "not in the file"],
    );
    expect_error(
        &moe(4, true),
        &[
            "`llama.expert_used_count`",
            "4 is not between 1 and the 3 experts",
        ],
    );
    // A dense model may carry the key as 0.
    let mut w = tiny_llama(&t);
    w.set_metadata("llama.expert_count", MetaValue::U32(0));
    assert!(resolve(&w).unwrap().hparams.experts.is_none());
}
