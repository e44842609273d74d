//! Serving over the paged KV cache, on a small random-weight model: continuous batching gives
//! every request what it gets alone (with chunked prompts, requests joining mid-run and
//! preemption), completions of one prompt share its blocks, impossible requests and steps are
//! refused, cancelled ones end; beam search over the indirect KV cache equals greedy at width
//! 1 and the copying reference on the CPU at width 3, copies no K/V when it reorders beams,
//! and is refused under H2O.
//! Each test runs on the Vulkan executor (module `vulkan`) and on the native CPU executor
//! (`cpu`, with f32 activations, whose results the copying reference meets; `cpu_q8` runs the
//! batching tests with the default 8-bit activations too), and on a model split between
//! them (`split`: the first layer on the CPU executor, the second on the Vulkan device;
//! `rows`: the second divided by rows between two devices, lavapipe opened twice).
//! Outside CI a machine without a Vulkan device skips the Vulkan and split ones; in CI a
//! missing device fails them.

use std::cell::Cell;
use std::collections::HashMap;

use hearth_cpu::Activations;
use hearth_engine::beam_search;
use hearth_engine::sample::beam_scores::BeamParams;
use hearth_engine::sample::SamplerParams;
use hearth_engine::sched::{RequestId, RequestParams, Scheduler, TokenEvent};
use hearth_engine::session::{FinishReason, GenerateParams};
use hearth_engine::speculative::Speculative;
use hearth_engine::split::{GpuLayers, SplitMode};
use hearth_engine::Error;
use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_kernels::vk::{Device, DeviceDesc};
use hearth_model::kv::infinigen::IgParams;
use hearth_model::kv::policy::KvPolicyChoice;
use hearth_model::kv::KvBudget;
use hearth_model::{BatchedBackend, SeqStep};
use hearth_models::resolve_gguf;
use hearth_models::synthetic::Shape;
use hearth_quant::Format;
use hearth_reference::CpuModel;

const TINY: Shape = Shape::TINY;

thread_local! {
    /// The executor this thread's test runs on, and the layers on the Vulkan device where the
    /// model is split.
    static BACKEND: Cell<(BackendKind, Activations, Option<GpuLayers>)> =
        const { Cell::new((BackendKind::Vulkan, Activations::F32, None)) };
}

/// Runs `test` on `backend`.
fn on(backend: BackendKind, activations: Activations, test: fn()) {
    BACKEND.set((backend, activations, None));
    test();
}

/// Runs `test` with the tiny model's first layer on the CPU executor (f32 activations) and
/// its second on the Vulkan device.
fn on_split(test: fn()) {
    BACKEND.set((
        BackendKind::Vulkan,
        Activations::F32,
        Some(GpuLayers::Count(1)),
    ));
    test();
}

thread_local! {
    /// The Vulkan layers are divided by rows between two devices (lavapipe opened twice).
    static ROWS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `test` with the tiny model's first layer on the CPU executor (f32 activations) and
/// its second divided by rows between two devices.
fn on_rows(test: fn()) {
    ROWS.set(true);
    on_split(test);
}

fn have_device() -> bool {
    BACKEND.get().0 != BackendKind::Vulkan
        || hearth_testkit::or_skip(Device::new(DeviceDesc::default()), "Vulkan device").is_some()
}

fn engine(n_seq: usize, n_ctx: usize, ubatch: usize, kv_budget: Option<KvBudget>) -> Engine {
    let file = TINY.build_random("tiny", Format::Q8, 7).unwrap();
    let (backend, activations, gpu_layers) = BACKEND.get();
    let (devices, split_mode) = match ROWS.get() {
        true => (vec![0, 0], SplitMode::Row { group: 0 }),
        false => (Vec::new(), SplitMode::Layer),
    };
    let options = EngineOptions {
        backend,
        activations,
        gpu_layers,
        devices,
        split_mode,
        validate: true,
        n_ctx: Some(n_ctx),
        n_seq,
        kv_budget,
        max_chunk: ubatch,
        ..EngineOptions::default()
    };
    Engine::load_file(file, &options, &mut |_| true).unwrap()
}

fn greedy(max_tokens: usize) -> RequestParams {
    RequestParams {
        generate: GenerateParams {
            max_tokens: Some(max_tokens),
            sampler: SamplerParams::greedy(),
            ignore_eos: true,
            ..GenerateParams::default()
        },
        n: 1,
    }
}

/// A prompt of `len` tokens, different for each `seed`.
fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (seed * 37 + i * 11 + 3) % 256)
        .collect()
}

/// Each (request, completion)'s tokens and how it finished.
type Outputs = HashMap<(RequestId, usize), (Vec<u32>, Option<FinishReason>)>;

/// Steps until nothing is pending; returns each (request, sample)'s tokens and finish.
fn drain(sched: &mut Scheduler<'_>) -> Outputs {
    let mut out = Outputs::new();
    while sched.pending() > 0 {
        for e in sched.step().unwrap() {
            record(&mut out, e);
        }
    }
    out
}

fn record(out: &mut Outputs, e: TokenEvent) {
    let entry = out.entry((e.request, e.sample)).or_default();
    entry.0.extend(e.token);
    if e.finish.is_some() {
        entry.1 = e.finish;
    }
}

/// What each prompt gives alone, through a plain session.
fn alone(prompts: &[(Vec<u32>, usize)]) -> Vec<Vec<u32>> {
    let mut e = engine(1, 128, 256, None);
    prompts
        .iter()
        .map(|(p, n)| {
            e.session_mut().clear();
            e.generate(p, &greedy(*n).generate, &mut |_| true)
                .unwrap()
                .tokens
        })
        .collect()
}

fn continuous_batching_gives_each_request_what_it_gets_alone() {
    if !have_device() {
        return;
    }
    // Mixed lengths; prompts longer than the 16-token step budget are read in chunks while
    // other sequences decode.
    let prompts: Vec<(Vec<u32>, usize)> = vec![
        (prompt(1, 5), 12),
        (prompt(2, 40), 6),
        (prompt(3, 17), 20),
        (prompt(4, 3), 9),
        (prompt(5, 29), 4),
    ];
    let want = alone(&prompts);
    let distinct: std::collections::HashSet<_> = want.iter().flatten().collect();
    assert!(
        distinct.len() > 10,
        "the model's greedy tokens vary: {want:?}"
    );
    let mut e = engine(3, 128, 16, None);
    let mut sched = e.scheduler().unwrap();
    let mut ids = Vec::new();
    for (p, n) in &prompts[..3] {
        ids.push(sched.add_request(p, &greedy(*n)).unwrap());
    }
    // Two more join after a few steps.
    let mut got = HashMap::new();
    for _ in 0..3 {
        for ev in sched.step().unwrap() {
            record(&mut got, ev);
        }
    }
    for (p, n) in &prompts[3..] {
        ids.push(sched.add_request(p, &greedy(*n)).unwrap());
    }
    while sched.pending() > 0 {
        for ev in sched.step().unwrap() {
            record(&mut got, ev);
        }
    }
    for (i, id) in ids.iter().enumerate() {
        let (tokens, finish) = &got[&(*id, 0)];
        assert_eq!(tokens, &want[i], "request {i}");
        assert_eq!(*finish, Some(FinishReason::Length));
    }
    assert_eq!(sched.running(), 0);
}

/// Sequences that draft (prompt lookup) step beside sequences that do not, and each gets
/// what plain decoding alone gives it: drafts cut from the rows when rejected, preemption
/// and a small step budget included.
fn speculative_sequences_get_what_decoding_gives() {
    if !have_device() {
        return;
    }
    // Prompts that repeat themselves, so that lookup finds drafts.
    let looped = |seed: u32, len: usize| -> Vec<u32> {
        let unit = prompt(seed, 6);
        unit.iter().copied().cycle().take(len).collect()
    };
    let prompts: Vec<(Vec<u32>, usize)> = vec![
        (looped(1, 20), 24),
        (prompt(2, 9), 10),
        (looped(3, 30), 18),
        (looped(4, 14), 12),
    ];
    let want = alone(&prompts);
    let lookup = |n: usize| {
        let mut p = greedy(n);
        p.generate.speculative = Some(Speculative::lookup());
        p
    };
    // The session drafts too.
    let mut e = engine(1, 128, 256, None);
    let g = e
        .generate(&prompts[0].0, &lookup(prompts[0].1).generate, &mut |_| true)
        .unwrap();
    assert_eq!(g.tokens, want[0], "session");
    // A pool of 9 blocks of 16 tokens for three rows: room runs short and preempts.
    let mut e = engine(3, 128, 16, Some(KvBudget::Tokens(9 * 16)));
    let mut sched = e.scheduler().unwrap();
    let ids: Vec<RequestId> = prompts
        .iter()
        .enumerate()
        .map(|(i, (p, n))| {
            let params = if i == 1 { greedy(*n) } else { lookup(*n) };
            sched.add_request(p, &params).unwrap()
        })
        .collect();
    let got = drain(&mut sched);
    let mut accepted = 0;
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(got[&(*id, 0)].0, want[i], "request {i}");
        assert_eq!(got[&(*id, 0)].1, Some(FinishReason::Length));
        accepted += sched.drafts_of(*id, 0).unwrap().accepted;
    }
    assert!(accepted > 0, "no draft was accepted");
    assert_eq!(sched.blocks_running(), 0);
}

fn finished_sequences_are_released_while_others_run() {
    if !have_device() {
        return;
    }
    let long = (prompt(14, 6), 40);
    let shorts: Vec<(Vec<u32>, usize)> = (0..5).map(|i| (prompt(15 + i, 6), 2)).collect();
    let mut all = vec![long.clone()];
    all.extend(shorts.iter().cloned());
    let want = alone(&all);
    let mut e = engine(3, 128, 64, None);
    let mut sched = e.scheduler().unwrap();
    let long_id = sched.add_request(&long.0, &greedy(long.1)).unwrap();
    // Three completions of one prompt that wait for their lead to read it.
    let shared = sched
        .add_request(&prompt(20, 30), &RequestParams { n: 3, ..greedy(3) })
        .unwrap();
    let mut got = HashMap::new();
    // Short requests keep arriving, so the scheduler is never idle: each one's state goes
    // as soon as its last event has been read.
    for (i, (p, n)) in shorts.iter().enumerate() {
        let id = sched.add_request(p, &greedy(*n)).unwrap();
        loop {
            let events = sched.step().unwrap();
            let done = events.iter().any(|e| e.request == id && e.finish.is_some());
            for ev in events {
                record(&mut got, ev);
            }
            sched.forget_finished();
            if done {
                break;
            }
        }
        assert_eq!(got[&(id, 0)].0, want[i + 1], "short request {i}");
        let pending = sched.pending();
        assert!(pending > 0, "the long request still runs");
        assert_eq!(sched.held(), pending, "only unfinished sequences are held");
    }
    while sched.pending() > 0 {
        for ev in sched.step().unwrap() {
            record(&mut got, ev);
        }
        sched.forget_finished();
    }
    assert_eq!(sched.held(), 0);
    assert_eq!(
        got[&(long_id, 0)].0,
        want[0],
        "renumbering kept the long request whole"
    );
    let first = &got[&(shared, 0)].0;
    for s in 1..3 {
        assert_eq!(&got[&(shared, s)].0, first, "greedy completions agree");
    }
}

fn running_out_of_blocks_preempts_and_recomputes() {
    if !have_device() {
        return;
    }
    let prompts: Vec<(Vec<u32>, usize)> = vec![
        (prompt(6, 20), 24),
        (prompt(7, 18), 24),
        (prompt(8, 22), 24),
    ];
    let want = alone(&prompts);
    // 8 blocks of 16: one request needs 3, three together 9.
    let mut e = engine(3, 64, 64, Some(KvBudget::Tokens(128)));
    let mut sched = e.scheduler().unwrap();
    let ids: Vec<_> = prompts
        .iter()
        .map(|(p, n)| sched.add_request(p, &greedy(*n)).unwrap())
        .collect();
    let got = drain(&mut sched);
    assert!(
        sched.preemptions() > 0,
        "the pool is too small for all three"
    );
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(got[&(*id, 0)].0, want[i], "request {i}");
    }
}

fn completions_of_one_prompt_share_its_blocks() {
    if !have_device() {
        return;
    }
    let p = prompt(9, 50);
    let mut e = engine(4, 128, 64, None);
    let mut sched = e.scheduler().unwrap();
    let params = RequestParams { n: 4, ..greedy(5) };
    let id = sched.add_request(&p, &params).unwrap();
    let mut peak = 0;
    let mut got = HashMap::new();
    while sched.pending() > 0 {
        for ev in sched.step().unwrap() {
            record(&mut got, ev);
        }
        peak = peak.max(sched.model().kv().usage().blocks_used);
    }
    // Three completions reuse all but the prompt's last token.
    assert_eq!(sched.reused_tokens(), 3 * (p.len() - 1));
    // Four private copies would take 4 x 4 blocks; shared, the prompt's 3 full blocks are
    // held once and each completion writes into its own copy of the last.
    assert!(peak <= 3 + 4, "{peak} blocks in use");
    let first = &got[&(id, 0)].0;
    for s in 1..4 {
        assert_eq!(&got[&(id, s)].0, first, "greedy completions agree");
    }
    assert_eq!(first, &alone(&[(p, 5)])[0]);
}

fn a_follow_up_turn_reuses_the_cached_conversation() {
    if !have_device() {
        return;
    }
    let mut e = engine(2, 128, 64, None);
    let mut sched = e.scheduler().unwrap();
    let turn1 = prompt(10, 30);
    let id = sched.add_request(&turn1, &greedy(6)).unwrap();
    let answer = drain(&mut sched)[&(id, 0)].0.clone();
    let mut turn2 = turn1.clone();
    turn2.extend(&answer);
    turn2.extend(prompt(11, 7));
    sched.add_request(&turn2, &greedy(3)).unwrap();
    drain(&mut sched);
    // The first turn and all but the last answer token (never fed back) were cached.
    assert_eq!(sched.reused_tokens(), turn1.len() + answer.len() - 1);
}

fn impossible_requests_are_refused_and_cancelled_ones_end() {
    if !have_device() {
        return;
    }
    let mut e = engine(2, 64, 64, Some(KvBudget::Tokens(48)));
    let mut sched = e.scheduler().unwrap();
    let err = sched.add_request(&prompt(1, 60), &greedy(10)).unwrap_err();
    assert!(matches!(err, Error::ContextFull { .. }), "{err}");
    let err = sched.add_request(&prompt(1, 40), &greedy(20)).unwrap_err();
    assert!(matches!(err, Error::KvFull { .. }), "{err}");
    assert!(err.to_string().contains("--kv-budget"), "{err}");
    let err = sched.add_request(&[], &greedy(1)).unwrap_err();
    assert!(
        matches!(&err, Error::Options { field, .. } if field == "prompt"),
        "{err}"
    );
    assert_eq!(err.to_string(), "prompt: is empty");
    let err = sched.add_request(&[999], &greedy(1)).unwrap_err();
    assert!(
        matches!(err, Error::BadToken { id: 999, n_vocab } if n_vocab == TINY.n_vocab),
        "{err}"
    );

    let id = sched.add_request(&prompt(2, 8), &greedy(30)).unwrap();
    sched.step().unwrap();
    sched.cancel(id);
    let got = drain(&mut sched);
    assert_eq!(got[&(id, 0)].1, Some(FinishReason::Cancelled));
    assert_eq!(sched.pending(), 0);
}

fn beam_search_is_greedy_at_width_one_and_matches_the_copying_reference() {
    if !have_device() {
        return;
    }
    let p = prompt(12, 21);
    let no_eos = |_| false;
    let mut e = engine(3, 64, 64, None);

    // Width 1 is greedy.
    let params = BeamParams {
        width: 1,
        max_tokens: 10,
        length_penalty: 1.0,
        early_stopping: false,
    };
    let model = e.session_mut().fresh_backend().as_batched_mut().unwrap();
    let h = beam_search::search(model, &p, &params, no_eos).unwrap();
    assert_eq!(h[0].tokens, alone(&[(p.clone(), 10)])[0]);

    // Width 3 against the reference that copies each beam's cache on the CPU.
    let params = BeamParams { width: 3, ..params };
    let copies_before = model.kv().block_copies();
    let got = beam_search::search(model, &p, &params, no_eos).unwrap();
    assert_eq!(
        model.kv().block_copies(),
        copies_before,
        "reordering beams copies no K/V"
    );
    let file = TINY.build_random("tiny", Format::Q8, 7).unwrap();
    let resolved = resolve_gguf(&file).unwrap();
    let mut cpu = CpuModel::load(&file, &resolved, 64, &mut |_| true).unwrap();
    let want = beam_search::search_copying(&mut cpu, &p, &params, no_eos).unwrap();
    assert_eq!(got.len(), 3);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.tokens, w.tokens);
        assert!(
            (g.logprob - w.logprob).abs() < 1e-3,
            "{} vs {}",
            g.logprob,
            w.logprob
        );
    }
}

/// H2O keeps one row's positions, which beams sharing a history cannot: beam search under it
/// is an error naming the placement, not a wrong answer.
fn beam_search_under_h2o_is_refused() {
    if !have_device() {
        return;
    }
    let mut e = engine(3, 64, 64, None);
    let model = e.session_mut().fresh_backend().as_batched_mut().unwrap();
    model
        .set_kv_policy(KvPolicyChoice::H2o(IgParams::paper(true)))
        .unwrap();
    let params = BeamParams {
        width: 2,
        max_tokens: 4,
        length_penalty: 1.0,
        early_stopping: false,
    };
    let err = beam_search::search(model, &prompt(12, 21), &params, |_| false).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("h2o") && message.contains("beam"),
        "{message}"
    );
}

/// A step the cache cannot take is refused before anything runs: too many tokens, a row
/// that does not exist, more blocks than are free. Each error names what was wrong, and every
/// row keeps its length.
fn impossible_steps_are_refused_and_change_nothing() {
    if !have_device() {
        return;
    }
    // Two rows, a step of at most 32 tokens, a pool of 4 blocks (64 tokens).
    let mut e = engine(2, 64, 32, Some(KvBudget::Tokens(64)));
    let model = e.session_mut().fresh_backend().as_batched_mut().unwrap();
    fn step(row: usize, tokens: &[u32]) -> SeqStep<'_> {
        SeqStep {
            row,
            tokens,
            logits: None,
            beam: None,
        }
    }
    let (a, b) = (prompt(3, 30), prompt(4, 30));
    model.step_batch(&[step(0, &a)]).unwrap();
    let lens = |m: &dyn BatchedBackend| (m.kv().len(0), m.kv().len(1));
    assert_eq!(lens(model), (30, 0));

    let long = prompt(5, 33);
    let err = model.step_batch(&[step(1, &long)]).unwrap_err().to_string();
    assert!(err.contains("at most 32 tokens"), "{err}");
    let err = model.step_batch(&[step(2, &b)]).unwrap_err().to_string();
    assert!(err.contains("no cache row 2"), "{err}");
    // Row 0 holds 2 blocks; 17 tokens in row 1 and 3 more in row 0 need 3 of the 2 free.
    let err = model
        .step_batch(&[step(1, &b[..17]), step(0, &b[..3])])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::KvFull {
                needed: 3,
                free: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(lens(model), (30, 0));

    // The cache still serves: the rows go on from where they were.
    model
        .step_batch(&[step(1, &b[..17]), step(0, &b[..2])])
        .unwrap();
    assert_eq!(lens(model), (32, 17));
}

fn the_engine_reports_kv_blocks() {
    if !have_device() {
        return;
    }
    let mut e = engine(1, 128, 64, None);
    let before = e.kv_usage().unwrap();
    assert_eq!(before.blocks_used, 0);
    assert_eq!(before.blocks_free, 8, "128 positions in blocks of 16");
    e.generate(&prompt(13, 20), &greedy(5).generate, &mut |_| true)
        .unwrap();
    // 20 prompt tokens and 4 fed-back generated tokens: 24 positions in 2 blocks.
    let after = e.kv_usage().unwrap();
    assert_eq!((after.blocks_used, after.blocks_free), (2, 6));
}

/// Every test on the Vulkan executor.
mod vulkan {
    use super::*;

    #[test]
    fn speculative_sequences_get_what_decoding_gives() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::speculative_sequences_get_what_decoding_gives,
        );
    }

    #[test]
    fn continuous_batching_gives_each_request_what_it_gets_alone() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::continuous_batching_gives_each_request_what_it_gets_alone,
        );
    }

    #[test]
    fn running_out_of_blocks_preempts_and_recomputes() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::running_out_of_blocks_preempts_and_recomputes,
        );
    }

    #[test]
    fn finished_sequences_are_released_while_others_run() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::finished_sequences_are_released_while_others_run,
        );
    }

    #[test]
    fn completions_of_one_prompt_share_its_blocks() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::completions_of_one_prompt_share_its_blocks,
        );
    }

    #[test]
    fn a_follow_up_turn_reuses_the_cached_conversation() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::a_follow_up_turn_reuses_the_cached_conversation,
        );
    }

    #[test]
    fn impossible_requests_are_refused_and_cancelled_ones_end() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::impossible_requests_are_refused_and_cancelled_ones_end,
        );
    }

    #[test]
    fn beam_search_is_greedy_at_width_one_and_matches_the_copying_reference() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::beam_search_is_greedy_at_width_one_and_matches_the_copying_reference,
        );
    }

    #[test]
    fn beam_search_under_h2o_is_refused() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::beam_search_under_h2o_is_refused,
        );
    }

    #[test]
    fn impossible_steps_are_refused_and_change_nothing() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::impossible_steps_are_refused_and_change_nothing,
        );
    }

    #[test]
    fn the_engine_reports_kv_blocks() {
        super::on(
            BackendKind::Vulkan,
            Activations::F32,
            super::the_engine_reports_kv_blocks,
        );
    }
}

/// Every test on the native CPU executor (H2O does not run there: its cache is in system
/// memory already).
mod cpu {
    use super::*;

    #[test]
    fn speculative_sequences_get_what_decoding_gives() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::speculative_sequences_get_what_decoding_gives,
        );
    }

    #[test]
    fn continuous_batching_gives_each_request_what_it_gets_alone() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::continuous_batching_gives_each_request_what_it_gets_alone,
        );
    }

    #[test]
    fn running_out_of_blocks_preempts_and_recomputes() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::running_out_of_blocks_preempts_and_recomputes,
        );
    }

    #[test]
    fn finished_sequences_are_released_while_others_run() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::finished_sequences_are_released_while_others_run,
        );
    }

    #[test]
    fn completions_of_one_prompt_share_its_blocks() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::completions_of_one_prompt_share_its_blocks,
        );
    }

    #[test]
    fn a_follow_up_turn_reuses_the_cached_conversation() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::a_follow_up_turn_reuses_the_cached_conversation,
        );
    }

    #[test]
    fn impossible_requests_are_refused_and_cancelled_ones_end() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::impossible_requests_are_refused_and_cancelled_ones_end,
        );
    }

    #[test]
    fn beam_search_is_greedy_at_width_one_and_matches_the_copying_reference() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::beam_search_is_greedy_at_width_one_and_matches_the_copying_reference,
        );
    }

    #[test]
    fn impossible_steps_are_refused_and_change_nothing() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::impossible_steps_are_refused_and_change_nothing,
        );
    }

    #[test]
    fn the_engine_reports_kv_blocks() {
        super::on(
            BackendKind::Cpu,
            Activations::F32,
            super::the_engine_reports_kv_blocks,
        );
    }
}

/// The batching tests on the native CPU executor with 8-bit activations, whose rounding is
/// per token, so a token's result does not depend on what else its step carries.
mod cpu_q8 {
    use super::*;

    #[test]
    fn continuous_batching_gives_each_request_what_it_gets_alone() {
        super::on(
            BackendKind::Cpu,
            Activations::Q8,
            super::continuous_batching_gives_each_request_what_it_gets_alone,
        );
    }

    #[test]
    fn running_out_of_blocks_preempts_and_recomputes() {
        super::on(
            BackendKind::Cpu,
            Activations::Q8,
            super::running_out_of_blocks_preempts_and_recomputes,
        );
    }

    #[test]
    fn completions_of_one_prompt_share_its_blocks() {
        super::on(
            BackendKind::Cpu,
            Activations::Q8,
            super::completions_of_one_prompt_share_its_blocks,
        );
    }

    #[test]
    fn a_follow_up_turn_reuses_the_cached_conversation() {
        super::on(
            BackendKind::Cpu,
            Activations::Q8,
            super::a_follow_up_turn_reuses_the_cached_conversation,
        );
    }
}

/// Every test on a model split between the CPU executor and the Vulkan device.
mod split {
    #[test]
    fn speculative_sequences_get_what_decoding_gives() {
        super::on_split(super::speculative_sequences_get_what_decoding_gives);
    }

    #[test]
    fn continuous_batching_gives_each_request_what_it_gets_alone() {
        super::on_split(super::continuous_batching_gives_each_request_what_it_gets_alone);
    }

    #[test]
    fn running_out_of_blocks_preempts_and_recomputes() {
        super::on_split(super::running_out_of_blocks_preempts_and_recomputes);
    }

    #[test]
    fn finished_sequences_are_released_while_others_run() {
        super::on_split(super::finished_sequences_are_released_while_others_run);
    }

    #[test]
    fn completions_of_one_prompt_share_its_blocks() {
        super::on_split(super::completions_of_one_prompt_share_its_blocks);
    }

    #[test]
    fn a_follow_up_turn_reuses_the_cached_conversation() {
        super::on_split(super::a_follow_up_turn_reuses_the_cached_conversation);
    }

    #[test]
    fn impossible_requests_are_refused_and_cancelled_ones_end() {
        super::on_split(super::impossible_requests_are_refused_and_cancelled_ones_end);
    }

    #[test]
    fn beam_search_is_greedy_at_width_one_and_matches_the_copying_reference() {
        super::on_split(
            super::beam_search_is_greedy_at_width_one_and_matches_the_copying_reference,
        );
    }

    #[test]
    fn impossible_steps_are_refused_and_change_nothing() {
        super::on_split(super::impossible_steps_are_refused_and_change_nothing);
    }

    #[test]
    fn the_engine_reports_kv_blocks() {
        super::on_split(super::the_engine_reports_kv_blocks);
    }
}

/// Every test on a model whose first layer runs on the CPU executor and whose second is
/// divided by rows between two devices.
mod rows {
    #[test]
    fn speculative_sequences_get_what_decoding_gives() {
        super::on_rows(super::speculative_sequences_get_what_decoding_gives);
    }

    #[test]
    fn continuous_batching_gives_each_request_what_it_gets_alone() {
        super::on_rows(super::continuous_batching_gives_each_request_what_it_gets_alone);
    }

    #[test]
    fn running_out_of_blocks_preempts_and_recomputes() {
        super::on_rows(super::running_out_of_blocks_preempts_and_recomputes);
    }

    #[test]
    fn finished_sequences_are_released_while_others_run() {
        super::on_rows(super::finished_sequences_are_released_while_others_run);
    }

    #[test]
    fn completions_of_one_prompt_share_its_blocks() {
        super::on_rows(super::completions_of_one_prompt_share_its_blocks);
    }

    #[test]
    fn a_follow_up_turn_reuses_the_cached_conversation() {
        super::on_rows(super::a_follow_up_turn_reuses_the_cached_conversation);
    }

    #[test]
    fn impossible_requests_are_refused_and_cancelled_ones_end() {
        super::on_rows(super::impossible_requests_are_refused_and_cancelled_ones_end);
    }

    #[test]
    fn beam_search_is_greedy_at_width_one_and_matches_the_copying_reference() {
        super::on_rows(super::beam_search_is_greedy_at_width_one_and_matches_the_copying_reference);
    }

    #[test]
    fn impossible_steps_are_refused_and_change_nothing() {
        super::on_rows(super::impossible_steps_are_refused_and_change_nothing);
    }

    #[test]
    fn the_engine_reports_kv_blocks() {
        super::on_rows(super::the_engine_reports_kv_blocks);
    }
}
