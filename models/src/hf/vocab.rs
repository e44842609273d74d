//! A Hugging Face tokenizer as a GGUF vocabulary (`tokenizer.ggml.*`), built as llama.cpp's
//! converter builds it, so that Hearth's own tokenizers read it as they read a converted file:
//!
//! - `tokenizer.model` (else `spiece.model`) present: SentencePiece. A Unigram model (T5's) is
//!   `t5`: its pieces, scores and kinds, the normalizer's settings, and `added_tokens.json`
//!   (`unigram`); a BPE model is `llama`: its pieces, scores and kinds, then the added tokens
//!   of `added_tokens.json` and `tokenizer_config.json`;
//! - `sentencepiece.bpe.model` present (XLM-RoBERTa's): a Unigram model numbered as fairseq
//!   numbers it, as `t5` (`unigram`);
//! - otherwise `tokenizer.json`: a SentencePiece-style BPE (byte fallback) as `llama`, its
//!   merges turned into scores (`spm_json`); a Unigram model as `t5` (`unigram_json`); a
//!   byte-level BPE as `gpt2`: the vocabulary and added tokens by id, the merges, and the
//!   pre-tokenizer named from its split pattern; a WordPiece model as `bert` (`wordpiece`);
//! - an encoder's count of token types (`type_vocab_size`);
//! - either way, ids past the tokenizer up to the model's `vocab_size` are `[PAD{id}]`;
//! - special tokens from `tokenizer_config.json` (else `config.json`'s ids), whether BOS and
//!   EOS are added from the post-processor, and the chat template.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::config::Config;
use super::sentencepiece::{self, ModelType, SentencePieceModel};
use super::spm_json;
use super::token_ids::tokens_by_id;
use super::unigram::UnigramVocab;
use super::{unigram, unigram_json, wordpiece};
use crate::error::{Error, Result};
use crate::gguf::{MetaArray, MetaValue};
use crate::spec::NetworkType;

/// Hugging Face's split patterns (as tokenizer.json spells them) and the name llama.cpp gives
/// each; Hearth's BPE pre-tokenizer implements these names.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// o200k's (GPT-4o, GPT-OSS): llama.cpp's `gpt-4o`.
const O200K_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How a SentencePiece model's ids become the vocabulary's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Numbering {
    /// As SentencePiece numbers them.
    SentencePiece,
    /// As fairseq numbers them: `<s>`, `<pad>`, `</s>`, `<unk>` first.
    Fairseq,
}

/// Where a folder's SentencePiece model is, in the order looked for: most folders name it
/// `tokenizer.model`, T5's `spiece.model`, XLM-RoBERTa's (fairseq's) `sentencepiece.bpe.model`.
const SENTENCEPIECE_FILES: [(&str, Numbering); 3] = [
    ("tokenizer.model", Numbering::SentencePiece),
    ("spiece.model", Numbering::SentencePiece),
    ("sentencepiece.bpe.model", Numbering::Fairseq),
];

/// The special tokens a GGUF file names, by tokenizer_config.json's name and GGUF's key.
const SPECIAL: [(&str, &str); 7] = [
    ("bos", "bos_token_id"),
    ("eos", "eos_token_id"),
    ("unk", "unknown_token_id"),
    ("sep", "seperator_token_id"),
    ("pad", "padding_token_id"),
    ("cls", "cls_token_id"),
    ("mask", "mask_token_id"),
];

fn read_json(path: &Path) -> Result<Option<Map<String, Value>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| Error::tokenizer(path.display().to_string(), format!("not JSON: {e}")))
}

/// The folder's tokenizer as `tokenizer.ggml.*` metadata, `n_vocab` tokens long.
pub(crate) fn vocabulary(
    dir: &Path,
    config: &Config,
    n_vocab: usize,
) -> Result<Vec<(String, MetaValue)>> {
    let json_path = dir.join("tokenizer.json");
    let tokenizer = read_json(&json_path)?;
    let tokenizer_config = read_json(&dir.join("tokenizer_config.json"))?;
    let added = added_tokens(tokenizer.as_ref());
    let mut out: Vec<(String, MetaValue)> = Vec::new();
    let mut set = |key: &str, value: MetaValue| out.push((format!("tokenizer.ggml.{key}"), value));

    let spm_path = SENTENCEPIECE_FILES
        .iter()
        .map(|&(name, numbering)| (dir.join(name), numbering))
        .find(|(path, _)| path.is_file());
    let spm = match spm_path {
        Some((path, numbering)) => {
            let model = SentencePieceModel::read(&path)?;
            if numbering == Numbering::Fairseq && model.model_type != ModelType::Unigram {
                return Err(Error::tokenizer(
                    path.display().to_string(),
                    "not a Unigram model: Hearth converts fairseq's numbering for Unigram \
                     models (XLM-RoBERTa's) only",
                ));
            }
            Some((model, numbering))
        }
        None => None,
    };
    let n_tokens;
    if let Some((model, numbering)) = spm
        .as_ref()
        .filter(|(m, _)| m.model_type == ModelType::Unigram)
    {
        let ugm = match numbering {
            Numbering::SentencePiece => {
                let added_json = read_json(&dir.join("added_tokens.json"))?;
                unigram::vocab(model, added_json.as_ref(), n_vocab)
            }
            Numbering::Fairseq => unigram::fairseq_vocab(model, n_vocab),
        };
        n_tokens = unigram_keys(ugm, &mut set);
    } else if let Some((model, _)) = &spm {
        let (tokens, scores, kinds) = sentencepiece_vocab(
            dir,
            model,
            config,
            tokenizer_config.as_ref(),
            &added,
            n_vocab,
        )?;
        n_tokens = tokens.len();
        set("model", MetaValue::String("llama".into()));
        set("pre", MetaValue::String("default".into()));
        set("tokens", MetaValue::Array(MetaArray::String(tokens)));
        set("scores", MetaValue::Array(MetaArray::F32(scores)));
        set("token_type", MetaValue::Array(MetaArray::I32(kinds)));
        if !model.add_dummy_prefix {
            set("add_space_prefix", MetaValue::Bool(false));
        }
    } else {
        let tokenizer = tokenizer.as_ref().ok_or_else(|| {
            Error::tokenizer(
                dir.display().to_string(),
                "neither tokenizer.model nor tokenizer.json is here (nor T5's spiece.model, \
                 nor XLM-RoBERTa's sentencepiece.bpe.model)",
            )
        })?;
        let source = json_path.display().to_string();
        if wordpiece::is_wordpiece(tokenizer) {
            let wpm = wordpiece::vocab(&source, tokenizer, &added, n_vocab)?;
            n_tokens = wpm.tokens.len();
            set("model", MetaValue::String("bert".into()));
            set("pre", MetaValue::String("default".into()));
            set("tokens", MetaValue::Array(MetaArray::String(wpm.tokens)));
            set("token_type", MetaValue::Array(MetaArray::I32(wpm.kinds)));
            set("normalizer.lowercase", MetaValue::Bool(wpm.lowercase));
        } else if unigram_json::is_unigram(tokenizer) {
            let specials = special_texts(tokenizer_config.as_ref());
            let ugm = unigram_json::vocab(
                &source,
                tokenizer,
                tokenizer_config.as_ref(),
                &specials,
                &added,
                n_vocab,
            )?;
            n_tokens = unigram_keys(ugm, &mut set);
        } else if spm_json::is_sentencepiece_bpe(tokenizer) {
            let spm = spm_json::vocab(&source, tokenizer, &added, n_vocab)?;
            n_tokens = spm.tokens.len();
            set("model", MetaValue::String("llama".into()));
            set("pre", MetaValue::String("default".into()));
            set("tokens", MetaValue::Array(MetaArray::String(spm.tokens)));
            set("scores", MetaValue::Array(MetaArray::F32(spm.scores)));
            set("token_type", MetaValue::Array(MetaArray::I32(spm.kinds)));
            if !spm.add_space_prefix {
                set("add_space_prefix", MetaValue::Bool(false));
            }
        } else {
            let bpe = byte_level_vocab(&source, tokenizer, &added, n_vocab)?;
            n_tokens = bpe.tokens.len();
            set("model", MetaValue::String("gpt2".into()));
            set("pre", MetaValue::String(bpe.pre.into()));
            set("tokens", MetaValue::Array(MetaArray::String(bpe.tokens)));
            set("token_type", MetaValue::Array(MetaArray::I32(bpe.kinds)));
            set("merges", MetaValue::Array(MetaArray::String(bpe.merges)));
        }
    }

    if config.family.network == NetworkType::EncoderOnly {
        // BERT's segments (sentence A and sentence B); one for RoBERTa's kind.
        let types = config.u64("type_vocab_size")?.unwrap_or(1);
        set(
            "token_type_count",
            MetaValue::U32(types.min(u32::MAX as u64) as u32),
        );
    }

    let mut specials = Specials::find(tokenizer.as_ref(), tokenizer_config.as_ref(), &added);
    if tokenizer.as_ref().is_some_and(wordpiece::is_wordpiece) {
        // [CLS] text [SEP], as llama.cpp's converter reads BERT's post-processor: the
        // classifier token plays BOS, the separator EOS.
        for (role, token) in [("bos", "cls"), ("eos", "sep")] {
            if let Some(&id) = specials.ids.get(token) {
                specials.ids.entry(role).or_insert(id);
            }
        }
        specials.add = vec![("bos", true), ("eos", true), ("sep", false)];
    }
    // Roles the family's converter sets by a token's text.
    let mut by_text: Vec<(&str, u32)> = Vec::new();
    for (role, text) in &config.family.hf.special_tokens {
        let Some(&(id, ..)) = added.iter().find(|(_, t, _)| t == text) else {
            return Err(Error::metadata(
                &dir.join("tokenizer.json"),
                "added_tokens",
                format!("has no {text:?}, the family's {role} token"),
            ));
        };
        match SPECIAL.iter().find(|(name, _)| name == role) {
            // A role the tokenizer's files already give keeps their token, as llama.cpp's
            // SpecialVocab keeps it.
            Some((name, _)) => {
                specials.ids.entry(name).or_insert(id);
            }
            None => by_text.push((role, id)),
        }
    }
    for (role, id) in by_text {
        set(&format!("{role}_token_id"), MetaValue::U32(id));
    }
    for (name, key) in SPECIAL {
        let id = specials
            .ids
            .get(name)
            .copied()
            .or_else(|| config_token_id(config, name).filter(|&id| (id as usize) < n_tokens));
        if let Some(id) = id {
            set(key, MetaValue::U32(id));
        }
    }
    for (name, add) in specials.add {
        set(&format!("add_{name}_token"), MetaValue::Bool(add));
    }
    if let Some(template) = chat_template(dir, tokenizer_config.as_ref())? {
        out.push((
            "tokenizer.chat_template".into(),
            MetaValue::String(template),
        ));
    }
    Ok(out)
}

/// A Unigram vocabulary's `tokenizer.ggml.*` keys, in the order llama.cpp's converter writes
/// them; returns the vocabulary's length.
fn unigram_keys(ugm: UnigramVocab, set: &mut impl FnMut(&str, MetaValue)) -> usize {
    let n = ugm.tokens.len();
    let norm = ugm.normalizer;
    set("model", MetaValue::String("t5".into()));
    set("pre", MetaValue::String("default".into()));
    set("tokens", MetaValue::Array(MetaArray::String(ugm.tokens)));
    set("scores", MetaValue::Array(MetaArray::F32(ugm.scores)));
    set("token_type", MetaValue::Array(MetaArray::I32(ugm.kinds)));
    set("add_space_prefix", MetaValue::Bool(norm.add_space_prefix));
    set(
        "remove_extra_whitespaces",
        MetaValue::Bool(norm.remove_extra_whitespaces),
    );
    if !norm.charsmap.is_empty() {
        set(
            "precompiled_charsmap",
            MetaValue::Array(MetaArray::U8(norm.charsmap)),
        );
    }
    n
}

/// tokenizer.json's added tokens: (id, content, special).
fn added_tokens(tokenizer: Option<&Map<String, Value>>) -> Vec<(u32, String, bool)> {
    let list = tokenizer
        .and_then(|t| t.get("added_tokens"))
        .and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .filter_map(|t| {
            let id = u32::try_from(t.get("id")?.as_u64()?).ok()?;
            let content = t.get("content")?.as_str()?.to_string();
            let special = t.get("special").and_then(Value::as_bool).unwrap_or(false);
            Some((id, content, special))
        })
        .collect()
}

/// Added tokens that the tokenizer does not mark special but that are control tokens in
/// practice (llama.cpp's list: chat markers, Gemma's unused slots).
fn looks_special(token: &str) -> bool {
    matches!(token, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (token.starts_with("<|") && token.ends_with("|>"))
        || (token.starts_with("<｜") && token.ends_with("｜>"))
        || (token.starts_with("<unused") && token.ends_with('>'))
}

type SpmVocab = (Vec<String>, Vec<f32>, Vec<i32>);

fn sentencepiece_vocab(
    dir: &Path,
    model: &SentencePieceModel,
    config: &Config,
    tokenizer_config: Option<&Map<String, Value>>,
    added: &[(u32, String, bool)],
    n_vocab: usize,
) -> Result<SpmVocab> {
    let (mut tokens, mut scores, mut kinds) = model.padded(n_vocab, |kind| kind);
    let n = tokens.len();
    let mut put = |id: usize, text: String, kind: i32| {
        if id < n {
            tokens[id] = text;
            scores[id] = -1000.0;
            kinds[id] = kind;
        }
    };
    if let Some(extra) = read_json(&dir.join("added_tokens.json"))? {
        for (text, id) in extra {
            if let Some(id) = id.as_u64() {
                put(id as usize, text, sentencepiece::USER_DEFINED);
            }
        }
    }
    let phi3 = config.family.hf.added_tokens_from_tokenizer_json;
    let decoder = tokenizer_config
        .and_then(|c| c.get("added_tokens_decoder"))
        .and_then(Value::as_object);
    for (id, data) in decoder.into_iter().flatten() {
        let (Ok(id), Some(text)) = (
            id.parse::<usize>(),
            data.get("content").and_then(Value::as_str),
        ) else {
            continue;
        };
        let special = data
            .get("special")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if special || (!phi3 && looks_special(text)) {
            put(id, text.to_string(), sentencepiece::CONTROL);
        } else if phi3 {
            put(id, text.to_string(), sentencepiece::USER_DEFINED);
        } else {
            // User-defined pieces are matched before normalization: spaces, not "▁".
            put(
                id,
                text.replace('\u{2581}', " "),
                sentencepiece::USER_DEFINED,
            );
        }
    }
    if phi3 {
        for (id, text, special) in added {
            let kind = if *special {
                sentencepiece::CONTROL
            } else {
                sentencepiece::USER_DEFINED
            };
            put(*id as usize, text.clone(), kind);
        }
    }
    Ok((tokens, scores, kinds))
}

struct ByteLevelVocab {
    tokens: Vec<String>,
    kinds: Vec<i32>,
    merges: Vec<String>,
    pre: &'static str,
}

fn byte_level_vocab(
    source: &str,
    tokenizer: &Map<String, Value>,
    added: &[(u32, String, bool)],
    n_vocab: usize,
) -> Result<ByteLevelVocab> {
    let bad = |reason: String| Error::tokenizer(source, reason);
    let model = tokenizer
        .get("model")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no `model`".into()))?;
    let kind = model.get("type").and_then(Value::as_str).unwrap_or("?");
    if kind != "BPE" {
        return Err(bad(format!(
            "a {kind} model; Hearth converts BPE, WordPiece and Unigram tokenizers (or \
             SentencePiece from tokenizer.model)"
        )));
    }
    let (by_id, n) = tokens_by_id(source, model, added, n_vocab)?;
    let mut tokens = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    for i in 0..n as u32 {
        let (token, kind) = match by_id.get(&i) {
            None => (format!("[PAD{i}]"), sentencepiece::UNUSED),
            Some((t, None)) => (t.to_string(), sentencepiece::NORMAL),
            Some((t, Some(special))) if *special || looks_special(t) => {
                (t.to_string(), sentencepiece::CONTROL)
            }
            Some((t, Some(_))) => (t.replace('\u{2581}', " "), sentencepiece::USER_DEFINED),
        };
        tokens.push(token);
        kinds.push(kind);
    }
    // Merges are "a b" strings, or (since transformers 4.45) pairs, whose spaces GGUF spells
    // as 'Ġ' (U+0120) so that one space still separates the pair.
    let merges = match model.get("merges").and_then(Value::as_array) {
        None => Vec::new(),
        Some(list) => list
            .iter()
            .map(|m| match m {
                Value::String(s) => Some(s.clone()),
                Value::Array(pair) if pair.len() == 2 => {
                    let part = |v: &Value| v.as_str().map(|s| s.replace(' ', "\u{120}"));
                    Some(format!("{} {}", part(&pair[0])?, part(&pair[1])?))
                }
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("`model.merges` holds something other than merges".into()))?,
    };
    let ignore_merges = model
        .get("ignore_merges")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let pre =
        pre_tokenizer_name(tokenizer.get("pre_tokenizer"), ignore_merges).ok_or_else(|| {
            bad(format!(
                "its pre-tokenizer is none Hearth implements (Llama 3's, Qwen2's, o200k's, \
                 GPT-2's or SmolLM's): {}",
                tokenizer.get("pre_tokenizer").unwrap_or(&Value::Null)
            ))
        })?;
    Ok(ByteLevelVocab {
        tokens,
        kinds,
        merges,
        pre,
    })
}

/// llama.cpp's name for a byte-level pre-tokenizer (`tokenizer.ggml.pre`).
fn pre_tokenizer_name(pre: Option<&Value>, ignore_merges: bool) -> Option<&'static str> {
    let pre = pre?;
    let steps: Vec<&Value> = match pre.get("type").and_then(Value::as_str)? {
        "Sequence" => pre.get("pretokenizers")?.as_array()?.iter().collect(),
        _ => vec![pre],
    };
    fn kind(v: &Value) -> &str {
        v.get("type").and_then(Value::as_str).unwrap_or("")
    }
    let byte_level_regex = |v: &Value| v.get("use_regex").and_then(Value::as_bool).unwrap_or(true);
    match steps.as_slice() {
        [b] if kind(b) == "ByteLevel" && byte_level_regex(b) => Some("gpt-2"),
        [d, b] if kind(d) == "Digits" && kind(b) == "ByteLevel" && byte_level_regex(b) => {
            Some("smollm")
        }
        [s, b] if kind(s) == "Split" && kind(b) == "ByteLevel" && !byte_level_regex(b) => {
            match s.get("pattern")?.get("Regex")?.as_str()? {
                LLAMA3_SPLIT if ignore_merges => Some("llama-bpe"),
                LLAMA3_SPLIT => Some("smaug-bpe"),
                QWEN2_SPLIT => Some("qwen2"),
                O200K_SPLIT => Some("gpt-4o"),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The text tokenizer_config.json gives the special token `name` (`bos` for `bos_token`).
fn special_content(config: Option<&Map<String, Value>>, name: &str) -> Option<String> {
    token_content(config?.get(&format!("{name}_token"))?)
}

/// A token as tokenizer_config.json writes one: its text, or an object with its `content`.
fn token_content(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => Some(o.get("content")?.as_str()?.to_string()),
        _ => None,
    }
}

/// Every text tokenizer_config.json names as a special token: the named ones (`bos_token`
/// and the like) and the extra ones (`additional_special_tokens`, `extra_special_tokens`):
/// transformers' `all_special_tokens`.
fn special_texts(config: Option<&Map<String, Value>>) -> Vec<String> {
    let named = SPECIAL
        .iter()
        .filter_map(|(name, _)| special_content(config, name));
    let extra = ["additional_special_tokens", "extra_special_tokens"]
        .iter()
        .filter_map(|key| config?.get(*key)?.as_array())
        .flatten()
        .filter_map(token_content);
    named.chain(extra).collect()
}

fn config_token_id(config: &Config, name: &str) -> Option<u32> {
    config
        .u64(&format!("{name}_token_id"))
        .ok()
        .flatten()
        .and_then(|id| u32::try_from(id).ok())
}

/// Special-token ids and which are added to every text.
struct Specials {
    ids: HashMap<&'static str, u32>,
    add: Vec<(&'static str, bool)>,
}

impl Specials {
    fn find(
        tokenizer: Option<&Map<String, Value>>,
        config: Option<&Map<String, Value>>,
        added: &[(u32, String, bool)],
    ) -> Self {
        let content = |name: &str| special_content(config, name);
        let mut ids = HashMap::new();
        for (name, _) in SPECIAL {
            let id = content(name)
                .and_then(|c| added.iter().find(|(_, t, _)| *t == c).map(|(id, ..)| *id));
            if let Some(id) = id {
                ids.insert(name, id);
            }
        }
        let mut add: Vec<(&'static str, bool)> = Vec::new();
        let processor = tokenizer.and_then(|t| t.get("post_processor"));
        let processors: Vec<&Value> = match processor {
            Some(p) => match p.get("processors").and_then(Value::as_array) {
                Some(list) => list.iter().collect(),
                None => vec![p],
            },
            None => Vec::new(),
        };
        let (bos, eos) = (content("bos"), content("eos"));
        let special_id = |v: &Value| -> Option<String> {
            Some(v.get("SpecialToken")?.get("id")?.as_str()?.to_string())
        };
        for p in processors {
            match p.get("type").and_then(Value::as_str) {
                Some("ByteLevel") => {
                    set_default(&mut add, "bos", false);
                    set_default(&mut add, "eos", false);
                }
                // <s> text </s>, and </s></s> between a pair's texts (gguf-py's reading).
                Some("RobertaProcessing") => {
                    set(&mut add, "bos", true);
                    set(&mut add, "eos", true);
                    set(&mut add, "sep", true);
                }
                Some("TemplateProcessing") => {
                    let list = |k: &str| p.get(k).and_then(Value::as_array).cloned();
                    let single = list("single").unwrap_or_default();
                    if single.len() > 1 {
                        let first = special_id(&single[0]);
                        if let Some(first) = &first {
                            set(&mut add, "bos", Some(first) == bos.as_ref());
                        }
                        let last = special_id(&single[single.len() - 1]);
                        if let Some(last) = &last {
                            set(&mut add, "eos", Some(last) == eos.as_ref());
                        }
                        let pair = list("pair").unwrap_or_default();
                        let ends = [first.as_deref(), last.as_deref()];
                        let enders = [content("sep"), eos.clone()];
                        if let Some(sep) = pair_separator(&pair, ends, &enders) {
                            set(&mut add, "sep", sep);
                        }
                    }
                }
                _ => {}
            }
        }
        for name in ["bos", "eos", "sep"] {
            if let Some(flag) = config.and_then(|c| c.get(&format!("add_{name}_token"))) {
                if let Some(flag) = flag.as_bool() {
                    set_default(&mut add, name, flag);
                }
            }
        }
        Specials { ids, add }
    }
}

/// Whether a pair template adds a separator of its own between its sequences, read as
/// gguf-py reads it: past the single template's first and last special tokens, `A`, one or
/// two special tokens, `B`; the first counts only where the single template ends in no
/// special token (else it is that one, EOS after A), the second always. `None` where the
/// template is not of that shape. `enders`: the separator's and EOS's text.
fn pair_separator(
    pair: &[Value],
    [first, last]: [Option<&str>; 2],
    enders: &[Option<String>; 2],
) -> Option<bool> {
    fn special(v: &Value) -> Option<&str> {
        v.get("SpecialToken")?.get("id")?.as_str()
    }
    fn sequence(v: &Value) -> Option<&str> {
        v.get("Sequence")?.get("id")?.as_str()
    }
    let start = usize::from(first.is_some() && pair.first().and_then(special) == first);
    let stop = pair.len() - usize::from(last.is_some() && pair.last().and_then(special) == last);
    let inner = pair.get(start..stop)?;
    if inner.len() < 3
        || sequence(&inner[0]) != Some("A")
        || sequence(&inner[inner.len() - 1]) != Some("B")
    {
        return None;
    }
    let middle = &inner[1..inner.len() - 1];
    let ends_text =
        |v: &Value| special(v).is_some_and(|id| enders.iter().any(|e| e.as_deref() == Some(id)));
    Some((ends_text(&middle[0]) && last.is_none()) || (middle.len() == 2 && ends_text(&middle[1])))
}

fn set(add: &mut Vec<(&'static str, bool)>, name: &'static str, value: bool) {
    match add.iter_mut().find(|(n, _)| *n == name) {
        Some(entry) => entry.1 = value,
        None => add.push((name, value)),
    }
}

fn set_default(add: &mut Vec<(&'static str, bool)>, name: &'static str, value: bool) {
    if !add.iter().any(|(n, _)| *n == name) {
        add.push((name, value));
    }
}

/// tokenizer_config.json's `chat_template`, else `chat_template.jinja`, else
/// `chat_template.json`'s.
fn chat_template(dir: &Path, config: Option<&Map<String, Value>>) -> Result<Option<String>> {
    if let Some(t) = config
        .and_then(|c| c.get("chat_template"))
        .and_then(Value::as_str)
    {
        return Ok(Some(t.to_string()));
    }
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja)
            .map(Some)
            .map_err(|e| Error::io(&jinja, e));
    }
    Ok(read_json(&dir.join("chat_template.json"))?
        .and_then(|j| j.get("chat_template")?.as_str().map(str::to_string)))
}
