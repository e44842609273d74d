//! The engine's service, the one request path of the server, the chat and the app, on a small
//! random-weight model: concurrent requests get what a session gives each alone, batched on
//! Vulkan and one at a time on the CPU reference; log probabilities come with the tokens;
//! each completion's end is followed by its report; a cancel, a caller that goes away and the
//! last handle dropped each end what runs; the observer sees every token and the running
//! blocks back at zero.
//! Outside CI a machine without a Vulkan device skips the Vulkan half; in CI a missing device
//! fails it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use hearth_engine::sample::SamplerParams;
use hearth_engine::sched::RequestParams;
use hearth_engine::service::{
    Event, Handle, Load, Observer, Service, ServiceError, ServiceOptions,
};
use hearth_engine::session::{FinishReason, GenerateParams};
use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_kernels::vk::{Device, DeviceDesc};
use hearth_models::synthetic::Shape;
use hearth_quant::Format;

const TINY: Shape = Shape::TINY;

fn have_device() -> bool {
    hearth_testkit::or_skip(Device::new(DeviceDesc::default()), "Vulkan device").is_some()
}

fn engine(backend: BackendKind, n_seq: usize) -> Engine {
    let file = TINY.build_random("tiny", Format::Q8, 7).unwrap();
    let options = EngineOptions {
        backend,
        validate: true,
        n_ctx: Some(128),
        n_seq,
        ..EngineOptions::default()
    };
    Engine::load_file(file, &options, &mut |_| true).unwrap()
}

fn greedy(max_tokens: usize, logprobs: Option<usize>) -> GenerateParams {
    GenerateParams {
        max_tokens: Some(max_tokens),
        sampler: SamplerParams::greedy(),
        ignore_eos: true,
        logprobs,
        ..GenerateParams::default()
    }
}

fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (seed * 37 + i * 11 + 3) % 256)
        .collect()
}

/// What a request's events added up to.
#[derive(Debug, Default)]
struct Heard {
    tokens: Vec<u32>,
    logprobs: usize,
    finish: Option<FinishReason>,
    /// Tokens the report says the cache holds for the completion.
    context_used: Option<usize>,
}

/// Submits a request whose events go to a channel.
fn submit(handle: &Handle, prompt: Vec<u32>, params: GenerateParams) -> mpsc::Receiver<Event> {
    let (tx, rx) = mpsc::channel();
    let request = RequestParams {
        generate: params,
        n: 1,
    };
    handle
        .submit_wait(prompt, request, Box::new(move |e| tx.send(e).is_ok()))
        .unwrap();
    rx
}

/// Reads events until the completion's report.
fn hear(rx: &mpsc::Receiver<Event>) -> Heard {
    let mut heard = Heard::default();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)).expect("an event") {
            Event::Token(e) => {
                heard.tokens.extend(e.token);
                heard.logprobs += usize::from(e.logprobs.is_some());
                if let Some(lp) = &e.logprobs {
                    // Greedy without penalties picks the most likely token.
                    assert_eq!(lp.top.len(), 2);
                    assert_eq!(lp.top[0].token, lp.chosen.token);
                    assert!(lp.chosen.logprob <= 0.0);
                    assert!(lp.top[1].logprob <= lp.top[0].logprob);
                }
                if e.finish.is_some() {
                    assert!(heard.finish.is_none(), "one finish per completion");
                    heard.finish = e.finish;
                }
            }
            Event::Report(r) => {
                assert!(heard.finish.is_some(), "the report follows the finish");
                heard.context_used = Some(r.context_used);
                return heard;
            }
            Event::Failed(e) => panic!("the request failed: {e}"),
        }
    }
}

/// Each prompt's greedy tokens from a session, alone.
fn solo_answers(backend: BackendKind, prompts: &[Vec<u32>], n: usize) -> Vec<Vec<u32>> {
    let mut e = engine(backend, 1);
    prompts
        .iter()
        .map(|p| {
            e.session_mut().clear();
            e.generate(p, &greedy(n, None), &mut |_| true)
                .unwrap()
                .tokens
        })
        .collect()
}

fn concurrent_requests_answer_as_alone(backend: BackendKind, batched: bool) {
    let prompts: Vec<Vec<u32>> = (0..5).map(|i| prompt(i, 5 + 7 * i as usize)).collect();
    let expected = solo_answers(backend, &prompts, 12);
    let (service, handle) =
        Service::spawn(engine(backend, 3), ServiceOptions { parallel: 3 }).unwrap();
    assert_eq!(handle.is_batched(), batched);
    let receivers: Vec<_> = prompts
        .iter()
        .map(|p| submit(&handle, p.clone(), greedy(12, Some(2))))
        .collect();
    for ((rx, want), p) in receivers.iter().zip(&expected).zip(&prompts) {
        let heard = hear(rx);
        assert_eq!(&heard.tokens, want, "prompt of {} tokens", p.len());
        assert_eq!(heard.logprobs, 12);
        assert_eq!(heard.finish, Some(FinishReason::Length));
        assert_eq!(heard.context_used, Some(p.len() + 12));
    }
    drop(handle);
    service.join();
}

#[test]
fn concurrent_requests_answer_as_alone_batched_on_vulkan() {
    if !have_device() {
        return;
    }
    concurrent_requests_answer_as_alone(BackendKind::Vulkan, true);
}

#[test]
fn concurrent_requests_answer_as_alone_batched_on_the_cpu_executor() {
    concurrent_requests_answer_as_alone(BackendKind::Cpu, true);
}

#[test]
fn concurrent_requests_answer_as_alone_one_at_a_time_on_the_cpu_reference() {
    concurrent_requests_answer_as_alone(BackendKind::Reference, false);
}

/// Counts what the service reports.
#[derive(Default)]
struct Counts {
    accepted: AtomicUsize,
    tokens: AtomicUsize,
    first_tokens: AtomicUsize,
    last: Mutex<Load>,
}

impl Observer for Counts {
    fn accepted(&self, _prompt_tokens: usize) {
        self.accepted.fetch_add(1, Ordering::SeqCst);
    }
    fn first_token(&self, _wait: Duration) {
        self.first_tokens.fetch_add(1, Ordering::SeqCst);
    }
    fn token(&self) {
        self.tokens.fetch_add(1, Ordering::SeqCst);
    }
    fn load(&self, load: &Load) {
        *self.last.lock().unwrap() = *load;
    }
}

fn cancels_end_requests(backend: BackendKind) {
    let (service, handle) =
        Service::spawn(engine(backend, 2), ServiceOptions { parallel: 2 }).unwrap();
    let counts = Arc::new(Counts::default());
    handle.observe(Some(counts.clone()));

    // Cancelled by id after its first token.
    let (tx, rx) = mpsc::channel();
    let request = RequestParams {
        generate: greedy(100, None),
        n: 1,
    };
    let id = handle
        .submit_wait(prompt(1, 8), request, Box::new(move |e| tx.send(e).is_ok()))
        .unwrap();
    assert!(matches!(rx.recv().unwrap(), Event::Token(_)));
    handle.cancel(id);
    let heard = hear(&rx);
    assert_eq!(heard.finish, Some(FinishReason::Cancelled));
    assert!(heard.tokens.len() < 100, "{} tokens", heard.tokens.len());

    // A caller that goes away after three tokens: the service stops sending.
    let sent = Arc::new(AtomicUsize::new(0));
    let seen = sent.clone();
    let request = RequestParams {
        generate: greedy(100, None),
        n: 1,
    };
    let sink = Box::new(move |_| seen.fetch_add(1, Ordering::SeqCst) < 2);
    handle.submit_wait(prompt(2, 8), request, sink).unwrap();

    // A later request still runs to its end.
    let rx = submit(&handle, prompt(3, 6), greedy(4, None));
    assert_eq!(hear(&rx).finish, Some(FinishReason::Length));
    assert_eq!(sent.load(Ordering::SeqCst), 3);

    // The observer saw each request and every token; nothing runs any more.
    assert_eq!(counts.accepted.load(Ordering::SeqCst), 3);
    assert_eq!(counts.first_tokens.load(Ordering::SeqCst), 3);
    assert!(counts.tokens.load(Ordering::SeqCst) >= 1 + 3 + 4);
    if backend != BackendKind::Reference {
        // The load is reported after the step that sent the last events.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let load = loop {
            let load = *counts.last.lock().unwrap();
            if load.running == 0 || std::time::Instant::now() > deadline {
                break load;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(
            (load.running, load.queued, load.kv_blocks_running),
            (0, 0, 0)
        );
        assert!(load.kv_blocks_used > 0, "finished prompts stay cached");
    }

    // The last handle dropped mid-request: the service cancels it and ends.
    let (tx, _rx_kept) = mpsc::channel();
    let request = RequestParams {
        generate: greedy(100, None),
        n: 1,
    };
    handle
        .submit_wait(prompt(4, 8), request, Box::new(move |e| tx.send(e).is_ok()))
        .unwrap();
    drop(handle);
    service.join();
}

#[test]
fn cancels_end_requests_batched_on_vulkan() {
    if !have_device() {
        return;
    }
    cancels_end_requests(BackendKind::Vulkan);
}

#[test]
fn cancels_end_requests_batched_on_the_cpu_executor() {
    cancels_end_requests(BackendKind::Cpu);
}

#[test]
fn cancels_end_requests_one_at_a_time_on_the_cpu_reference() {
    cancels_end_requests(BackendKind::Reference);
}

#[test]
fn a_request_that_cannot_run_is_refused_with_its_reason() {
    let (service, handle) = Service::spawn(
        engine(BackendKind::Reference, 1),
        ServiceOptions { parallel: 1 },
    )
    .unwrap();
    let request = |max| RequestParams {
        generate: greedy(max, None),
        n: 1,
    };
    let e = handle
        .submit_wait(prompt(1, 8), request(500), Box::new(|_| true))
        .unwrap_err();
    assert!(matches!(e, ServiceError::TooLong(_)), "{e:?}");
    assert!(e.to_string().contains("128"), "{e}");
    let e = handle
        .submit_wait(Vec::new(), request(4), Box::new(|_| true))
        .unwrap_err();
    assert!(matches!(e, ServiceError::Invalid(_)), "{e:?}");
    assert!(e.to_string().contains("prompt"), "{e}");
    drop(handle);
    service.join();
}

#[test]
fn a_warm_up_runs_a_request_through_and_refuses_a_bad_one() {
    for (backend, parallel) in [(BackendKind::Cpu, 2), (BackendKind::Reference, 1)] {
        let (service, handle) =
            Service::spawn(engine(backend, parallel), ServiceOptions { parallel }).unwrap();
        handle.warm_up(prompt(3, 5)).unwrap();
        // Nothing is left waiting, and the service answers as before.
        assert_eq!(handle.waiting(), 0);
        let e = handle.warm_up(Vec::new()).unwrap_err();
        assert!(matches!(e, ServiceError::Invalid(_)), "{e:?}");
        drop(handle);
        service.join();
    }
}
