//! The engine on a thread of its own, taking requests from any number of callers: the one
//! request path of `hearth serve`, `hearth chat` and the desktop app.
//!
//! A [`Service`] owns an [`Engine`] and runs its continuous-batching scheduler (`batched.rs`).
//! Callers hold [`Handle`]s: they submit a prompt's tokens with a [`Sink`] for its events,
//! and learn whether it was taken. Every token comes back as an [`Event::Token`]; a
//! completion's last one carries its finish, followed by an [`Event::Report`] with its timings
//! and the cache as it ends. A sink that says its receiver is gone (returns `false`) cancels
//! the request, whose blocks are free at the next step. A refusal, or a failure while
//! running, is a [`ServiceError`] that says whose fault it is.
//!
//! Where the engine cannot batch (the CPU reference, or a KV pool that evicts), requests run
//! one at a time on the engine's session (`solo.rs`), with the same events.

mod batched;
mod error;
mod queue;
mod solo;

use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::sample::{GenerateParams, SamplerParams};
use crate::sched::{RequestId, RequestParams, TokenEvent};
use crate::session::Timings;
use hearth_model::kv::policy::KvPolicyStats;
use hearth_model::kv::KvUsage;

pub use error::ServiceError;
use queue::Queue;

/// What a caller hears about its request.
#[derive(Debug)]
pub enum Event {
    Token(TokenEvent),
    /// Follows a completion's last `Token` event.
    Report(Box<Report>),
    /// The engine failed; the request ends here.
    Failed(ServiceError),
}

/// How one completion went, and the cache as it ended.
#[derive(Clone, Debug)]
pub struct Report {
    /// Which of the request's completions.
    pub sample: usize,
    pub timings: Timings,
    /// Tokens of the completion (prompt and generated), which the cache now holds.
    pub context_used: usize,
    pub kv: Option<KvUsage>,
    /// What a sparse KV policy (InfiniGen, H2O) fetched so far.
    pub kv_policy: Option<KvPolicyStats>,
}

/// Where a request's events go. Returns `false` once nobody listens: the request is then
/// cancelled.
pub type Sink = Box<dyn FnMut(Event) -> bool + Send>;

/// Hears whether a request was taken: its id, or why not.
pub type Accepted = Box<dyn FnOnce(Result<RequestId, ServiceError>) + Send>;

/// A request for the service.
pub struct Submit {
    pub prompt: Vec<u32>,
    pub params: RequestParams,
    pub sink: Sink,
    pub accepted: Accepted,
}

/// Watches the service's work: metrics for `/metrics`. Every method has an empty default.
pub trait Observer: Send + Sync {
    /// A request was taken, with this many prompt tokens.
    fn accepted(&self, _prompt_tokens: usize) {}
    /// A completion's first token came, this long after its request was submitted.
    fn first_token(&self, _wait: Duration) {}
    /// A token was generated.
    fn token(&self) {}
    /// A completion of more than one token finished, its later tokens this far apart.
    fn per_token(&self, _interval: Duration) {}
    /// After every step.
    fn load(&self, _load: &Load) {}
}

/// The service's load after a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    pub running: usize,
    /// Completions waiting for a cache row.
    pub queued: usize,
    /// KV blocks the running completions hold.
    pub kv_blocks_running: usize,
    /// KV blocks in use in all, cached prefixes included.
    pub kv_blocks_used: usize,
    pub kv_blocks_total: usize,
    /// Sequences preempted so far.
    pub preemptions: usize,
}

/// Options of [`Service::spawn`].
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// Completions generated at once (at most the cache's rows).
    pub parallel: usize,
}

enum Command {
    // Boxed: a request's parameters are most of a command's size, and the others are small.
    Submit(Box<Submit>, Instant),
    Cancel(RequestId),
    /// Ends every request (with `Cancelled`).
    CancelAll,
    Observe(Option<Arc<dyn Observer>>),
}

/// A caller's side of the service; clones share it. Once every handle is gone, the service
/// cancels what runs and its thread ends.
#[derive(Clone)]
pub struct Handle {
    tx: mpsc::Sender<Command>,
    queue: Arc<Queue>,
    batched: bool,
}

impl Handle {
    /// Queues a request; `submit.accepted` hears whether it was taken. Fails with
    /// [`ServiceError::ShuttingDown`] when the service has stopped (then `accepted` is never
    /// called).
    pub fn submit(&self, submit: Submit) -> Result<(), ServiceError> {
        self.send(submit, None)
    }

    /// [`submit`](Self::submit), refused with [`ServiceError::QueueFull`] where `limit`
    /// completions or more would wait for a cache row ahead of it. Requests submitted at the
    /// same moment are counted one after another, so a burst cannot pass the limit.
    pub fn submit_within(&self, submit: Submit, limit: usize) -> Result<(), ServiceError> {
        self.send(submit, Some(limit))
    }

    fn send(&self, submit: Submit, limit: Option<usize>) -> Result<(), ServiceError> {
        let n = submit.params.n;
        self.queue.reserve(n, limit)?;
        self.tx
            .send(Command::Submit(Box::new(submit), Instant::now()))
            .map_err(|_| {
                self.queue.taken(n);
                ServiceError::ShuttingDown
            })
    }

    /// [`submit`](Self::submit), waiting for the answer.
    pub fn submit_wait(
        &self,
        prompt: Vec<u32>,
        params: RequestParams,
        sink: Sink,
    ) -> Result<RequestId, ServiceError> {
        let (tx, rx) = mpsc::channel();
        let accepted: Accepted = Box::new(move |r| {
            let _ = tx.send(r);
        });
        let submit = Submit {
            prompt,
            params,
            sink,
            accepted,
        };
        self.submit(submit)?;
        rx.recv().unwrap_or(Err(ServiceError::ShuttingDown))
    }

    /// Runs one short greedy request on `prompt` (its prefill and a decode step) and waits
    /// for its end, so that what the executor builds on first use (the Vulkan pipelines of
    /// each step's kernels) is built before the service's callers are told it is ready.
    pub fn warm_up(&self, prompt: Vec<u32>) -> Result<(), ServiceError> {
        let (tx, rx) = mpsc::channel();
        let params = RequestParams {
            generate: GenerateParams {
                max_tokens: Some(2),
                sampler: SamplerParams::greedy(),
                ignore_eos: true,
                ..GenerateParams::default()
            },
            n: 1,
        };
        self.submit_wait(prompt, params, Box::new(move |e| tx.send(e).is_ok()))?;
        for event in rx {
            match event {
                // A completion's report follows its last token.
                Event::Report(_) => return Ok(()),
                Event::Failed(e) => return Err(e),
                Event::Token(_) => {}
            }
        }
        Err(ServiceError::Stopped)
    }

    /// Ends request `id`; its completions get a last event with `Cancelled`.
    pub fn cancel(&self, id: RequestId) {
        let _ = self.tx.send(Command::Cancel(id));
    }

    pub fn cancel_all(&self) {
        let _ = self.tx.send(Command::CancelAll);
    }

    /// Reports the work to `observer` from now on (`None`: to nobody).
    pub fn observe(&self, observer: Option<Arc<dyn Observer>>) {
        let _ = self.tx.send(Command::Observe(observer));
    }

    /// Completions waiting for a cache row.
    pub fn waiting(&self) -> usize {
        self.queue.waiting()
    }

    /// Whether requests are batched; otherwise they run one at a time.
    pub fn is_batched(&self) -> bool {
        self.batched
    }
}

/// The service's thread.
pub struct Service {
    thread: Option<JoinHandle<()>>,
}

impl Service {
    /// Starts the thread over `engine`. Returns once it is ready to take requests, or with
    /// the reason it could not start.
    pub fn spawn(engine: Engine, options: ServiceOptions) -> crate::Result<(Service, Handle)> {
        let (tx, rx) = mpsc::channel::<Command>();
        let (ready_tx, ready_rx) = mpsc::channel::<bool>();
        let queue = Arc::new(Queue::new());
        let shared = queue.clone();
        let thread = std::thread::Builder::new()
            .name("hearth-engine".into())
            .spawn(move || run(engine, options, rx, ready_tx, shared))
            .map_err(|e| {
                hearth_model::Error::options("service", format!("spawning its thread: {e}"))
            })?;
        let service = Service {
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(batched) => Ok((service, Handle { tx, queue, batched })),
            Err(_) => Err(hearth_model::Error::options(
                "service",
                "the engine thread ended before it was ready",
            )),
        }
    }

    /// Waits for the thread to end: after the last handle is dropped, once the requests it
    /// was running are cancelled. The engine (and its device memory) is gone afterwards.
    pub fn join(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    mut engine: Engine,
    options: ServiceOptions,
    rx: mpsc::Receiver<Command>,
    ready: mpsc::Sender<bool>,
    queue: Arc<Queue>,
) {
    // The scheduler refuses the engines it cannot batch on; those take one request at a time.
    match engine.scheduler() {
        Ok(mut sched) => {
            sched.set_max_running(options.parallel);
            queue.set_slots(sched.max_running());
            let _ = ready.send(true);
            batched::run(sched, rx, queue);
        }
        Err(_) => {
            queue.set_slots(1);
            let _ = ready.send(false);
            solo::run(&mut engine, rx, queue);
        }
    }
}
