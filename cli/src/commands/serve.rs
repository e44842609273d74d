//! `hearth serve`: an OpenAI-compatible HTTP server (the `hearth-server` crate) on the
//! engine's service, which runs the continuous-batching scheduler on a thread of its own.
//!
//! The listener opens at once and `/health` answers 503 until the model has loaded and one
//! warm-up request has run through it (building what the executor builds on first use). SIGTERM
//! or Ctrl-C stops accepting connections, closes idle ones, lets the requests in flight
//! finish for `--shutdown-timeout`, then cancels what is left.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use hearth_engine::service::{Service, ServiceOptions};
use hearth_server::{AppState, EmbeddingModel, Model, ServerOptions};

use crate::draft_args::DraftArgs;
use crate::model_args::ModelArgs;
use crate::DeviceChoice;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    draft: DraftArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port; the address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences generated at once (continuous batching); the KV cache holds this many.
    #[arg(long, default_value_t = 4, value_name = "N")]
    parallel: usize,
    /// Context length per sequence [default: the model's, at most 4096].
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Accept API requests only with `Authorization: Bearer KEY`; repeatable. /health and
    /// /metrics stay open.
    #[arg(long = "api-key", value_name = "KEY", env = "HEARTH_API_KEY")]
    api_keys: Vec<String>,
    /// Largest request body, in bytes (413 past it).
    #[arg(long, default_value_t = 4 << 20, value_name = "BYTES")]
    max_body: usize,
    /// Seconds a request body may take to arrive (408 after).
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    body_timeout: u64,
    /// Completions that may wait for a row before new requests get 503.
    #[arg(long, default_value_t = 256, value_name = "N")]
    max_queue: usize,
    /// Seconds a request's headers may take to arrive; a slower connection is closed.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    header_timeout: u64,
    /// Connections open at once; more wait to be accepted.
    #[arg(long, default_value_t = 512, value_name = "N")]
    max_connections: usize,
    /// Requests one keep-alive connection may make; its last answer closes it.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    max_requests_per_connection: usize,
    /// Seconds in-flight requests may run on after SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    shutdown_timeout: u64,
    /// The model's id in /v1/models [default: the -m argument].
    #[arg(long, value_name = "NAME")]
    alias: Option<String>,
    /// An embedding model (BERT-style: all-MiniLM, BGE, E5) served at /v1/embeddings beside
    /// the chat model. An embedding model given as -m is served alone.
    #[arg(long, value_name = "MODEL")]
    embedding_model: Option<String>,
}

/// The warm-up's prompt: several tokens, so that a prompt chunk and a decode step both run.
const WARM_UP: &str = "A short request that runs the prompt and decode kernels once.";

pub fn run(args: &ServeArgs, device: &DeviceChoice) -> Result<()> {
    // The model's chat template is code from the model file: it renders in a worker whose
    // memory is capped, so a template that grows without end fails its request, not the
    // server.
    #[cfg(unix)]
    match std::env::current_exe() {
        Ok(exe) => hearth_models::chat_sandbox::confine(exe, vec!["template-worker".into()]),
        Err(e) => tracing::warn!("chat templates render in the server itself: {e}"),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let state = AppState::new(ServerOptions {
        api_keys: args.api_keys.clone(),
        max_body: args.max_body,
        body_timeout: Duration::from_secs(args.body_timeout),
        max_queue: args.max_queue,
        header_timeout: Duration::from_secs(args.header_timeout.max(1)),
        max_connections: args.max_connections.max(1),
        max_requests_per_connection: args.max_requests_per_connection.max(1),
    });
    let address = format!("{}:{}", args.host, args.port);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(&address))
        .with_context(|| format!("listening on {address}"))?;
    let local: SocketAddr = listener.local_addr()?;
    eprintln!("hearth serve: listening on http://{local} (loading the model)");
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    std::thread::scope(|scope| {
        // The model loads beside the listener; a failure ends the server.
        let loading = state.clone();
        scope.spawn(move || match load(args, device, &loading) {
            Ok(()) => eprintln!("hearth serve: ready on http://{local}"),
            Err(e) => {
                let _ = failed_tx.send(e);
            }
        });
        runtime.block_on(serve(listener, state, failed_rx, args))?;
        // Done serving: the process ends here, a model still loading or not.
        std::process::exit(0)
    })
}

/// Loads the model for `--parallel` sequences and starts the engine's service over it; an
/// embedding model (`--embedding-model`, or an encoder as `-m`) goes to /v1/embeddings.
fn load(args: &ServeArgs, device: &DeviceChoice, state: &AppState) -> Result<()> {
    let path = args.model.run.dir.resolve(&args.model.model)?;
    let spec = match &args.model.run.spec {
        Some(p) => Some(hearth_models::ModelSpec::from_file(p)?),
        None => None,
    };
    if hearth_engine::embed::is_encoder(&path, spec.as_ref())? {
        if args.embedding_model.is_some() {
            anyhow::bail!(
                "`{}` is an embedding model: serve it alone with -m, or beside a chat model \
                 with --embedding-model",
                args.model.model
            );
        }
        let id = args
            .alias
            .clone()
            .unwrap_or_else(|| args.model.model.clone());
        return load_embedder(args, &args.model.model, id, true, device, state);
    }
    if let Some(name) = &args.embedding_model {
        load_embedder(args, name, name.clone(), false, device, state)?;
    }
    let parallel = args.parallel.max(1);
    let cache = args.model.run.cache(args.ctx_size, parallel)?;
    let mut engine = args.model.run.load(&args.model.model, device, cache)?;
    args.draft.load(&mut engine, &args.model.run, device)?;
    let tools = engine.text_tools();
    let n_ctx = engine.session().backend().n_ctx();
    let mut aliases = vec![stem(&path), engine.info().name.clone()];
    aliases.retain(|a| !a.is_empty());
    // The service's thread runs until the process ends.
    let (_service, handle) = Service::spawn(engine, ServiceOptions { parallel })?;
    // /health says ready only once a first request has run: the first answer does not wait
    // for kernels built on first use.
    let started = std::time::Instant::now();
    handle
        .warm_up(tools.0.encode(WARM_UP))
        .context("warming up")?;
    eprintln!(
        "hearth serve: warmed up in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let id = args
        .alias
        .clone()
        .unwrap_or_else(|| args.model.model.clone());
    let model = Model::new(handle, tools, id, aliases, n_ctx);
    state.set_model(model.with_speculative(args.draft.speculative()?));
    Ok(())
}

/// Loads the embedding model `name` and serves it at /v1/embeddings as `id`.
fn load_embedder(
    args: &ServeArgs,
    name: &str,
    id: String,
    alone: bool,
    device: &DeviceChoice,
    state: &AppState,
) -> Result<()> {
    let run = &args.model.run;
    let options = crate::encoder_args::embedder_options(
        run.cpu,
        run.threads,
        run.activations,
        run.spec.as_deref(),
        device,
    )?;
    let embedder = crate::encoder_args::load_embedder(&run.dir, name, &options)?;
    let path = embedder.info().path.clone();
    let mut aliases = vec![stem(&path), embedder.info().name.clone()];
    aliases.retain(|a| !a.is_empty() && *a != id);
    eprintln!(
        "hearth serve: embedding model `{id}` ({} dimensions) at /v1/embeddings",
        embedder.info().dims
    );
    state.set_embedder(EmbeddingModel::new(embedder, id, aliases, alone));
    Ok(())
}

async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    failed: tokio::sync::oneshot::Receiver<anyhow::Error>,
    args: &ServeArgs,
) -> Result<()> {
    let app = state.clone();
    let timeout = Duration::from_secs(args.shutdown_timeout);
    let shutdown = async move {
        tokio::select! {
            _ = stop_signal() => {}
            Ok(e) = failed => {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
        }
        eprintln!(
            "hearth serve: stopping; requests in flight have {} s to finish",
            timeout.as_secs()
        );
        // Past the timeout whatever still runs is cancelled: its streams end.
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if let Some(m) = state.model() {
                m.handle.cancel_all();
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            std::process::exit(0);
        });
    };
    hearth_server::serve(listener, app, shutdown)
        .await
        .context("serving")
}

/// Ctrl-C, or SIGTERM where there is one.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
