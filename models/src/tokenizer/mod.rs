//! Tokenizers stored in GGUF metadata (`tokenizer.ggml.*`): byte-level BPE (`gpt2`),
//! SentencePiece BPE (`llama`), BPE over characters by merge rank (`gemma4`), SentencePiece
//! Unigram (`t5`) and WordPiece (`bert`), with
//! special tokens matched before the model; streaming detokenization ([`StreamDecoder`]); and
//! Hugging Face `tokenizer.json` files ([`HfTokenizer`], e.g. WordPiece for BERT-style
//! embedding models).

mod bpe;
mod bytelevel;
mod charsmap;
mod hf;
mod pretok;
mod special;
mod spm;
mod stream;
mod ugm;
mod wpm;

use std::any::Any;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

pub use hf::{HfEncoding, HfTokenizer};
pub use special::SpecialTokens;
pub use stream::StreamDecoder;

use self::bpe::{BpeModel, CharBpeModel};
use self::bytelevel::ByteLevel;
use self::charsmap::Charsmap;
use self::special::{Fragment, SpecialMatcher};
use self::spm::{SpmModel, SPACE_MARK};
use self::ugm::UgmModel;
use self::wpm::WpmModel;
use crate::error::{Error, Result};
use crate::gguf::{GgufFile, MetaArray};

/// GGUF token types (`tokenizer.ggml.token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    Normal,
    Unknown,
    /// BOS, EOS, chat markers: matched in text only when parsing specials, never spelled.
    Control,
    /// Added tokens matched in text before BPE (and output verbatim).
    UserDefined,
    Unused,
    /// `<0xXX>` byte-fallback tokens of SentencePiece vocabularies.
    Byte,
}

impl TokenType {
    fn from_gguf(v: i32) -> Self {
        match v {
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            // 1 is normal; 0 ("undefined") and unknown values are treated as normal.
            _ => TokenType::Normal,
        }
    }

    /// Tokens matched as whole strings before BPE and printed verbatim.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            TokenType::Control | TokenType::UserDefined | TokenType::Unknown
        )
    }

    /// Markup, not text: control tokens and the unknown token, which the text a model writes
    /// leaves out. A user-defined token (`<tool_call>`, `<think>`) is text the model wrote and
    /// stays in it, as llama.cpp and transformers keep it.
    pub fn is_markup(self) -> bool {
        matches!(self, TokenType::Control | TokenType::Unknown)
    }
}

/// Which algorithm the vocabulary uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// GPT-2 style byte-level BPE (`gpt2`).
    ByteLevelBpe,
    /// SentencePiece BPE with byte fallback (`llama`).
    SentencePieceBpe,
    /// BPE by merge rank over characters, spaces spelled `▁`, with byte fallback (`gemma4`:
    /// Gemma 4's vocabulary).
    CharBpe,
    /// SentencePiece Unigram (`t5`: T5, mT5, XLM-RoBERTa).
    Unigram,
    /// BERT's WordPiece (`bert`).
    WordPiece,
}

/// How to encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Add BOS/EOS as the model's `add_bos_token`/`add_eos_token` ask.
    pub add_special: bool,
    /// Match control tokens (`<|im_start|>`, `<s>`) in the text. User-defined tokens are
    /// always matched. Turn this off for untrusted user text inside a rendered prompt.
    pub parse_special: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            add_special: true,
            parse_special: true,
        }
    }
}

enum Model {
    Bpe(BpeModel),
    CharBpe(CharBpeModel),
    Spm(SpmModel),
    Ugm(UgmModel),
    Wpm(WpmModel),
}

/// A tokenizer built from GGUF metadata.
pub struct Tokenizer {
    /// The file it came from, for messages.
    source: String,
    model: Model,
    pre: Option<String>,
    pieces: Vec<String>,
    types: Vec<TokenType>,
    ids: HashMap<String, u32>,
    /// What each token decodes to.
    bytes: Vec<Box<[u8]>>,
    special: SpecialTokens,
    /// Tokens that end generation (EOS, EOT and the chat markers that play their role).
    end_of_generation: Vec<u32>,
    all_specials: Option<SpecialMatcher>,
    user_defined: Option<SpecialMatcher>,
    /// Decoding drops the space that starts the text and follows each special token (the
    /// space prefix SentencePiece's encoders add).
    strips_space_prefix: bool,
    /// What crates above build once from this vocabulary and keep beside it (the engine's
    /// index for grammars), one value per type, built on first use: see [`Tokenizer::derived`].
    derived: Mutex<Vec<Arc<dyn Any + Send + Sync>>>,
}

/// Control-token texts that end a turn in common chat formats; llama.cpp treats them as
/// end-of-generation too, since many files only name one of them as EOS.
const EOG_TEXTS: &[&str] = &[
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|end_of_text|>",
    "</s>",
    // Gemma 4's end of turn, and the marker after which its tool answers.
    "<turn|>",
    "<|tool_response>",
];

impl Tokenizer {
    /// Builds the tokenizer described by the file's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let path = file.path();
        let source = path.display().to_string();
        let model_key = "tokenizer.ggml.model";
        let model_name: &str = file.require(model_key)?;
        let kind = match model_name {
            "gpt2" => TokenizerKind::ByteLevelBpe,
            "llama" => TokenizerKind::SentencePieceBpe,
            "gemma4" => TokenizerKind::CharBpe,
            "t5" => TokenizerKind::Unigram,
            "bert" => TokenizerKind::WordPiece,
            other => {
                return Err(Error::metadata(
                    path,
                    model_key,
                    format!(
                        "tokenizer model `{other}` is not supported (gpt2, llama, gemma4, t5 \
                         and bert are)"
                    ),
                ))
            }
        };
        let pieces: Vec<String> = file.require::<&[String]>("tokenizer.ggml.tokens")?.to_vec();
        let n = pieces.len();
        if n == 0 || u32::try_from(n).is_err() {
            return Err(Error::metadata(
                path,
                "tokenizer.ggml.tokens",
                format!("{n} tokens is not a usable vocabulary"),
            ));
        }
        let check_len = |key: &str, len: usize| {
            if len == n {
                Ok(())
            } else {
                Err(Error::metadata(
                    path,
                    key,
                    format!("{len} entries for {n} tokens"),
                ))
            }
        };
        let mut types: Vec<TokenType> = match file.get::<&[i32]>("tokenizer.ggml.token_type")? {
            Some(t) => {
                check_len("tokenizer.ggml.token_type", t.len())?;
                t.iter().map(|&v| TokenType::from_gguf(v)).collect()
            }
            None => vec![TokenType::Normal; n],
        };
        // Later duplicates win, as in llama.cpp and Hugging Face.
        let ids: HashMap<String, u32> = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), i as u32))
            .collect();

        let id_key = |key: &str| -> Result<Option<u32>> {
            match file.get::<u32>(key)? {
                Some(id) if id as usize >= n => Err(Error::metadata(
                    path,
                    key,
                    format!("token id {id} is outside the vocabulary of {n}"),
                )),
                id => Ok(id),
            }
        };
        let spm = kind == TokenizerKind::SentencePieceBpe;
        let ugm = kind == TokenizerKind::Unigram;
        // Defaults follow llama.cpp: SentencePiece files predate these keys, and T5's
        // converter leaves T5's ids (pad 0, eos 1, unk 2) to them.
        let [bos, eos, unk, pad] = match kind {
            TokenizerKind::SentencePieceBpe => [Some(1), Some(2), Some(0), None],
            TokenizerKind::Unigram => [None, Some(1), Some(2), Some(0)],
            _ => [None; 4],
        };
        let default_id = |id: Option<u32>| id.filter(|&id| (id as usize) < n);
        let wpm = kind == TokenizerKind::WordPiece;
        let named = |piece: &str| ids.get(piece).copied().filter(|_| wpm);
        let special = match wpm {
            // [CLS] text [SEP], as llama.cpp and transformers frame every WordPiece input.
            true => SpecialTokens {
                bos: id_key("tokenizer.ggml.cls_token_id")?
                    .or(id_key("tokenizer.ggml.bos_token_id")?)
                    .or(named("[CLS]")),
                eos: id_key("tokenizer.ggml.seperator_token_id")?
                    .or(id_key("tokenizer.ggml.eos_token_id")?)
                    .or(named("[SEP]")),
                eot: None,
                unk: id_key("tokenizer.ggml.unknown_token_id")?.or(named("[UNK]")),
                pad: id_key("tokenizer.ggml.padding_token_id")?,
                add_bos: true,
                add_eos: true,
                add_space_prefix: false,
            },
            false => SpecialTokens {
                bos: id_key("tokenizer.ggml.bos_token_id")?.or(default_id(bos)),
                eos: id_key("tokenizer.ggml.eos_token_id")?.or(default_id(eos)),
                eot: id_key("tokenizer.ggml.eot_token_id")?,
                unk: id_key("tokenizer.ggml.unknown_token_id")?.or(default_id(unk)),
                pad: id_key("tokenizer.ggml.padding_token_id")?.or(default_id(pad)),
                // llama.cpp adds BOS to every `gemma4` text, whatever the file says (Gemma 4
                // is trained with it).
                add_bos: file.get("tokenizer.ggml.add_bos_token")?.unwrap_or(spm)
                    || kind == TokenizerKind::CharBpe,
                add_eos: file.get("tokenizer.ggml.add_eos_token")?.unwrap_or(ugm),
                add_space_prefix: file
                    .get("tokenizer.ggml.add_space_prefix")?
                    .unwrap_or(spm || ugm),
            },
        };

        // An end-of-turn marker is markup even where the file types it user-defined (older
        // conversions do), as llama.cpp overrides it: never shown, always an end.
        let mut end_of_generation: Vec<u32> = special.eos.into_iter().chain(special.eot).collect();
        for text in EOG_TEXTS {
            if let Some(&id) = ids.get(*text) {
                let kind = &mut types[id as usize];
                if kind.is_special() && !end_of_generation.contains(&id) {
                    *kind = TokenType::Control;
                    end_of_generation.push(id);
                }
            }
        }

        // A merge list entry `i` that BPE cannot read.
        let bad_merge = |merges: &[String], i: usize| {
            Error::metadata(
                path,
                "tokenizer.ggml.merges",
                format!(
                    "entry {i} ({:?}) is not two tokens separated by a space",
                    merges[i]
                ),
            )
        };
        let pre: Option<String> = file.get::<&str>("tokenizer.ggml.pre")?.map(String::from);
        // As llama.cpp: files without the key keep whitespace as it is.
        let remove_extra_whitespaces = ugm
            && file
                .get("tokenizer.ggml.remove_extra_whitespaces")?
                .unwrap_or(false);
        let model = match kind {
            TokenizerKind::ByteLevelBpe => {
                let pre_tok = pretok::PreTokenizer::named(pre.as_deref()).ok_or_else(|| {
                    Error::metadata(
                        path,
                        "tokenizer.ggml.pre",
                        format!(
                            "pre-tokenizer `{}` is not supported (supported: {})",
                            pre.as_deref().unwrap_or_default(),
                            pretok::SUPPORTED.join(", ")
                        ),
                    )
                })?;
                let merges: &[String] = file.require("tokenizer.ggml.merges")?;
                let bpe = BpeModel::new(&ids, merges, pre_tok).map_err(|i| bad_merge(merges, i))?;
                Model::Bpe(bpe)
            }
            TokenizerKind::CharBpe => {
                let merges: &[String] = file.require("tokenizer.ggml.merges")?;
                let bpe = CharBpeModel::new(&ids, merges).map_err(|i| bad_merge(merges, i))?;
                Model::CharBpe(bpe)
            }
            TokenizerKind::SentencePieceBpe => {
                let scores = match file.get::<&[f32]>("tokenizer.ggml.scores")? {
                    Some(s) => {
                        check_len("tokenizer.ggml.scores", s.len())?;
                        s.to_vec()
                    }
                    None => vec![0.0; n],
                };
                Model::Spm(SpmModel::new(&ids, scores))
            }
            TokenizerKind::Unigram => {
                let scores_key = "tokenizer.ggml.scores";
                let scores: &[f32] = file.require(scores_key)?;
                check_len(scores_key, scores.len())?;
                let unk_key = "tokenizer.ggml.unknown_token_id";
                let unk = special.unk.ok_or_else(|| {
                    Error::metadata(
                        path,
                        unk_key,
                        format!("missing, and the {n} tokens have no id 2 (T5's)"),
                    )
                })?;
                let charsmap_key = "tokenizer.ggml.precompiled_charsmap";
                let charsmap = match file.get::<&MetaArray>(charsmap_key)? {
                    None => None,
                    Some(MetaArray::U8(b)) if b.is_empty() => None,
                    Some(MetaArray::U8(b)) => Some(Charsmap::parse(b)),
                    // llama.cpp reads i8 as well.
                    Some(MetaArray::I8(b)) => {
                        let b: Vec<u8> = b.iter().map(|&v| v as u8).collect();
                        (!b.is_empty()).then(|| Charsmap::parse(&b))
                    }
                    Some(other) => Some(Err(format!(
                        "expected an array of u8, found an array of {}",
                        other.elem_type().name()
                    ))),
                }
                .transpose()
                .map_err(|e| Error::metadata(path, charsmap_key, e))?;
                let ugm = UgmModel::new(
                    &pieces,
                    &types,
                    scores,
                    unk,
                    charsmap,
                    remove_extra_whitespaces,
                )
                .map_err(|e| Error::metadata(path, unk_key, e))?;
                Model::Ugm(ugm)
            }
            TokenizerKind::WordPiece => {
                let unk = special
                    .unk
                    .map_or("[UNK]", |id| pieces[id as usize].as_str());
                // llama.cpp's files say whether the model is cased; older ones are uncased.
                let lowercase = file
                    .get::<bool>("tokenizer.ggml.normalizer.lowercase")?
                    .unwrap_or(true);
                let wpm = WpmModel::new(&pieces, &types, unk, lowercase)
                    .map_err(|e| Error::metadata(path, "tokenizer.ggml.tokens", e))?;
                Model::Wpm(wpm)
            }
        };

        // SentencePiece's decoder drops the space prefix where its normalizer adds one, or
        // where it trims the text's ends.
        let strips_space_prefix =
            ((spm || ugm) && special.add_space_prefix) || remove_extra_whitespaces;
        let bytes = token_bytes(kind, &pieces, &types);
        let specials = |only_user_defined: bool| {
            SpecialMatcher::new(
                pieces
                    .iter()
                    .zip(&types)
                    .enumerate()
                    .filter(|(_, (_, t))| {
                        t.is_special() && (!only_user_defined || **t == TokenType::UserDefined)
                    })
                    .map(|(i, (p, _))| (p.clone(), i as u32)),
            )
        };
        Ok(Tokenizer {
            source,
            model,
            pre,
            all_specials: specials(false),
            user_defined: specials(true),
            strips_space_prefix,
            pieces,
            types,
            ids,
            bytes,
            special,
            end_of_generation,
            derived: Mutex::new(Vec::new()),
        })
    }

    /// The value of type `T` derived from this tokenizer: built by `build` on the first call
    /// and shared by every later one, so that what only some requests need (an index of the
    /// vocabulary for constrained output) costs nothing until one asks. A failed build is not
    /// kept. Concurrent first calls wait for one build.
    pub fn derived<T, E>(
        &self,
        build: impl FnOnce(&Self) -> std::result::Result<T, E>,
    ) -> std::result::Result<Arc<T>, E>
    where
        T: Any + Send + Sync,
    {
        // A panic in another caller's build leaves the list as it was: still usable.
        let mut derived = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = derived.iter().find_map(|d| d.clone().downcast::<T>().ok()) {
            return Ok(found);
        }
        let value = Arc::new(build(self)?);
        derived.push(value.clone());
        Ok(value)
    }

    /// Encodes `text` with the default options: BOS/EOS as the model asks, special tokens
    /// in the text recognised.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.encode_with(text, EncodeOptions::default())
    }

    pub fn encode_with(&self, text: &str, opts: EncodeOptions) -> Vec<u32> {
        let mut fragments = Vec::new();
        let matcher = if opts.parse_special {
            &self.all_specials
        } else {
            &self.user_defined
        };
        match matcher {
            Some(m) => m.split(text, &mut fragments),
            None if text.is_empty() => {}
            None => fragments.push(Fragment::Text(text)),
        }
        self.encode_fragments(fragments, opts.add_special)
    }

    /// Encodes a rendered prompt whose control tokens are matched (the template's markup),
    /// except those whose text overlaps a span of `literal` (text a message brought): that
    /// text is spelled out as ordinary tokens. No BOS or EOS is added.
    pub fn encode_with_literals(&self, text: &str, literal: &[Range<usize>]) -> Vec<u32> {
        let mut fragments = Vec::new();
        let overlaps = |span: &Range<usize>| {
            literal
                .iter()
                .any(|l| l.start < span.end && span.start < l.end)
        };
        match &self.all_specials {
            Some(m) => m.split_where(
                text,
                |id, span| self.token_type(id) == Some(TokenType::UserDefined) || !overlaps(&span),
                &mut fragments,
            ),
            None if text.is_empty() => {}
            None => fragments.push(Fragment::Text(text)),
        }
        self.encode_fragments(fragments, false)
    }

    /// Where `text` holds the text of a control token (`<|im_end|>`, `<s>`): what
    /// [`encode`](Self::encode) would turn into that token. User-defined tokens are not
    /// listed: they are matched in any text.
    pub fn control_texts(&self, text: &str) -> Vec<Range<usize>> {
        let Some(m) = &self.all_specials else {
            return Vec::new();
        };
        m.find(text)
            .into_iter()
            .filter(|(id, _)| self.token_type(*id) != Some(TokenType::UserDefined))
            .map(|(_, span)| span)
            .collect()
    }

    fn encode_fragments(&self, fragments: Vec<Fragment<'_>>, add_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        if add_special && self.special.add_bos {
            out.extend(self.special.bos);
        }
        // SentencePiece models get a space before text at the start and after each special
        // token, as llama.cpp does; decoding removes it again.
        let mut after_special = true;
        let mut escaped = String::new();
        for fragment in fragments {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(t) => {
                    match &self.model {
                        Model::Bpe(bpe) => bpe.encode(t, self.special.unk, &mut out),
                        Model::CharBpe(bpe) => bpe.encode(t, &mut out),
                        Model::Spm(spm) => {
                            escaped.clear();
                            if self.special.add_space_prefix && after_special {
                                escaped.push(SPACE_MARK);
                            }
                            escaped
                                .extend(t.chars().map(|c| if c == ' ' { SPACE_MARK } else { c }));
                            spm.encode(&escaped, &self.ids, self.special.unk, &mut out);
                        }
                        Model::Ugm(ugm) => {
                            ugm.encode(t, self.special.add_space_prefix && after_special, &mut out)
                        }
                        Model::Wpm(wpm) => wpm.encode(t, &mut out),
                    }
                    after_special = false;
                }
            }
        }
        if add_special && self.special.add_eos {
            out.extend(self.special.eos);
        }
        out
    }

    /// Decodes ids to text. Markup tokens ([`TokenType::is_markup`]) appear as their text
    /// unless `skip_special`; invalid UTF-8 (a sequence cut short) and ids outside the vocabulary become U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut stream = StreamDecoder::new(skip_special);
        let mut text = String::new();
        for &id in ids {
            text.push_str(&stream.push(self, id));
        }
        text.push_str(&stream.finish());
        text
    }

    /// A fresh streaming decoder; see [`StreamDecoder`].
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder {
        StreamDecoder::new(skip_special)
    }

    /// The bytes token `id` decodes to (SentencePiece space prefixes not removed).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.bytes.get(id as usize).map(|b| &b[..])
    }

    /// Token `id`'s text for display (like llama.cpp's token_to_piece): its bytes, with an
    /// incomplete UTF-8 sequence shown as U+FFFD.
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.token_bytes(id)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }

    /// Token `id` as the vocabulary spells it (`Ġworld`, `▁world`, `<0x0A>`).
    pub fn piece(&self, id: u32) -> Option<&str> {
        self.pieces.get(id as usize).map(String::as_str)
    }

    /// The id of a vocabulary entry, spelled as the vocabulary spells it.
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.ids.get(piece).copied()
    }

    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    pub fn kind(&self) -> TokenizerKind {
        match self.model {
            Model::Bpe(_) => TokenizerKind::ByteLevelBpe,
            Model::CharBpe(_) => TokenizerKind::CharBpe,
            Model::Spm(_) => TokenizerKind::SentencePieceBpe,
            Model::Ugm(_) => TokenizerKind::Unigram,
            Model::Wpm(_) => TokenizerKind::WordPiece,
        }
    }

    /// Whether decoding drops the space prefix at the start of the text and after each
    /// special token.
    pub(crate) fn strips_space_prefix(&self) -> bool {
        self.strips_space_prefix
    }

    /// `tokenizer.ggml.pre`, if the file names one.
    pub fn pre_tokenizer(&self) -> Option<&str> {
        self.pre.as_deref()
    }

    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// Ids that end generation: EOS, EOT, and control tokens such as `<|im_end|>`.
    pub fn end_of_generation(&self) -> &[u32] {
        &self.end_of_generation
    }

    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.end_of_generation.contains(&id)
    }

    /// The file the tokenizer came from.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// What every token decodes to: byte-level pieces through the GPT-2 alphabet, SentencePiece
/// and character-BPE pieces with `▁` as a space and `<0xXX>` as a byte, special tokens as
/// their own text.
fn token_bytes(kind: TokenizerKind, pieces: &[String], types: &[TokenType]) -> Vec<Box<[u8]>> {
    let byte_level = ByteLevel::new();
    pieces
        .iter()
        .zip(types)
        .map(|(p, &t)| {
            let bytes = match (kind, t) {
                (_, t) if t.is_special() => p.as_bytes().to_vec(),
                (TokenizerKind::ByteLevelBpe, _) => byte_level.decode(p),
                (
                    TokenizerKind::SentencePieceBpe
                    | TokenizerKind::CharBpe
                    | TokenizerKind::Unigram,
                    TokenType::Byte,
                ) => parse_byte_token(p)
                    .map(|b| vec![b])
                    .unwrap_or_else(|| p.as_bytes().to_vec()),
                (
                    TokenizerKind::SentencePieceBpe
                    | TokenizerKind::CharBpe
                    | TokenizerKind::Unigram,
                    _,
                ) => p.replace(SPACE_MARK, " ").into_bytes(),
                (TokenizerKind::WordPiece, _) => wpm::piece_bytes(p),
            };
            bytes.into_boxed_slice()
        })
        .collect()
}

/// `<0x0A>` -> 0x0A.
fn parse_byte_token(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x1>"), None);
        assert_eq!(parse_byte_token("0x10"), None);
    }
}
