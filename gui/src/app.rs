//! The application state and what the user can do with it. Views (in `views/`) draw this
//! state and call these actions; the inference thread (`worker`) does the work.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hearth_models::ChatMessage;
use hearth_runtime::kv::KvUsage;
use hearth_runtime::session::{FinishReason, GenerateParams};
use hearth_runtime::vk::DeviceInfo;

use crate::conversations::{AnswerStats, Conversation, Message, Role, Store};
use crate::library::{self, LibraryEntry, ModelCard};
use crate::settings::{ModelSettings, Preferences, ThemeChoice};
use crate::worker::{Event, LoadRequest, Loaded, Worker};

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
    pub model: ModelState,
    /// How the current model was asked to load.
    pub load_request: Option<LoadRequest>,
    /// Settings being edited for the loaded (or loading) model.
    pub settings: ModelSettings,
    pub generating: Option<Generating>,
    pub last_run: LastRun,
    pub input: String,
    /// A user message being edited: its index and the new text.
    pub editing: Option<(usize, String)>,
    /// A conversation being renamed: its id and the new title.
    pub renaming: Option<(String, String)>,
    /// Errors and notices shown at the top until dismissed.
    pub notices: Vec<String>,
    pub view: View,
    pub show_settings: bool,
    pub markdown: egui_commonmark::CommonMarkCache,
    /// Added to the seed so each answer samples afresh (regenerate gives a new answer).
    answers: u64,
    worker: Option<Worker>,
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
            hearth_runtime::vk::list_devices().map_err(|e| e.to_string())
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
            model: ModelState::Empty,
            load_request: None,
            settings: ModelSettings::default(),
            generating: None,
            last_run: LastRun::default(),
            input: String::new(),
            editing: None,
            renaming: None,
            notices,
            view: View::Library,
            show_settings: false,
            markdown: egui_commonmark::CommonMarkCache::default(),
            answers: 0,
            worker: None,
            applied_theme: None,
        }
    }

    /// Draws one frame of the whole window.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        crate::views::show(self, ui);
    }

    /// Handles the inference thread's events; called at the start of every frame.
    pub fn poll(&mut self, ctx: &egui::Context) {
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
        if self.generating.is_some() {
            // Keep the tokens/s figure ticking between tokens.
            ctx.request_repaint_after(Duration::from_millis(250));
        }
    }

    fn worker(&mut self) -> &mut Worker {
        // `poll` starts it on the first frame, with the UI to wake; an action before any
        // frame (a test driving the state) gets one that wakes nothing.
        self.worker.get_or_insert_with(|| Worker::spawn(|| {}))
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Loading { done: d, total: t } => {
                if let ModelState::Loading { done, total, .. } = &mut self.model {
                    (*done, *total) = (d, t);
                }
            }
            Event::Loaded(loaded) => {
                if let ModelState::Loading { card, .. } =
                    std::mem::replace(&mut self.model, ModelState::Empty)
                {
                    self.prefs.last_model = Some(card.path.clone());
                    self.save_prefs();
                    self.last_run = LastRun {
                        kv: loaded.kv,
                        ..LastRun::default()
                    };
                    self.model = ModelState::Ready { card, loaded };
                    self.view = View::Chat;
                }
            }
            Event::LoadFailed(message) => {
                self.model = ModelState::Empty;
                self.notices.push(message);
            }
            Event::Started { prompt_tokens } => {
                if let Some(g) = &mut self.generating {
                    g.prompt_tokens = Some(prompt_tokens);
                }
            }
            Event::Text(text) => {
                if let Some(g) = &mut self.generating {
                    g.first_text.get_or_insert_with(Instant::now);
                    g.pieces += 1;
                    g.text.push_str(&text);
                }
            }
            Event::Finished(finished) => {
                let Some(g) = self.generating.take() else {
                    return;
                };
                let gen = &finished.generation;
                let t = &gen.timings;
                let stats = AnswerStats {
                    tokens: t.generated_tokens,
                    tokens_per_second: t.generation_tokens_per_second(),
                    ttft_ms: g
                        .first_text
                        .map_or(t.prompt.as_secs_f64(), |f| (f - g.started).as_secs_f64())
                        * 1e3,
                    finish: finish_name(gen.finish).to_string(),
                };
                self.last_run = LastRun {
                    tokens_per_second: (t.generated_tokens > 1).then_some(stats.tokens_per_second),
                    ttft: Some(Duration::from_secs_f64(stats.ttft_ms / 1e3)),
                    context_used: finished.context_used,
                    kv: finished.kv,
                    fetched: finished
                        .infinigen
                        .filter(|s| s.selections > 0)
                        .map(|s| s.fetched_fraction()),
                };
                let mut message = Message::assistant(gen.text.trim());
                message.stats = Some(stats);
                self.chat.messages.push(message);
                self.save_chat();
            }
            Event::Failed(message) => {
                if self.generating.take().is_some() {
                    // The request never produced an answer: give the question back to edit.
                    if let Some(last) = self.chat.messages.last() {
                        if last.role == Role::User && self.input.is_empty() {
                            self.input = last.text.clone();
                            self.chat.messages.pop();
                        }
                    }
                }
                self.notices.push(message);
            }
        }
    }

    // ----- models -----

    pub fn refresh_library(&mut self) {
        self.library = library::scan(&self.config.models_dir);
    }

    /// Starts loading `path` with its saved settings; the current model is freed first.
    pub fn load_model(&mut self, path: PathBuf) {
        if self.generating.is_some() {
            self.notices
                .push("Stop the answer being generated before loading a model.".into());
            return;
        }
        let card = match ModelCard::read(&path) {
            Ok(card) => card,
            Err(e) => {
                self.notices.push(format!("Could not open the model: {e}"));
                return;
            }
        };
        self.settings = self.prefs.model(&card);
        let request = LoadRequest {
            path,
            device: self.prefs.device,
            n_ctx: self.settings.n_ctx,
            kv_budget_tokens: self.settings.kv_budget_tokens,
            kv_offload: self.settings.kv_offload,
            infinigen: self.settings.infinigen,
        };
        self.load_request = Some(request.clone());
        let id = self.worker().load(request);
        self.model = ModelState::Loading {
            id,
            card,
            done: 0,
            total: 1,
        };
    }

    /// Reloads the current model (after changing its context, KV cache settings or the device).
    pub fn reload_model(&mut self) {
        if let Some(card) = self.card() {
            let path = card.path.clone();
            self.save_model_settings();
            self.load_model(path);
        }
    }

    /// Whether the context, KV cache settings or device differ from what the model was loaded
    /// with.
    pub fn needs_reload(&self) -> bool {
        self.load_request
            .as_ref()
            .is_some_and(|r| r.device != self.prefs.device || r.differs_from(&self.settings))
    }

    pub fn cancel_load(&mut self) {
        if let ModelState::Loading { id, .. } = self.model {
            self.worker().cancel_load(id);
        }
    }

    pub fn card(&self) -> Option<&ModelCard> {
        match &self.model {
            ModelState::Empty => None,
            ModelState::Loading { card, .. } | ModelState::Ready { card, .. } => Some(card),
        }
    }

    pub fn loaded(&self) -> Option<&Loaded> {
        match &self.model {
            ModelState::Ready { loaded, .. } => Some(loaded),
            _ => None,
        }
    }

    pub fn save_model_settings(&mut self) {
        if let Some(name) = self.card().map(|c| c.name.clone()) {
            self.prefs.models.insert(name, self.settings.clone());
            self.save_prefs();
        }
    }

    /// Puts back the model's own defaults.
    pub fn reset_model_settings(&mut self) {
        if let Some(card) = self.card() {
            self.settings = ModelSettings::for_model(card);
            self.save_model_settings();
        }
    }

    pub fn set_device(&mut self, device: Option<usize>) {
        if self.prefs.device != device {
            self.prefs.device = device;
            self.save_prefs();
        }
    }

    pub fn set_theme(&mut self, theme: ThemeChoice) {
        self.prefs.theme = theme;
        self.save_prefs();
    }

    fn apply_theme(&mut self, ctx: &egui::Context) {
        if self.applied_theme == Some(self.prefs.theme) {
            return;
        }
        self.applied_theme = Some(self.prefs.theme);
        ctx.set_theme(match self.prefs.theme {
            ThemeChoice::System => egui::ThemePreference::System,
            ThemeChoice::Dark => egui::ThemePreference::Dark,
            ThemeChoice::Light => egui::ThemePreference::Light,
        });
    }

    fn save_prefs(&mut self) {
        if let Err(e) = self.prefs.save(&self.config.data_dir.join(SETTINGS_FILE)) {
            self.notices.push(e);
        }
    }

    // ----- chatting -----

    pub fn can_send(&self) -> bool {
        self.loaded().is_some() && self.generating.is_none()
    }

    /// Sends the text in the input box.
    pub fn send(&mut self) {
        let text = self.input.trim().to_string();
        if text.is_empty() || !self.can_send() {
            return;
        }
        self.input.clear();
        self.chat.messages.push(Message::user(text));
        self.answer();
    }

    /// Asks for an answer to the conversation as it stands (ending with a user message).
    fn answer(&mut self) {
        let mut messages = Vec::new();
        if !self.chat.system.trim().is_empty() {
            messages.push(ChatMessage::new("system", self.chat.system.trim()));
        }
        messages.extend(
            self.chat
                .messages
                .iter()
                .map(|m| ChatMessage::new(m.role.as_str(), m.text.as_str())),
        );
        let mut sampler = self.settings.sampler.clone();
        sampler.seed = sampler.seed.wrapping_add(self.answers);
        self.answers += 1;
        let params = GenerateParams {
            max_tokens: (self.settings.max_tokens > 0).then_some(self.settings.max_tokens),
            sampler,
            ..GenerateParams::default()
        };
        self.chat.model = self.card().map(|c| c.name.clone());
        self.save_chat();
        let id = self.worker().generate(messages, params);
        self.generating = Some(Generating {
            id,
            text: String::new(),
            started: Instant::now(),
            first_text: None,
            pieces: 0,
            prompt_tokens: None,
            stopping: false,
        });
    }

    pub fn stop(&mut self) {
        if let Some(id) = self.generating.as_mut().map(|g| {
            g.stopping = true;
            g.id
        }) {
            self.worker().stop(id);
        }
    }

    /// Drops the last answer and asks again.
    pub fn regenerate(&mut self) {
        if !self.can_send() || self.chat.messages.last().map(|m| m.role) != Some(Role::Assistant) {
            return;
        }
        self.chat.messages.pop();
        self.answer();
    }

    pub fn start_edit(&mut self, index: usize) {
        if let Some(m) = self.chat.messages.get(index) {
            self.editing = Some((index, m.text.clone()));
        }
    }

    /// Replaces the edited user message, drops everything after it and asks again.
    pub fn finish_edit(&mut self) {
        let Some((index, text)) = self.editing.take() else {
            return;
        };
        if text.trim().is_empty() || !self.can_send() || index >= self.chat.messages.len() {
            self.editing = Some((index, text));
            return;
        }
        self.chat.messages.truncate(index);
        self.chat.messages.push(Message::user(text.trim()));
        self.answer();
    }

    /// Opens an empty conversation (the current one stays saved).
    pub fn new_chat(&mut self) {
        if self.generating.is_some() {
            return;
        }
        self.chat = Conversation::new(self.chat.system.clone());
        self.editing = None;
        self.view = View::Chat;
        self.worker().forget();
    }

    pub fn open_chat(&mut self, id: &str) {
        if self.generating.is_some() || self.chat.id == id {
            self.view = View::Chat;
            return;
        }
        if let Some(c) = self.saved.iter().find(|c| c.id == id) {
            self.chat = c.clone();
            self.editing = None;
            self.view = View::Chat;
        }
    }

    pub fn rename_chat(&mut self, id: &str, title: &str) {
        let title = title.trim().to_string();
        if self.chat.id == id {
            self.chat.title = title.clone();
        }
        if let Some(c) = self.saved.iter_mut().find(|c| c.id == id) {
            c.title = title;
            let mut c = c.clone();
            if let Err(e) = self.store.save(&mut c) {
                self.notices.push(e.to_string());
            }
        }
    }

    pub fn delete_chat(&mut self, id: &str) {
        if self.chat.id == id && self.generating.is_some() {
            return;
        }
        if let Err(e) = self.store.delete(id) {
            self.notices.push(e.to_string());
            return;
        }
        self.saved.retain(|c| c.id != id);
        if self.chat.id == id {
            self.chat = Conversation::new(self.chat.system.clone());
            self.worker().forget();
        }
    }

    /// Saves the open conversation once it has messages, and updates the sidebar.
    pub fn save_chat(&mut self) {
        if self.chat.messages.is_empty() {
            return;
        }
        self.chat.touch();
        if let Err(e) = self.store.save(&mut self.chat) {
            self.notices.push(e.to_string());
            return;
        }
        self.saved.retain(|c| c.id != self.chat.id);
        self.saved.insert(0, self.chat.clone());
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
    }

    /// Context in use: during an answer, the prompt plus what came so far.
    pub fn context_used(&self) -> usize {
        match &self.generating {
            Some(g) => g.prompt_tokens.unwrap_or(0) + g.pieces,
            None => self.last_run.context_used,
        }
    }
}

pub fn finish_name(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Eos => "eos",
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
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

/// Hearth's look: a little more room than egui's defaults, for reading long answers.
pub fn style(ctx: &egui::Context) {
    ctx.all_styles_mut(|style| {
        style.spacing.item_spacing = egui::vec2(8.0, 6.0);
        style.spacing.button_padding = egui::vec2(8.0, 4.0);
        style.spacing.interact_size.y = 24.0;
        for (text_style, size) in [
            (egui::TextStyle::Body, 14.5),
            (egui::TextStyle::Button, 14.0),
            (egui::TextStyle::Monospace, 13.5),
            (egui::TextStyle::Heading, 20.0),
            (egui::TextStyle::Small, 11.5),
        ] {
            if let Some(font) = style.text_styles.get_mut(&text_style) {
                font.size = size;
            }
        }
    });
    // Text a little stronger than egui's grey, for long answers.
    ctx.style_mut_of(egui::Theme::Dark, |style| {
        style.visuals.widgets.noninteractive.fg_stroke.color = egui::Color32::from_gray(208);
    });
    ctx.style_mut_of(egui::Theme::Light, |style| {
        style.visuals.widgets.noninteractive.fg_stroke.color = egui::Color32::from_gray(32);
    });
}
