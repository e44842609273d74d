//! Helpers shared by the integration tests: scratch directories and a tiny GGUF to break.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod torch_pickle;

/// A fresh, empty scratch directory under the system temp dir for one test.
pub fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hearth-models-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

use hearth_models::gguf::{GgufWriter, MetaArray, MetaValue};
use hearth_models::GgmlType;

/// Hyperparameters of [`tiny_llama`].
pub struct Tiny {
    pub n_layer: u32,
    pub n_embd: u64,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub n_ff: u64,
    pub vocab: Vec<String>,
}

impl Default for Tiny {
    fn default() -> Self {
        Tiny {
            n_layer: 2,
            n_embd: 8,
            n_head: 2,
            n_head_kv: 1,
            n_ff: 16,
            vocab: ["<unk>", "<s>", "</s>", "a", "b"]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// A tiny Llama-architecture GGUF (all-zero F32 weights) with consistent metadata, for tests
/// that then break one thing at a time.
pub fn tiny_llama(t: &Tiny) -> GgufWriter<'static> {
    let mut w = GgufWriter::new();
    let s = |v: &str| MetaValue::String(v.into());
    w.set_metadata("general.architecture", s("llama"));
    w.set_metadata("llama.block_count", MetaValue::U32(t.n_layer));
    w.set_metadata("llama.context_length", MetaValue::U32(64));
    w.set_metadata("llama.embedding_length", MetaValue::U32(t.n_embd as u32));
    w.set_metadata("llama.feed_forward_length", MetaValue::U32(t.n_ff as u32));
    w.set_metadata("llama.attention.head_count", MetaValue::U32(t.n_head));
    w.set_metadata("llama.attention.head_count_kv", MetaValue::U32(t.n_head_kv));
    w.set_metadata("llama.rope.freq_base", MetaValue::F32(10_000.0));
    w.set_metadata(
        "llama.attention.layer_norm_rms_epsilon",
        MetaValue::F32(1e-5),
    );
    w.set_metadata("tokenizer.ggml.model", s("llama"));
    w.set_metadata(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(t.vocab.clone())),
    );

    let e = t.n_embd;
    let head_dim = e / t.n_head as u64;
    let kv = head_dim * t.n_head_kv as u64;
    let v = t.vocab.len() as u64;
    let mut add = |name: &str, shape: &[u64]| {
        let n: u64 = shape.iter().product();
        w.add_tensor(name, GgmlType::F32, shape, vec![0u8; 4 * n as usize])
            .unwrap();
    };
    add("token_embd.weight", &[e, v]);
    add("output_norm.weight", &[e]);
    for i in 0..t.n_layer {
        add(&format!("blk.{i}.attn_norm.weight"), &[e]);
        add(&format!("blk.{i}.attn_q.weight"), &[e, e]);
        add(&format!("blk.{i}.attn_k.weight"), &[e, kv]);
        add(&format!("blk.{i}.attn_v.weight"), &[e, kv]);
        add(&format!("blk.{i}.attn_output.weight"), &[e, e]);
        add(&format!("blk.{i}.ffn_norm.weight"), &[e]);
        add(&format!("blk.{i}.ffn_gate.weight"), &[e, t.n_ff]);
        add(&format!("blk.{i}.ffn_up.weight"), &[e, t.n_ff]);
        add(&format!("blk.{i}.ffn_down.weight"), &[t.n_ff, e]);
    }
    w
}
