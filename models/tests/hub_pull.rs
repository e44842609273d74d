//! `hub::pull` against a local server shaped like the Hugging Face hub: the API's tree
//! listing (in pages), `resolve/main/...` redirected to where the bytes are, ranges, a file
//! whose listed checksum is wrong, connections dropped halfway through a body.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use hearth_models::hub::{self, HubOptions, ModelRef, PullEvent};
use hearth_models::{list_models, open_model, resolve_model, Error, GgufFile, ModelFormat};
use sha1::Sha1;
use sha2::{Digest, Sha256};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/torch_llama");

/// A file the hub serves.
#[derive(Clone)]
struct File {
    bytes: Vec<u8>,
    /// Stored in LFS (listed with a SHA-256, sent through a redirect).
    lfs: bool,
    /// Listed with the checksum of other bytes.
    wrong_checksum: bool,
}

/// One request the server saw.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    range: Option<String>,
    authorization: Option<String>,
}

#[derive(Default)]
struct State {
    /// `ORG/REPO` -> its files by path, in listing order.
    repos: HashMap<String, Vec<(String, File)>>,
    /// Bodies to cut halfway, by file path: how many more times.
    drops: HashMap<String, usize>,
    /// Files whose ranges the server ignores (sending them whole, status 200).
    no_ranges: Vec<String>,
    seen: Vec<Seen>,
    /// `http://HOST:PORT` of the LFS files.
    cdn: String,
}

/// A hub on 127.0.0.1, and where it sends LFS files on to (127.0.0.2 where the loopback
/// takes it, as Linux's does: another host): a thread each, one request per connection.
struct Hub {
    endpoint: String,
    /// `http://HOST:PORT` of the LFS files.
    cdn: String,
    state: Arc<Mutex<State>>,
}

impl Hub {
    fn start() -> Hub {
        let state = Arc::new(Mutex::new(State::default()));
        let listen = |listener: TcpListener| {
            let addr = format!("http://{}", listener.local_addr().unwrap());
            let shared = state.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { continue };
                    let _ = serve(stream, &shared);
                }
            });
            addr
        };
        let endpoint = listen(TcpListener::bind("127.0.0.1:0").unwrap());
        let cdn = TcpListener::bind("127.0.0.2:0")
            .or_else(|_| TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let cdn = listen(cdn);
        state.lock().unwrap().cdn = cdn.clone();
        Hub {
            endpoint,
            cdn,
            state,
        }
    }

    fn add(&self, repo: &str, path: &str, bytes: Vec<u8>, lfs: bool) {
        let file = File {
            bytes,
            lfs,
            wrong_checksum: false,
        };
        let mut state = self.state.lock().unwrap();
        state
            .repos
            .entry(repo.to_string())
            .or_default()
            .push((path.to_string(), file));
    }

    fn file_mut(&self, repo: &str, path: &str, f: impl FnOnce(&mut File)) {
        let mut state = self.state.lock().unwrap();
        let files = state.repos.get_mut(repo).unwrap();
        f(&mut files.iter_mut().find(|(p, _)| p == path).unwrap().1);
    }

    fn drop_next(&self, path: &str, times: usize) {
        self.state
            .lock()
            .unwrap()
            .drops
            .insert(path.to_string(), times);
    }

    fn seen(&self) -> Vec<Seen> {
        std::mem::take(&mut self.state.lock().unwrap().seen)
    }

    fn options(&self, retries: u32) -> HubOptions {
        HubOptions {
            endpoint: self.endpoint.clone(),
            token: Some("hf_secret".into()),
            retries,
        }
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let target = line.split(' ').nth(1).unwrap_or("/").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let mut state = state.lock().unwrap();
    state.seen.push(Seen {
        path: target.clone(),
        range: headers.get("range").cloned(),
        authorization: headers.get("authorization").cloned(),
    });
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut out = stream;
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let repo = rest.strip_suffix("/tree/main").unwrap_or("");
        let Some(files) = repo_files(&state, repo) else {
            // The hub answers 401 to a repository it does not show an anonymous caller, and
            // 404 otherwise; both mean "not found" here.
            let status = if repo.starts_with("private") {
                401
            } else {
                404
            };
            return respond(
                &mut out,
                status,
                &[],
                br#"{"error":"Repository not found"}"#,
            );
        };
        // Two pages: the second one's files after a cursor, as the hub's Link header chains.
        let half = files.len() / 2;
        let (page, link) = if query.contains("cursor=2") {
            (&files[half..], None)
        } else {
            let next = format!(
                "<http://{}/api/models/{repo}/tree/main?recursive=true&cursor=2>; rel=\"next\"",
                headers.get("host").cloned().unwrap_or_default()
            );
            (&files[..half], Some(next))
        };
        let body = listing(page);
        let link_header = link.map(|l| ("Link".to_string(), l));
        return respond(&mut out, 200, link_header.as_slice(), body.as_bytes());
    }
    // `/{org}/{repo}/resolve/main/{path}`, or `/cdn/{org}/{repo}/{path}` where LFS files go.
    let (cdn, rest) = match path.strip_prefix("/cdn/") {
        Some(rest) => (true, rest),
        None => (false, path.trim_start_matches('/')),
    };
    let mut parts = rest.splitn(3, '/');
    let repo = format!(
        "{}/{}",
        parts.next().unwrap_or(""),
        parts.next().unwrap_or("")
    );
    let file_path = parts.next().unwrap_or("");
    let file_path = if cdn {
        file_path.to_string()
    } else {
        match file_path.strip_prefix("resolve/main/") {
            Some(p) => p.to_string(),
            None => return respond(&mut out, 404, &[], b"not found"),
        }
    };
    let Some(file) = repo_files(&state, &repo)
        .and_then(|files| files.iter().find(|(p, _)| *p == file_path))
        .map(|(_, f)| f.clone())
    else {
        return respond(&mut out, 404, &[], b"Entry not found");
    };
    if file.lfs && !cdn {
        let location = (
            "Location".to_string(),
            format!("{}/cdn/{repo}/{file_path}", state.cdn),
        );
        return respond(&mut out, 302, &[location], b"");
    }
    let total = file.bytes.len();
    let from = headers
        .get("range")
        .filter(|_| !state.no_ranges.contains(&file_path))
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<usize>().ok());
    let (status, body, extra) = match from {
        Some(from) if from >= total => return respond(&mut out, 416, &[], b""),
        Some(from) => (
            206,
            &file.bytes[from..],
            vec![(
                "Content-Range".to_string(),
                format!("bytes {from}-{}/{total}", total - 1),
            )],
        ),
        None => (200, &file.bytes[..], vec![]),
    };
    let drop = match state.drops.get_mut(&file_path) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    };
    if drop {
        // The whole length announced, half of it sent, the connection closed.
        head(&mut out, status, &extra, body.len())?;
        out.write_all(&body[..body.len() / 2])?;
        out.flush()?;
        return out.shutdown(std::net::Shutdown::Both);
    }
    respond(&mut out, status, &extra, body)
}

/// A repository's files: names match in any case, as on the hub.
fn repo_files<'a>(state: &'a State, repo: &str) -> Option<&'a Vec<(String, File)>> {
    state
        .repos
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(repo))
        .map(|(_, files)| files)
}

fn head(
    out: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    len: usize,
) -> std::io::Result<()> {
    let mut text = format!("HTTP/1.1 {status} X\r\nContent-Length: {len}\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    out.write_all(text.as_bytes())
}

fn respond(
    out: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<()> {
    head(out, status, headers, body.len())?;
    out.write_all(body)?;
    out.flush()
}

/// A page of the hub's tree listing, as `api/models/{repo}/tree/main?recursive=true` sends
/// it: git's blob id for every file, the LFS object's SHA-256 for LFS files.
fn listing(files: &[(String, File)]) -> String {
    let entries: Vec<serde_json::Value> = files
        .iter()
        .map(|(path, f)| {
            let bytes: &[u8] = if f.wrong_checksum {
                b"other bytes"
            } else {
                &f.bytes
            };
            let git = hex(&Sha1::new()
                .chain_update(format!("blob {}\0", bytes.len()))
                .chain_update(bytes)
                .finalize());
            let mut entry = serde_json::json!({
                "type": "file", "oid": git, "size": f.bytes.len(), "path": path,
            });
            if f.lfs {
                entry["lfs"] = serde_json::json!({
                    "oid": hex(&Sha256::digest(bytes)), "size": f.bytes.len(), "pointerSize": 134,
                });
            }
            entry
        })
        .chain(std::iter::once(serde_json::json!({
            "type": "directory", "oid": "0".repeat(40), "size": 0, "path": "docs",
        })))
        .collect();
    serde_json::to_string(&entries).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A tiny Llama GGUF; `n_ff` tells two apart.
fn gguf(n_ff: u64) -> Vec<u8> {
    common::tiny_llama(&common::Tiny {
        n_ff,
        ..Default::default()
    })
    .to_bytes()
    .unwrap()
}

const GGUF_REPO: &str = "tiny/Tiny-Llama-GGUF";

/// A repository of GGUF files as bartowski's and unsloth's are laid out.
fn gguf_repo(hub: &Hub) {
    hub.add(
        GGUF_REPO,
        ".gitattributes",
        b"*.gguf filter=lfs\n".to_vec(),
        false,
    );
    hub.add(GGUF_REPO, "README.md", b"# Tiny\n".to_vec(), false);
    hub.add(GGUF_REPO, "Tiny-Llama-Q4_K_M.gguf", gguf(16), true);
    hub.add(GGUF_REPO, "Tiny-Llama-Q8_0.gguf", gguf(32), true);
    hub.add(GGUF_REPO, "mmproj-Tiny-Llama-f16.gguf", gguf(8), true);
}

fn pull(
    hub: &Hub,
    name: &str,
    dir: &Path,
    retries: u32,
) -> hearth_models::Result<(hub::Pulled, Vec<String>)> {
    let mut events = Vec::new();
    let pulled = hub::pull(
        &hub.options(retries),
        &ModelRef::parse(name).unwrap(),
        dir,
        &mut |e| match e {
            PullEvent::Start { file, size, done } => {
                events.push(format!("start {file} {done}/{size}"))
            }
            PullEvent::Progress { .. } => {}
            PullEvent::Finish => events.push("finish".into()),
        },
    )?;
    Ok((pulled, events))
}

fn hidden_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n != ".hub")
        .collect();
    names.sort();
    names
}

#[test]
fn a_gguf_file_arrives_by_quant_and_by_default() {
    let hub = Hub::start();
    gguf_repo(&hub);
    let dir = common::scratch_dir("hub-gguf");

    let (pulled, events) = pull(&hub, "tiny/tiny-llama-gguf:q8_0", &dir, 0).unwrap();
    let file = dir.join("Tiny-Llama-Q8_0.gguf");
    assert_eq!(pulled.path, file);
    assert_eq!(pulled.format, ModelFormat::Gguf);
    assert_eq!(pulled.downloaded, gguf(32).len() as u64);
    assert_eq!(std::fs::read(&file).unwrap(), gguf(32));
    assert_eq!(
        events,
        [
            format!("start Tiny-Llama-Q8_0.gguf 0/{}", gguf(32).len()),
            "finish".into()
        ]
    );
    assert!(GgufFile::open(&file).is_ok());
    assert_eq!(resolve_model("tiny-llama-q8_0", &dir).unwrap(), file);
    let model = ModelRef::parse("tiny/Tiny-Llama-GGUF:Q8_0").unwrap();
    assert_eq!(hub::find_pulled(&model, &dir), Some(file.clone()));
    assert_eq!(
        hidden_entries(&dir),
        Vec::<String>::new(),
        "no part is left"
    );

    // The listing in two pages, then the file through the redirect; the token goes to the
    // hub but not on to a redirect's other host.
    let seen = hub.seen();
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/api/models/tiny/tiny-llama-gguf/tree/main?recursive=true",
            "/api/models/tiny/tiny-llama-gguf/tree/main?recursive=true&cursor=2",
            "/tiny/tiny-llama-gguf/resolve/main/Tiny-Llama-Q8_0.gguf",
            "/cdn/tiny/tiny-llama-gguf/Tiny-Llama-Q8_0.gguf",
        ]
    );
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer hf_secret"));
    assert_eq!(seen[2].authorization.as_deref(), Some("Bearer hf_secret"));
    if !hub.cdn.starts_with("http://127.0.0.1:") {
        assert_eq!(
            seen[3].authorization, None,
            "the token stays on the hub's host"
        );
    }

    // Without a quantization: Q4_K_M, as llama.cpp takes it.
    let (pulled, _) = pull(&hub, GGUF_REPO, &dir, 0).unwrap();
    assert_eq!(pulled.path, dir.join("Tiny-Llama-Q4_K_M.gguf"));
    assert_eq!(std::fs::read(&pulled.path).unwrap(), gguf(16));

    // Pulled again: checked against the hub's checksum, not fetched.
    hub.seen();
    let (pulled, events) = pull(&hub, "tiny/Tiny-Llama-GGUF:Q8_0", &dir, 0).unwrap();
    assert_eq!((pulled.path, pulled.downloaded), (file, 0));
    assert!(events.is_empty(), "{events:?}");
    assert!(hub.seen().iter().all(|s| s.path.starts_with("/api/")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_folder_arrives_complete() {
    let hub = Hub::start();
    let read = |p: &str| std::fs::read(Path::new(FIXTURES).join(p)).unwrap();
    let repo = "tiny/tiny-llama";
    hub.add(
        repo,
        ".gitattributes",
        b"*.safetensors filter=lfs\n".to_vec(),
        false,
    );
    hub.add(repo, "README.md", b"# Tiny\n".to_vec(), false);
    hub.add(repo, "config.json", read("config.json"), false);
    hub.add(
        repo,
        "model.safetensors",
        read("safetensors/model.safetensors"),
        true,
    );
    hub.add(repo, "onnx/model.onnx", b"onnx".to_vec(), true);
    hub.add(repo, "tokenizer.json", read("tokenizer.json"), false);
    let dir = common::scratch_dir("hub-folder");

    let (pulled, events) = pull(&hub, repo, &dir, 0).unwrap();
    let folder = dir.join("tiny-llama");
    assert_eq!(pulled.path, folder);
    assert_eq!(pulled.format, ModelFormat::SafetensorsDir);
    let starts: Vec<&String> = events.iter().filter(|e| e.starts_with("start")).collect();
    assert_eq!(starts.len(), 3, "{events:?}");
    let mut names: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["config.json", "model.safetensors", "tokenizer.json"]
    );
    assert_eq!(
        std::fs::read(folder.join("model.safetensors")).unwrap(),
        read("safetensors/model.safetensors")
    );
    open_model(&folder).expect("the folder loads");
    let listed: Vec<String> = list_models(&dir)
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(listed, ["tiny-llama"]);
    assert_eq!(
        hidden_entries(&dir),
        Vec::<String>::new(),
        "no staging folder is left"
    );
    assert_eq!(
        hub::find_pulled(&ModelRef::parse(repo).unwrap(), &dir),
        Some(folder.clone())
    );
    // Pulled again: the recorded folder is it.
    let (again, events) = pull(&hub, repo, &dir, 0).unwrap();
    assert_eq!((again.path, again.downloaded, events.len()), (folder, 0, 0));

    // Shards: the index first, then the files its weight map names.
    let repo = "tiny/tiny-llama-bin";
    hub.add(repo, "config.json", read("config.json"), false);
    for shard in [
        "pytorch_model-00001-of-00002.bin",
        "pytorch_model-00002-of-00002.bin",
    ] {
        hub.add(repo, shard, read(&format!("sharded/{shard}")), true);
    }
    hub.add(
        repo,
        "pytorch_model.bin.index.json",
        read("sharded/pytorch_model.bin.index.json"),
        false,
    );
    hub.add(repo, "tokenizer.json", read("tokenizer.json"), false);
    let (pulled, _) = pull(&hub, repo, &dir, 0).unwrap();
    assert_eq!(pulled.path, dir.join("tiny-llama-bin"));
    open_model(&pulled.path).expect("the sharded folder loads");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_interrupted_download_resumes_from_its_part() {
    let hub = Hub::start();
    gguf_repo(&hub);
    let dir = common::scratch_dir("hub-resume");
    let size = gguf(16).len();
    let file = "Tiny-Llama-Q4_K_M.gguf";

    // No retries: the pull fails and keeps the half it had.
    hub.drop_next(file, 1);
    let err = pull(&hub, "tiny/Tiny-Llama-GGUF:Q4_K_M", &dir, 0).unwrap_err();
    assert!(matches!(err, Error::Http { .. }), "{err}");
    assert!(
        err.to_string().contains("pulling again resumes there"),
        "{err}"
    );
    let part = dir.join(format!(".{file}.part"));
    let kept = std::fs::metadata(&part).unwrap().len() as usize;
    assert_eq!(kept, size / 2);
    assert!(!dir.join(file).exists());

    // The next pull asks for the rest only.
    hub.seen();
    let (pulled, events) = pull(&hub, "tiny/Tiny-Llama-GGUF:Q4_K_M", &dir, 0).unwrap();
    assert_eq!(events[0], format!("start {file} {kept}/{size}"));
    assert_eq!(pulled.downloaded, (size - kept) as u64);
    assert_eq!(std::fs::read(&pulled.path).unwrap(), gguf(16));
    let ranges: Vec<Option<String>> = hub.seen().into_iter().map(|s| s.range).collect();
    assert_eq!(
        ranges.last().unwrap().as_deref(),
        Some(&*format!("bytes={kept}-"))
    );
    assert!(!part.exists());

    // With retries, one pull resumes by itself, twice over.
    let file = "Tiny-Llama-Q8_0.gguf";
    let size = gguf(32).len();
    hub.drop_next(file, 2);
    let (pulled, _) = pull(&hub, "tiny/Tiny-Llama-GGUF:Q8_0", &dir, 3).unwrap();
    assert_eq!(std::fs::read(&pulled.path).unwrap(), gguf(32));
    // Each range goes to the hub, then on through its redirect.
    let ranges: Vec<String> = hub
        .seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/cdn/"))
        .filter_map(|s| s.range)
        .collect();
    let first = size / 2;
    let second = first + (size - first) / 2;
    assert_eq!(
        ranges,
        [format!("bytes={first}-"), format!("bytes={second}-")]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_that_ignores_the_range_sends_the_file_again() {
    let hub = Hub::start();
    gguf_repo(&hub);
    let dir = common::scratch_dir("hub-no-range");
    let file = "Tiny-Llama-Q4_K_M.gguf";
    hub.state.lock().unwrap().no_ranges.push(file.into());
    hub.drop_next(file, 1);
    let (pulled, _) = pull(&hub, GGUF_REPO, &dir, 1).unwrap();
    assert_eq!(std::fs::read(&pulled.path).unwrap(), gguf(16));
    let cdn: Vec<Seen> = hub
        .seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/cdn/"))
        .collect();
    assert_eq!(cdn.len(), 2);
    assert!(
        cdn[1].range.is_some(),
        "the second request asked for the rest"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checksum_mismatch_is_an_error_that_leaves_no_file() {
    let hub = Hub::start();
    gguf_repo(&hub);
    hub.file_mut(GGUF_REPO, "Tiny-Llama-Q8_0.gguf", |f| {
        f.wrong_checksum = true
    });
    let dir = common::scratch_dir("hub-checksum");
    let err = pull(&hub, "tiny/Tiny-Llama-GGUF:Q8_0", &dir, 0).unwrap_err();
    let Error::Checksum { file, expected, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(file, "tiny/Tiny-Llama-GGUF/Tiny-Llama-Q8_0.gguf");
    assert!(expected.starts_with("sha256 "), "{err}");
    assert!(
        err.to_string().contains("the partial file was removed"),
        "{err}"
    );
    assert!(!dir.join("Tiny-Llama-Q8_0.gguf").exists());
    assert_eq!(
        hidden_entries(&dir),
        Vec::<String>::new(),
        "no part to resume"
    );
    let model = ModelRef::parse("tiny/Tiny-Llama-GGUF:Q8_0").unwrap();
    assert_eq!(hub::find_pulled(&model, &dir), None);

    // A small file, checked by git's blob id: the folder never appears.
    let repo = "tiny/bad-config";
    hub.add(repo, "config.json", b"{}".to_vec(), false);
    hub.add(repo, "model.safetensors", b"weights".to_vec(), true);
    hub.file_mut(repo, "config.json", |f| f.wrong_checksum = true);
    let err = pull(&hub, repo, &dir, 0).unwrap_err();
    assert!(
        matches!(&err, Error::Checksum { expected, .. } if expected.starts_with("git sha1 ")),
        "{err}"
    );
    assert!(!dir.join("bad-config").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_repository_or_quant_is_a_clear_error() {
    let hub = Hub::start();
    gguf_repo(&hub);
    let dir = common::scratch_dir("hub-missing");
    for repo in ["nobody/nothing", "private/thing"] {
        let err = pull(&hub, repo, &dir, 0).unwrap_err();
        assert!(matches!(err, Error::HubRepoNotFound { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("{repo}: no such repository on the hub")),
            "{text}"
        );
    }
    let err = pull(&hub, "tiny/Tiny-Llama-GGUF:IQ2_XS", &dir, 0).unwrap_err();
    assert!(matches!(err, Error::HubQuantNotFound { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.ends_with("it has: Q4_K_M (Tiny-Llama-Q4_K_M.gguf), Q8_0 (Tiny-Llama-Q8_0.gguf)"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_in_the_way_is_never_overwritten() {
    let hub = Hub::start();
    gguf_repo(&hub);
    let dir = common::scratch_dir("hub-in-the-way");
    let mine = dir.join("Tiny-Llama-Q4_K_M.gguf");
    std::fs::write(&mine, b"my own file").unwrap();
    let err = pull(&hub, GGUF_REPO, &dir, 0).unwrap_err();
    assert!(err.to_string().contains("is not the hub's"), "{err}");
    assert_eq!(std::fs::read(&mine).unwrap(), b"my own file");
    let _ = std::fs::remove_dir_all(&dir);
}
