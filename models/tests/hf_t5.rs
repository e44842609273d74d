//! T5 folders beyond what llama.cpp's converter takes (its reference conversions are checked in
//! hf_convert.rs): more decoder blocks than encoder blocks, which llama.cpp maps only up to the
//! encoder's count, convert with every block named; the shared embeddings' first copy is the
//! one kept; a config that contradicts the weights names its T5 key. The folders are tiny
//! Flan-T5 shapes written here with the safetensors crate.

use std::path::PathBuf;

use hearth_models::gguf::MetaValue;
use hearth_models::HfFolder;
use safetensors::Dtype;
use serde_json::{json, Value};

const D_MODEL: usize = 8;
const VOCAB: usize = 4;

struct Folder {
    dir: PathBuf,
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn config() -> Value {
    json!({
        "architectures": ["T5ForConditionalGeneration"],
        "d_model": D_MODEL,
        "d_kv": 4,
        "num_heads": 2,
        "d_ff": 16,
        "num_layers": 1,
        "num_decoder_layers": 2,
        "vocab_size": VOCAB,
        "feed_forward_proj": "gated-gelu",
        "layer_norm_epsilon": 1e-6,
        "relative_attention_num_buckets": 32,
        "tie_word_embeddings": false,
        "pad_token_id": 0,
        "eos_token_id": 1,
    })
}

/// One encoder block and two decoder blocks (name, shape), the shared embeddings stored as
/// `shared` and as the decoder's copy.
fn tensors() -> Vec<(String, Vec<usize>)> {
    let mut t: Vec<(String, Vec<usize>)> = vec![
        ("shared.weight".into(), vec![VOCAB, D_MODEL]),
        ("decoder.embed_tokens.weight".into(), vec![VOCAB, D_MODEL]),
        ("lm_head.weight".into(), vec![VOCAB, D_MODEL]),
        ("encoder.final_layer_norm.weight".into(), vec![D_MODEL]),
        ("decoder.final_layer_norm.weight".into(), vec![D_MODEL]),
    ];
    let attention = |prefix: &str, t: &mut Vec<(String, Vec<usize>)>| {
        for w in ["q", "k", "v", "o"] {
            t.push((format!("{prefix}.{w}.weight"), vec![D_MODEL, D_MODEL]));
        }
    };
    let mlp = |prefix: &str, t: &mut Vec<(String, Vec<usize>)>| {
        t.push((format!("{prefix}.layer_norm.weight"), vec![D_MODEL]));
        for w in ["wi_0", "wi_1"] {
            t.push((
                format!("{prefix}.DenseReluDense.{w}.weight"),
                vec![16, D_MODEL],
            ));
        }
        t.push((
            format!("{prefix}.DenseReluDense.wo.weight"),
            vec![D_MODEL, 16],
        ));
    };
    for (stack, blocks) in [("encoder", 1), ("decoder", 2)] {
        for b in 0..blocks {
            let block = format!("{stack}.block.{b}.layer");
            t.push((format!("{block}.0.layer_norm.weight"), vec![D_MODEL]));
            attention(&format!("{block}.0.SelfAttention"), &mut t);
            if b == 0 {
                t.push((
                    format!("{block}.0.SelfAttention.relative_attention_bias.weight"),
                    vec![32, 2],
                ));
            }
            if stack == "decoder" {
                t.push((format!("{block}.1.layer_norm.weight"), vec![D_MODEL]));
                attention(&format!("{block}.1.EncDecAttention"), &mut t);
                mlp(&format!("{block}.2"), &mut t);
            } else {
                mlp(&format!("{block}.1"), &mut t);
            }
        }
    }
    t
}

/// Tensor `j`'s value `i`: distinct from one tensor to the next.
fn value(j: usize, i: usize) -> f32 {
    ((j * 13 + i) % 256) as f32 / 64.0
}

fn folder(name: &str, config: &Value, tensors: &[(String, Vec<usize>)]) -> Folder {
    let dir = std::env::temp_dir().join(format!("hearth-t5-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .enumerate()
        .map(|(j, (_, s))| {
            let n: usize = s.iter().product();
            (0..n).flat_map(|i| value(j, i).to_le_bytes()).collect()
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .zip(&data)
        .map(|((name, shape), bytes)| {
            let view =
                safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), bytes).unwrap();
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, &None, &dir.join("model.safetensors")).unwrap();
    // The vocabulary is not what is tested here: any tokenizer Hearth converts.
    let tokenizer = json!({
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3}, "merges": ["a b"]},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
        "added_tokens": [],
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    Folder { dir }
}

#[test]
fn more_decoder_blocks_than_encoder_blocks_convert() {
    let t = tensors();
    let f = folder("ok", &config(), &t);
    let file = HfFolder::open(&f.dir).unwrap().to_gguf_file().unwrap();
    let meta = |key: &str| file.metadata().get(key).cloned();
    assert_eq!(meta("t5.block_count"), Some(MetaValue::U32(1)));
    assert_eq!(meta("t5.decoder_block_count"), Some(MetaValue::U32(2)));
    assert_eq!(meta("t5.attention.key_length"), Some(MetaValue::U32(4)));
    // No n_positions, no decoder_start_token_id: llama.cpp's 512, T5's padding token.
    assert_eq!(meta("t5.context_length"), Some(MetaValue::U32(512)));
    assert_eq!(meta("t5.decoder_start_token_id"), Some(MetaValue::U32(0)));
    assert!(meta("t5.attention.head_count_kv").is_none());

    let mut names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    for name in [
        "token_embd.weight",
        "output.weight",
        "enc.output_norm.weight",
        "dec.output_norm.weight",
        "enc.blk.0.attn_rel_b.weight",
        "enc.blk.0.ffn_gate.weight",
        "dec.blk.0.attn_rel_b.weight",
        "dec.blk.1.cross_attn_o.weight",
        "dec.blk.1.ffn_down.weight",
    ] {
        assert!(names.binary_search(&name).is_ok(), "{name} in {names:?}");
    }
    // One GGUF tensor per Hugging Face tensor, but the second copy of the embeddings.
    assert_eq!(names.len(), t.len() - 1);
    // Copies are read in name order: the decoder's before `shared`.
    let embd = file.tensor("token_embd.weight").unwrap();
    let j = t
        .iter()
        .position(|(n, _)| n == "decoder.embed_tokens.weight")
        .unwrap();
    let want: Vec<u8> = (0..VOCAB * D_MODEL)
        .flat_map(|i| value(j, i).to_le_bytes())
        .collect();
    assert_eq!(file.tensor_data(embd).unwrap(), want.as_slice());
    // Norms and relative biases keep their source type (f32 here) and GGUF's order of axes.
    let bias = file.tensor("enc.blk.0.attn_rel_b.weight").unwrap();
    assert_eq!(bias.shape, vec![2, 32]);
}

#[test]
fn a_config_contradicting_the_weights_names_its_t5_key() {
    for (key, value) in [
        ("num_decoder_layers", json!(1)),
        ("num_decoder_layers", json!(3)),
        ("num_layers", json!(2)),
        ("d_model", json!(16)),
        ("num_heads", json!(4)),
    ] {
        let mut c = config();
        c[key] = value.clone();
        let f = folder(&format!("contradiction-{key}-{value}"), &c, &tensors());
        let err = match HfFolder::open(&f.dir).and_then(|h| h.to_gguf_file()) {
            Ok(_) => panic!("{key} = {value} converted"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("config.json") && err.contains(key),
            "{key} = {value}: {err}"
        );
    }
}
