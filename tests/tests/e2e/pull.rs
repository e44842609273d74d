//! `hearth pull` and `-m ORG/REPO[:QUANT] --pull` against a local hub (`HF_ENDPOINT`): the
//! file arrives under its name, a later `-m` finds it by the hub name, and an unknown
//! quantization lists those the repository has. (hearth-models' `hub_pull` tests cover
//! redirects, resumes and checksums.)

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use sha1::{Digest, Sha1};

use super::scratch;

/// The repository's files: not real models, so that a command opening one fails naming the
/// path it resolved to.
const FILES: [(&str, &[u8]); 2] = [
    ("Tiny-Q4_K_M.gguf", b"not a model, Q4_K_M"),
    ("Tiny-Q8_0.gguf", b"not a model, Q8_0"),
];

/// A hub serving `e2e/Tiny-GGUF` on 127.0.0.1 until the test process ends; its address.
fn hub() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line.split(' ').nth(1).unwrap_or("").to_string();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {}
            let (status, body) = answer(&path);
            let head = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    endpoint
}

/// The status and body for a request path: the tree listing (git blob ids, the files being
/// small and not in LFS) and the files.
fn answer(path: &str) -> (u16, Vec<u8>) {
    if path.starts_with("/api/models/e2e/Tiny-GGUF/tree/main") {
        let entries: Vec<String> = FILES
            .iter()
            .map(|(name, bytes)| {
                format!(
                    r#"{{"type":"file","oid":"{}","size":{},"path":"{name}"}}"#,
                    git_blob_id(bytes),
                    bytes.len()
                )
            })
            .collect();
        return (200, format!("[{}]", entries.join(",")).into_bytes());
    }
    for (name, bytes) in FILES {
        if path == format!("/e2e/Tiny-GGUF/resolve/main/{name}") {
            return (200, bytes.to_vec());
        }
    }
    (404, b"{\"error\":\"Repository not found\"}".to_vec())
}

/// Git's blob id of `bytes`: what the hub lists for a file outside LFS.
fn git_blob_id(bytes: &[u8]) -> String {
    let digest = Sha1::new()
        .chain_update(format!("blob {}\0", bytes.len()))
        .chain_update(bytes)
        .finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
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
    let endpoint = hub();
    let dir = scratch("pull");
    let out = hearth(&endpoint, &dir, &["pull", "e2e/Tiny-GGUF:q8_0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let file = dir.join("Tiny-Q8_0.gguf");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains(&file.display().to_string()), "{stdout}");
    assert_eq!(std::fs::read(&file).unwrap(), FILES[1].1);

    // `-m` (here `inspect`'s MODEL) by the hub name: the pulled file, which is no GGUF file.
    let out = hearth(&endpoint, &dir, &["inspect", "e2e/Tiny-GGUF:Q8_0"]);
    let err = stderr(&out);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("not a GGUF file"),
        "{err}"
    );

    // Not pulled yet: an error saying how, then `--pull` fetches llama.cpp's default.
    let out = hearth(&endpoint, &dir, &["inspect", "e2e/Tiny-GGUF"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is not pulled yet: add --pull"),
        "{}",
        stderr(&out)
    );
    let out = hearth(&endpoint, &dir, &["inspect", "e2e/Tiny-GGUF", "--pull"]);
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
    let out = hearth(&endpoint, &dir, &["pull", "e2e/Tiny-GGUF:IQ1_S"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("it has: Q4_K_M (Tiny-Q4_K_M.gguf), Q8_0 (Tiny-Q8_0.gguf)"),
        "{err}"
    );
    let out = hearth(&endpoint, &dir, &["pull", "e2e/Nothing"]);
    assert!(
        stderr(&out).contains("e2e/Nothing: no such repository"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}
