//! `hearth pull` and `-m ORG/REPO[:QUANT] --pull` against a local hub (`HF_ENDPOINT`): the
//! file arrives under its name, a later `-m` finds it by the hub name, and an unknown
//! quantization lists those the repository has. (hearth-models' `hub_pull` tests cover
//! redirects, resumes and checksums.)

use std::path::Path;
use std::process::{Command, Output};

use hearth_testkit::hub::Hub;

use super::scratch;

/// The repository's files: not real models, so that a command opening one fails naming the
/// path it resolved to.
const FILES: [(&str, &[u8]); 2] = [
    ("Tiny-Q4_K_M.gguf", b"not a model, Q4_K_M"),
    ("Tiny-Q8_0.gguf", b"not a model, Q8_0"),
];

/// testkit's local hub, serving `e2e/Tiny-GGUF` until the test process ends.
fn hub() -> Hub {
    let hub = Hub::start();
    for (name, bytes) in FILES {
        hub.add("e2e/Tiny-GGUF", name, bytes.to_vec(), false);
    }
    hub
}

fn hearth(endpoint: &str, dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hearth-e2e"))
        .env("HF_ENDPOINT", endpoint)
        .env("HEARTH_MODELS", dir)
        .env_remove("HF_TOKEN")
        .env("HF_TOKEN_PATH", dir.join("no-token"))
        .args(args)
        .output()
        .expect("the hearth binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_pulled_model_is_found_by_its_hub_name() {
    let hub = hub();
    let endpoint = hub.endpoint.as_str();
    let dir = scratch("pull");
    let out = hearth(endpoint, &dir, &["pull", "e2e/Tiny-GGUF:q8_0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let file = dir.join("Tiny-Q8_0.gguf");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains(&file.display().to_string()), "{stdout}");
    assert_eq!(std::fs::read(&file).unwrap(), FILES[1].1);

    // `-m` (here `inspect`'s MODEL) by the hub name: the pulled file, which is no GGUF file.
    let out = hearth(endpoint, &dir, &["inspect", "e2e/Tiny-GGUF:Q8_0"]);
    let err = stderr(&out);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("not a GGUF file"),
        "{err}"
    );

    // Not pulled yet: an error saying how, then `--pull` fetches llama.cpp's default.
    let out = hearth(endpoint, &dir, &["inspect", "e2e/Tiny-GGUF"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is not pulled yet: add --pull"),
        "{}",
        stderr(&out)
    );
    let out = hearth(endpoint, &dir, &["inspect", "e2e/Tiny-GGUF", "--pull"]);
    let err = stderr(&out);
    assert!(
        err.contains("Tiny-Q4_K_M.gguf") && err.contains("not a GGUF file"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.join("Tiny-Q4_K_M.gguf")).unwrap(),
        FILES[0].1
    );

    // A quantization the repository lacks, and a repository the hub lacks.
    let out = hearth(endpoint, &dir, &["pull", "e2e/Tiny-GGUF:IQ1_S"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("it has: Q4_K_M (Tiny-Q4_K_M.gguf), Q8_0 (Tiny-Q8_0.gguf)"),
        "{err}"
    );
    let out = hearth(endpoint, &dir, &["pull", "e2e/Nothing"]);
    assert!(
        stderr(&out).contains("e2e/Nothing: no such repository"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}
