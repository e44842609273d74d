//! `hearth generate`: complete a prompt, streaming the text to stdout; an encoder-decoder's
//! prompt is its input (`seq2seq`).

mod seq2seq;

use std::io::Write as _;

use anyhow::Result;
use hearth_engine::grammar::GrammarSpec;
use hearth_engine::sample::beam_scores::{BeamParams, Hypothesis};
use hearth_engine::session::GenerateParams;
use hearth_engine::speculative::Speculative;
use hearth_model::kv::infinigen::IgStats;
use hearth_model::kv::policy::KvPolicyKind;
use serde_json::json;

use crate::draft_args::DraftArgs;
use crate::grammar_args::GrammarArgs;
use crate::model_args::ModelArgs;
use crate::output::Format;
use crate::sampling_args::SamplingArgs;
use crate::DeviceChoice;

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt.
    #[arg(short = 'p', long)]
    prompt: String,
    /// Tokens to generate (-1: until end of text or a full context).
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 128,
        allow_negative_numbers = true
    )]
    n_predict: i64,
    /// Context length [default: the model's, at most 4096].
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Stop before this text (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Keep generating after an end-of-text token.
    #[arg(long)]
    ignore_eos: bool,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    draft: DraftArgs,
    #[command(flatten)]
    grammar: GrammarArgs,
    /// Beam search with this many beams (sampling options are then ignored); prints the
    /// best hypothesis (JSON: every hypothesis).
    #[arg(long, value_name = "W")]
    beams: Option<usize>,
    /// Beam search: score = log-probability / length^P (above 0 favours longer text).
    #[arg(long, default_value_t = 1.0, value_name = "P")]
    length_penalty: f32,
    /// Beam search: stop as soon as W hypotheses have ended.
    #[arg(long)]
    early_stopping: bool,
    /// text: stream the completion; json: one object with text, tokens and timings.
    #[arg(long, value_enum, default_value_t = Format::Table, hide_default_value = true)]
    format: Format,
}

impl GenerateArgs {
    /// The request the length, sampling and stop options make.
    fn params(
        &self,
        speculative: Option<Speculative>,
        grammar: Option<GrammarSpec>,
    ) -> GenerateParams {
        GenerateParams {
            max_tokens: usize::try_from(self.n_predict).ok(),
            sampler: self.sampling.params(),
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            logprobs: None,
            speculative,
            grammar,
        }
    }
}

/// Generated text to stdout as it comes, where `stream`. A closed pipe ends generation
/// quietly.
fn stream_to(stream: bool) -> impl FnMut(&str) -> bool {
    let mut stdout = std::io::stdout();
    move |text| {
        !stream
            || stdout
                .write_all(text.as_bytes())
                .and_then(|_| stdout.flush())
                .is_ok()
    }
}

pub fn run(args: &GenerateArgs, device: &DeviceChoice) -> Result<()> {
    if is_seq2seq(args) {
        return seq2seq::run(args, device);
    }
    if let Some(width) = args.beams {
        if args.draft.draft.is_some() {
            anyhow::bail!(
                "--draft and --beams do not go together: beam search keeps its own candidates"
            );
        }
        if args.grammar.spec()?.is_some() {
            anyhow::bail!("a grammar and --beams do not go together: beam search is unconstrained");
        }
        return run_beams(args, device, width);
    }
    let speculative = args.draft.speculative()?;
    let grammar = args.grammar.spec()?;
    let mut engine = args.model.load(device, args.ctx_size)?;
    args.draft.load(&mut engine, &args.model.run, device)?;
    let prompt = engine.tokenize(&args.prompt);
    let params = args.params(speculative, grammar);
    let stream = args.format == Format::Table;
    let mut stdout = std::io::stdout();
    let generation = engine.generate(&prompt, &params, &mut stream_to(stream))?;
    crate::output::print_profile(&engine);
    let t = &generation.timings;
    if stream {
        let _ = writeln!(stdout);
        eprintln!(
            "prompt: {} tokens, {:.1} tokens/s; generated: {} tokens, {:.1} tokens/s ({})",
            t.prompt_tokens,
            t.prompt_tokens_per_second(),
            t.generated_tokens,
            t.generation_tokens_per_second(),
            engine.info().device,
        );
        if speculative.is_some() {
            let d = generation.draft;
            eprintln!(
                "drafts: {} of {} drafted tokens accepted ({:.0}%) over {} steps",
                d.accepted,
                d.drafted,
                d.acceptance_rate() * 100.0,
                d.steps
            );
        }
        if let Some(s) = infinigen_stats(&engine) {
            eprintln!(
                "{}",
                crate::output::sparsity_line("InfiniGen", "fetched", s)
            );
        }
    } else {
        let out = json!({
            "text": generation.text,
            "tokens": generation.tokens,
            "finish_reason": generation.finish,
            "prompt_tokens": prompt.len(),
            "seed": params.sampler.seed,
            "device": engine.info().device,
            "infinigen": infinigen_stats(&engine).map(crate::output::stats_json),
            "draft": speculative.map(|_| json!({
                "steps": generation.draft.steps,
                "drafted": generation.draft.drafted,
                "accepted": generation.draft.accepted,
                "acceptance_rate": generation.draft.acceptance_rate(),
            })),
            "timings": {
                "prompt_tokens": t.prompt_tokens,
                "prompt_ms": t.prompt.as_secs_f64() * 1e3,
                "prompt_tokens_per_second": t.prompt_tokens_per_second(),
                "generated_tokens": t.generated_tokens,
                "generation_ms": t.generation.as_secs_f64() * 1e3,
                "generation_tokens_per_second": t.generation_tokens_per_second(),
            },
        });
        crate::output::emit_json(&out)?;
    }
    Ok(())
}

/// Whether `-m` names an encoder-decoder. A model that cannot be found or read is left to
/// the decoder's path, which checks the options first and then reports it.
fn is_seq2seq(args: &GenerateArgs) -> bool {
    let run = &args.model.run;
    let Ok(path) = run.dir.resolve(&args.model.model) else {
        return false;
    };
    let spec = match &run.spec {
        Some(p) => match hearth_models::ModelSpec::from_file(p) {
            Ok(spec) => Some(spec),
            Err(_) => return false,
        },
        None => None,
    };
    hearth_engine::seq2seq::is_seq2seq(&path, spec.as_ref()).unwrap_or(false)
}

/// `--beams W`: beam search over the indirect KV cache (W cache rows).
fn run_beams(args: &GenerateArgs, device: &DeviceChoice, width: usize) -> Result<()> {
    let m = &args.model;
    let cache = m.run.cache(args.ctx_size, width)?;
    let mut engine = m.run.load(&m.model, device, cache)?;
    let prompt = engine.tokenize(&args.prompt);
    let n_ctx = engine.session().backend().n_ctx();
    let params = BeamParams {
        width,
        max_tokens: usize::try_from(args.n_predict).unwrap_or(n_ctx.saturating_sub(prompt.len())),
        length_penalty: args.length_penalty,
        early_stopping: args.early_stopping,
    };
    let start = std::time::Instant::now();
    let hypotheses = engine.beam_search(&prompt, &params)?;
    let elapsed = start.elapsed();
    crate::output::print_profile(&engine);
    let done = BeamsDone {
        width,
        elapsed,
        prompt_tokens: prompt.len(),
        device: &engine.info().device,
    };
    print_beams(args.format, &hypotheses, engine.tokenizer(), &done)?;
    Ok(())
}

/// A finished beam search, for printing.
struct BeamsDone<'a> {
    width: usize,
    elapsed: std::time::Duration,
    prompt_tokens: usize,
    device: &'a str,
}

/// The best hypothesis's text (table), or every hypothesis with its scores (JSON); each
/// hypothesis's text ends before its end-of-generation token.
fn print_beams(
    format: Format,
    hypotheses: &[Hypothesis],
    tokenizer: &hearth_models::Tokenizer,
    done: &BeamsDone,
) -> Result<()> {
    let text = |tokens: &[u32]| {
        let end = tokens
            .iter()
            .position(|&t| tokenizer.is_end_of_generation(t))
            .unwrap_or(tokens.len());
        tokenizer.decode(&tokens[..end], true)
    };
    if format == Format::Table {
        let best = hypotheses
            .first()
            .map(|h| text(&h.tokens))
            .unwrap_or_default();
        println!("{best}");
        eprintln!(
            "beam search: {} beams, {} hypotheses, {:.1} s ({})",
            done.width,
            hypotheses.len(),
            done.elapsed.as_secs_f64(),
            done.device
        );
        return Ok(());
    }
    let out: Vec<_> = hypotheses
        .iter()
        .map(|h| {
            json!({
                "text": text(&h.tokens),
                "tokens": h.tokens,
                "logprob": h.logprob,
                "score": h.score,
            })
        })
        .collect();
    crate::output::emit_json(&json!({
        "hypotheses": out,
        "prompt_tokens": done.prompt_tokens,
        "device": done.device,
    }))
}

/// What InfiniGen fetched so far, when it runs.
fn infinigen_stats(engine: &hearth_engine::Engine) -> Option<IgStats> {
    engine.kv_policy_stats()?.of(KvPolicyKind::Infinigen)
}
