//! The inference thread. It owns the [`Engine`]; the UI sends it commands and reads events
//! over channels, so loading and generation never block a frame.
//!
//! Stopping and cancelling go through atomics rather than the command channel, because the
//! worker is busy inside the engine when they matter: each generation and load has a number,
//! and the UI raises a shared watermark to that number to stop it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use hearth_models::ChatMessage;
use hearth_runtime::engine::{Engine, EngineOptions, ModelInfo};
use hearth_runtime::kv::infinigen::IgStats;
use hearth_runtime::kv::policy::KvPolicyKind;
use hearth_runtime::kv::KvPlacement;
use hearth_runtime::kv::{KvType, KvUsage};
use hearth_runtime::model::KvBudget;
use hearth_runtime::session::{GenerateParams, Generation};

use crate::settings::{InfinigenSettings, KvOffload, ModelSettings};

/// What to load, and how.
#[derive(Clone, Debug)]
pub struct LoadRequest {
    pub path: PathBuf,
    /// Vulkan device index; `None` picks the best.
    pub device: Option<usize>,
    pub n_ctx: usize,
    /// KV pool in tokens; 0 sizes it for the whole context.
    pub kv_budget_tokens: usize,
    pub kv_offload: KvOffload,
    pub kv_type: KvType,
    /// Used with `KvOffload::Infinigen`.
    pub infinigen: InfinigenSettings,
}

impl LoadRequest {
    /// Whether `s` asks for another engine than this request made: its context, KV cache, or
    /// InfiniGen's settings where InfiniGen runs (they shape the engine's buffers and skew).
    pub fn differs_from(&self, s: &ModelSettings) -> bool {
        self.n_ctx != s.n_ctx
            || self.kv_budget_tokens != s.kv_budget_tokens
            || self.kv_offload != s.kv_offload
            || self.kv_type != s.kv_type
            || (s.kv_offload == KvOffload::Infinigen && self.infinigen != s.infinigen)
    }
}

enum Command {
    Load(u64, LoadRequest),
    Generate(u64, Vec<ChatMessage>, GenerateParams),
    Forget,
}

/// A model ready to chat.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub info: ModelInfo,
    pub n_ctx: usize,
    pub kv: Option<KvUsage>,
}

/// How a generation ended.
#[derive(Clone, Debug)]
pub struct Finished {
    pub generation: Generation,
    /// Tokens in the KV cache afterwards: the conversation so far.
    pub context_used: usize,
    pub kv: Option<KvUsage>,
    /// What InfiniGen fetched so far, when it is on.
    pub infinigen: Option<IgStats>,
}

#[derive(Debug)]
pub enum Event {
    Loading {
        done: u64,
        total: u64,
    },
    Loaded(Box<Loaded>),
    /// The load failed or was cancelled; the message says which.
    LoadFailed(String),
    /// The prompt is tokenized and fits: `prompt_tokens` of the context are in use.
    Started {
        prompt_tokens: usize,
    },
    Text(String),
    Finished(Box<Finished>),
    /// The request was refused or the engine failed; the conversation is unchanged.
    Failed(String),
}

pub struct Worker {
    commands: Option<Sender<Command>>,
    events: Receiver<Event>,
    /// Generations and loads numbered at or below these stop.
    stop_below: Arc<AtomicU64>,
    cancel_below: Arc<AtomicU64>,
    next_id: u64,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the thread; `notify` runs after every event (to wake the UI).
    pub fn spawn(notify: impl Fn() + Send + 'static) -> Self {
        let (commands, rx) = channel();
        let (tx, events) = channel();
        let stop_below = Arc::new(AtomicU64::new(0));
        let cancel_below = Arc::new(AtomicU64::new(0));
        let mut state = State {
            engine: None,
            events: tx,
            notify: Box::new(notify),
            stop_below: stop_below.clone(),
            cancel_below: cancel_below.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("hearth-inference".into())
            .spawn(move || {
                for command in rx {
                    state.run(command);
                }
            })
            .expect("spawning the inference thread");
        Self {
            commands: Some(commands),
            events,
            stop_below,
            cancel_below,
            next_id: 1,
            thread: Some(thread),
        }
    }

    fn send(&mut self, command: impl FnOnce(u64) -> Command) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        if let Some(commands) = &self.commands {
            // The thread only ends when this sender is dropped.
            let _ = commands.send(command(id));
        }
        id
    }

    /// Loads a model, replacing (and first freeing) the current one.
    pub fn load(&mut self, request: LoadRequest) -> u64 {
        self.send(|id| Command::Load(id, request))
    }

    pub fn cancel_load(&self, id: u64) {
        self.cancel_below.fetch_max(id, Ordering::SeqCst);
    }

    /// Answers the conversation `messages` (rendered with the model's chat template).
    pub fn generate(&mut self, messages: Vec<ChatMessage>, params: GenerateParams) -> u64 {
        self.send(|id| Command::Generate(id, messages, params))
    }

    pub fn stop(&self, id: u64) {
        self.stop_below.fetch_max(id, Ordering::SeqCst);
    }

    /// Drops the model's cached conversation (a new chat shares no prefix with the old one).
    pub fn forget(&mut self) {
        self.send(|_| Command::Forget);
    }

    pub fn try_recv(&self) -> Option<Event> {
        self.events.try_recv().ok()
    }

    /// Waits for the next event, up to `timeout`.
    pub fn recv_timeout(&self, timeout: std::time::Duration) -> Option<Event> {
        self.events.recv_timeout(timeout).ok()
    }
}

impl Drop for Worker {
    /// Stops whatever runs and waits for the thread, so the device is released before exit.
    fn drop(&mut self) {
        self.stop_below.store(u64::MAX, Ordering::SeqCst);
        self.cancel_below.store(u64::MAX, Ordering::SeqCst);
        self.commands = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct State {
    engine: Option<Engine>,
    events: Sender<Event>,
    notify: Box<dyn Fn() + Send>,
    stop_below: Arc<AtomicU64>,
    cancel_below: Arc<AtomicU64>,
}

impl State {
    fn emit(&self, event: Event) {
        let _ = self.events.send(event);
        (self.notify)();
    }

    fn run(&mut self, command: Command) {
        match command {
            Command::Load(id, request) => self.load(id, request),
            Command::Generate(id, messages, params) => self.generate(id, &messages, params),
            Command::Forget => {
                if let Some(engine) = &mut self.engine {
                    engine.session_mut().clear();
                }
            }
        }
    }

    fn load(&mut self, id: u64, request: LoadRequest) {
        // Two models never share the device's memory.
        self.engine = None;
        let options = EngineOptions {
            device: request.device,
            n_ctx: Some(request.n_ctx),
            kv_budget: (request.kv_budget_tokens > 0)
                .then_some(KvBudget::Tokens(request.kv_budget_tokens)),
            kv_placement: match request.kv_offload {
                KvOffload::None => KvPlacement::Device,
                KvOffload::Full | KvOffload::Infinigen => KvPlacement::Host,
            },
            kv_type: request.kv_type,
            infinigen: (request.kv_offload == KvOffload::Infinigen)
                .then(|| request.infinigen.options()),
            ..EngineOptions::default()
        };
        let cancel = self.cancel_below.clone();
        let (events, notify) = (&self.events, &self.notify);
        let mut last_percent = u64::MAX;
        let mut progress = |p: hearth_runtime::model::LoadProgress| {
            let percent = p.done_bytes * 100 / p.total_bytes.max(1);
            if percent != last_percent {
                last_percent = percent;
                let _ = events.send(Event::Loading {
                    done: p.done_bytes,
                    total: p.total_bytes,
                });
                notify();
            }
            cancel.load(Ordering::SeqCst) < id
        };
        match Engine::load(&request.path, &options, &mut progress) {
            Ok(engine) => {
                let loaded = Loaded {
                    info: engine.info().clone(),
                    n_ctx: engine.session().backend().n_ctx(),
                    kv: engine.kv_usage(),
                };
                self.engine = Some(engine);
                self.emit(Event::Loaded(Box::new(loaded)));
            }
            Err(hearth_runtime::Error::Cancelled) => {
                self.emit(Event::LoadFailed("Loading cancelled.".into()))
            }
            Err(e) => self.emit(Event::LoadFailed(format!(
                "Could not load {}: {e}",
                request.path.display()
            ))),
        }
    }

    fn generate(&mut self, id: u64, messages: &[ChatMessage], mut params: GenerateParams) {
        let Some(engine) = self.engine.as_mut() else {
            return self.emit(Event::Failed("No model is loaded.".into()));
        };
        let prompt = match engine.tokenize_chat(messages) {
            Ok(p) => p,
            Err(e) => return self.emit(Event::Failed(format!("Chat template: {e}"))),
        };
        let n_ctx = engine.session().backend().n_ctx();
        if prompt.len() >= n_ctx {
            return self.emit(Event::Failed(format!(
                "The conversation is {} tokens and no longer fits the {n_ctx}-token context. \
                 Start a new chat, or raise the context length in Settings and reload.",
                prompt.len()
            )));
        }
        // With no limit, or a limit past the context, answer until the context is full.
        let room = n_ctx - prompt.len();
        params.max_tokens = Some(params.max_tokens.map_or(room, |n| n.min(room)));
        let _ = self.events.send(Event::Started {
            prompt_tokens: prompt.len(),
        });
        (self.notify)();
        let (events, notify, stop) = (&self.events, &self.notify, &self.stop_below);
        let result = engine.generate(&prompt, &params, &mut |text| {
            let _ = events.send(Event::Text(text.to_string()));
            notify();
            stop.load(Ordering::SeqCst) < id
        });
        match result {
            Ok(generation) => {
                let finished = Finished {
                    generation,
                    context_used: engine.session().cached().len(),
                    kv: engine.kv_usage(),
                    infinigen: engine
                        .kv_policy_stats()
                        .and_then(|s| s.of(KvPolicyKind::Infinigen)),
                };
                self.emit(Event::Finished(Box::new(finished)));
            }
            Err(e) => self.emit(Event::Failed(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infinigen_settings_ask_for_a_reload_only_where_infinigen_runs() {
        let settings = ModelSettings::default();
        let request = LoadRequest {
            path: "m.gguf".into(),
            device: None,
            n_ctx: settings.n_ctx,
            kv_budget_tokens: settings.kv_budget_tokens,
            kv_offload: settings.kv_offload,
            kv_type: settings.kv_type,
            infinigen: settings.infinigen,
        };
        assert!(!request.differs_from(&settings));
        let mut changed = settings.clone();
        changed.infinigen.alpha = Some(1000.0);
        assert!(!request.differs_from(&changed));
        changed.kv_offload = KvOffload::Infinigen;
        assert!(request.differs_from(&changed));
        let loaded = LoadRequest {
            kv_offload: KvOffload::Infinigen,
            infinigen: changed.infinigen,
            ..request.clone()
        };
        assert!(!loaded.differs_from(&changed));
        changed.n_ctx += 1;
        assert!(loaded.differs_from(&changed));
    }
}
