//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`) on a small synthetic vocabulary whose
//! merge order can be worked out by hand.

mod common;

use common::{tiny_llama, Tiny};
use hearth_models::gguf::{GgufFile, MetaArray, MetaValue};
use hearth_models::tokenizer::{TokenType, TokenizerKind};
use hearth_models::{EncodeOptions, Tokenizer};

/// (piece, score, GGUF token type)
fn vocab() -> Vec<(String, f32, i32)> {
    let mut v = vec![
        ("<unk>".to_string(), 0.0, 2),
        ("<s>".to_string(), 0.0, 3),
        ("</s>".to_string(), 0.0, 3),
    ];
    v.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 0.0, 6)));
    // Single characters score low; merges score by the order they should happen in.
    for c in ["▁", "h", "e", "l", "o", "w", "r", "d"] {
        v.push((c.to_string(), -10.0, 1));
    }
    for (piece, score) in [
        ("ll", -1.0),
        ("or", -1.5),
        ("he", -2.0),
        ("ld", -2.5),
        ("hell", -3.0),
        ("hello", -4.0),
        ("▁hello", -5.0),
        ("▁w", -6.0),
        ("▁wor", -7.0),
        ("▁world", -8.0),
        ("<|user|>", 0.0),
    ] {
        v.push((piece.to_string(), score, 1));
    }
    // A user-defined token is matched in text even without special parsing.
    v.last_mut().unwrap().2 = 4;
    v
}

fn tokenizer(add_space_prefix: bool) -> Tokenizer {
    let vocab = vocab();
    let mut w = tiny_llama(&Tiny {
        vocab: vocab.iter().map(|v| v.0.clone()).collect(),
        ..Tiny::default()
    });
    w.set_metadata(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(vocab.iter().map(|v| v.1).collect())),
    );
    w.set_metadata(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(vocab.iter().map(|v| v.2).collect())),
    );
    w.set_metadata(
        "tokenizer.ggml.add_space_prefix",
        MetaValue::Bool(add_space_prefix),
    );
    let file = GgufFile::from_bytes("spm.gguf", w.to_bytes().unwrap()).unwrap();
    Tokenizer::from_gguf(&file).unwrap()
}

fn id(tok: &Tokenizer, piece: &str) -> u32 {
    tok.token_id(piece)
        .unwrap_or_else(|| panic!("{piece} not in vocab"))
}

const NO_BOS: EncodeOptions = EncodeOptions {
    add_special: false,
    parse_special: true,
};

#[test]
fn merges_follow_scores() {
    let tok = tokenizer(true);
    assert_eq!(tok.kind(), TokenizerKind::SentencePieceBpe);
    let s = tok.special();
    assert_eq!((s.bos, s.eos, s.unk), (Some(1), Some(2), Some(0)));
    assert!(s.add_bos && s.add_space_prefix);

    // ll, or, he, ld, hell, hello, ▁hello, ▁w, ▁wor, ▁world: two tokens.
    let expected = vec![1, id(&tok, "▁hello"), id(&tok, "▁world")];
    assert_eq!(tok.encode("hello world"), expected);
    assert_eq!(tok.decode(&expected, true), "hello world");
    assert_eq!(tok.decode(&expected, false), "<s>hello world");
    // Equal scores merge leftmost first.
    assert_eq!(
        tok.encode_with("lll", NO_BOS),
        vec![id(&tok, "▁"), id(&tok, "ll"), id(&tok, "l")]
    );
}

#[test]
fn missing_characters_fall_back_to_bytes() {
    let tok = tokenizer(true);
    let ids = tok.encode_with("hi☃", NO_BOS);
    let bytes: Vec<u32> = [0x69u8, 0xE2, 0x98, 0x83]
        .iter()
        .map(|b| id(&tok, &format!("<0x{b:02X}>")))
        .collect();
    let mut expected = vec![id(&tok, "▁"), id(&tok, "h")];
    expected.extend(bytes);
    assert_eq!(ids, expected);
    assert_eq!(tok.token_type(ids[2]), Some(TokenType::Byte));
    assert_eq!(tok.decode(&ids, false), "hi☃");

    let mut stream = tok.stream_decoder(false);
    let pieces: Vec<String> = ids.iter().map(|&i| stream.push(&tok, i)).collect();
    assert_eq!(pieces, ["", "h", "i", "", "", "☃"]);
}

#[test]
fn special_tokens_split_the_text_and_reset_the_space_prefix() {
    let tok = tokenizer(true);
    let ids = tok.encode_with("<s>hello</s>world<|user|>", NO_BOS);
    assert_eq!(
        ids,
        vec![
            1,
            id(&tok, "▁hello"),
            2,
            id(&tok, "▁world"),
            id(&tok, "<|user|>")
        ]
    );
    assert_eq!(tok.decode(&ids, false), "<s>hello</s>world<|user|>");
    // A user-defined token is text: only control tokens are left out.
    assert_eq!(tok.decode(&ids, true), "helloworld<|user|>");

    // Control tokens are only parsed on request; user-defined ones always.
    let plain = EncodeOptions {
        add_special: false,
        parse_special: false,
    };
    let ids = tok.encode_with("</s><|user|>", plain);
    assert!(!ids.contains(&2), "{ids:?}");
    assert_eq!(ids.last(), Some(&id(&tok, "<|user|>")));
    assert_eq!(tok.decode(&ids, false), "</s><|user|>");
}

#[test]
fn round_trips_without_a_space_prefix() {
    let tok = tokenizer(false);
    for text in ["hello world", " hello", "  world ", "", "wor\nld", "héllo"] {
        let ids = tok.encode_with(text, NO_BOS);
        assert_eq!(tok.decode(&ids, false), text, "{ids:?}");
    }
    assert_eq!(
        tok.encode_with("hello world", NO_BOS),
        vec![id(&tok, "hello"), id(&tok, "▁world")]
    );
    let tok = tokenizer(true);
    for text in ["hello world", " hello", "  world ", "", "wor\nld", "héllo"] {
        let ids = tok.encode(text);
        assert_eq!(tok.decode(&ids, true), text, "{ids:?}");
    }
}

#[test]
fn inconsistent_metadata_names_the_key() {
    let vocab = vocab();
    let mut w = tiny_llama(&Tiny {
        vocab: vocab.iter().map(|v| v.0.clone()).collect(),
        ..Tiny::default()
    });
    w.set_metadata(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(vec![0.0; 3])),
    );
    let file = GgufFile::from_bytes("spm.gguf", w.to_bytes().unwrap()).unwrap();
    let err = Tokenizer::from_gguf(&file).err().unwrap().to_string();
    assert!(
        err.contains("`tokenizer.ggml.scores`") && err.contains("3 entries"),
        "{err}"
    );

    w.set_metadata(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(vec![])),
    );
    w.set_metadata("tokenizer.ggml.bos_token_id", MetaValue::U32(100_000));
    let file = GgufFile::from_bytes("spm.gguf", w.to_bytes().unwrap()).unwrap();
    let err = Tokenizer::from_gguf(&file).err().unwrap().to_string();
    assert!(
        err.contains("spm.gguf") && err.contains("`tokenizer.ggml.bos_token_id`"),
        "{err}"
    );

    w.set_metadata("tokenizer.ggml.model", MetaValue::String("rwkv".into()));
    let file = GgufFile::from_bytes("spm.gguf", w.to_bytes().unwrap()).unwrap();
    let err = Tokenizer::from_gguf(&file).err().unwrap().to_string();
    assert!(
        err.contains("`tokenizer.ggml.model`") && err.contains("rwkv"),
        "{err}"
    );
}
