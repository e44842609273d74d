//! Hugging Face folders that are wrong: each conversion error names the file and the key or
//! tensor at fault. The folders are tiny Llama, Mixtral and GPT-OSS shapes written here with
//! the safetensors crate (GPT-OSS's experts in MXFP4, checked value for value).

use std::path::{Path, PathBuf};

use hearth_models::HfFolder;
use safetensors::Dtype;
use serde_json::{json, Value};

const HIDDEN: usize = 8;
const VOCAB: usize = 4;

struct Folder {
    dir: PathBuf,
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn config(experts: bool) -> Value {
    let mut c = json!({
        "architectures": [if experts { "MixtralForCausalLM" } else { "LlamaForCausalLM" }],
        "hidden_size": HIDDEN,
        "intermediate_size": 16,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "num_hidden_layers": 1,
        "vocab_size": VOCAB,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 64,
        "rope_theta": 10000.0,
    });
    if experts {
        c["num_local_experts"] = json!(2);
        c["num_experts_per_tok"] = json!(1);
    }
    c
}

/// The tensors of a one-layer model (name, shape); experts replace the dense MLP.
fn tensors(experts: bool) -> Vec<(String, Vec<usize>)> {
    let mut t = vec![
        ("model.embed_tokens.weight".to_string(), vec![VOCAB, HIDDEN]),
        ("model.norm.weight".into(), vec![HIDDEN]),
        ("lm_head.weight".into(), vec![VOCAB, HIDDEN]),
        ("model.layers.0.input_layernorm.weight".into(), vec![HIDDEN]),
        (
            "model.layers.0.post_attention_layernorm.weight".into(),
            vec![HIDDEN],
        ),
        (
            "model.layers.0.self_attn.q_proj.weight".into(),
            vec![8, HIDDEN],
        ),
        (
            "model.layers.0.self_attn.k_proj.weight".into(),
            vec![4, HIDDEN],
        ),
        (
            "model.layers.0.self_attn.v_proj.weight".into(),
            vec![4, HIDDEN],
        ),
        (
            "model.layers.0.self_attn.o_proj.weight".into(),
            vec![HIDDEN, 8],
        ),
    ];
    if experts {
        t.push((
            "model.layers.0.block_sparse_moe.gate.weight".into(),
            vec![2, HIDDEN],
        ));
        for e in 0..2 {
            for (w, shape) in [
                ("w1", [16, HIDDEN]),
                ("w3", [16, HIDDEN]),
                ("w2", [HIDDEN, 16]),
            ] {
                let name = format!("model.layers.0.block_sparse_moe.experts.{e}.{w}.weight");
                t.push((name, shape.to_vec()));
            }
        }
    } else {
        for (w, shape) in [
            ("gate", [16, HIDDEN]),
            ("up", [16, HIDDEN]),
            ("down", [HIDDEN, 16]),
        ] {
            t.push((
                format!("model.layers.0.mlp.{w}_proj.weight"),
                shape.to_vec(),
            ));
        }
    }
    t
}

fn write_weights(dir: &Path, tensors: &[(String, Vec<usize>)], dtype: Dtype) {
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, s)| {
            let n: usize = s.iter().product();
            let values = (0..n).map(value);
            match dtype {
                // bfloat16: the top half of each f32 (these values are exact in it).
                Dtype::BF16 => values
                    .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
                    .collect(),
                // Any other type of four bytes: the f32 bytes, whatever they mean there.
                _ => values.flat_map(f32::to_le_bytes).collect(),
            }
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .zip(&data)
        .map(|((name, shape), bytes)| {
            let view = safetensors::tensor::TensorView::new(dtype, shape.clone(), bytes).unwrap();
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, &None, &dir.join("model.safetensors")).unwrap();
}

/// Value i of every tensor: multiples of 1/64 up to 4, exact in bfloat16.
fn value(i: usize) -> f32 {
    (i % 256) as f32 / 64.0
}

fn folder(name: &str, config: &Value, tensors: &[(String, Vec<usize>)]) -> Folder {
    let dir = std::env::temp_dir().join(format!("hearth-hf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    write_weights(&dir, tensors, Dtype::F32);
    let tokenizer = json!({
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3}, "merges": ["a b"]},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
        "added_tokens": [],
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    Folder { dir }
}

fn error(f: &Folder) -> String {
    match HfFolder::open(&f.dir).and_then(|h| h.to_gguf_file()) {
        Ok(_) => panic!("{} converted", f.dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_tiny_llama_and_mixtral_convert_and_resolve() {
    for experts in [false, true] {
        let f = folder(
            &format!("ok-{experts}"),
            &config(experts),
            &tensors(experts),
        );
        let file = HfFolder::open(&f.dir).unwrap().to_gguf_file().unwrap();
        let model = hearth_models::resolve_gguf(&file).unwrap();
        assert_eq!(model.hparams.n_layer, 1);
        let tok = hearth_models::Tokenizer::from_gguf(&file).unwrap();
        assert_eq!(tok.encode_with("ab", Default::default()), vec![2]);
        if experts {
            let t = file.tensor("blk.0.ffn_down_exps.weight").unwrap();
            assert_eq!(t.shape, vec![16, HIDDEN as u64, 2]);
        }
    }
}

/// bfloat16 weights (as most checkpoints ship) stay bfloat16 matrices, borrowed from the
/// mapping; norms become f32 with the same values.
#[test]
fn bf16_weights_keep_their_type_and_norms_become_f32() {
    let f = folder("bf16", &config(false), &tensors(false));
    write_weights(&f.dir, &tensors(false), Dtype::BF16);
    let file = HfFolder::open(&f.dir).unwrap().to_gguf_file().unwrap();
    let q = file.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.ggml_type, hearth_models::GgmlType::BF16);
    let norm = file.tensor("blk.0.attn_norm.weight").unwrap();
    assert_eq!(norm.ggml_type, hearth_models::GgmlType::F32);
    let values: Vec<f32> = file
        .tensor_data(norm)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(values, (0..HIDDEN).map(value).collect::<Vec<_>>());
    assert_eq!(file.get::<u32>("general.file_type").unwrap(), Some(32));
}

#[test]
fn config_json_contradicting_the_weights_names_the_key() {
    for (key, value) in [
        ("hidden_size", json!(16)),
        ("vocab_size", json!(5)),
        ("num_hidden_layers", json!(2)),
        ("num_key_value_heads", json!(2)),
        ("num_attention_heads", json!(4)),
    ] {
        let mut c = config(false);
        c[key] = value;
        let f = folder(&format!("contradiction-{key}"), &c, &tensors(false));
        let err = error(&f);
        assert!(
            err.contains("config.json") && err.contains(key),
            "{key}: {err}"
        );
    }
}

#[test]
fn a_missing_expert_is_named() {
    let mut t = tensors(true);
    t.retain(|(n, _)| n != "model.layers.0.block_sparse_moe.experts.1.w2.weight");
    let f = folder("missing-expert", &config(true), &t);
    let err = error(&f);
    assert!(
        err.contains("expert 1 of layer 0") && err.contains("Down"),
        "{err}"
    );

    // An expert past the count config.json gives.
    let mut c = config(true);
    c["num_local_experts"] = json!(1);
    let f = folder("extra-expert", &c, &tensors(true));
    let err = error(&f);
    assert!(
        err.contains("`num_experts`") && err.contains("expert 1"),
        "{err}"
    );
}

#[test]
fn unknown_families_tensors_and_types_are_named() {
    let mut c = config(false);
    c["architectures"] = json!(["BartForConditionalGeneration"]);
    let f = folder("bart", &c, &tensors(false));
    let err = error(&f);
    assert!(
        err.contains("BartForConditionalGeneration")
            && err.contains("LlamaForCausalLM")
            && err.contains("config.json"),
        "{err}"
    );

    let mut t = tensors(false);
    t.push(("model.layers.0.mystery.weight".into(), vec![HIDDEN]));
    let f = folder("mystery", &config(false), &t);
    let err = error(&f);
    assert!(
        err.contains("model.layers.0.mystery.weight") && err.contains("model.safetensors"),
        "{err}"
    );

    let f = folder("int", &config(false), &tensors(false));
    write_weights(&f.dir, &tensors(false), Dtype::I32);
    let err = error(&f);
    assert!(err.contains("I32") && err.contains("tensor `"), "{err}");
}

#[test]
fn a_folder_without_a_tokenizer_or_with_a_foreign_one_is_named() {
    let f = folder("no-tokenizer", &config(false), &tensors(false));
    std::fs::remove_file(f.dir.join("tokenizer.json")).unwrap();
    let err = error(&f);
    assert!(err.contains("tokenizer.model nor tokenizer.json"), "{err}");

    let word_level = json!({"model": {"type": "WordLevel", "vocab": {"a": 0}}});
    std::fs::write(f.dir.join("tokenizer.json"), word_level.to_string()).unwrap();
    let err = error(&f);
    assert!(
        err.contains("tokenizer.json") && err.contains("WordLevel"),
        "{err}"
    );

    std::fs::write(f.dir.join("tokenizer.json"), b"{\"model\": ").unwrap();
    let err = error(&f);
    assert!(
        err.contains("tokenizer.json") && err.contains("not JSON"),
        "{err}"
    );

    std::fs::write(f.dir.join("config.json"), b"[1, 2]").unwrap();
    let err = error(&f);
    assert!(err.contains("config.json"), "{err}");
}

/// A one-layer GPT-OSS folder (width 32, 2 heads of 16 on 1 KV head, 2 experts of width 32)
/// with its experts in MXFP4, as OpenAI ships them: `_blocks` (U8, [expert, out, in / 32,
/// 16]) and `_scales` (U8, [expert, out, in / 32]), gate and up rows interleaved.
fn gptoss_folder(name: &str, config_edit: impl FnOnce(&mut Value)) -> Folder {
    let (h, ff, experts) = (32usize, 32usize, 2usize);
    let mut config = json!({
        "architectures": ["GptOssForCausalLM"],
        "hidden_size": h,
        "intermediate_size": ff,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "num_hidden_layers": 1,
        "vocab_size": VOCAB,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 64,
        "rope_parameters": {"rope_type": "default", "rope_theta": 150000.0},
        "layer_types": ["sliding_attention"],
        "sliding_window": 4,
        "num_local_experts": experts,
        "num_experts_per_tok": 1,
        "swiglu_limit": 7.0,
    });
    config_edit(&mut config);
    let l = "model.layers.0";
    let mut floats: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![VOCAB, h]),
        ("model.norm.weight".into(), vec![h]),
        ("lm_head.weight".into(), vec![VOCAB, h]),
        (format!("{l}.input_layernorm.weight"), vec![h]),
        (format!("{l}.post_attention_layernorm.weight"), vec![h]),
        (format!("{l}.self_attn.sinks"), vec![2]),
        (format!("{l}.mlp.router.weight"), vec![experts, h]),
        (format!("{l}.mlp.router.bias"), vec![experts]),
        (
            format!("{l}.mlp.experts.gate_up_proj_bias"),
            vec![experts, 2 * ff],
        ),
        (format!("{l}.mlp.experts.down_proj_bias"), vec![experts, h]),
    ];
    for (p, out) in [("q", 32), ("k", 16), ("v", 16), ("o", h)] {
        let inp = if p == "o" { 32 } else { h };
        floats.push((format!("{l}.self_attn.{p}_proj.weight"), vec![out, inp]));
        floats.push((format!("{l}.self_attn.{p}_proj.bias"), vec![out]));
    }
    let f = folder(name, &config, &floats);
    // Rewritten with the MXFP4 tensors beside the float ones.
    let float_data: Vec<Vec<u8>> = floats
        .iter()
        .map(|(_, s)| {
            let n: usize = s.iter().product();
            (0..n).map(value).flat_map(f32::to_le_bytes).collect()
        })
        .collect();
    let mut u8s: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (part, out, inp) in [("gate_up_proj", 2 * ff, h), ("down_proj", h, ff)] {
        let blocks = vec![experts, out, inp / 32, 16];
        let scales = vec![experts, out, inp / 32];
        let n: usize = blocks.iter().product();
        let bytes = (0..n).map(|i| ((i * 37 + 11) % 256) as u8).collect();
        u8s.push((format!("{l}.mlp.experts.{part}_blocks"), blocks, bytes));
        let n: usize = scales.iter().product();
        let bytes = (0..n).map(|i| 120 + (i % 10) as u8).collect();
        u8s.push((format!("{l}.mlp.experts.{part}_scales"), scales, bytes));
    }
    let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> = floats
        .iter()
        .zip(&float_data)
        .map(|((name, shape), bytes)| {
            let view = safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), bytes);
            (name.clone(), view.unwrap())
        })
        .collect();
    for (name, shape, bytes) in &u8s {
        let view = safetensors::tensor::TensorView::new(Dtype::U8, shape.clone(), bytes);
        views.push((name.clone(), view.unwrap()));
    }
    safetensors::serialize_to_file(views, &None, &f.dir.join("model.safetensors")).unwrap();
    f
}

/// The e2m1 values, as transformers decodes OpenAI's nibbles.
const FP4: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

#[test]
fn gptoss_mxfp4_experts_keep_their_values_and_odd_constants_are_named() {
    let f = gptoss_folder("gptoss", |_| {});
    let gguf = HfFolder::open(&f.dir).unwrap().to_gguf_file().unwrap();
    // The spec finds every tensor it names, sinks and expert biases included.
    let model = hearth_models::resolve_gguf(&gguf).unwrap();
    assert_eq!(model.hparams.n_layer, 1);
    // What transformers computes from the folder's blocks: gate rows are the even rows of
    // gate_up, up rows the odd ones.
    let (blocks, scales) = (
        |i: usize| ((i * 37 + 11) % 256) as u8,
        |i: usize| 120 + (i % 10) as u8,
    );
    let hf_value = |e: usize, row: usize, rows: usize, k: usize, cols: usize| {
        let at = (e * rows + row) * (cols / 32) + k / 32;
        let byte = blocks(at * 16 + (k % 32) / 2);
        let code = (byte >> (4 * (k % 2))) & 0x0F;
        FP4[code as usize] * 2f32.powi(i32::from(scales(at)) - 127)
    };
    for (name, rows, cols, first, step) in [
        ("blk.0.ffn_gate_exps.weight", 64, 32, 0, 2),
        ("blk.0.ffn_up_exps.weight", 64, 32, 1, 2),
        ("blk.0.ffn_down_exps.weight", 32, 32, 0, 1),
    ] {
        let t = gguf.tensor(name).unwrap();
        assert_eq!(t.ggml_type.id(), 39, "{name}: MXFP4");
        let kept = rows / step;
        assert_eq!(t.shape, vec![cols as u64, kept as u64, 2], "{name}");
        let data = gguf.tensor_data(t).unwrap();
        for (b, block) in data.chunks_exact(17).enumerate() {
            let mut qs = [0u8; 16];
            qs.copy_from_slice(&block[1..]);
            let mut got = [0f32; 32];
            hearth_quant::formats::mxfp4::BlockMxfp4 { e: block[0], qs }.dequantize(&mut got);
            let (row, blk) = (b / (cols / 32), b % (cols / 32));
            let (e, r) = (row / kept, row % kept);
            for (j, &v) in got.iter().enumerate() {
                let want = hf_value(e, first + r * step, rows, blk * 32 + j, cols);
                assert_eq!(
                    v,
                    want,
                    "{name}: expert {e}, row {r}, value {}",
                    blk * 32 + j
                );
            }
        }
    }
    // Constants, layer patterns and YaRN rounding the spec does not run are refused by key.
    let f = gptoss_folder("gptoss-limit", |c| c["swiglu_limit"] = json!(8.0));
    assert!(error(&f).contains("swiglu_limit"), "{}", error(&f));
    let f = gptoss_folder("gptoss-layers", |c| {
        c["layer_types"] = json!(["full_attention"]);
    });
    assert!(error(&f).contains("layer_types"), "{}", error(&f));
}
