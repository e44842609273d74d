//! The application state and what the user can do with it. Views (in `views/`) draw this
//! state and call these actions; the inference thread (`worker`) does the work.
//!
//! The actions are split by what they act on: the model slot and its settings (`models`), the
//! conversation (`chat`), the worker's events (`events`), the Hugging Face hub's search and
//! downloads (`hub`) and the look (`look`).

mod chat;
mod events;
mod hub;
mod look;
mod models;
mod serve;

pub use events::finish_name;
pub use hub::{Download, HubView};
pub use look::style;
pub use serve::Serving;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hearth_engine::placement::CpuExecutorInfo;
use hearth_kernels::vk::DeviceInfo;
use hearth_model::kv::KvUsage;
use hearth_models::hub::HubOptions;

use crate::conversations::{Conversation, Message, Store};
use crate::hub::Hub;
use crate::library::{self, LibraryEntry, ModelCard};
use crate::planner::Planner;
use crate::settings::{ModelSettings, Preferences, ThemeChoice};
use crate::worker::{LoadRequest, Loaded, Worker};

/// Where the app keeps its files and finds models.
#[derive(Clone, Debug)]
pub struct AppConfig {
    pub models_dir: PathBuf,
    /// Conversations and settings live here.
    pub data_dir: PathBuf,
    /// Load this model when the window opens.
    pub open_model: Option<PathBuf>,
    /// List Vulkan devices at start (tests turn it off to start faster).
    pub list_devices: bool,
    /// Where the library searches for models and downloads them from.
    pub hub: HubOptions,
}

/// The model slot.
pub enum ModelState {
    Empty,
    Loading {
        id: u64,
        card: ModelCard,
        done: u64,
        total: u64,
    },
    Ready {
        card: ModelCard,
        loaded: Box<Loaded>,
    },
}

/// An answer being generated.
pub struct Generating {
    pub id: u64,
    pub text: String,
    pub started: Instant,
    pub first_text: Option<Instant>,
    /// Text pieces received; one per token, bar multi-byte characters split across tokens.
    pub pieces: usize,
    pub prompt_tokens: Option<usize>,
    /// Asked to stop; the worker finishes the current token first.
    pub stopping: bool,
}

impl Generating {
    /// Tokens per second since the first piece of text.
    pub fn tokens_per_second(&self) -> Option<f64> {
        let first = self.first_text?;
        let secs = first.elapsed().as_secs_f64();
        (self.pieces > 1 && secs > 0.0).then(|| (self.pieces - 1) as f64 / secs)
    }
}

/// Figures of the last finished answer, for the status bar.
#[derive(Clone, Debug, Default)]
pub struct LastRun {
    pub tokens_per_second: Option<f64>,
    pub ttft: Option<Duration>,
    pub context_used: usize,
    pub kv: Option<KvUsage>,
    /// Share of the cached tokens InfiniGen fetched, when it is on.
    pub fetched: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Chat,
    Library,
}

pub struct App {
    pub config: AppConfig,
    pub prefs: Preferences,
    pub store: Store,
    /// Saved conversations for the sidebar, newest first.
    pub saved: Vec<Conversation>,
    /// The open conversation (saved once it has a message).
    pub chat: Conversation,
    pub library: Result<Vec<LibraryEntry>, String>,
    pub devices: Result<Vec<DeviceInfo>, String>,
    /// The native CPU executor: its instruction set and threads.
    pub cpu_executor: CpuExecutorInfo,
    pub model: ModelState,
    /// How the current model was asked to load.
    pub load_request: Option<LoadRequest>,
    /// Settings being edited for the loaded (or loading) model.
    pub settings: ModelSettings,
    pub generating: Option<Generating>,
    pub last_run: LastRun,
    /// The OpenAI-compatible server for the loaded model.
    pub serving: Serving,
    pub input: String,
    /// A user message being edited: its index and the new text.
    pub editing: Option<(usize, String)>,
    /// A conversation being renamed: its id and the new title.
    pub renaming: Option<(String, String)>,
    /// Errors and notices shown at the top until dismissed.
    pub notices: Vec<String>,
    pub view: View,
    pub show_settings: bool,
    /// The library's search of the Hugging Face hub and its download.
    pub hub: HubView,
    pub markdown: egui_commonmark::CommonMarkCache,
    /// Added to the seed so each answer samples afresh (regenerate gives a new answer).
    answers: u64,
    worker: Option<Worker>,
    /// Plans the GPU layers being edited; started when first asked.
    planner: Option<Planner>,
    /// Searches and downloads; started when first asked.
    hub_threads: Option<Hub>,
    /// The window's context, once a frame has run: what background threads wake.
    ctx: Option<egui::Context>,
    applied_theme: Option<ThemeChoice>,
}

const SETTINGS_FILE: &str = "settings.json";

impl App {
    pub fn new(config: AppConfig) -> Self {
        let mut notices = Vec::new();
        let prefs = Preferences::load(&config.data_dir.join(SETTINGS_FILE)).unwrap_or_else(|e| {
            notices.push(e);
            Preferences::default()
        });
        let store = Store::new(config.data_dir.join("conversations"));
        let loaded = store.load_all();
        notices.extend(loaded.errors.iter().map(|e| e.to_string()));
        let devices = if config.list_devices {
            hearth_kernels::vk::list_devices().map_err(|e| e.to_string())
        } else {
            Ok(Vec::new())
        };
        Self {
            library: library::scan(&config.models_dir),
            config,
            prefs,
            store,
            saved: loaded.conversations,
            chat: Conversation::new(""),
            devices,
            cpu_executor: CpuExecutorInfo::detect(None),
            model: ModelState::Empty,
            load_request: None,
            settings: ModelSettings::default(),
            generating: None,
            last_run: LastRun::default(),
            serving: Serving::Off,
            input: String::new(),
            editing: None,
            renaming: None,
            notices,
            view: View::Library,
            show_settings: false,
            hub: HubView::default(),
            markdown: egui_commonmark::CommonMarkCache::default(),
            answers: 0,
            worker: None,
            planner: None,
            hub_threads: None,
            ctx: None,
            applied_theme: None,
        }
    }

    /// Draws one frame of the whole window.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        crate::views::show(self, ui);
    }

    /// Handles the inference thread's events; called at the start of every frame.
    pub fn poll(&mut self, ctx: &egui::Context) {
        if self.ctx.is_none() {
            self.ctx = Some(ctx.clone());
        }
        if self.worker.is_none() {
            let ctx = ctx.clone();
            self.worker = Some(Worker::spawn(move || ctx.request_repaint()));
            if let Some(path) = self.config.open_model.clone() {
                self.load_model(path);
            }
        }
        self.apply_theme(ctx);
        while let Some(event) = self.worker.as_ref().and_then(Worker::try_recv) {
            self.handle(event);
        }
        self.poll_hub(ctx);
        if self.generating.is_some() {
            // Keep the tokens/s figure ticking between tokens.
            ctx.request_repaint_after(Duration::from_millis(250));
        }
    }

    pub(super) fn worker(&mut self) -> &mut Worker {
        // `poll` starts it on the first frame, with the UI to wake; an action before any
        // frame (a test driving the state) gets one that wakes nothing.
        self.worker.get_or_insert_with(|| Worker::spawn(|| {}))
    }

    /// Called when the window closes: stops an answer in progress, keeps what it said so far
    /// and saves everything.
    pub fn shutdown(&mut self) {
        if self.generating.is_some() {
            self.stop();
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.generating.is_some() && Instant::now() < deadline {
                match self
                    .worker
                    .as_ref()
                    .and_then(|w| w.recv_timeout(Duration::from_millis(100)))
                {
                    Some(event) => self.handle(event),
                    None => continue,
                }
            }
            // The worker did not answer in time: keep the partial text anyway.
            if let Some(g) = self.generating.take() {
                self.chat.messages.push(Message::assistant(g.text.trim()));
            }
        }
        self.save_chat();
        self.save_model_settings();
        self.worker = None;
        self.planner = None;
        self.hub_threads = None;
    }
}

impl eframe::App for App {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }

    fn on_exit(&mut self, _gl: Option<&eframe::glow::Context>) {
        self.shutdown();
    }
}
