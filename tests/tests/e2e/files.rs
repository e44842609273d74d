//! Bad model files through the command line: a clear error naming the file and what is
//! wrong, exit status 1, nothing on stdout.

use super::{error_of, scratch, smollm2};

#[test]
fn a_truncated_model_is_reported_with_its_path() {
    let Some(model) = smollm2() else { return };
    let dir = scratch("truncated");
    let cut = dir.join("cut.gguf");
    let bytes = std::fs::read(&model).expect("the model reads");
    std::fs::write(&cut, &bytes[..1000]).expect("scratch write");
    let cut = cut.to_str().unwrap();
    let stderr = error_of(&["generate", "-m", cut, "-p", "hi"]);
    assert!(
        stderr.contains(cut) && stderr.contains("truncated"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_file_that_is_not_gguf_is_named() {
    let dir = scratch("not-gguf");
    let bad = dir.join("bad.gguf");
    std::fs::write(&bad, b"garbage\n").expect("scratch write");
    let bad = bad.to_str().unwrap();
    let stderr = error_of(&["inspect", bad]);
    assert!(
        stderr.contains(bad) && stderr.contains("not a GGUF file"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_missing_model_lists_what_is_installed() {
    let stderr = error_of(&["generate", "-m", "no-such-model", "-p", "hi"]);
    assert!(
        stderr.contains("no model named `no-such-model`"),
        "{stderr}"
    );
    assert!(stderr.contains("available:"), "{stderr}");
}
