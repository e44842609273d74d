//! `hearth generate` on an encoder-decoder (T5, Flan-T5): the prompt is the encoder's input,
//! the output the decoder's text, streamed, or the best of a beam search.

use std::io::Write as _;

use anyhow::{Context, Result};
use hearth_engine::sample::beam_scores::BeamParams;
use hearth_engine::Seq2SeqEngine;
use serde_json::json;

use super::{print_beams, stream_to, BeamsDone, GenerateArgs};
use crate::encoder_args::embedder_options;
use crate::model_args::with_load_bar;
use crate::output::Format;
use crate::DeviceChoice;

pub fn run(args: &GenerateArgs, device: &DeviceChoice) -> Result<()> {
    if args.draft.draft.is_some() {
        anyhow::bail!("--draft is for decoder-only models; this one is an encoder-decoder");
    }
    let run = &args.model.run;
    let options = embedder_options(
        run.cpu,
        run.threads,
        run.activations,
        run.spec.as_deref(),
        device,
    )?;
    let path = run.dir.resolve(&args.model.model)?;
    let mut engine = with_load_bar(|progress| Seq2SeqEngine::load(&path, &options, progress))
        .with_context(|| format!("loading {}", path.display()))?;
    let input = engine.tokenize(&args.prompt);
    if let Some(width) = args.beams {
        return beams(args, &mut engine, &input, width);
    }
    let params = args.params(None, args.grammar.spec()?);
    let stream = args.format == Format::Table;
    let out = engine.generate(&input, &params, &mut stream_to(stream))?;
    let per_s = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    if stream {
        let _ = writeln!(std::io::stdout());
        eprintln!(
            "input: {} tokens, {:.1} tokens/s; generated: {} tokens, {:.1} tokens/s ({})",
            out.input_tokens,
            per_s(out.input_tokens, out.encode_s),
            out.tokens.len(),
            per_s(out.tokens.len(), out.decode_s),
            engine.info().device,
        );
    } else {
        crate::output::emit_json(&json!({
            "text": out.text,
            "tokens": out.tokens,
            "finish_reason": out.finish,
            "prompt_tokens": out.input_tokens,
            "seed": params.sampler.seed,
            "device": engine.info().device,
            "timings": {
                "prompt_tokens": out.input_tokens,
                "prompt_ms": out.encode_s * 1e3,
                "prompt_tokens_per_second": per_s(out.input_tokens, out.encode_s),
                "generated_tokens": out.tokens.len(),
                "generation_ms": out.decode_s * 1e3,
                "generation_tokens_per_second": per_s(out.tokens.len(), out.decode_s),
            },
        }))?;
    }
    Ok(())
}

fn beams(
    args: &GenerateArgs,
    engine: &mut Seq2SeqEngine,
    input: &[u32],
    width: usize,
) -> Result<()> {
    let params = BeamParams {
        width,
        max_tokens: usize::try_from(args.n_predict).unwrap_or(engine.info().n_ctx_train),
        length_penalty: args.length_penalty,
        early_stopping: args.early_stopping,
    };
    let start = std::time::Instant::now();
    let hypotheses = engine.beam_search(input, &params)?;
    let elapsed = start.elapsed();
    let done = BeamsDone {
        width,
        elapsed,
        prompt_tokens: input.len(),
        device: &engine.info().device,
    };
    print_beams(args.format, &hypotheses, engine.tokenizer(), &done)
}
