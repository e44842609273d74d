//! OpenAI's HTTP API over a running engine [`service`](hearth_engine::service): the server
//! behind `hearth serve` and the desktop app's "Serve" switch.
//!
//! - `listen.rs`: accepting connections, with limits on how many, how slow and how long;
//! - `routes/`: the endpoints (tokio and axum), OpenAI-shaped errors, authentication;
//! - `openai/`: the API's request and response shapes;
//! - `logprobs.rs`: log probabilities in the chat and completion shapes;
//! - `metrics.rs`: `/metrics`, fed by the service as its [`Observer`].
//!
//! The handlers render chat templates and tokenize on their own threads, so the engine's
//! thread only steps the model.

mod listen;
mod logprobs;
pub mod metrics;
pub mod openai;
mod routes;

use hearth_engine::speculative::Speculative;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use hearth_engine::service::{Handle, Observer};
use hearth_engine::Embedder;
use hearth_models::{ChatTemplate, Tokenizer};

pub use metrics::Metrics;
pub use routes::router;

/// How the server treats requests.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// With any, the API routes need `Authorization: Bearer KEY` with one of them.
    pub api_keys: Vec<String>,
    /// Largest request body in bytes (413 past it).
    pub max_body: usize,
    /// How long a request body may take to arrive (408 after).
    pub body_timeout: Duration,
    /// Completions that may wait for a cache row before new requests get 503.
    pub max_queue: usize,
    /// How long a request's headers may take to arrive (the connection is closed after).
    pub header_timeout: Duration,
    /// Connections open at once; more wait to be accepted.
    pub max_connections: usize,
    /// Requests one keep-alive connection may make; the last answer closes it.
    pub max_requests_per_connection: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            api_keys: Vec::new(),
            max_body: 4 << 20,
            body_timeout: Duration::from_secs(30),
            max_queue: 256,
            header_timeout: Duration::from_secs(10),
            max_connections: 512,
            max_requests_per_connection: 1000,
        }
    }
}

impl ServerOptions {
    fn limits(&self) -> listen::Limits {
        listen::Limits {
            header_timeout: self.header_timeout,
            max_connections: self.max_connections,
            max_requests_per_connection: self.max_requests_per_connection,
        }
    }
}

/// The served model as the handlers use it.
pub struct Model {
    pub handle: Handle,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Arc<ChatTemplate>,
    /// The model's id in `/v1/models`.
    pub id: String,
    /// Other names a request may use for it.
    pub aliases: Vec<String>,
    pub n_ctx: usize,
    pub created: u64,
    /// Speculative decoding for requests that do not say (`--draft`).
    pub speculative: Option<Speculative>,
}

impl Model {
    pub fn new(
        handle: Handle,
        (tokenizer, template): (Arc<Tokenizer>, Arc<ChatTemplate>),
        id: String,
        aliases: Vec<String>,
        n_ctx: usize,
    ) -> Self {
        Self {
            handle,
            tokenizer,
            template,
            id,
            aliases,
            n_ctx,
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            speculative: None,
        }
    }

    /// Drafts for every request that does not ask otherwise.
    pub fn with_speculative(self, speculative: Option<Speculative>) -> Self {
        Self {
            speculative,
            ..self
        }
    }
}

/// An embedding model served by `/v1/embeddings`, beside the chat model or alone.
pub struct EmbeddingModel {
    /// One request embeds at a time; its texts run as one batch.
    pub embedder: Arc<Mutex<Embedder>>,
    /// The model's id in `/v1/models`.
    pub id: String,
    pub aliases: Vec<String>,
    pub created: u64,
    /// Whether it is the only model served (no chat model follows).
    pub alone: bool,
}

impl EmbeddingModel {
    pub fn new(embedder: Embedder, id: String, aliases: Vec<String>, alone: bool) -> Self {
        Self {
            embedder: Arc::new(Mutex::new(embedder)),
            id,
            aliases,
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            alone,
        }
    }

    /// Whether a request's `model` names this one.
    pub fn named(&self, name: &str) -> bool {
        name == self.id || self.aliases.iter().any(|a| a == name)
    }
}

/// What the handlers share.
pub struct AppState {
    /// Set once the model has loaded; until then the model routes answer 503.
    model: OnceLock<Model>,
    /// Set once an embedding model has loaded, where the server runs one.
    embedder: OnceLock<EmbeddingModel>,
    pub metrics: Arc<Metrics>,
    pub options: ServerOptions,
    next_id: AtomicU64,
}

impl AppState {
    pub fn new(options: ServerOptions) -> Arc<Self> {
        Arc::new(Self {
            model: OnceLock::new(),
            embedder: OnceLock::new(),
            metrics: Arc::new(Metrics::new()),
            options,
            next_id: AtomicU64::new(1),
        })
    }

    /// Serves `model` from now on (once; later calls are ignored). Its service reports to
    /// this server's metrics.
    pub fn set_model(&self, model: Model) {
        let observer: Arc<dyn Observer> = self.metrics.clone();
        model.handle.observe(Some(observer));
        let _ = self.model.set(model);
    }

    pub fn model(&self) -> Option<&Model> {
        self.model.get()
    }

    /// Serves `model` at `/v1/embeddings` from now on (once; later calls are ignored).
    pub fn set_embedder(&self, model: EmbeddingModel) {
        let _ = self.embedder.set(model);
    }

    pub fn embedder(&self) -> Option<&EmbeddingModel> {
        self.embedder.get()
    }
}

/// Serves `state` on `listener` until `shutdown` completes, then until the answers in
/// progress are written (idle connections are closed at once).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.options.limits();
    listen::serve(listener, router(state), limits, shutdown).await
}

/// A server on a thread of its own, with its own async runtime: the desktop app's.
pub struct Background {
    address: SocketAddr,
    stop: Option<tokio::sync::watch::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    handle: Handle,
}

impl Background {
    /// Listens on `address` (`127.0.0.1:8080`; port 0 picks a free one) and serves `model`.
    pub fn start(address: &str, model: Model, options: ServerOptions) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(address))
            .with_context(|| format!("listening on {address}"))?;
        let local = listener.local_addr()?;
        let handle = model.handle.clone();
        let state = AppState::new(options);
        state.set_model(model);
        let (stop, stopped) = tokio::sync::watch::channel(());
        let thread = std::thread::Builder::new()
            .name("hearth-server".into())
            .spawn(move || {
                let (mut graceful, mut hard) = (stopped.clone(), stopped);
                runtime.block_on(async move {
                    let served = serve(listener, state, async move {
                        let _ = graceful.changed().await;
                    });
                    // Requests in flight get a moment to finish once stopped.
                    let grace = async move {
                        let _ = hard.changed().await;
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    };
                    tokio::select! {
                        result = served => {
                            if let Err(e) = result {
                                tracing::error!("the server failed: {e}");
                            }
                        }
                        () = grace => {}
                    }
                });
                // Connections still open (a stream) end with the runtime: their requests are
                // cancelled at their next token.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok(Self {
            address: local,
            stop: Some(stop),
            thread: Some(thread),
            handle,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops listening and ends the requests in flight; returns once the server is gone.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.handle.observe(None);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.shut_down();
    }
}
