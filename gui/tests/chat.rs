//! The app driven through its widgets (found by their accessible names, as a screen reader
//! would) with SmolLM2-135M-Instruct on the Vulkan device (chosen in the saved preferences,
//! since a machine whose only Vulkan device is lavapipe defaults to the CPU executor): load it
//! from the library, ask, watch the answer stream, stop, regenerate, edit and resend, close
//! mid-answer, and reopen the saved conversation in a fresh app; the device picker's CPU
//! executor; and a model split between the CPU executor and the device by GPU layers.
//!
//! Outside CI a machine without the model skips the model tests; in CI a missing model fails
//! them.

use std::path::Path;
use std::time::{Duration, Instant};

use egui::accesskit::Role;
use egui_kittest::kittest::Queryable;
use egui_kittest::Harness;
use hearth_gui::conversations::{Role as Speaker, Store};
use hearth_gui::{App, AppConfig};
use hearth_models::gguf::{GgufWriter, MetaValue};

/// The model's `general.name`, which the library shows.
const MODEL_NAME: &str = "Smollm2 135M 8k Lc100K Mix1 Ep2";

fn have_model() -> bool {
    hearth_testkit::model(hearth_testkit::SMOLLM2).is_some()
}

fn harness(models_dir: &Path, data_dir: &Path) -> Harness<'static, App> {
    // The first Vulkan device, unless the test saved preferences of its own.
    let settings = data_dir.join("settings.json");
    if !settings.exists() {
        std::fs::write(&settings, r#"{"device": 0}"#).unwrap();
    }
    let app = App::new(AppConfig {
        models_dir: models_dir.to_path_buf(),
        data_dir: data_dir.to_path_buf(),
        open_model: None,
        list_devices: true,
        hub: hearth_models::hub::HubOptions::default(),
    });
    Harness::builder()
        .with_size([1100.0, 1000.0])
        .with_context_setup(hearth_gui::app::style)
        .build_ui_state(|ui, app: &mut App| app.show(ui), app)
}

/// Steps frames until `done` holds (the worker thread runs meanwhile), or fails naming `what`.
fn wait_for(
    harness: &mut Harness<'static, App>,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Harness<'static, App>) -> bool,
) {
    let start = Instant::now();
    loop {
        harness.step();
        if done(harness) {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}; notices: {:?}",
            harness.state().notices
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn idle(h: &Harness<'static, App>) -> bool {
    h.state().generating.is_none()
}

/// Types `text` into the message box and presses Enter.
/// Picks where the KV cache lives in the open settings panel.
fn choose_kv_cache(harness: &mut Harness<'static, App>, placement: &str) {
    harness
        .get_by_role_and_label(Role::ComboBox, "KV cache")
        .click();
    harness.run();
    harness.get_by_label(placement).click();
    harness.run();
}

fn ask(harness: &mut Harness<'static, App>, text: &str) {
    harness.get_by_label("Message").focus();
    harness.step();
    harness.get_by_label("Message").type_text(text);
    harness.step();
    harness.key_press(egui::Key::Enter);
    harness.step();
    assert!(
        harness.state().generating.is_some(),
        "Enter sent the message"
    );
}

const LONG: Duration = Duration::from_secs(240);

/// The answer length the chat test sets in the settings panel.
const MAX_TOKENS: usize = 96;

/// The app with SmolLM2 loaded from the library: loading it opens the chat.
fn with_smollm2_loaded(data_dir: &Path) -> Harness<'static, App> {
    let mut harness = harness(&hearth_testkit::models_dir(), data_dir);
    harness.step();
    harness.get_by_label(&format!("Load {MODEL_NAME}")).click();
    harness.step();
    wait_for(&mut harness, "the model to load", LONG, |h| {
        h.query_by_label_contains("Chat with").is_some()
    });
    assert!(harness.state().notices.is_empty());
    harness
}

#[test]
fn chat_with_smollm2() {
    if !have_model() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mut harness = with_smollm2_loaded(data.path());

    // Greedy answers, set through the settings panel, make the text predictable.
    harness.get_by_label("Settings").click();
    harness.step();
    harness
        .get_by_role_and_label(Role::Slider, "Temperature")
        .set_value_accesskit(0.0);
    harness.step();
    assert_eq!(harness.state().settings.sampler.temperature, 0.0);
    harness
        .get_by_role_and_label(Role::SpinButton, "Max tokens")
        .set_value_accesskit(MAX_TOKENS as f64);
    harness.step();
    assert_eq!(harness.state().settings.max_tokens, MAX_TOKENS);
    // InfiniGen's settings show with its placement, and changing them asks for a reload.
    assert!(harness.query_by_label("Fetch budget").is_none());
    choose_kv_cache(&mut harness, "System memory, InfiniGen");
    assert!(harness.query_by_label("Fetch budget").is_some());
    assert!(harness.state().needs_reload());
    harness.get_by_label("Model's default").click();
    harness.step();
    assert_eq!(harness.state().settings.infinigen.alpha, Some(5.0));
    harness
        .get_by_role_and_label(Role::SpinButton, "Alpha value")
        .set_value_accesskit(1000.0);
    harness.step();
    assert_eq!(harness.state().settings.infinigen.alpha, Some(1000.0));
    // Back in device memory, InfiniGen's settings need no reload.
    choose_kv_cache(&mut harness, "Device memory");
    assert!(!harness.state().needs_reload());
    harness.get_by_label("Settings").click();
    harness.step();

    // A streamed answer: text appears while generation is still running.
    ask(&mut harness, "What is the capital of France?");
    wait_for(&mut harness, "the answer to stream", LONG, |h| {
        h.state().generating.as_ref().is_some_and(|g| g.pieces >= 2)
            && h.query_by_label("Stop").is_some()
    });
    wait_for(&mut harness, "the answer to finish", LONG, idle);
    harness.step();
    let answer = harness.state().chat.messages[1].text.clone();
    assert!(answer.contains("Paris"), "{answer}");
    assert!(harness.query_by_label_contains("Paris").is_some());
    // The answer's figures, and the status bar's.
    assert_eq!(harness.query_all_by_label_contains("tok/s").count(), 2);

    // Stop midway: the partial answer stays, marked as stopped.
    ask(&mut harness, "Tell me a long story about it.");
    wait_for(&mut harness, "the story to start", LONG, |h| {
        h.state().generating.as_ref().is_some_and(|g| g.pieces >= 5)
    });
    harness.get_by_label("Stop").click();
    wait_for(&mut harness, "the story to stop", LONG, idle);
    harness.step();
    let stopped = harness.state().chat.messages[3].clone();
    assert_eq!(stopped.role, Speaker::Assistant);
    let stats = stopped.stats.as_ref().unwrap();
    assert_eq!(stats.finish, "cancelled");
    // Stopped short of the length limit, which would have ended it anyway.
    assert!(stats.tokens >= 5 && stats.tokens < MAX_TOKENS, "{stats:?}");
    assert!(harness.query_by_label_contains("stopped").is_some());

    // Regenerate replaces the last answer (here with a complete one).
    harness.get_by_label("Regenerate").click();
    harness.step();
    assert!(harness.state().generating.is_some());
    wait_for(&mut harness, "the regenerated answer", LONG, idle);
    let messages = &harness.state().chat.messages;
    assert_eq!(messages.len(), 4);
    assert_ne!(messages[3].stats.as_ref().unwrap().finish, "cancelled");

    // Edit the first question and resend: what followed it is replaced.
    harness.step();
    // The first question has scrolled out of view: act on it the way a screen reader does.
    harness
        .get_all_by_label("Edit")
        .next()
        .unwrap()
        .click_accesskit();
    harness.step();
    harness.step();
    assert_eq!(harness.state().editing.as_ref().map(|e| e.0), Some(0));
    let edit = harness.get_by_label("Edit message");
    edit.focus();
    harness.step();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness.step();
    harness
        .get_by_label("Edit message")
        .type_text("What is the capital of Germany?");
    harness.step();
    harness.get_by_label("Save and resend").click_accesskit();
    harness.step();
    wait_for(
        &mut harness,
        "the answer to the edited question",
        LONG,
        idle,
    );
    let messages = harness.state().chat.messages.clone();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0].text, "What is the capital of Germany?");
    assert!(messages[1].text.contains("Berlin"), "{}", messages[1].text);

    // Closing the window mid-answer stops it and saves what was said.
    ask(&mut harness, "Write a poem about the sea.");
    wait_for(&mut harness, "the poem to start", LONG, |h| {
        h.state().generating.as_ref().is_some_and(|g| g.pieces >= 3)
    });
    harness.state_mut().shutdown();
    let saved = Store::new(data.path().join("conversations")).load_all();
    assert!(saved.errors.is_empty(), "{:?}", saved.errors);
    assert_eq!(saved.conversations.len(), 1);
    let on_disk = &saved.conversations[0];
    assert_eq!(on_disk.messages.len(), 4);
    assert!(!on_disk.messages[3].text.is_empty());
    drop(harness);

    // A fresh app finds the conversation on disk and shows it.
    let mut harness = self::harness(&hearth_testkit::models_dir(), data.path());
    harness.step();
    harness
        .get_by_label("What is the capital of Germany?")
        .click();
    harness.step();
    harness.step();
    assert!(harness.query_by_label_contains("Berlin").is_some());
    assert_eq!(harness.state().chat.messages.len(), 4);
}

/// InfiniGen chosen in the settings panel, with its alpha set, reaches the engine on reload.
#[test]
fn infinigen_from_the_settings_panel() {
    if !have_model() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mut harness = with_smollm2_loaded(data.path());

    harness.get_by_label("Settings").click();
    harness.step();
    choose_kv_cache(&mut harness, "System memory, InfiniGen");
    harness.get_by_label("Model's default").click();
    harness.step();
    harness
        .get_by_role_and_label(Role::SpinButton, "Alpha value")
        .set_value_accesskit(1000.0);
    harness.step();
    // The button sits below the fold of the panel: press it as a screen reader does.
    harness.get_by_label("Reload to apply").click_accesskit();
    harness.step();
    assert!(!harness.state().needs_reload());
    wait_for(&mut harness, "the model to reload", LONG, |h| {
        h.state().loaded().is_some() && h.query_by_label_contains("Chat with").is_some()
    });
    assert!(
        harness.state().notices.is_empty(),
        "{:?}",
        harness.state().notices
    );
    harness.get_by_label("Settings").click();
    harness.step();

    ask(&mut harness, "What is the capital of France?");
    wait_for(&mut harness, "the answer to finish", LONG, idle);
    harness.step();
    let answer = harness.state().chat.messages[1].text.clone();
    assert!(answer.contains("Paris"), "{answer}");
    // The engine ran InfiniGen: the status bar reports what it fetched.
    assert!(harness.state().last_run.fetched.is_some());
    assert!(harness
        .query_by_label_contains("InfiniGen fetched")
        .is_some());

    // The choice is saved with the model's settings.
    let settings = &harness.state().settings;
    assert_eq!(settings.infinigen.alpha, Some(1000.0));
}

/// A corrupt model file is a readable row in the library, and loading a truncated or a
/// missing one is a readable notice; nothing panics.
#[test]
fn broken_models_are_reported() {
    let models = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(models.path().join("garbage.gguf"), b"not a model at all").unwrap();
    let mut harness = harness(models.path(), data.path());
    harness.step();
    assert!(harness.query_by_label("garbage").is_some());
    assert!(harness.query_by_label_contains("garbage.gguf").is_some());

    // A GGUF file cut off halfway through its metadata.
    let mut gguf = GgufWriter::new();
    gguf.set_metadata("general.architecture", MetaValue::String("llama".into()));
    gguf.set_metadata("general.name", MetaValue::String("Cut short".into()));
    let bytes = gguf.to_bytes().unwrap();
    let truncated = models.path().join("cut.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    harness.state_mut().load_model(truncated);
    harness.step();
    let notice = harness.state().notices.join("\n");
    assert!(
        notice.contains("Could not open the model")
            && notice.contains("cut.gguf")
            && (notice.contains("truncated") || notice.contains("past the end")),
        "{notice}"
    );
    harness.get_by_label("Dismiss").click();
    harness.step();
    assert!(harness.state().notices.is_empty());

    harness
        .state_mut()
        .load_model(models.path().join("missing.gguf"));
    harness.step();
    let notice = harness.state().notices.join("\n");
    assert!(
        notice.contains("Could not open the model") && notice.contains("missing.gguf"),
        "{notice}"
    );
    harness.get_by_label("Dismiss").click();
    harness.step();
    assert!(harness.state().notices.is_empty());
}

/// Saved conversations are listed from disk, open with their messages, and rename and delete
/// through the sidebar change the files.
#[test]
fn rename_and_delete_saved_conversations() {
    let models = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let store = Store::new(data.path().join("conversations"));
    let mut saved = hearth_gui::conversations::Conversation::new("Answer in French.");
    saved
        .messages
        .push(hearth_gui::conversations::Message::user("Bonjour ?"));
    saved
        .messages
        .push(hearth_gui::conversations::Message::assistant(
            "**Bonjour** !",
        ));
    store.save(&mut saved).unwrap();

    let mut harness = harness(models.path(), data.path());
    harness.run();
    harness.get_by_label("Bonjour ?").click();
    harness.run();
    assert_eq!(harness.state().chat.messages.len(), 2);
    assert_eq!(harness.state().chat.system, "Answer in French.");

    harness.get_by_label("Rename").click();
    harness.run();
    let title = harness.get_by_label("Conversation title");
    assert!(title.is_focused());
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness.run();
    harness
        .get_by_label("Conversation title")
        .type_text("Greetings");
    harness.run();
    harness.key_press(egui::Key::Enter);
    harness.run();
    assert!(harness.query_by_label("Greetings").is_some());
    let on_disk = store.load_all().conversations;
    assert_eq!(on_disk[0].title, "Greetings");
    assert_eq!(on_disk[0].messages, saved.messages);

    harness.get_by_label("Delete").click();
    harness.run();
    assert!(store.load_all().conversations.is_empty());
    assert!(harness.query_by_label("Greetings").is_none());
    assert!(harness.state().chat.messages.is_empty());
}

/// One HTTP/1.1 exchange on loopback; returns the status and the body.
fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("the server listens");
    s.set_read_timeout(Some(LONG)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let body = raw
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

#[test]
fn the_status_bar_serves_the_loaded_model() {
    use hearth_gui::app::Serving;
    if !have_model() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mut harness = with_smollm2_loaded(data.path());
    // Any free port, so parallel tests never collide.
    harness.state_mut().prefs.serve_port = Some(0);
    harness.get_by_label("Serve API").click();
    harness.step();
    wait_for(&mut harness, "the server to start", LONG, |h| {
        matches!(h.state().serving, Serving::On(_))
    });
    let Serving::On(addr) = harness.state().serving else {
        unreachable!()
    };
    assert!(addr.ip().is_loopback(), "{addr}");
    let url = format!("Serving http://{addr}/v1");
    harness.get_by_label(&url);

    // A client gets greedy answers while the app stays usable.
    let (status, body) = http(addr, "GET", "/v1/models", "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("SmolLM2"), "{body}");
    let request = r#"{"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}"#;
    let client = std::thread::spawn(move || http(addr, "POST", "/v1/completions", request));
    ask(&mut harness, "What is 2+2?");
    wait_for(&mut harness, "the app's answer", LONG, idle);
    let (status, body) = client.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(r#""text":" Paris.\n\nThe answer is: 201""#),
        "{body}"
    );
    assert_eq!(harness.state().chat.messages.len(), 2);

    harness.get_by_label("Stop server").click();
    harness.step();
    wait_for(&mut harness, "the server to stop", LONG, |h| {
        h.state().serving == Serving::Off
    });
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening"
    );
    assert!(
        harness.state().notices.is_empty(),
        "{:?}",
        harness.state().notices
    );
}

/// GPU layers chosen in the settings panel: what each side takes shows beside the control,
/// and on reload the first layers run on the CPU executor and the rest on the device, as the
/// status bar says.
#[test]
fn gpu_layers_split_the_model() {
    use hearth_engine::split::GpuLayers;
    if !have_model() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mut harness = with_smollm2_loaded(data.path());
    let device = harness.state().loaded().unwrap().info.device.clone();
    let device = device.split(" (").next().unwrap().to_string();

    harness.get_by_label("Settings").click();
    harness.step();
    // A short answer is enough.
    harness
        .get_by_role_and_label(Role::SpinButton, "Max tokens")
        .set_value_accesskit(16.0);
    harness.step();
    harness
        .get_by_role_and_label(Role::ComboBox, "GPU layers")
        .click();
    harness.run();
    harness.get_by_label("Layers").click();
    harness.run();
    // Every layer on the device to start; the slider moves the first 15 to the CPU.
    assert_eq!(
        harness.state().settings.gpu_layers,
        Some(GpuLayers::Count(30))
    );
    harness
        .get_by_role_and_label(Role::Slider, "GPU layer count")
        .set_value_accesskit(15.0);
    harness.step();
    assert_eq!(
        harness.state().settings.gpu_layers,
        Some(GpuLayers::Count(15))
    );
    assert!(harness.state().needs_reload());
    let on_device = format!("{device}: layers 15-29, ");
    wait_for(&mut harness, "the plan", LONG, |h| {
        h.query_by_label_contains(&on_device).is_some()
            && h.query_by_label_contains("CPU: layers 0-14, ").is_some()
    });

    harness.get_by_label("Reload to apply").click_accesskit();
    harness.step();
    assert!(!harness.state().needs_reload());
    wait_for(&mut harness, "the model to reload", LONG, |h| {
        h.state().loaded().is_some() && h.query_by_label_contains("Chat with").is_some()
    });
    assert!(
        harness.state().notices.is_empty(),
        "{:?}",
        harness.state().notices
    );
    let placement = &harness.state().loaded().unwrap().placement;
    assert_eq!(placement.len(), 2, "{placement:?}");
    assert_eq!(placement[0].executor, "cpu");
    harness.get_by_label(&format!("CPU 0-14 + {device} 15-29"));

    // The split answers (its first layers run the CPU executor's arithmetic, whose greedy
    // answer may differ from the device's).
    harness.get_by_label("Settings").click();
    harness.step();
    ask(&mut harness, "What is the capital of France?");
    wait_for(&mut harness, "the answer to finish", LONG, idle);
    assert!(
        harness.state().notices.is_empty(),
        "{:?}",
        harness.state().notices
    );
    let answer = &harness.state().chat.messages[1];
    assert!(answer.stats.as_ref().unwrap().tokens > 1, "{answer:?}");

    // Auto says how many layers it chose; the choice is saved with the model's settings.
    harness.get_by_label("Settings").click();
    harness.step();
    harness
        .get_by_role_and_label(Role::ComboBox, "GPU layers")
        .click();
    harness.run();
    harness.get_by_label("Auto").click();
    harness.run();
    wait_for(&mut harness, "the automatic plan", LONG, |h| {
        h.query_by_label_contains("Auto: ").is_some()
    });
    assert!(harness
        .query_by_label_contains("of 30 layers on the GPU")
        .is_some());
    let saved = std::fs::read_to_string(data.path().join("settings.json")).unwrap();
    assert!(saved.contains(r#""gpu_layers": "auto""#), "{saved}");
}

#[test]
fn the_device_picker_runs_the_cpu_executor() {
    if !have_model() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mut harness = harness(&hearth_testkit::models_dir(), data.path());
    harness.step();
    harness
        .get_by_role_and_label(Role::ComboBox, "Device")
        .click();
    harness.run();
    harness.get_by_label_contains("CPU executor").click();
    harness.run();
    assert!(harness.state().prefs.cpu);
    harness.get_by_label(&format!("Load {MODEL_NAME}")).click();
    harness.step();
    wait_for(&mut harness, "the model to load", LONG, |h| {
        h.query_by_label_contains("Chat with").is_some()
    });
    assert!(
        harness.state().notices.is_empty(),
        "{:?}",
        harness.state().notices
    );
    // The status bar names the executor: its instruction set and threads.
    assert!(harness.query_by_label_contains("CPU (").is_some());
    // The choice is saved for the next start.
    let saved = std::fs::read_to_string(data.path().join("settings.json")).unwrap();
    assert!(saved.contains(r#""cpu": true"#), "{saved}");
}
