//! Hugging Face folders that are wrong: each conversion error names the file and the key or
//! tensor at fault. The folders are tiny Llama and Mixtral shapes written here with the
//! safetensors crate.

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
