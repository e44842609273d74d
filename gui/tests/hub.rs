//! The library's search of the Hugging Face hub, driven through its widgets against
//! testkit's local hub: a search and its results, a repository's quantizations with
//! llama.cpp's pick marked, a download cancelled midway (its part kept) and downloaded again
//! (resumed, checked), the model in the library and loaded; and a failing search, a search
//! with no results, and a failed download, each a message in the window. No display, no
//! network and no installed model are needed.

use std::path::Path;
use std::time::{Duration, Instant};

use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use hearth_gui::app::ModelState;
use hearth_gui::hub::Event;
use hearth_gui::{App, AppConfig};
use hearth_models::hub::HubOptions;
use hearth_models::synthetic::Shape;
use hearth_quant::Format;
use hearth_testkit::hub::{hidden_entries, Hub};

const REPO: &str = "tiny/Tiny-Llama-GGUF";
const Q8: &str = "Tiny-Llama-Q8_0.gguf";
const Q4: &str = "Tiny-Llama-Q4_K_M.gguf";

/// A synthetic tiny Llama, which the CPU executor loads.
fn model(format: Format) -> Vec<u8> {
    Shape::TINY
        .build("Tiny Llama", format)
        .unwrap()
        .bytes()
        .to_vec()
}

/// A hub with the tiny model's repository, a less downloaded one, and a folder without GGUF
/// files.
fn hub() -> Hub {
    let hub = Hub::start();
    hub.add(REPO, "README.md", b"# Tiny\n".to_vec(), false);
    hub.add(REPO, Q4, model(Format::Q4), true);
    hub.add(REPO, Q8, model(Format::Q8), true);
    hub.add(
        REPO,
        "mmproj-Tiny-Llama-f16.gguf",
        b"projector".to_vec(),
        true,
    );
    hub.set_stats(REPO, 52_300, 12);
    hub.add(
        "tiny/Tiny-Other-GGUF",
        "Other-Q2_K.gguf",
        b"other".to_vec(),
        true,
    );
    hub.set_stats("tiny/Tiny-Other-GGUF", 40, 0);
    hub.add("tiny/tiny-llama", "config.json", b"{}".to_vec(), false);
    hub
}

fn harness(hub: &Hub, models_dir: &Path, data_dir: &Path) -> Harness<'static, App> {
    // The CPU executor: no Vulkan device is needed to load the download.
    std::fs::write(data_dir.join("settings.json"), r#"{"cpu": true}"#).unwrap();
    let app = App::new(AppConfig {
        models_dir: models_dir.to_path_buf(),
        data_dir: data_dir.to_path_buf(),
        open_model: None,
        list_devices: false,
        hub: HubOptions {
            endpoint: hub.endpoint.clone(),
            ..HubOptions::default()
        },
    });
    Harness::builder()
        .with_size([1100.0, 1000.0])
        .with_context_setup(hearth_gui::app::style)
        .build_ui_state(|ui, app: &mut App| app.show(ui), app)
}

/// Steps frames until `done` holds (the hub's threads run meanwhile), or fails naming `what`.
fn wait_for(
    harness: &mut Harness<'static, App>,
    what: &str,
    done: impl Fn(&Harness<'static, App>) -> bool,
) {
    let start = Instant::now();
    loop {
        harness.step();
        if done(harness) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}; notices: {:?}; the hub: {:?}",
            harness.state().notices,
            harness.state().hub
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Types `text` into the search box and presses Enter.
fn search(harness: &mut Harness<'static, App>, text: &str) {
    let field = harness.get_by_label("Search Hugging Face");
    field.focus();
    harness.step();
    harness.get_by_label("Search Hugging Face").type_text(text);
    harness.step();
    harness.key_press(egui::Key::Enter);
    harness.step();
}

#[test]
fn search_download_cancel_resume_and_load() {
    let hub = hub();
    let models = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut harness = harness(&hub, models.path(), data.path());
    harness.step();

    search(&mut harness, "tiny");
    wait_for(&mut harness, "the results", |h| {
        h.state().hub.results.is_some()
    });
    // The GGUF repositories, most downloaded first; the folder is left out.
    let hits: Vec<String> = match &harness.state().hub.results {
        Some(Ok(hits)) => hits.iter().map(|h| h.id.clone()).collect(),
        other => panic!("{other:?}"),
    };
    assert_eq!(hits, [REPO, "tiny/Tiny-Other-GGUF"]);
    harness.step();
    assert!(harness.query_by_label("52.3k").is_some(), "downloads shown");
    assert!(hub.seen().iter().any(|s| s
        .path
        .starts_with("/api/models?search=tiny&filter=gguf&sort=downloads")));

    // Choosing it lists its model files, Q4_K_M marked as llama.cpp's pick.
    harness.get_by_label(REPO).click();
    wait_for(&mut harness, "the quantizations", |h| {
        h.state().hub.quants.is_some()
    });
    harness.step();
    assert!(harness.query_by_label("Q4_K_M ★").is_some());
    assert!(harness.query_by_label("Q8_0").is_some());
    assert!(harness.query_by_label(Q8).is_some());
    assert!(
        harness
            .query_by_label("mmproj-Tiny-Llama-f16.gguf")
            .is_none(),
        "a projector is no model to download"
    );

    // Download Q8_0, which the hub holds halfway, and cancel it there.
    let size = model(Format::Q8).len() as u64;
    let half = size / 2;
    hub.hold(Q8, half as usize);
    harness.get_by_label(&format!("Download {Q8}")).click();
    harness.step();
    wait_for(&mut harness, "the download to reach the hold", |h| {
        h.state()
            .hub
            .download
            .as_ref()
            .is_some_and(|d| d.done == half)
    });
    assert!(harness.query_by_label("Download progress").is_some());
    let d = harness.state().hub.download.as_ref().unwrap();
    assert_eq!((d.repo.as_str(), d.file.as_str(), d.size), (REPO, Q8, size));
    harness.get_by_label("Cancel download").click();
    // The click is handled in one frame, and the next one shows it.
    harness.step();
    harness.step();
    assert!(harness.query_by_label("Cancelling…").is_some());
    // The download stops at its next read: the byte the hub sends once released.
    hub.release(Q8);
    wait_for(&mut harness, "the cancel", |h| {
        h.state().hub.download.is_none()
    });
    let notice = harness.state().notices.join("\n");
    assert!(
        notice.contains(&format!("Download of {Q8} cancelled")) && notice.contains("resumes there"),
        "{notice}"
    );
    let part = models.path().join(format!(".{Q8}.part"));
    let kept = std::fs::metadata(&part).unwrap().len();
    assert_eq!(kept, half + 1);
    assert!(!models.path().join(Q8).exists(), "no half-written file");
    // The notice goes at the end of the frame that handles the click, and the layout
    // settles on the next.
    harness.get_by_label("Dismiss").click();
    harness.step();
    harness.step();

    // Downloaded again: it resumes from the part, and the file is the hub's.
    hub.seen();
    harness.get_by_label(&format!("Download {Q8}")).click();
    wait_for(&mut harness, "the download", |h| {
        h.state().hub.downloaded.is_some()
    });
    assert!(
        harness.state().notices.is_empty(),
        "{:?}",
        harness.state().notices
    );
    let ranges: Vec<String> = hub.seen().into_iter().filter_map(|s| s.range).collect();
    assert_eq!(ranges.last(), Some(&format!("bytes={kept}-")));
    let file = models.path().join(Q8);
    assert_eq!(std::fs::read(&file).unwrap(), model(Format::Q8));
    assert_eq!(hidden_entries(models.path()), Vec::<String>::new());

    // The library lists it, and it loads.
    harness.step();
    let listed: Vec<_> = match &harness.state().library {
        Ok(entries) => entries.iter().map(|e| e.path.clone()).collect(),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(listed, std::slice::from_ref(&file));
    harness
        .get_by_label("Load downloaded Tiny-Llama-Q8_0")
        .click();
    harness.step();
    wait_for(&mut harness, "the model to load", |h| {
        matches!(h.state().model, ModelState::Ready { .. }) || !h.state().notices.is_empty()
    });
    assert!(
        harness.state().notices.is_empty(),
        "{:?}",
        harness.state().notices
    );
    assert_eq!(harness.state().card().unwrap().path, file);
}

#[test]
fn failures_are_messages_in_the_window() {
    let hub = hub();
    let models = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut harness = harness(&hub, models.path(), data.path());
    harness.step();

    search(&mut harness, "nothing like it");
    wait_for(&mut harness, "the results", |h| {
        h.state().hub.results.is_some()
    });
    harness.step();
    assert!(harness
        .query_by_label("No GGUF models on the hub match “nothing like it”.")
        .is_some());

    hub.fail_searches(Some(503));
    harness.get_by_label("Search").click();
    wait_for(&mut harness, "the results", |h| {
        h.state().hub.results.is_some()
    });
    harness.step();
    assert!(harness
        .query_by_label_contains("The search failed")
        .is_some());
    assert!(harness.query_by_label_contains("status 503").is_some());
    assert!(harness
        .query_by_label_contains("/api/models?search=nothing%20like%20it&filter=gguf")
        .is_some());
    hub.fail_searches(None);

    // A file whose checksum is wrong fails with the hub's error, leaving nothing behind.
    hub.file_mut(REPO, Q4, |f| f.wrong_checksum = true);
    harness.state_mut().select_repo(REPO.into());
    wait_for(&mut harness, "the quantizations", |h| {
        h.state().hub.quants.is_some()
    });
    harness.step();
    harness.get_by_label(&format!("Download {Q4}")).click();
    wait_for(&mut harness, "the failure", |h| {
        h.state().hub.download.is_none()
    });
    let notice = harness.state().notices.join("\n");
    assert!(
        notice.contains(&format!("Could not download {Q4}")) && notice.contains("checksum"),
        "{notice}"
    );
    assert_eq!(std::fs::read_dir(models.path()).unwrap().count(), 0);
}

/// The state follows the hub threads' events: answers to an older query or another
/// repository, and events of another download, are left out; a download's events start it
/// and end it.
#[test]
fn events_move_the_library_state() {
    let hub = hub();
    let models = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut app = harness(&hub, models.path(), data.path()).into_state();
    app.hub.query = "tiny".into();
    app.search_hub();
    assert!(app.hub.searching());
    app.handle_hub(Event::Results {
        query: "older".into(),
        hits: Ok(Vec::new()),
    });
    assert!(app.hub.searching(), "an older query's answer is left out");
    app.handle_hub(Event::Results {
        query: "tiny".into(),
        hits: Err("boom".into()),
    });
    assert_eq!(app.hub.results, Some(Err("boom".into())));

    app.select_repo(REPO.into());
    app.handle_hub(Event::Quants {
        repo: "other/repo".into(),
        quants: Ok(Vec::new()),
    });
    assert_eq!(app.hub.quants, None);

    app.download(Q8.into());
    let id = app.hub.download.as_ref().unwrap().id;
    app.handle_hub(Event::Started {
        id,
        size: 1000,
        done: 250,
    });
    app.handle_hub(Event::Started {
        id: id + 1,
        size: 2000,
        done: 999,
    });
    app.handle_hub(Event::Downloaded {
        id: id + 1,
        path: models.path().join("other.gguf"),
    });
    let d = app.hub.download.as_ref().unwrap();
    assert_eq!((d.done, d.size, d.fraction()), (250, 1000, 0.25));
    assert_eq!(app.hub.downloaded, None);
    // A second download waits for the first.
    app.download(Q4.into());
    assert_eq!(app.hub.download.as_ref().unwrap().file, Q8);
    assert_eq!(app.notices.len(), 1);
    app.cancel_download();
    assert!(app.hub.download.as_ref().unwrap().cancelling);
    app.handle_hub(Event::Stopped {
        id,
        cancelled: true,
        message: "cancelled".into(),
    });
    assert!(app.hub.download.is_none());
    assert_eq!(app.notices.last().map(String::as_str), Some("cancelled"));
}
