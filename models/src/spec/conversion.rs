//! A spec's `[hf]` table: which Hugging Face folders convert to the family's GGUF files, and
//! what their conversion does beyond the common keys and tensors (`crate::hf`).

use serde::Deserialize;

/// How a folder of the family converts, as llama.cpp's converter converts it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HfSpec {
    /// The classes transformers saves the family as (`config.json`'s `architectures`).
    pub classes: Vec<String>,
    /// llama.cpp's "llama" files rotate adjacent pairs, Hugging Face's halves: Q and K rows
    /// are reordered so each head's halves interleave.
    #[serde(default)]
    pub permute_qk: bool,
    /// Norm gains are stored as offsets from 1 (Gemma: `weight + 1` multiplies).
    #[serde(default)]
    pub norm_plus_one: bool,
    /// `post_attention_layernorm`, the MLP's pre-norm, is written as
    /// `post_attention_norm.weight` rather than `ffn_norm.weight`, as llama.cpp names it for
    /// GPT-OSS.
    #[serde(default)]
    pub post_attention_norm: bool,
    /// tokenizer.json's added tokens join the SentencePiece vocabulary as they are, special
    /// or not (Phi-3's converter).
    #[serde(default)]
    pub added_tokens_from_tokenizer_json: bool,
    /// Special tokens the family's converter sets by their text (role: `bos`, `eos`, `unk`,
    /// `eot`, `eom`, ...), where the tokenizer files give the role none (as llama.cpp's
    /// SpecialVocab sets them): GLM-4's `<|endoftext|>` and `<|user|>`.
    #[serde(default)]
    pub special_tokens: std::collections::BTreeMap<String, String>,
    /// Layers past `num_hidden_layers` (DeepSeek-V3's multi-token prediction layer) are left
    /// out of the file, as llama.cpp's converter leaves them; without this, they are counted
    /// among the blocks as `num_nextn_predict_layers` says (GLM-4.5).
    #[serde(default)]
    pub drop_nextn: bool,
    /// The conversion hook that writes metadata beyond the common keys, by its name in
    /// `models/src/hf/hooks.rs`.
    #[serde(default)]
    pub hook: Option<String>,
}
