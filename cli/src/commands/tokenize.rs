//! `hearth tokenize`: the token ids and pieces of a text, like llama.cpp's llama-tokenize.
//! Works with GGUF models (their own tokenizer) and Hugging Face model directories
//! (tokenizer.json).

use std::fmt::Write as _;
use std::io::Read;

use anyhow::{Context, Result};
use hearth_models::{EncodeOptions, GgufFile, HfTokenizer, Tokenizer};
use serde_json::json;

use crate::model_args::ModelsDirArg;
use crate::output::emit;
use crate::output::Format;

#[derive(clap::Args)]
pub struct TokenizeArgs {
    /// Model: a path, or a name in the models directory (`smollm2-135m-instruct`).
    #[arg(short, long)]
    model: String,
    /// Text to tokenize; `-` reads standard input.
    text: String,
    /// Do not add BOS/EOS, even where the model asks for them.
    #[arg(long)]
    no_bos: bool,
    /// Treat control-token text such as `<|im_start|>` as plain text.
    #[arg(long)]
    no_parse_special: bool,
    #[command(flatten)]
    models: ModelsDirArg,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: &TokenizeArgs) -> Result<()> {
    let path = args.models.resolve(&args.model)?;
    let text = if args.text == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading text from standard input")?;
        s
    } else {
        args.text.clone()
    };

    // (id, the token's bytes) for each token.
    let tokens: Vec<(u32, Vec<u8>)> = if path.is_dir() {
        let tok = HfTokenizer::from_file(&path)?;
        let enc = tok.encode(&text, !args.no_bos)?;
        enc.ids
            .into_iter()
            .zip(enc.tokens.into_iter().map(String::into_bytes))
            .collect()
    } else {
        let file = GgufFile::open(&path)?;
        let tok = Tokenizer::from_gguf(&file)?;
        let ids = tok.encode_with(
            &text,
            EncodeOptions {
                add_special: !args.no_bos,
                parse_special: !args.no_parse_special,
            },
        );
        ids.into_iter()
            .map(|id| (id, tok.token_bytes(id).unwrap_or_default().to_vec()))
            .collect()
    };

    let mut out = String::new();
    match args.format {
        Format::Json => {
            // JSON strings cannot hold a partial UTF-8 sequence; those bytes become U+FFFD.
            let ids: Vec<u32> = tokens.iter().map(|t| t.0).collect();
            let pieces: Vec<String> = tokens
                .iter()
                .map(|t| String::from_utf8_lossy(&t.1).into_owned())
                .collect();
            writeln!(out, "{}", json!({ "tokens": ids, "pieces": pieces }))?;
        }
        Format::Table => {
            for (id, bytes) in &tokens {
                writeln!(out, "{id:>6} -> '{}'", escape(bytes))?;
            }
            writeln!(out, "{} tokens", tokens.len())?;
        }
    }
    emit(&out)
}

/// A token's bytes for display: text as is except control characters escaped, and bytes of
/// a character split across tokens as `\xNN`.
fn escape(bytes: &[u8]) -> String {
    let mut s = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => s.push_str("\\n"),
                '\t' => s.push_str("\\t"),
                '\r' => s.push_str("\\r"),
                c if c.is_control() => {
                    let _ = write!(s, "\\u{{{:x}}}", c as u32);
                }
                c => s.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(s, "\\x{b:02X}");
        }
    }
    s
}
