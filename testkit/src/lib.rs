//! What every test crate in the workspace shares: whether this is a CI run, where the installed
//! test models are, one way to skip a test for a missing device or model, and a local server
//! shaped like the Hugging Face hub ([`hub`]).
//!
//! Outside CI a test whose device or model is missing skips: it returns early, says so on
//! stderr and appends a line to the skip log, which `make test` counts and prints. In CI
//! (`CI` set to anything but empty or `false`) the same guard fails the test instead, so a CI
//! run cannot pass without running everything.

pub mod hub;

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};

/// SmolLM2-135M-Instruct, the real model `scripts/setup` installs in [`models_dir`].
pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// all-MiniLM-L6-v2, a Hugging Face model directory `scripts/setup` installs in [`models_dir`].
pub const MINILM: &str = "all-MiniLM-L6-v2";

/// The file each skip appends a line to. Unset, skips go to `<target>/test-skips/<pid>.log`.
pub const SKIP_LOG_ENV: &str = "HEARTH_SKIP_LOG";

/// Whether this is a CI run: `CI` holds anything but an empty string or `false` (CI services
/// set `true`, some `1`).
pub fn in_ci() -> bool {
    ci_value(std::env::var_os("CI").as_deref().and_then(|v| v.to_str()))
}

fn ci_value(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "false")
}

/// The installed models: `$HEARTH_MODELS`, else `~/.cache/hearth/models`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HEARTH_MODELS") {
        return PathBuf::from(dir);
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/hearth/models")
}

/// The path of the installed test model `name` (a file or directory in [`models_dir`]), or
/// `None` after recording a skip when it is missing; in CI a missing model fails the test.
#[track_caller]
pub fn model(name: &str) -> Option<PathBuf> {
    let path = models_dir().join(name);
    if path.exists() {
        return Some(path);
    }
    skip(format_args!(
        "{} is missing (run scripts/setup)",
        path.display()
    ));
    None
}

/// The conformance models `scripts/conformance/build` makes: `$HEARTH_CONFORMANCE`, else
/// `~/.cache/hearth/conformance/models`.
pub fn conformance_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HEARTH_CONFORMANCE") {
        return PathBuf::from(dir);
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
        .join(".cache/hearth/conformance/models")
}

/// The directory of conformance family `name` (model.gguf, reference.json, reference.f32),
/// or `None` after recording a skip when it is missing; in CI a missing one fails the test.
#[track_caller]
pub fn conformance_model(name: &str) -> Option<PathBuf> {
    let dir = conformance_dir().join(name);
    if dir.join("stamp").is_file() {
        return Some(dir);
    }
    skip(format_args!(
        "{} is missing (run scripts/conformance/build)",
        dir.display()
    ));
    None
}

/// The Python that has the test tools (`scripts/pytools/setup`, which `make test` runs: the
/// official `openai` package, `kubernetes-validate`), or `None` after recording a skip when it
/// is missing; in CI a missing one fails the test.
#[track_caller]
pub fn tools_python() -> Option<PathBuf> {
    let python = PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
        .join(".cache/hearth/pytools/venv/bin/python");
    if python.is_file() {
        return Some(python);
    }
    skip(format_args!(
        "{} is missing (run scripts/pytools/setup)",
        python.display()
    ));
    None
}

/// llama.cpp's vocabulary file `ggml-vocab-{name}.gguf` with its `.inp` and `.out` test cases,
/// from the source `scripts/llama-cpp src` fetches (`$LLAMA_CPP_DIR`, else
/// `~/.cache/hearth/llama.cpp`; the conformance build fetches it), or `None` after recording a
/// skip when it is missing; in CI a missing one fails the test.
#[track_caller]
pub fn llama_cpp_vocab(name: &str) -> Option<PathBuf> {
    llama_cpp_source(&format!("models/ggml-vocab-{name}.gguf"))
}

/// llama.cpp's example GBNF grammars (`grammars/*.gbnf`: json, arithmetic, c, chess, ...),
/// from the same source as [`llama_cpp_vocab`], or `None` after recording a skip when they
/// are missing; in CI that fails the test.
#[track_caller]
pub fn llama_cpp_grammars() -> Option<PathBuf> {
    llama_cpp_source("grammars")
}

/// `path` inside llama.cpp's source tree, or `None` after recording a skip.
#[track_caller]
fn llama_cpp_source(path: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("LLAMA_CPP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/hearth/llama.cpp")
        });
    let found = std::fs::read_dir(&cache).ok().and_then(|entries| {
        entries
            .flatten()
            .map(|e| e.path().join("vendor/llama.cpp").join(path))
            .find(|p| p.exists())
    });
    if found.is_none() {
        skip(format_args!(
            "llama.cpp's {path} is missing under {} (run scripts/llama-cpp src)",
            cache.display()
        ));
    }
    found
}

/// Checks one executor's logits against another's: the same length, and every value within
/// `tolerance` times the largest magnitude of `want` (at least 1). `what` names the
/// comparison in a failure.
#[track_caller]
pub fn assert_logits_close(got: &[f32], want: &[f32], tolerance: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: logits");
    let scale = want.iter().fold(0f32, |m, l| m.max(l.abs()));
    let diff = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
    assert!(
        diff <= tolerance * scale.max(1.0),
        "{what}: logits differ by {diff} (largest {scale})"
    );
}

/// The value of `result`, or `None` after recording a skip naming `what` and the error (for a
/// device that cannot be opened); in CI an error fails the test.
#[track_caller]
pub fn or_skip<T, E: Display>(result: Result<T, E>, what: &str) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) => {
            skip(format_args!("no {what}: {e}"));
            None
        }
    }
}

/// Records that the calling test skips, for `why`, and returns so that the test can return.
/// In CI it fails the test instead.
///
/// A test records at most one skip however many guards it passes through.
#[track_caller]
pub fn skip(why: impl Display) {
    if in_ci() {
        panic!("CI runs every test, but this one would skip: {why}");
    }
    let test = std::thread::current().name().unwrap_or("").to_owned();
    // libtest names each test's thread after the test; with one test thread it runs them on
    // `main`, and then every call counts.
    if test != "main" && !test.is_empty() && !first_skip_of(&test) {
        return;
    }
    let binary = binary_name();
    eprintln!("skipping {binary} {test}: {why}");
    let line = format!("{binary} {test}: {why}\n");
    let path = skip_log();
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?
                .write_all(line.as_bytes())
        });
    if let Err(e) = written {
        panic!("cannot record a skip in {}: {e}", path.display());
    }
}

/// Whether `test` has not recorded a skip in this process yet (and marks it as having one).
fn first_skip_of(test: &str) -> bool {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static SKIPPED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    skipped
        .get_or_insert_with(HashSet::new)
        .insert(test.to_owned())
}

/// The test binary's name without the hash cargo appends (`batching-0f3a..` is `batching`).
fn binary_name() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe.file_stem().and_then(|s| s.to_str()).unwrap_or("test");
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
        _ => stem.to_owned(),
    }
}

fn skip_log() -> PathBuf {
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        return PathBuf::from(path);
    }
    // Test binaries live in <target>/<profile>/deps.
    let exe = std::env::current_exe().unwrap_or_default();
    let target = exe.ancestors().nth(3).unwrap_or(Path::new("target"));
    target
        .join("test-skips")
        .join(format!("{}.log", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_ci_value_but_empty_or_false_is_ci() {
        assert!(ci_value(Some("true")));
        assert!(ci_value(Some("1")));
        assert!(ci_value(Some("yes")));
        assert!(!ci_value(Some("")));
        assert!(!ci_value(Some("false")));
        assert!(!ci_value(None));
    }

    #[test]
    fn binary_name_drops_the_cargo_hash() {
        assert_eq!(binary_name(), "hearth_testkit");
    }

    #[test]
    fn a_test_records_one_skip() {
        assert!(first_skip_of("some::test"));
        assert!(!first_skip_of("some::test"));
        assert!(first_skip_of("other::test"));
    }
}
