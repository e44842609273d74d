//! The model's thread. It loads models and hands each to the engine's service, the request
//! path `hearth serve` and `hearth chat` use too; the UI sends it commands and reads events
//! over channels, so loading and generation never block a frame. It can also serve the
//! loaded model over OpenAI's API (`hearth-server`), beside the app's own chats.
//!
//! Cancelling a load goes through an atomic rather than the command channel, because the
//! thread is busy loading when it matters: each load has a number, and the UI raises a shared
//! watermark to that number to cancel it. Answers run on the service's thread, so a stop is
//! an ordinary command.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use hearth_engine::sched::{RequestId, RequestParams};
use hearth_engine::service::{Event as ServiceEvent, Handle, Service, ServiceOptions, Submit};
use hearth_engine::session::{FinishReason, GenerateParams, Generation};
use hearth_engine::split::GpuLayers;
use hearth_engine::{chat_prompt, Engine, EngineOptions, ModelInfo, Placement};
use hearth_model::kv::infinigen::IgStats;
use hearth_model::kv::policy::KvPolicyKind;
use hearth_model::kv::KvBudget;
use hearth_model::kv::KvPlacement;
use hearth_model::kv::{KvType, KvUsage};
use hearth_model::PlacedPart;
use hearth_models::{ChatMessage, ChatTemplate, Tokenizer};
use hearth_server::{Background, Model, ServerOptions};

use crate::settings::{InfinigenSettings, KvOffload, ModelSettings};

/// What to load, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadRequest {
    pub path: PathBuf,
    /// Where the model runs; `None`: the best place on this machine.
    pub placement: Option<Placement>,
    pub n_ctx: usize,
    /// KV pool in tokens; 0 sizes it for the whole context.
    pub kv_budget_tokens: usize,
    pub kv_offload: KvOffload,
    pub kv_type: KvType,
    /// Used with `KvOffload::Infinigen`.
    pub infinigen: InfinigenSettings,
    /// Layers on a Vulkan device, the first ones on the CPU executor; `None`: the whole
    /// model at `placement`.
    pub gpu_layers: Option<GpuLayers>,
}

impl LoadRequest {
    /// `path` at `placement` with the engine settings of `s`.
    pub fn new(path: PathBuf, placement: Option<Placement>, s: &ModelSettings) -> Self {
        Self {
            path,
            placement,
            n_ctx: s.n_ctx,
            kv_budget_tokens: s.kv_budget_tokens,
            kv_offload: s.kv_offload,
            kv_type: s.kv_type,
            infinigen: s.infinigen,
            gpu_layers: s.gpu_layers,
        }
    }

    /// Whether `s` asks for another engine than this request made: its context, KV cache,
    /// GPU layers, or InfiniGen's settings where InfiniGen runs (they shape the engine's
    /// buffers and skew).
    pub fn differs_from(&self, s: &ModelSettings) -> bool {
        self.n_ctx != s.n_ctx
            || self.kv_budget_tokens != s.kv_budget_tokens
            || self.kv_offload != s.kv_offload
            || self.kv_type != s.kv_type
            || self.gpu_layers != s.gpu_layers
            || (s.kv_offload == KvOffload::Infinigen && self.infinigen != s.infinigen)
    }

    /// The engine's options for this request, for loading it and for planning its layers.
    pub fn engine_options(&self) -> EngineOptions {
        let mut options = EngineOptions {
            n_ctx: Some(self.n_ctx),
            kv_budget: (self.kv_budget_tokens > 0)
                .then_some(KvBudget::Tokens(self.kv_budget_tokens)),
            kv_placement: match self.kv_offload {
                KvOffload::None => KvPlacement::Device,
                KvOffload::Full | KvOffload::Infinigen => KvPlacement::Host,
            },
            kv_type: self.kv_type,
            infinigen: (self.kv_offload == KvOffload::Infinigen).then(|| self.infinigen.options()),
            gpu_layers: self.gpu_layers,
            pipeline_cache: pipeline_cache_dir(),
            tuning: hearth_models::user_tuning_dir().map(|dir| hearth_engine::tune::TuneSetting {
                dir,
                tune_missing: true,
                budget: hearth_engine::tune::QUICK_BUDGET,
            }),
            ..EngineOptions::default()
        };
        let placement = match (self.gpu_layers, self.placement) {
            (None, p) => p.unwrap_or_else(Placement::default_for_host),
            // A split's layers go to the Vulkan device the picker names, else the best one,
            // even where the picker names the CPU executor: that runs the first layers.
            (Some(_), Some(Placement::Vulkan(index))) => Placement::Vulkan(index),
            (Some(_), _) => Placement::Vulkan(None),
        };
        placement.apply(&mut options);
        options
    }
}

/// Where compiled Vulkan pipelines are kept between runs, as the command line keeps them.
fn pipeline_cache_dir() -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE"))?;
    Some(hearth_models::default_pipeline_cache_dir(
        std::path::Path::new(&home),
    ))
}

enum Command {
    Load(u64, LoadRequest),
    Generate(u64, Vec<ChatMessage>, Box<GenerateParams>),
    Stop(u64),
    /// Serve the model on this address (`None`: stop serving).
    Serve(Option<String>),
}

/// A model ready to chat.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub info: ModelInfo,
    pub n_ctx: usize,
    pub kv: Option<KvUsage>,
    /// What each executor holds: one part, or one per side of a split.
    pub placement: Vec<PlacedPart>,
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
    /// The API server listens here now (`None`: it stopped).
    Serving(Option<SocketAddr>),
    /// The API server could not start; the message says why.
    ServeFailed(String),
}

pub struct Worker {
    commands: Option<Sender<Command>>,
    events: Receiver<Event>,
    /// Loads numbered at or below this stop.
    cancel_below: Arc<AtomicU64>,
    next_id: u64,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the thread; `notify` runs after every event (to wake the UI).
    pub fn spawn(notify: impl Fn() + Send + Sync + 'static) -> Self {
        let (commands, rx) = channel();
        let (tx, events) = channel();
        let cancel_below = Arc::new(AtomicU64::new(0));
        let mut state = State {
            model: None,
            server: None,
            events: Emitter {
                tx,
                notify: Arc::new(notify),
            },
            cancel_below: cancel_below.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("hearth-inference".into())
            .spawn(move || {
                for command in rx {
                    state.run(command);
                }
                state.unload();
            })
            .expect("spawning the inference thread");
        Self {
            commands: Some(commands),
            events,
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
        self.send(|id| Command::Generate(id, messages, Box::new(params)))
    }

    pub fn stop(&mut self, id: u64) {
        self.send(|_| Command::Stop(id));
    }

    /// Serves the loaded model over OpenAI's API on `address` (`127.0.0.1:8080`).
    pub fn serve(&mut self, address: String) {
        self.send(|_| Command::Serve(Some(address)));
    }

    pub fn stop_serving(&mut self) {
        self.send(|_| Command::Serve(None));
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
        self.cancel_below.store(u64::MAX, Ordering::SeqCst);
        self.commands = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The loaded model: the service running it and what requests are made with.
struct ModelSlot {
    service: Service,
    handle: Handle,
    tokenizer: Arc<Tokenizer>,
    template: Arc<ChatTemplate>,
    info: ModelInfo,
    n_ctx: usize,
    /// The service's request of each generation still running.
    running: Arc<std::sync::Mutex<HashMap<u64, RequestId>>>,
}

/// Sends events to the UI and wakes it; cheap to clone into the service's sinks.
#[derive(Clone)]
struct Emitter {
    tx: Sender<Event>,
    notify: Arc<dyn Fn() + Send + Sync>,
}

impl Emitter {
    /// Whether the UI still listens.
    fn emit(&self, event: Event) -> bool {
        let ok = self.tx.send(event).is_ok();
        (self.notify)();
        ok
    }
}

struct State {
    model: Option<ModelSlot>,
    server: Option<Background>,
    events: Emitter,
    cancel_below: Arc<AtomicU64>,
}

impl State {
    fn emit(&self, event: Event) {
        self.events.emit(event);
    }

    fn run(&mut self, command: Command) {
        match command {
            Command::Load(id, request) => self.load(id, request),
            Command::Generate(id, messages, params) => self.generate(id, &messages, *params),
            Command::Stop(id) => {
                if let Some(m) = &self.model {
                    if let Some(&request) = m.running.lock().unwrap().get(&id) {
                        m.handle.cancel(request);
                    }
                }
            }
            Command::Serve(address) => self.serve(address),
        }
    }

    /// Stops the server and the service, freeing the device's memory.
    fn unload(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
            self.emit(Event::Serving(None));
        }
        if let Some(m) = self.model.take() {
            m.handle.cancel_all();
            drop(m.handle);
            m.service.join();
        }
    }

    fn load(&mut self, id: u64, request: LoadRequest) {
        // Two models never share the device's memory.
        self.unload();
        let options = request.engine_options();
        let cancel = self.cancel_below.clone();
        let events = &self.events;
        let mut last_percent = u64::MAX;
        let mut progress = |p: hearth_model::LoadProgress| {
            let percent = p.done_bytes * 100 / p.total_bytes.max(1);
            if percent != last_percent {
                last_percent = percent;
                events.emit(Event::Loading {
                    done: p.done_bytes,
                    total: p.total_bytes,
                });
            }
            cancel.load(Ordering::SeqCst) < id
        };
        let engine = match Engine::load(&request.path, &options, &mut progress) {
            Ok(engine) => engine,
            Err(hearth_engine::Error::Cancelled) => {
                return self.emit(Event::LoadFailed("Loading cancelled.".into()))
            }
            Err(e) => {
                return self.emit(Event::LoadFailed(format!(
                    "Could not load {}: {e}",
                    request.path.display()
                )))
            }
        };
        let loaded = Loaded {
            info: engine.info().clone(),
            n_ctx: engine.session().backend().n_ctx(),
            kv: engine.kv_usage(),
            placement: engine.placement(),
        };
        let (tokenizer, template) = engine.text_tools();
        match Service::spawn(engine, ServiceOptions { parallel: 1 }) {
            Ok((service, handle)) => {
                self.model = Some(ModelSlot {
                    service,
                    handle,
                    tokenizer,
                    template,
                    info: loaded.info.clone(),
                    n_ctx: loaded.n_ctx,
                    running: Default::default(),
                });
                self.emit(Event::Loaded(Box::new(loaded)));
            }
            Err(e) => self.emit(Event::LoadFailed(format!(
                "Could not start {}: {e}",
                request.path.display()
            ))),
        }
    }

    fn generate(&mut self, id: u64, messages: &[ChatMessage], mut params: GenerateParams) {
        let Some(m) = self.model.as_ref() else {
            return self.emit(Event::Failed("No model is loaded.".into()));
        };
        let prompt = match chat_prompt(&m.tokenizer, &m.template, messages) {
            Ok(p) => p,
            Err(e) => return self.emit(Event::Failed(format!("Chat template: {e}"))),
        };
        let n_ctx = m.n_ctx;
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
        self.emit(Event::Started {
            prompt_tokens: prompt.len(),
        });
        let request = RequestParams {
            generate: params,
            n: 1,
        };
        let answer = Answer {
            events: self.events.clone(),
            running: m.running.clone(),
            id,
            text: String::new(),
            tokens: Vec::new(),
            finish: FinishReason::Cancelled,
        };
        let failed = self.events.clone();
        let running = m.running.clone();
        let submit = Submit {
            prompt,
            params: request,
            sink: {
                let mut answer = answer;
                Box::new(move |event| answer.take(event))
            },
            accepted: Box::new(move |r| match r {
                Ok(request) => {
                    running.lock().unwrap().insert(id, request);
                }
                Err(e) => {
                    failed.emit(Event::Failed(e.to_string()));
                }
            }),
        };
        // Not taken: the service stopped, and the model with it.
        if m.handle.submit(submit).is_err() {
            self.emit(Event::Failed("The model stopped.".into()));
        }
    }

    fn serve(&mut self, address: Option<String>) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
        let (Some(address), Some(m)) = (address, &self.model) else {
            return self.emit(Event::Serving(None));
        };
        let stem = m
            .info
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let model = Model::new(
            m.handle.clone(),
            (m.tokenizer.clone(), m.template.clone()),
            stem.clone(),
            vec![m.info.name.clone()],
            m.n_ctx,
        );
        match Background::start(&address, model, ServerOptions::default()) {
            Ok(server) => {
                let at = server.address();
                self.server = Some(server);
                self.emit(Event::Serving(Some(at)));
            }
            Err(e) => self.emit(Event::ServeFailed(format!("{e:#}"))),
        }
    }
}

/// One answer as the service streams it: its text goes to the UI as it comes, and its end
/// as a [`Finished`] event.
struct Answer {
    events: Emitter,
    running: Arc<std::sync::Mutex<HashMap<u64, RequestId>>>,
    id: u64,
    text: String,
    tokens: Vec<u32>,
    finish: FinishReason,
}

impl Answer {
    fn take(&mut self, event: ServiceEvent) -> bool {
        match event {
            ServiceEvent::Token(e) => {
                self.tokens.extend(e.token);
                if let Some(f) = e.finish {
                    self.finish = f;
                }
                if e.text.is_empty() {
                    return true;
                }
                self.text.push_str(&e.text);
                self.events.emit(Event::Text(e.text))
            }
            ServiceEvent::Report(report) => {
                self.running.lock().unwrap().remove(&self.id);
                let finished = Finished {
                    generation: Generation {
                        text: std::mem::take(&mut self.text),
                        tokens: std::mem::take(&mut self.tokens),
                        finish: self.finish,
                        timings: report.timings,
                        draft: Default::default(),
                    },
                    context_used: report.context_used,
                    kv: report.kv,
                    infinigen: report.kv_policy.and_then(|s| s.of(KvPolicyKind::Infinigen)),
                };
                self.events.emit(Event::Finished(Box::new(finished)))
            }
            ServiceEvent::Failed(e) => {
                self.running.lock().unwrap().remove(&self.id);
                self.events.emit(Event::Failed(e.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_engine::BackendKind;

    #[test]
    fn infinigen_settings_ask_for_a_reload_only_where_infinigen_runs() {
        let settings = ModelSettings::default();
        let request = LoadRequest::new("m.gguf".into(), None, &settings);
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

    #[test]
    fn gpu_layers_ask_for_a_reload_and_a_vulkan_device() {
        let mut settings = ModelSettings::default();
        let request = LoadRequest::new("m.gguf".into(), Some(Placement::Cpu), &settings);
        assert_eq!(request.engine_options().backend, BackendKind::Cpu);
        settings.gpu_layers = Some(GpuLayers::Count(12));
        assert!(request.differs_from(&settings));

        // The picker's CPU executor runs the first layers; the rest go to the best device.
        let split = LoadRequest::new("m.gguf".into(), Some(Placement::Cpu), &settings);
        assert!(!split.differs_from(&settings));
        let options = split.engine_options();
        assert_eq!(options.backend, BackendKind::Vulkan);
        assert_eq!(options.device, None);
        assert_eq!(options.gpu_layers, Some(GpuLayers::Count(12)));
        // A Vulkan device chosen in the picker holds them.
        let on_1 = LoadRequest {
            placement: Some(Placement::Vulkan(Some(1))),
            ..split
        };
        let options = on_1.engine_options();
        assert_eq!(
            (options.backend, options.device),
            (BackendKind::Vulkan, Some(1))
        );
    }
}
