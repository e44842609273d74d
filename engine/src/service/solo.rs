//! The service's loop where the engine cannot batch (the CPU reference, a KV pool that
//! evicts): requests run one completion at a time on the engine's session, which keeps the
//! last one's tokens cached for the next (a chat's next turn). Commands that arrive meanwhile
//! are taken between tokens, so a cancel stops the running completion at once.

use std::collections::VecDeque;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use hearth_models::Tokenizer;

use super::{Command, Event, Observer, Queue, Report, ServiceError, Sink, Submit};
use crate::engine::Engine;
use crate::sample::FinishReason;
use crate::sched::{RequestId, RequestParams, TokenEvent};
use crate::session::{Step, Timings};

struct Queued {
    id: RequestId,
    prompt: Vec<u32>,
    params: RequestParams,
    sink: Sink,
    submitted: Instant,
}

struct Solo {
    queue: VecDeque<Queued>,
    observer: Option<Arc<dyn Observer>>,
    next_id: u64,
    n_ctx: usize,
    n_vocab: usize,
    /// The engine's tokenizer, which requests' grammars are checked against.
    tokenizer: Arc<Tokenizer>,
    /// The request running now, and whether it was cancelled.
    current: Option<RequestId>,
    cancelled: bool,
    /// The callers are gone.
    closed: bool,
    /// What the callers see of the queue.
    shared: Arc<Queue>,
}

pub(super) fn run(engine: &mut Engine, rx: mpsc::Receiver<Command>, shared: Arc<Queue>) {
    let mut solo = Solo {
        queue: VecDeque::new(),
        observer: None,
        next_id: 0,
        n_ctx: engine.session().backend().n_ctx(),
        n_vocab: engine.info().config.n_vocab,
        tokenizer: engine.text_tools().0,
        current: None,
        cancelled: false,
        closed: false,
        shared,
    };
    loop {
        if solo.queue.is_empty() {
            match rx.recv() {
                Ok(command) => solo.take(command),
                Err(_) => return,
            }
        }
        solo.drain(&rx);
        if let Some(q) = solo.queue.pop_front() {
            solo.publish(1);
            solo.generate(engine, q, &rx);
            solo.publish(0);
        }
    }
}

impl Solo {
    /// Takes every command waiting, without blocking.
    fn drain(&mut self, rx: &mpsc::Receiver<Command>) {
        loop {
            match rx.try_recv() {
                Ok(command) => self.take(command),
                Err(mpsc::TryRecvError::Empty) => return,
                Err(mpsc::TryRecvError::Disconnected) => {
                    if !self.closed {
                        self.closed = true;
                        self.take(Command::CancelAll);
                    }
                    return;
                }
            }
        }
    }

    /// Publishes the queue for the callers: `running` completions, and those queued.
    fn publish(&self, running: usize) {
        let waiting = self.queue.iter().map(|q| q.params.n).sum();
        self.shared.publish(running, waiting);
    }

    fn take(&mut self, command: Command) {
        match command {
            Command::Submit(s, submitted) => {
                let n = s.params.n;
                self.submit(*s, submitted);
                self.publish(usize::from(self.current.is_some()));
                self.shared.taken(n);
            }
            Command::Cancel(id) => self.cancel(id),
            Command::CancelAll => {
                let ids: Vec<RequestId> = self.queue.iter().map(|q| q.id).collect();
                for id in ids.into_iter().chain(self.current) {
                    self.cancel(id);
                }
            }
            Command::Observe(o) => self.observer = o,
        }
    }

    /// Queues a submission, or tells its caller why not.
    fn submit(&mut self, s: Submit, submitted: Instant) {
        let checked = s
            .params
            .generate
            .check(&self.tokenizer, &s.prompt, self.n_ctx, self.n_vocab)
            .and_then(|()| match s.params.n {
                0 => Err(hearth_model::Error::options("n", "must be at least 1")),
                _ => Ok(()),
            });
        if let Err(e) = checked {
            return (s.accepted)(Err(ServiceError::refused(e)));
        }
        let id = RequestId(self.next_id);
        self.next_id += 1;
        if let Some(o) = &self.observer {
            o.accepted(s.prompt.len());
        }
        let Submit {
            prompt,
            params,
            sink,
            accepted,
        } = s;
        accepted(Ok(id));
        self.queue.push_back(Queued {
            id,
            prompt,
            params,
            sink,
            submitted,
        });
    }

    /// Stops request `id` if it runs; ends it at once if it waits.
    fn cancel(&mut self, id: RequestId) {
        if self.current == Some(id) {
            self.cancelled = true;
            return;
        }
        let Some(at) = self.queue.iter().position(|q| q.id == id) else {
            return;
        };
        let Some(mut q) = self.queue.remove(at) else {
            return;
        };
        for sample in 0..q.params.n {
            let end = end_event(id, sample, String::new(), FinishReason::Cancelled);
            (q.sink)(Event::Token(end));
            let report = Report {
                sample,
                timings: Timings::default(),
                context_used: 0,
                kv: None,
                kv_policy: None,
            };
            (q.sink)(Event::Report(Box::new(report)));
        }
    }

    /// Runs each completion of `q` in turn, sampled with seed `seed + i`.
    fn generate(&mut self, engine: &mut Engine, mut q: Queued, rx: &mpsc::Receiver<Command>) {
        self.current = Some(q.id);
        self.cancelled = false;
        let id = q.id;
        for sample in 0..q.params.n {
            let mut params = q.params.generate.clone();
            params.sampler.seed = params.sampler.seed.wrapping_add(sample as u64);
            let mut tail = String::new();
            let mut listening = true;
            let mut first: Option<Instant> = None;
            let sink = &mut q.sink;
            let submitted = q.submitted;
            let result = {
                let mut on_step = |step: Step<'_>| -> bool {
                    self.drain(rx);
                    match step {
                        Step::Tail(text) => tail.push_str(text),
                        Step::Token(next) => {
                            if let Some(o) = &self.observer {
                                o.token();
                                if first.is_none() {
                                    o.first_token(submitted.elapsed());
                                }
                            }
                            first.get_or_insert_with(Instant::now);
                            let event = TokenEvent {
                                request: id,
                                sample,
                                token: Some(next.token),
                                text: next.text.clone(),
                                finish: None,
                                logprobs: next.logprobs.clone(),
                            };
                            listening = sink(Event::Token(event));
                        }
                    }
                    listening && !self.cancelled
                };
                let (tokenizer, _) = engine.text_tools();
                engine
                    .session_mut()
                    .generate_tokens(&tokenizer, &q.prompt, &params, &mut on_step)
            };
            match result {
                Ok(g) => {
                    if let Some(o) = &self.observer {
                        if g.tokens.len() > 1 {
                            o.per_token(g.timings.generation / (g.tokens.len() - 1) as u32);
                        }
                    }
                    if !listening {
                        break;
                    }
                    let end = end_event(id, sample, tail, g.finish);
                    let report = Report {
                        sample,
                        timings: g.timings,
                        context_used: q.prompt.len() + g.tokens.len(),
                        kv: engine.kv_usage(),
                        kv_policy: engine.kv_policy_stats(),
                    };
                    listening = sink(Event::Token(end)) && sink(Event::Report(Box::new(report)));
                }
                Err(e) => {
                    sink(Event::Failed(ServiceError::Failed(Arc::new(e))));
                    break;
                }
            }
            if !listening {
                break;
            }
            if self.cancelled {
                // The rest of the request's completions end unstarted.
                for rest in sample + 1..q.params.n {
                    let end = end_event(id, rest, String::new(), FinishReason::Cancelled);
                    sink(Event::Token(end));
                }
                break;
            }
        }
        self.current = None;
    }
}

fn end_event(request: RequestId, sample: usize, text: String, finish: FinishReason) -> TokenEvent {
    TokenEvent {
        request,
        sample,
        token: None,
        text,
        finish: Some(finish),
        logprobs: None,
    }
}
