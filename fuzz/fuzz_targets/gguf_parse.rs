//! Arbitrary bytes as a GGUF file: parsing must return an error or a file whose every tensor
//! lies inside it, never panic, hang or allocate without bound; whatever parses must also
//! survive spec resolution, tokenizer construction, template compilation and a write/re-read.
#![no_main]

use hearth_models::gguf::{GgufFile, GgufWriter};
use hearth_models::{resolve_gguf, ChatTemplate, Tokenizer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes("fuzz.gguf", data.to_vec()) else {
        return;
    };
    for t in file.tensors() {
        let bytes = file
            .tensor_data(t)
            .expect("the parser bounds-checked every tensor");
        assert_eq!(bytes.len() as u64, t.n_bytes);
    }
    let _ = resolve_gguf(&file);
    if let Ok(tok) = Tokenizer::from_gguf(&file) {
        let ids = tok.encode("Hello, world! 123 <|im_start|>");
        let _ = tok.decode(&ids, false);
    }
    // Compile only: rendering an arbitrary template may legitimately loop for a long time.
    let _ = ChatTemplate::from_gguf(&file);

    let writer = GgufWriter::from_file(&file).expect("a parsed file can be rewritten");
    let bytes = writer.to_bytes().expect("writing to memory cannot fail");
    let again = GgufFile::from_bytes("rewritten.gguf", bytes).expect("a rewritten file parses");
    assert_eq!(again.tensors().len(), file.tensors().len());
    assert_eq!(again.metadata().len(), file.metadata().len());
});
