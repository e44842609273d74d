//! The tokenizer: kind, vocabulary size and special tokens, as text and as JSON.
use std::fmt::Write as _;

use hearth_models::tokenizer::TokenizerKind;
use hearth_models::Tokenizer;
use serde_json::{json, Value};

pub(super) fn write_tokenizer(out: &mut String, t: &Tokenizer) -> std::fmt::Result {
    let kind = match t.kind() {
        TokenizerKind::ByteLevelBpe => "byte-level BPE (gpt2)",
        TokenizerKind::SentencePieceBpe => "SentencePiece BPE (llama)",
        TokenizerKind::CharBpe => "BPE over characters (gemma4)",
        TokenizerKind::Unigram => "SentencePiece Unigram (t5)",
        TokenizerKind::WordPiece => "WordPiece (bert)",
    };
    let pre = t
        .pre_tokenizer()
        .map(|p| format!(", pre-tokenizer `{p}`"))
        .unwrap_or_default();
    writeln!(out, "  model           {kind}{pre}")?;
    let n_special = (0..t.vocab_size() as u32)
        .filter(|&id| t.token_type(id).is_some_and(|ty| ty.is_special()))
        .count();
    writeln!(
        out,
        "  vocab           {} tokens ({n_special} special)",
        t.vocab_size()
    )?;
    let show = |id: Option<u32>| match id {
        Some(id) => format!("{id} {:?}", t.piece(id).unwrap_or("")),
        None => "-".to_string(),
    };
    let s = t.special();
    writeln!(
        out,
        "  special ids     bos {}, eos {}, unk {}, pad {}",
        show(s.bos),
        show(s.eos),
        show(s.unk),
        show(s.pad)
    )?;
    writeln!(
        out,
        "  flags           add_bos {}, add_eos {}, add_space_prefix {}",
        s.add_bos, s.add_eos, s.add_space_prefix
    )?;
    let eog: Vec<String> = t
        .end_of_generation()
        .iter()
        .map(|&id| show(Some(id)))
        .collect();
    writeln!(out, "  end of turn     {}", eog.join(", "))
}

pub(super) fn tokenizer_json(t: &Tokenizer) -> Value {
    let s = t.special();
    json!({
        "kind": match t.kind() {
            TokenizerKind::ByteLevelBpe => "gpt2",
            TokenizerKind::SentencePieceBpe => "llama",
            TokenizerKind::CharBpe => "gemma4",
            TokenizerKind::Unigram => "t5",
            TokenizerKind::WordPiece => "bert",
        },
        "pre": t.pre_tokenizer(),
        "vocab_size": t.vocab_size(),
        "bos": s.bos,
        "eos": s.eos,
        "unk": s.unk,
        "pad": s.pad,
        "add_bos": s.add_bos,
        "add_eos": s.add_eos,
        "add_space_prefix": s.add_space_prefix,
        "end_of_generation": t.end_of_generation(),
    })
}
