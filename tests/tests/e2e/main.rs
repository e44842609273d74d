//! The `hearth` command line as a user runs it: a process with arguments, stdin and exit
//! status, on SmolLM2-135M-Instruct (installed by scripts/setup). Expected outputs are the
//! model's own: greedy text that the CPU reference reproduces token for token, and the
//! perplexity digits the project keeps fixed.

mod convert;
mod embed;
mod files;
mod generate;
mod perplexity;
mod pull;
mod seq2seq;
mod serve;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The device the tests run on unless they name another: the Vulkan path, whose outputs the
/// expected texts and digits are (a CPU-only machine's default is the CPU executor).
const DEVICE: &str = "vulkan";

/// Runs `hearth args..` with `stdin` fed to it.
fn hearth_with_input(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth-e2e"))
        .env("HEARTH_DEVICE", DEVICE)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the hearth binary starts");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes())
        .expect("stdin takes the input");
    child.wait_with_output().expect("the hearth binary runs")
}

fn hearth(args: &[&str]) -> Output {
    hearth_with_input(args, "")
}

/// Stdout of a run that must succeed; the failure message carries stderr.
fn stdout_of(args: &[&str]) -> String {
    let out = hearth(args);
    assert!(
        out.status.success(),
        "hearth {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// Stderr of a run that must fail with status 1.
fn error_of(args: &[&str]) -> String {
    let out = hearth(args);
    assert_eq!(out.status.code(), Some(1), "hearth {args:?} should fail");
    assert!(out.stdout.is_empty(), "a failed run prints no result");
    String::from_utf8(out.stderr).expect("stderr is UTF-8")
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let text = stdout_of(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("hearth {args:?}: {e}: {text}"))
}

/// The real model's path, or `None` after the test kit has recorded a skip (a failure in CI).
fn smollm2() -> Option<String> {
    let path = hearth_testkit::model(hearth_testkit::SMOLLM2)?;
    Some(path.to_str().expect("a UTF-8 model path").to_owned())
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hearth-e2e-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}
