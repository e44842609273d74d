//! What the fuzz targets share: a model folder with one file replaced by the fuzzer's bytes,
//! and the checks every model that opens must pass.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hearth_models::gguf::GgufFile;
use hearth_models::{resolve_gguf, ChatTemplate, Tokenizer};

/// The tiny Llama folder `make-fixtures.py` writes: config, weights and both tokenizers.
const FIXTURES: [(&str, &[u8]); 4] = [
    ("config.json", include_bytes!("../fixtures/config.json")),
    (
        "model.safetensors",
        include_bytes!("../fixtures/model.safetensors"),
    ),
    (
        "tokenizer.json",
        include_bytes!("../fixtures/tokenizer.json"),
    ),
    (
        "tokenizer.model",
        include_bytes!("../fixtures/tokenizer.model"),
    ),
];

/// A folder holding the fixtures, with `name` holding `data` instead (and, for
/// `tokenizer.model`, no `tokenizer.json`, which would be read first). One folder per process,
/// in memory where the system has a tmpfs: the fixed files are written once, the fuzzed one
/// for every input.
pub fn folder_with(name: &str, data: &[u8]) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("hearth-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        for (file, bytes) in FIXTURES {
            let sentencepiece_only = name == "tokenizer.model" && file == "tokenizer.json";
            if !sentencepiece_only {
                std::fs::write(dir.join(file), bytes).expect("the scratch folder is writable");
            }
        }
        dir
    });
    std::fs::write(dir.join(name), data).expect("the scratch folder is writable");
    dir
}

/// What any model that opens must survive: every tensor inside the file, spec resolution,
/// the tokenizer built and run both ways, and the chat template compiled.
pub fn exercise(file: &GgufFile) {
    for t in file.tensors() {
        let bytes = file
            .tensor_data(t)
            .expect("the reader bounds-checked every tensor");
        assert_eq!(bytes.len() as u64, t.n_bytes);
    }
    let _ = resolve_gguf(file);
    if let Ok(tok) = Tokenizer::from_gguf(file) {
        let ids = tok.encode("Hello, world! 123 <|im_start|> naïve 東京\n\n  x");
        let _ = tok.decode(&ids, false);
        let _ = tok.decode(&ids, true);
    }
    let _ = ChatTemplate::from_gguf(file);
}
