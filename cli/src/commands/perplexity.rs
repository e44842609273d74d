//! `hearth perplexity`: perplexity of a text, computed as llama.cpp's llama-perplexity does:
//! the text is cut into non-overlapping windows of `ctx` tokens, each evaluated from an empty
//! cache with BOS in place of its first token where the model adds BOS, and only the second
//! half of each window is scored (those tokens have at least ctx/2 tokens of context).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use hearth_model::kv::policy::KvPolicyKind;
use hearth_model::{Backend, Logits};
use serde_json::json;

use crate::model_args::{KvOffload, ModelArgs};
use crate::output::Format;
use crate::output::{sparsity_line, stats_json, step_bar};
use crate::DeviceChoice;

#[derive(clap::Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The text to score.
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Window length in tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx: usize,
    /// Score at most this many windows (-1: all).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    chunks: i64,
    /// Score the second half of each window one token at a time, as generation sees it
    /// (implied by `--kv-offload infinigen` and `h2o`, which change only decode steps).
    #[arg(long)]
    decode: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

pub fn run(args: &PerplexityArgs, device: &DeviceChoice) -> Result<()> {
    if args.ctx < 4 {
        bail!("--ctx-size must be at least 4, got {}", args.ctx);
    }
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let mut engine = args.model.load(device, Some(args.ctx))?;
    let tokens = engine.tokenize(&text);
    let available = tokens.len() / args.ctx;
    let windows = match usize::try_from(args.chunks) {
        Ok(n) => n.min(available),
        Err(_) => available,
    };
    if windows == 0 {
        bail!(
            "{} has {} tokens; a window needs {} (lower --ctx-size)",
            args.file.display(),
            tokens.len(),
            args.ctx
        );
    }
    let n_vocab = engine.info().config.n_vocab;
    let first = args.ctx / 2;
    // As llama-perplexity does: a model that adds BOS gets it in place of each window's first
    // token, so that every window starts as its text would (the stream itself starts with
    // one already).
    let special = engine.tokenizer().special();
    let bos = special.bos.filter(|_| special.add_bos);
    let decode = args.decode
        || matches!(
            args.model.run.offload()?,
            KvOffload::Infinigen | KvOffload::H2o
        );
    let bar = step_bar(windows as u64, "perplexity");
    let mut per_window = Vec::with_capacity(windows);
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for w in 0..windows {
        let window = window(&tokens, w, args.ctx, bos);
        let backend = engine.session_mut().fresh_backend();
        let logits = window_logits(backend, &window, first, decode)?;
        let mut window_nll = 0f64;
        // Row j predicts token first + j + 1.
        for i in first..args.ctx - 1 {
            let row = &logits[(i - first) * n_vocab..(i - first + 1) * n_vocab];
            let lp = log_softmax_at(row, window[i + 1] as usize);
            window_nll -= lp;
            nll2 += lp * lp;
        }
        let scored = args.ctx - 1 - first;
        nll += window_nll;
        count += scored;
        per_window.push((window_nll / scored as f64).exp());
        bar.inc(1);
        bar.set_message(format!("ppl {:.4}", (nll / count as f64).exp()));
    }
    bar.finish_and_clear();

    let mean = nll / count as f64;
    let ppl = mean.exp();
    // Standard error of the mean log-likelihood, carried to the perplexity.
    let var = (nll2 / count as f64 - mean * mean).max(0.0);
    let ppl_err = ppl * (var / (count as f64 - 1.0).max(1.0)).sqrt();
    let info = engine.info();
    let sparse = engine.kv_policy_stats();
    let ig = sparse.and_then(|s| s.of(KvPolicyKind::Infinigen));
    let h2o = sparse.and_then(|s| s.of(KvPolicyKind::H2o));
    match args.format {
        Format::Table => {
            let windows: Vec<String> = per_window
                .iter()
                .enumerate()
                .map(|(i, p)| format!("[{}]{p:.4}", i + 1))
                .collect();
            let fetched = match (ig, h2o) {
                (Some(s), _) => sparsity_line("InfiniGen", "fetched", s) + "\n",
                (None, Some(s)) => sparsity_line("H2O", "attended", s) + "\n",
                (None, None) => String::new(),
            };
            crate::output::emit(&format!(
                "{}\n{}: {} tokens in {} windows of {}, {} scored{}, on {}\n{fetched}\
                 Final estimate: PPL = {ppl:.4} +/- {ppl_err:.5}\n",
                windows.join(","),
                args.file.display(),
                tokens.len(),
                per_window.len(),
                args.ctx,
                count,
                if decode { " one at a time" } else { "" },
                info.device
            ))
        }
        Format::Json => {
            let out = json!({
                "ppl": ppl,
                "ppl_stderr": ppl_err,
                "windows": per_window,
                "n_ctx": args.ctx,
                "n_tokens": tokens.len(),
                "n_scored": count,
                "model": info.path,
                "device": info.device,
                "decode": decode,
                "infinigen": ig.map(stats_json),
                "h2o": h2o.map(stats_json),
            });
            crate::output::emit_json(&out)
        }
    }
}

/// Window `w` of `ctx` tokens, with `bos` in place of its first token where given.
fn window(tokens: &[u32], w: usize, ctx: usize, bos: Option<u32>) -> Vec<u32> {
    let mut window = tokens[w * ctx..(w + 1) * ctx].to_vec();
    if let Some(bos) = bos {
        window[0] = bos;
    }
    window
}

/// Logits predicting tokens first+1..len of `window`, one row each: from one pass over the
/// window, or (`decode`) from a pass over window[..=first] and then one step per token.
fn window_logits(
    backend: &mut dyn Backend,
    window: &[u32],
    first: usize,
    decode: bool,
) -> hearth_engine::Result<Vec<f32>> {
    if !decode {
        let all = backend.forward(window, Logits::All)?;
        let n_vocab = all.len() / window.len();
        return Ok(all[first * n_vocab..(window.len() - 1) * n_vocab].to_vec());
    }
    let mut out = backend.forward(&window[..=first], Logits::Last)?;
    for &t in &window[first + 1..window.len() - 1] {
        out.extend(backend.forward(&[t], Logits::Last)?);
    }
    Ok(out)
}

/// log p(target) under softmax(row), in f64.
fn log_softmax_at(row: &[f32], target: usize) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    row[target] as f64 - max - sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_start_with_bos_where_the_model_adds_it() {
        let tokens: Vec<u32> = (1..=9).collect();
        assert_eq!(window(&tokens, 1, 4, Some(1)), [1, 6, 7, 8]);
        assert_eq!(window(&tokens, 1, 4, None), [5, 6, 7, 8]);
        assert_eq!(window(&tokens, 0, 4, Some(1)), [1, 2, 3, 4]);
    }
}
