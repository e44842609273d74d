//! `hub::pull` and `hub::search` against testkit's local server shaped like the Hugging Face
//! hub: the API's tree listing (in pages), `resolve/main/...` redirected to where the bytes
//! are, ranges, a file whose listed checksum is wrong, connections dropped halfway through a
//! body, the model search, and pulls cancelled midway.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use hearth_models::hub::{self, HubOptions, ModelRef, PullEvent};
use hearth_models::{list_models, open_model, resolve_model, Error, GgufFile, ModelFormat};
use hearth_testkit::hub::{hidden_entries, Hub, Seen};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/torch_llama");

fn options(hub: &Hub, retries: u32) -> HubOptions {
    HubOptions {
        endpoint: hub.endpoint.clone(),
        token: Some("hf_secret".into()),
        retries,
    }
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
        &options(hub, retries),
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
    hub.ignore_ranges(file);
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

#[test]
fn the_search_finds_gguf_repositories_most_downloaded_first() {
    let hub = Hub::start();
    gguf_repo(&hub);
    hub.add(
        "tiny/Tiny-Llama-Q2-GGUF",
        "Tiny-Llama-Q2_K.gguf",
        gguf(8),
        true,
    );
    hub.add("tiny/tiny-llama", "config.json", b"{}".to_vec(), false);
    hub.add("other/Other-GGUF", "Other-Q4_K_M.gguf", gguf(8), true);
    hub.set_stats(GGUF_REPO, 10, 3);
    hub.set_stats("tiny/Tiny-Llama-Q2-GGUF", 250, 1);

    let hits = hub::search(&options(&hub, 0), "tiny llama", 20).unwrap();
    assert_eq!(hits, [], "a space is no wildcard");
    let hits = hub::search(&options(&hub, 0), "Tiny-Llama", 20).unwrap();
    let ids: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
    // The folder holds no GGUF file: the filter leaves it out.
    assert_eq!(ids, ["tiny/Tiny-Llama-Q2-GGUF", GGUF_REPO]);
    assert_eq!((hits[0].downloads, hits[0].likes), (250, 1));
    assert_eq!(hits[1].name(), "Tiny-Llama-GGUF");
    assert!(hits[1].tags.iter().any(|t| t == "gguf"));
    let seen = hub.seen();
    assert_eq!(
        seen[1].path,
        "/api/models?search=Tiny-Llama&filter=gguf&sort=downloads&direction=-1&limit=20"
    );
    assert_eq!(seen[1].authorization.as_deref(), Some("Bearer hf_secret"));

    let hits = hub::search(&options(&hub, 0), "llama", 1).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hub::search(&options(&hub, 0), "nothing like it", 5).unwrap(),
        []
    );

    // A failing search names its request and what the hub said.
    hub.fail_searches(Some(500));
    let err = hub::search(&options(&hub, 0), "tiny", 5).unwrap_err();
    assert!(matches!(err, Error::Http { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("{}/api/models?search=tiny&", hub.endpoint)),
        "{text}"
    );
    assert!(
        text.contains("the search answered status 500: Internal Error"),
        "{text}"
    );
}

#[test]
fn quants_list_a_repositorys_gguf_files_with_the_default_marked() {
    let hub = Hub::start();
    gguf_repo(&hub);
    let quants = hub::quants(&options(&hub, 0), GGUF_REPO).unwrap();
    let rows: Vec<(&str, Option<&str>, u64, bool)> = quants
        .iter()
        .map(|q| (q.path.as_str(), q.quant.as_deref(), q.size, q.default))
        .collect();
    assert_eq!(
        rows,
        [
            (
                "Tiny-Llama-Q4_K_M.gguf",
                Some("Q4_K_M"),
                gguf(16).len() as u64,
                true
            ),
            (
                "Tiny-Llama-Q8_0.gguf",
                Some("Q8_0"),
                gguf(32).len() as u64,
                false
            ),
        ]
    );
    let err = hub::quants(&options(&hub, 0), "nobody/nothing").unwrap_err();
    assert!(matches!(err, Error::HubRepoNotFound { .. }), "{err}");
}

#[test]
fn a_cancelled_pull_keeps_its_part_and_the_next_one_resumes() {
    let hub = Hub::start();
    gguf_repo(&hub);
    let dir = common::scratch_dir("hub-cancel");
    let file = "Tiny-Llama-Q8_0.gguf";
    let size = gguf(32).len() as u64;
    // The hub sends half the file, then waits: the quarter is always reached midway.
    hub.hold(file, size as usize / 2);

    // Cancelled once a quarter of the file is in.
    let cancel = AtomicBool::new(false);
    let err = hub::pull_file(
        &options(&hub, 3),
        GGUF_REPO,
        file,
        &dir,
        &cancel,
        &mut |e| {
            if let PullEvent::Progress { done } = e {
                if done >= size / 4 {
                    cancel.store(true, Ordering::Relaxed);
                }
            }
        },
    )
    .unwrap_err();
    let Error::PullCancelled {
        file: name,
        part,
        kept,
        size: total,
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(name, &format!("{GGUF_REPO}/{file}"));
    assert_eq!(*part, dir.join(format!(".{file}.part")));
    assert!(*kept >= size / 4 && *kept <= size / 2, "{kept} of {size}");
    assert_eq!(*total, size);
    assert_eq!(std::fs::metadata(part).unwrap().len(), *kept);
    assert!(!dir.join(file).exists(), "no half-written file");
    assert!(
        err.to_string().contains("pulling again resumes there"),
        "{err}"
    );
    let model = ModelRef::parse("tiny/Tiny-Llama-GGUF:Q8_0").unwrap();
    assert_eq!(hub::find_pulled(&model, &dir), None);

    // The next pull asks for the rest, and the whole file has the hub's checksum.
    let kept = *kept;
    hub.release(file);
    hub.seen();
    let mut starts = Vec::new();
    let pulled = hub::pull_file(
        &options(&hub, 0),
        GGUF_REPO,
        file,
        &dir,
        &AtomicBool::new(false),
        &mut |e| {
            if let PullEvent::Start { done, .. } = e {
                starts.push(done)
            }
        },
    )
    .unwrap();
    assert_eq!(starts, [kept]);
    assert_eq!(pulled.path, dir.join(file));
    assert_eq!(pulled.downloaded, size - kept);
    assert_eq!(
        hearth_testkit::hub::sha256(&std::fs::read(&pulled.path).unwrap()),
        hearth_testkit::hub::sha256(&gguf(32))
    );
    let ranges: Vec<String> = hub.seen().into_iter().filter_map(|s| s.range).collect();
    assert_eq!(ranges.last(), Some(&format!("bytes={kept}-")));
    assert_eq!(hidden_entries(&dir), Vec::<String>::new());
    // Recorded under its quantization (not the bare name: Q4_K_M is the default).
    assert_eq!(hub::find_pulled(&model, &dir), Some(pulled.path.clone()));
    let bare = ModelRef::parse(GGUF_REPO).unwrap();
    assert_eq!(hub::find_pulled(&bare, &dir), None);

    // A flag set before the pull starts fetches nothing, and leaves nothing.
    let cancel = AtomicBool::new(true);
    let err = hub::pull_file(
        &options(&hub, 0),
        GGUF_REPO,
        "Tiny-Llama-Q4_K_M.gguf",
        &dir,
        &cancel,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(err, Error::PullCancelled { kept: 0, .. }), "{err}");
    assert!(!dir.join("Tiny-Llama-Q4_K_M.gguf").exists());
    // A file that is not a model is refused by name.
    let err = hub::pull_file(
        &options(&hub, 0),
        GGUF_REPO,
        "mmproj-Tiny-Llama-f16.gguf",
        &dir,
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("is not a GGUF model file"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
