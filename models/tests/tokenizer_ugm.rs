//! SentencePiece Unigram (`tokenizer.ggml.model = "t5"`) against `sentencepiece` itself: two
//! small vocabularies its trainer made, written to GGUF as llama.cpp's T5 converter writes them,
//! with the ids it gives a set of texts and its decoded strings (fixtures/unigram/, made by
//! scripts/fixtures/make-unigram-tokenizer); and XLM-RoBERTa's vocabulary with its full NFKC
//! charsmap, from llama.cpp's source. Then files whose tokenizer keys are wrong.

use std::path::{Path, PathBuf};

use hearth_models::gguf::{GgufFile, GgufWriter, MetaArray, MetaValue};
use hearth_models::tokenizer::TokenizerKind;
use hearth_models::{EncodeOptions, Tokenizer};
use serde_json::Value;

/// What `sentencepiece.encode` does: no markup added, none parsed.
const PLAIN: EncodeOptions = EncodeOptions {
    add_special: false,
    parse_special: false,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/unigram")
        .join(name)
}

fn open(path: &Path) -> Tokenizer {
    let file = GgufFile::open(path).unwrap();
    Tokenizer::from_gguf(&file).unwrap()
}

/// One text of a fixture: the ids sentencepiece gives it and, where recorded, what
/// sentencepiece decodes them to and what transformers' T5 tokenizer gives instead.
struct Case {
    text: String,
    ids: Vec<u32>,
    decoded: Option<String>,
    transformers_ids: Option<Vec<u32>>,
}

fn cases(json: &str) -> Vec<Case> {
    let text = std::fs::read_to_string(fixture(json)).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect()
    };
    doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().unwrap().to_string(),
            ids: ids(&c["ids"]),
            decoded: c["decoded"].as_str().map(String::from),
            transformers_ids: c.get("transformers_ids").map(ids),
        })
        .collect()
}

/// Every text encodes to sentencepiece's ids, and ids without the unknown token decode to
/// what sentencepiece decodes them to, streamed or at once.
fn check(tok: &Tokenizer, cases: &[Case]) {
    let unk = tok.special().unk;
    let mut wrong = Vec::new();
    for case in cases {
        let got = tok.encode_with(&case.text, PLAIN);
        if got != case.ids {
            wrong.push(format!("{:?}: got {got:?}, want {:?}", case.text, case.ids));
        }
        let Some(decoded) = &case.decoded else {
            continue;
        };
        // sentencepiece spells the unknown token ` ⁇ `; Hearth keeps it as markup.
        if unk.is_some_and(|unk| case.ids.contains(&unk)) {
            continue;
        }
        let text = tok.decode(&case.ids, true);
        let mut stream = tok.stream_decoder(true);
        let mut streamed: String = case.ids.iter().map(|&i| stream.push(tok, i)).collect();
        streamed.push_str(&stream.finish());
        if text != *decoded || streamed != *decoded {
            wrong.push(format!(
                "{:?}: decoded {text:?}, streamed {streamed:?}, want {decoded:?}",
                case.text
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn t5_vocabulary_matches_sentencepiece() {
    let tok = open(&fixture("t5.gguf"));
    assert_eq!(tok.kind(), TokenizerKind::Unigram);
    check(&tok, &cases("t5.json"));
}

#[test]
fn byte_fallback_vocabulary_matches_sentencepiece() {
    let tok = open(&fixture("bytes.gguf"));
    check(&tok, &cases("bytes.json"));
}

#[test]
fn xlm_roberta_vocabulary_matches_sentencepiece() {
    let Some(path) = hearth_testkit::llama_cpp_vocab("nomic-bert-moe") else {
        return;
    };
    check(&open(&path), &cases("nomic_bert_moe.json"));
}

#[test]
fn markup_as_t5_frames_it() {
    let tok = open(&fixture("t5.gguf"));
    let s = tok.special();
    assert_eq!(
        (s.bos, s.eos, s.unk, s.pad),
        (None, Some(1), Some(2), Some(0))
    );
    assert!(s.add_eos && !s.add_bos && s.add_space_prefix);

    // T5 ends every input with </s>.
    let cases = cases("t5.json");
    let hello = cases.iter().find(|c| c.text == "Hello world").unwrap();
    let mut framed = hello.ids.clone();
    framed.push(1);
    assert_eq!(tok.encode("Hello world"), framed);
    assert_eq!(tok.decode(&framed, true), "Hello world");
    assert_eq!(tok.decode(&framed, false), "Hello world</s>");
    // The unused rows past the pieces (`[PAD{i}]`) spell nothing in generated text.
    let unused = (tok.vocab_size() - 1) as u32;
    assert_eq!(
        tok.token_type(unused),
        Some(hearth_models::tokenizer::TokenType::Unused)
    );
    let mut padded = hello.ids.clone();
    padded.push(unused);
    assert_eq!(tok.decode(&padded, true), "Hello world");

    // Parsing markup, Hearth reads `</s>` in text as transformers does.
    let parse = EncodeOptions {
        add_special: false,
        parse_special: true,
    };
    let markup = cases.iter().find(|c| c.text.starts_with("</s>")).unwrap();
    let want = markup.transformers_ids.as_ref().unwrap();
    assert_eq!(&tok.encode_with(&markup.text, parse), want);
    assert_eq!(want[..3], [1, 0, 2]);
}

/// The t5 fixture's metadata, to be spoiled.
fn t5_metadata() -> Vec<(String, MetaValue)> {
    let file = GgufFile::open(fixture("t5.gguf")).unwrap();
    file.metadata()
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// What loading the t5 fixture with `key` set to `value` (removed if `None`) says.
fn load_with(key: &str, value: Option<MetaValue>) -> hearth_models::Result<Tokenizer> {
    let mut w = GgufWriter::new();
    for (k, v) in t5_metadata() {
        w.set_metadata(k, v);
    }
    match value {
        Some(v) => w.set_metadata(key, v),
        None => {
            w.remove_metadata(key);
        }
    }
    let file = GgufFile::from_bytes("spoiled.gguf", w.to_bytes().unwrap()).unwrap();
    Tokenizer::from_gguf(&file)
}

#[track_caller]
fn refused(key: &str, value: Option<MetaValue>, fragments: &[&str]) {
    let err = load_with(key, value).err().expect("refused").to_string();
    for f in fragments {
        assert!(err.contains(f), "{err}");
    }
}

#[test]
fn scores_of_the_wrong_length_or_missing_are_refused() {
    let key = "tokenizer.ggml.scores";
    let short = MetaValue::Array(MetaArray::F32(vec![0.0; 10]));
    refused(
        key,
        Some(short),
        &["spoiled.gguf", "`tokenizer.ggml.scores`", "10 entries"],
    );
    refused(key, None, &["`tokenizer.ggml.scores`", "missing"]);
    let ints = MetaValue::Array(MetaArray::I32(vec![0; 808]));
    refused(key, Some(ints), &["`tokenizer.ggml.scores`", "f32"]);
}

#[test]
fn unknown_token_outside_the_vocabulary_is_refused() {
    let key = "tokenizer.ggml.unknown_token_id";
    refused(
        key,
        Some(MetaValue::U32(5000)),
        &[&format!("`{key}`"), "5000"],
    );
}

#[test]
fn charsmaps_that_do_not_parse_are_refused() {
    let key = "tokenizer.ggml.precompiled_charsmap";
    let named = format!("`{key}`");
    let bytes = |b: &[u8]| Some(MetaValue::Array(MetaArray::U8(b.to_vec())));
    refused(key, bytes(b"not a charsmap at all"), &[&named, "trie"]);
    refused(key, bytes(&[7, 0]), &[&named]);
    let strings = MetaValue::Array(MetaArray::String(vec!["a".into()]));
    refused(key, Some(strings), &[&named]);

    let Some((_, MetaValue::Array(MetaArray::U8(map)))) =
        t5_metadata().into_iter().find(|(k, _)| k == key)
    else {
        panic!("the fixture has a charsmap");
    };
    refused(key, bytes(&map[..map.len() / 2]), &[&named]);
    // Replacements cut short: the keys that point past the end have nothing to point at.
    refused(
        key,
        bytes(&map[..map.len() - 40]),
        &[&named, "no replacement"],
    );
    // Without the key the text is kept as it is: no NFKC.
    let plain = load_with(key, None).unwrap();
    let nfkc = open(&fixture("t5.gguf"));
    assert_ne!(plain.encode_with("ﬁ", PLAIN), nfkc.encode_with("ﬁ", PLAIN));
}

/// A charsmap whose trie is damaged anywhere is refused or works: never a panic.
#[test]
fn damaged_charsmaps_never_panic() {
    let key = "tokenizer.ggml.precompiled_charsmap";
    let Some((_, MetaValue::Array(MetaArray::U8(map)))) =
        t5_metadata().into_iter().find(|(k, _)| k == key)
    else {
        panic!("the fixture has a charsmap");
    };
    let texts: Vec<String> = cases("t5.json").into_iter().map(|c| c.text).collect();
    let trie_len = u32::from_le_bytes([map[0], map[1], map[2], map[3]]) as usize;
    let (mut refusals, mut loaded) = (0, 0);
    for i in (4..4 + trie_len).step_by(97) {
        for flip in [0x01u8, 0x80, 0xFF] {
            let mut spoiled = map.clone();
            spoiled[i] ^= flip;
            match load_with(key, Some(MetaValue::Array(MetaArray::U8(spoiled)))) {
                Err(e) => {
                    assert!(e.to_string().contains(key), "{e}");
                    refusals += 1;
                }
                Ok(tok) => {
                    for text in &texts {
                        tok.encode(text);
                    }
                    loaded += 1;
                }
            }
        }
    }
    assert!(
        refusals > 0 && loaded > 0,
        "{refusals} refused, {loaded} loaded"
    );
}
