//! The engine's own thread. It owns the model and the continuous-batching scheduler, takes
//! requests over a channel, and streams each completion's tokens back to the handler that
//! asked. A handler that goes away (its client disconnected) drops its receiver: the next
//! token meant for it cancels the request, whose blocks are then free at the next step.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use hearth_runtime::engine::Engine;
use hearth_runtime::sched::{RequestId, RequestParams, TokenEvent};
use tokio::sync::{mpsc as tmpsc, oneshot};

use super::metrics::Metrics;

/// What a handler hears about its request.
#[derive(Debug)]
pub enum Event {
    Token(TokenEvent),
    /// The engine failed; the request ends here.
    Failed(String),
}

/// A request for the engine: the prompt's tokens, how to continue them, where its events go
/// and where to say whether it was taken.
pub struct Submit {
    pub prompt: Vec<u32>,
    pub params: RequestParams,
    pub events: tmpsc::UnboundedSender<Event>,
    pub accepted: oneshot::Sender<Result<(), String>>,
}

enum Command {
    Submit(Submit, Instant),
    /// Ends every request (with `Cancelled`); the server is going down.
    CancelAll,
}

/// The handlers' side of the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Command>,
    waiting: Arc<AtomicUsize>,
}

impl EngineHandle {
    pub fn submit(&self, submit: Submit) -> bool {
        self.tx
            .send(Command::Submit(submit, Instant::now()))
            .is_ok()
    }

    pub fn cancel_all(&self) {
        let _ = self.tx.send(Command::CancelAll);
    }

    /// Completions queued for a cache row.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// One request's route back to its handler.
struct Route {
    events: tmpsc::UnboundedSender<Event>,
    /// Completions not finished yet.
    open: usize,
    arrived: Instant,
    /// Per completion: when its first token came, and how many came.
    first: Vec<Option<Instant>>,
    tokens: Vec<u64>,
}

/// Starts the engine thread over `engine`, running at most `parallel` sequences at once.
/// Returns once the scheduler is ready (or failed to start).
pub fn spawn(
    engine: Engine,
    parallel: usize,
    metrics: Arc<Metrics>,
) -> anyhow::Result<(EngineHandle, std::thread::JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel::<Command>();
    let waiting = Arc::new(AtomicUsize::new(0));
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let shared_waiting = waiting.clone();
    let thread = std::thread::Builder::new()
        .name("hearth-engine".into())
        .spawn(move || run(engine, parallel, rx, ready_tx, shared_waiting, metrics))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok((EngineHandle { tx, waiting }, thread)),
        Ok(Err(e)) => anyhow::bail!("{e}"),
        Err(_) => anyhow::bail!("the engine thread ended before it was ready"),
    }
}

fn run(
    mut engine: Engine,
    parallel: usize,
    rx: mpsc::Receiver<Command>,
    ready: mpsc::Sender<Result<(), String>>,
    waiting: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
) {
    let mut sched = match engine.scheduler() {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    sched.set_max_running(parallel);
    let _ = ready.send(Ok(()));
    let mut routes: HashMap<RequestId, Route> = HashMap::new();
    let mut preemptions = 0;
    loop {
        // Idle: wait for work. Busy: take whatever arrived, then step.
        if sched.pending() == 0 {
            sched.forget_finished();
            match rx.recv() {
                Ok(command) => take(command, &mut sched, &mut routes, &metrics),
                Err(_) => return,
            }
        }
        while let Ok(command) = rx.try_recv() {
            take(command, &mut sched, &mut routes, &metrics);
        }
        let events = match sched.step() {
            Ok(events) => events,
            Err(e) => {
                tracing::error!("engine step failed: {e}");
                for (id, route) in routes.drain() {
                    let _ = route.events.send(Event::Failed(e.to_string()));
                    sched.cancel(id);
                }
                Vec::new()
            }
        };
        let now = Instant::now();
        for event in events {
            deliver(event, now, &mut sched, &mut routes, &metrics);
        }
        let running = sched.running();
        waiting.store(sched.pending() - running, Ordering::Relaxed);
        metrics.running.set(running as i64);
        metrics.queued.set((sched.pending() - running) as i64);
        let usage = sched.model().kv_usage();
        metrics.kv_blocks_used.set(usage.blocks_used as i64);
        metrics
            .kv_blocks_total
            .set((usage.blocks_used + usage.blocks_free) as i64);
        let p = sched.preemptions();
        metrics.preemptions.inc_by((p - preemptions) as u64);
        preemptions = p;
    }
}

fn take(
    command: Command,
    sched: &mut hearth_runtime::sched::Scheduler<'_>,
    routes: &mut HashMap<RequestId, Route>,
    metrics: &Metrics,
) {
    match command {
        Command::Submit(s, arrived) => match sched.add_request(&s.prompt, &s.params) {
            Ok(id) => {
                metrics.prompt_tokens.inc_by(s.prompt.len() as u64);
                let n = s.params.n;
                routes.insert(
                    id,
                    Route {
                        events: s.events,
                        open: n,
                        arrived,
                        first: vec![None; n],
                        tokens: vec![0; n],
                    },
                );
                let _ = s.accepted.send(Ok(()));
            }
            Err(e) => {
                let _ = s.accepted.send(Err(e.to_string()));
            }
        },
        Command::CancelAll => {
            for &id in routes.keys() {
                sched.cancel(id);
            }
        }
    }
}

fn deliver(
    event: TokenEvent,
    now: Instant,
    sched: &mut hearth_runtime::sched::Scheduler<'_>,
    routes: &mut HashMap<RequestId, Route>,
    metrics: &Metrics,
) {
    let id = event.request;
    let Some(route) = routes.get_mut(&id) else {
        return;
    };
    let i = event.sample;
    if event.token.is_some() {
        metrics.generated_tokens.inc();
        route.tokens[i] += 1;
        if route.first[i].is_none() {
            route.first[i] = Some(now);
            let ttft = now.duration_since(route.arrived).as_secs_f64();
            metrics.time_to_first_token.observe(ttft);
        }
    }
    let finished = event.finish.is_some();
    if finished {
        route.open -= 1;
        if let (Some(first), n) = (route.first[i], route.tokens[i]) {
            if n > 1 {
                let per = now.duration_since(first).as_secs_f64() / (n - 1) as f64;
                metrics.time_per_output_token.observe(per);
            }
        }
    }
    if route.events.send(Event::Token(event)).is_err() {
        // The handler is gone: nobody wants the rest.
        sched.cancel(id);
        routes.remove(&id);
        return;
    }
    if finished && route.open == 0 {
        routes.remove(&id);
    }
}
