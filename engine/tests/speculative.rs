//! Speculative decoding on a real model (SmolLM2-135M-Instruct; `scripts/setup` fetches it):
//! the output under greedy decoding is the target's own, token for token, with drafts from
//! prompt lookup and from a draft model, through rejections, an end inside a draft, stop
//! strings, `max_tokens` and the end of the context; and the cache afterwards holds what a
//! run without drafts leaves.
//!
//! The target is the f32 CPU reference, whose logits for a token are the same bits whether it
//! runs alone or in a step of several: "the same tokens" is then exact, not a near-tie away
//! from a flip. The sampled rule's distribution is tested in `speculative::verify`.

use hearth_engine::sample::SamplerParams;
use hearth_engine::session::{FinishReason, GenerateParams, Generation, Session};
use hearth_engine::speculative::{Acceptance, DraftModel, Speculative};
use hearth_model::kv::KvType;
use hearth_model::{Backend, Logits};
use hearth_models::{resolve_gguf, GgufFile, Tokenizer};
use hearth_reference::CpuModel;

const N_CTX: usize = 256;

fn reference(n_ctx: usize) -> Option<(Tokenizer, Box<dyn Backend + Send>)> {
    let path = hearth_testkit::model(hearth_testkit::SMOLLM2)?;
    let file = GgufFile::open(&path).unwrap();
    let model = resolve_gguf(&file).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let mut cpu = CpuModel::load(&file, &model, n_ctx, &mut |_| true).unwrap();
    cpu.set_kv_type(KvType::F32);
    Some((tokenizer, Box::new(cpu)))
}

/// A prompt whose answer repeats it: what prompt lookup is for.
fn editing_prompt(tokenizer: &Tokenizer) -> Vec<u32> {
    let text = "Fix the typo and repeat the sentence.\nSentence: The quick brown fox jumps \
                over the lazy dog, and the dog sleeps on under the warm afternon sun.\n\
                Fixed: The quick brown fox";
    tokenizer.encode(text)
}

fn greedy(max_tokens: usize) -> GenerateParams {
    GenerateParams {
        max_tokens: Some(max_tokens),
        sampler: SamplerParams::greedy(),
        ..GenerateParams::default()
    }
}

fn run(
    session: &mut Session,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    p: &GenerateParams,
) -> Generation {
    let mut streamed = String::new();
    let g = session
        .generate(tokenizer, prompt, p, &mut |t| {
            streamed.push_str(t);
            true
        })
        .unwrap();
    assert_eq!(streamed, g.text, "streamed text is the whole text");
    g
}

/// Runs `params` plainly and with `spec` on fresh sessions, checks the outputs are the same,
/// and that both caches then give the same logits for the next token. Returns the
/// speculative run.
fn same_as_plain(
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    spec: Speculative,
    draft: Option<DraftModel>,
    n_ctx: usize,
) -> Generation {
    let (_, target) = reference(n_ctx).unwrap();
    let mut plain = Session::new(target);
    let want = run(&mut plain, tokenizer, prompt, params);
    let (_, target) = reference(n_ctx).unwrap();
    let mut fast = Session::new(target);
    fast.set_draft_model(draft);
    let with = GenerateParams {
        speculative: Some(spec),
        ..params.clone()
    };
    let got = run(&mut fast, tokenizer, prompt, &with);
    assert_eq!(got.tokens, want.tokens, "tokens differ from the plain run");
    assert_eq!(got.text, want.text);
    assert_eq!(got.finish, want.finish);
    assert_eq!(
        fast.cached(),
        plain.cached(),
        "the caches hold different tokens"
    );
    if fast.cached().len() < n_ctx {
        let next = [*want.tokens.last().unwrap()];
        let held = plain.cached().to_vec();
        let a = plain
            .backend_at(&held)
            .unwrap()
            .forward(&next, Logits::Last)
            .unwrap();
        let b = fast
            .backend_at(&held)
            .unwrap()
            .forward(&next, Logits::Last)
            .unwrap();
        assert_eq!(a, b, "the caches give different logits after the run");
    }
    got
}

#[test]
fn prompt_lookup_gives_the_target_s_greedy_tokens() {
    let Some((tokenizer, _)) = reference(N_CTX) else {
        return;
    };
    let prompt = editing_prompt(&tokenizer);
    let g = same_as_plain(
        &tokenizer,
        &prompt,
        &greedy(40),
        Speculative::lookup(),
        None,
        N_CTX,
    );
    assert!(g.draft.accepted > 0, "{:?}", g.draft);
    assert!(
        g.draft.accepted < g.draft.drafted,
        "no rejection exercised: {:?}",
        g.draft
    );
    // Short drafts, and Inferflow's pool acceptance (the same as exact under greedy).
    for max in [1, 3] {
        let spec = Speculative {
            max,
            acceptance: Acceptance::TopPool,
            ..Speculative::lookup()
        };
        same_as_plain(&tokenizer, &prompt, &greedy(24), spec, None, N_CTX);
    }
}

#[test]
fn drafts_end_where_the_plain_run_ends() {
    let Some((tokenizer, _)) = reference(N_CTX) else {
        return;
    };
    let prompt = editing_prompt(&tokenizer);
    // `max_tokens` inside what a draft would cover.
    for max_tokens in [1, 2, 5] {
        same_as_plain(
            &tokenizer,
            &prompt,
            &greedy(max_tokens),
            Speculative::lookup(),
            None,
            N_CTX,
        );
    }
    // A stop string inside an accepted draft.
    let stop = GenerateParams {
        stop: vec!["lazy".into()],
        ..greedy(40)
    };
    let g = same_as_plain(
        &tokenizer,
        &prompt,
        &stop,
        Speculative::lookup(),
        None,
        N_CTX,
    );
    assert_eq!(g.finish, FinishReason::Stop);
    // The end of the context, with drafts cut to the room left.
    let n_ctx = prompt.len() + 7;
    let to_the_end = GenerateParams {
        max_tokens: None,
        ..greedy(0)
    };
    let g = same_as_plain(
        &tokenizer,
        &prompt,
        &to_the_end,
        Speculative::lookup(),
        None,
        n_ctx,
    );
    assert_eq!(g.finish, FinishReason::Length);
    assert_eq!(g.tokens.len(), 8);
}

#[test]
fn an_end_of_generation_inside_a_draft_ends_the_stream() {
    let Some((tokenizer, _)) = reference(N_CTX) else {
        return;
    };
    // A chat turn that closes: the end-of-turn token comes while drafts run.
    let prompt = tokenizer.encode(
        "<|im_start|>user\nSay only: yes<|im_end|>\n<|im_start|>assistant\nyes<|im_end|>\n\
         <|im_start|>user\nSay only: yes<|im_end|>\n<|im_start|>assistant\n",
    );
    let g = same_as_plain(
        &tokenizer,
        &prompt,
        &greedy(30),
        Speculative::lookup(),
        None,
        N_CTX,
    );
    assert_eq!(g.finish, FinishReason::Eos, "{:?}", g.text);
}

#[test]
fn a_draft_model_gives_the_target_s_greedy_tokens() {
    let Some((tokenizer, _)) = reference(N_CTX) else {
        return;
    };
    let prompt = tokenizer.encode("The three primary colours are");
    // The same model as its own draft: every draft accepted.
    let (_, draft) = reference(N_CTX).unwrap();
    let draft = DraftModel::new(draft, 49152).unwrap();
    let spec = Speculative {
        max: 4,
        p_min: 0.0,
        ..Speculative::model()
    };
    let g = same_as_plain(&tokenizer, &prompt, &greedy(20), spec, Some(draft), N_CTX);
    assert_eq!(g.draft.accepted, g.draft.drafted, "{:?}", g.draft);
    assert!(g.draft.drafted > 0);
}

/// Sampling with drafts runs through the same loop: here only its plumbing is checked (the
/// rule keeps the target's distribution; `speculative::verify` tests that).
#[test]
fn sampling_with_drafts_is_seeded_and_stays_in_the_cache() {
    let Some((tokenizer, target)) = reference(N_CTX) else {
        return;
    };
    let prompt = editing_prompt(&tokenizer);
    let params = GenerateParams {
        max_tokens: Some(24),
        sampler: SamplerParams {
            temperature: 0.7,
            ..SamplerParams::default()
        },
        speculative: Some(Speculative::lookup()),
        ..GenerateParams::default()
    };
    let mut session = Session::new(target);
    let a = run(&mut session, &tokenizer, &prompt, &params);
    let b = run(&mut session, &tokenizer, &prompt, &params);
    assert_eq!(a.tokens, b.tokens, "the same seed gives the same tokens");
    assert!(a.draft.drafted > 0);
    let mut want = prompt.clone();
    want.extend_from_slice(&a.tokens[..a.tokens.len() - 1]);
    assert_eq!(session.cached(), want);
}

#[test]
fn a_draft_model_needs_the_target_s_vocabulary_and_a_load() {
    let Some((tokenizer, _)) = reference(N_CTX) else {
        return;
    };
    let (_, other) = reference(N_CTX).unwrap();
    let err = DraftModel::new(other, 32000).err().unwrap();
    assert!(err.to_string().contains("vocabulary"), "{err}");
    let (_, target) = reference(N_CTX).unwrap();
    let mut session = Session::new(target);
    let params = GenerateParams {
        speculative: Some(Speculative::model()),
        ..greedy(4)
    };
    let err = session
        .generate(&tokenizer, &tokenizer.encode("Hi"), &params, &mut |_| true)
        .unwrap_err();
    assert!(err.to_string().contains("draft"), "{err}");
}
