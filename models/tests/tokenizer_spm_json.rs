//! A SentencePiece-style Hugging Face folder shipped without `tokenizer.model`: its
//! `tokenizer.json` alone becomes a GGUF `llama` vocabulary that tokenizes as Hugging Face's
//! `tokenizers` does with that file, and as the vocabulary made from `tokenizer.model`. The
//! folders are the conformance suite's SentencePiece families (`scripts/conformance/build`).

use std::path::Path;

use hearth_models::{EncodeOptions, HfFolder, HfTokenizer, Tokenizer};

const TEXTS: [&str; 8] = [
    "Hello world",
    "It's 2026: the 12345th test, isn't it?\n\n  Indented\tline",
    "Ünïcödé – 日本語のテキスト and emoji 🦙🔥",
    "def f(x):\n    return x ** 2  # squares\n",
    "   leading spaces, trailing   ",
    "",
    "a",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
];

/// `dir`'s files but tokenizer.model, linked into a fresh folder.
fn without_tokenizer_model(dir: &Path, family: &str) -> std::path::PathBuf {
    let out = std::env::temp_dir().join(format!("hearth-spm-json-{family}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name != "tokenizer.model" {
            std::os::unix::fs::symlink(&path, out.join(name)).unwrap();
        }
    }
    out
}

fn check(family: &str) {
    let Some(dir) = hearth_testkit::conformance_model(family) else {
        return;
    };
    let hf = dir.join("hf");
    assert!(
        hf.join("tokenizer.model").is_file(),
        "{family} has its tokenizer.model"
    );
    let bare = without_tokenizer_model(&hf, family);
    let from_json = Tokenizer::from_gguf(&HfFolder::open(&bare).unwrap().to_gguf_file().unwrap())
        .unwrap_or_else(|e| panic!("{family}: {e}"));
    let from_model =
        Tokenizer::from_gguf(&HfFolder::open(&hf).unwrap().to_gguf_file().unwrap()).unwrap();
    let reference = HfTokenizer::from_file(hf.join("tokenizer.json")).unwrap();
    let plain = EncodeOptions {
        add_special: false,
        parse_special: true,
    };
    for text in TEXTS {
        let want = reference.encode(text, false).unwrap().ids;
        assert_eq!(
            from_json.encode_with(text, plain),
            want,
            "{family}: {text:?}"
        );
        assert_eq!(
            from_model.encode_with(text, plain),
            want,
            "{family} (tokenizer.model): {text:?}"
        );
        // With BOS as the folder asks, and back to the text.
        let with_bos = from_json.encode(text);
        assert_eq!(
            with_bos,
            from_model.encode(text),
            "{family}: {text:?} with BOS"
        );
        assert_eq!(
            from_json.decode(&want, false),
            from_model.decode(&want, false),
            "{family}: {text:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&bare);
}

macro_rules! families {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            check(stringify!($name));
        }
    )*};
}

families!(mistral, mixtral, phi3, longrope, gemma2, gemma3);
