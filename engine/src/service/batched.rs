//! The service's loop over the continuous-batching scheduler: take what arrived, step, and
//! route each completion's events back to its sink.

use std::collections::HashMap;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use super::{Command, Event, Load, Observer, Queue, Report, ServiceError, Sink, Submit};
use crate::sched::{RequestId, Scheduler, SeqTimes, TokenEvent};
use crate::session::Timings;

/// One request's way back to its caller.
struct Route {
    sink: Sink,
    /// Completions not finished yet.
    open: usize,
    submitted: Instant,
}

struct State<'s, 'm> {
    sched: &'s mut Scheduler<'m>,
    routes: HashMap<RequestId, Route>,
    observer: Option<Arc<dyn Observer>>,
    /// Completions submitted since the queue was last published.
    taken: usize,
}

pub(super) fn run(mut sched: Scheduler<'_>, rx: mpsc::Receiver<Command>, queue: Arc<Queue>) {
    let mut state = State {
        sched: &mut sched,
        routes: HashMap::new(),
        observer: None,
        taken: 0,
    };
    let mut callers = true;
    loop {
        // Idle: wait for work. Busy: take whatever arrived, then step.
        if state.sched.pending() == 0 {
            match rx.recv() {
                Ok(command) => state.take(command),
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(command) => state.take(command),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    // Nobody can submit or listen any more: wind down.
                    if callers {
                        state.take(Command::CancelAll);
                        callers = false;
                    }
                    break;
                }
            }
        }
        match state.sched.step() {
            Ok(events) => {
                for event in events {
                    state.deliver(event);
                }
                // Delivered: what finished is released now, not when the server is next idle.
                state.sched.forget_finished();
            }
            Err(e) => {
                tracing::error!("engine step failed: {e}");
                let e = Arc::new(e);
                for (id, mut route) in state.routes.drain() {
                    (route.sink)(Event::Failed(ServiceError::Failed(e.clone())));
                    state.sched.cancel(id);
                }
            }
        }
        let load = state.load();
        queue.publish(load.running, load.queued);
        queue.taken(std::mem::take(&mut state.taken));
        if let Some(o) = &state.observer {
            o.load(&load);
        }
    }
}

impl State<'_, '_> {
    fn take(&mut self, command: Command) {
        match command {
            Command::Submit(s, submitted) => {
                self.taken += s.params.n;
                self.add(*s, submitted);
            }
            Command::Cancel(id) => self.sched.cancel(id),
            Command::CancelAll => {
                for &id in self.routes.keys() {
                    self.sched.cancel(id);
                }
            }
            Command::Observe(o) => self.observer = o,
        }
    }

    /// Hands a submission to the scheduler, and tells its caller whether it was taken.
    fn add(&mut self, s: Submit, submitted: Instant) {
        match self.sched.add_request(&s.prompt, &s.params) {
            Ok(id) => {
                if let Some(o) = &self.observer {
                    o.accepted(s.prompt.len());
                }
                let route = Route {
                    sink: s.sink,
                    open: s.params.n,
                    submitted,
                };
                self.routes.insert(id, route);
                (s.accepted)(Ok(id));
            }
            Err(e) => (s.accepted)(Err(ServiceError::refused(e))),
        }
    }

    fn deliver(&mut self, event: TokenEvent) {
        let id = event.request;
        let Some(route) = self.routes.get_mut(&id) else {
            return;
        };
        let i = event.sample;
        let finished = event.finish.is_some();
        // A lookup among the scheduler's sequences: only where something reads it.
        let times = (self.observer.is_some() || finished)
            .then(|| self.sched.times_of(id, i))
            .flatten();
        if let (Some(o), Some(t)) = (&self.observer, times) {
            if event.token.is_some() {
                o.token();
                if t.generated == 1 {
                    let first = t.first_token.unwrap_or(t.added);
                    o.first_token(first.saturating_duration_since(route.submitted));
                }
            }
            if finished {
                if let (Some(first), Some(last)) = (t.first_token, t.finished) {
                    if t.generated > 1 {
                        o.per_token((last - first) / (t.generated - 1) as u32);
                    }
                }
            }
        }
        let mut listening = (route.sink)(Event::Token(event));
        if finished && listening {
            route.open -= 1;
            let report = Report {
                sample: i,
                timings: times.map(|t| timings(&t)).unwrap_or_default(),
                context_used: times.map_or(0, |t| t.prompt + t.generated),
                kv: Some(self.sched.model().kv_usage()),
                kv_policy: self.sched.model().kv_policy_stats(),
            };
            listening &= (route.sink)(Event::Report(Box::new(report)));
        }
        if !listening {
            // The caller is gone: nobody wants the rest.
            self.sched.cancel(id);
            self.routes.remove(&id);
        } else if finished && route.open == 0 {
            self.routes.remove(&id);
        }
    }

    fn load(&self) -> Load {
        let running = self.sched.running();
        let usage = self.sched.model().kv_usage();
        Load {
            running,
            queued: self.sched.pending() - running,
            kv_blocks_running: self.sched.blocks_running(),
            kv_blocks_used: usage.blocks_used,
            kv_blocks_total: usage.blocks_used + usage.blocks_free,
            preemptions: self.sched.preemptions(),
        }
    }
}

/// A completion's timings as a session reports them: the prompt from submission (queueing
/// included) to the first token, generation from the first token to the last.
fn timings(t: &SeqTimes) -> Timings {
    let first = t.first_token.unwrap_or(t.added);
    Timings {
        prompt_tokens: t.prompt - t.reused,
        cached_tokens: t.reused,
        prompt: first - t.added,
        generated_tokens: t.generated,
        generation: t.finished.unwrap_or(first).saturating_duration_since(first),
    }
}
