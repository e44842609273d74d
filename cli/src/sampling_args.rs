//! Sampling options, named as llama.cpp names them: the chain's filters, penalties, DRY,
//! XTC, Mirostat, and FSD.

use hearth_engine::sample::{SamplerParams, DRY_SEQUENCE_BREAKERS};

/// Sampling options, named as llama.cpp names them.
#[derive(clap::Args, Debug)]
pub struct SamplingArgs {
    /// Temperature; 0 picks the most likely token every time (greedy).
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temperature: f32,
    /// Keep only the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Keep the most likely tokens whose probabilities sum to P (1.0: all).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than P times the most likely one (0: none).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalise tokens seen in the last --repeat-last-n tokens (1.0: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Subtract P from tokens seen in the last --repeat-last-n tokens (0.0: off).
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "P",
        allow_negative_numbers = true
    )]
    pub presence_penalty: f32,
    /// Subtract P per occurrence in the last --repeat-last-n tokens (0.0: off).
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "P",
        allow_negative_numbers = true
    )]
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look at.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub repeat_last_n: usize,
    /// Random seed; the same seed and settings give the same text [default: random].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Add BIAS to a token's logit before sampling, llama.cpp's `TOKEN_ID(+/-)BIAS`
    /// (`15043+1`; `15043-inf` bans it); repeat for several tokens.
    #[arg(short = 'l', long = "logit-bias", value_name = "TOKEN_ID(+/-)BIAS", value_parser = parse_logit_bias)]
    pub logit_bias: Vec<(u32, f32)>,
    /// Locally typical sampling: keep the tokens nearest the expected surprise until their
    /// probabilities pass P (1.0: off).
    #[arg(long = "typical", default_value_t = 1.0, value_name = "P")]
    pub typical_p: f32,
    /// Tail-free sampling: cut the tail where the probabilities' curve flattens (1.0: off).
    #[arg(long = "tfs", default_value_t = 1.0, value_name = "Z")]
    pub tfs_z: f32,
    /// Mirostat sampling, version 1 or 2, in place of top-k, top-p, min-p, typical,
    /// tail-free and XTC (0: off).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub mirostat: u8,
    /// Mirostat's learning rate (eta).
    #[arg(long = "mirostat-lr", default_value_t = 0.1, value_name = "ETA")]
    pub mirostat_eta: f32,
    /// Mirostat's target surprise in bits (tau).
    #[arg(long = "mirostat-ent", default_value_t = 5.0, value_name = "TAU")]
    pub mirostat_tau: f32,
    /// DRY: penalise the token that would extend a repeated passage (0.0: off).
    #[arg(long, default_value_t = 0.0, value_name = "M")]
    pub dry_multiplier: f32,
    /// DRY: how much steeper the penalty gets per further repeated token.
    #[arg(long, default_value_t = 1.75, value_name = "B")]
    pub dry_base: f32,
    /// DRY: repeats up to this many tokens are free.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub dry_allowed_length: usize,
    /// DRY: how many recent tokens it looks at (-1: all, 0: off).
    #[arg(long, default_value_t = -1, value_name = "N", allow_negative_numbers = true)]
    pub dry_penalty_last_n: i64,
    /// DRY: a text a repeat may not reach across; repeat for several, `none` for none
    /// [default: newline, `:`, `"`, `*`].
    #[arg(long = "dry-sequence-breaker", value_name = "TEXT")]
    pub dry_sequence_breakers: Vec<String>,
    /// XTC: how often the most likely tokens are excluded (0.0: off).
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub xtc_probability: f32,
    /// XTC: tokens at least this likely are excluded, all but the least likely of them.
    #[arg(long, default_value_t = 0.1, value_name = "P")]
    pub xtc_threshold: f32,
    /// Frustratingly simple decoding: weight of an n-gram model of the text so far against
    /// the model, choosing among its --fsd-k likeliest tokens; deterministic (0.0: off).
    #[arg(long, default_value_t = 0.0, value_name = "ALPHA")]
    pub fsd_alpha: f32,
    /// FSD: how many of the likeliest tokens compete.
    #[arg(long, default_value_t = 5, value_name = "K")]
    pub fsd_k: usize,
    /// FSD: the n-gram model's order.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub fsd_n: usize,
    /// Randomized FSD: sample the first N tokens, then decode by FSD.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub fsd_sample_steps: usize,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplerParams {
        SamplerParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed.unwrap_or_else(random_seed),
            logit_bias: self.logit_bias.clone(),
            typical_p: self.typical_p,
            tfs_z: self.tfs_z,
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_tau,
            mirostat_eta: self.mirostat_eta,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            // llama.cpp's -1 is the whole context.
            dry_penalty_last_n: usize::try_from(self.dry_penalty_last_n).unwrap_or(usize::MAX),
            dry_sequence_breakers: match self.dry_sequence_breakers.as_slice() {
                [] => DRY_SEQUENCE_BREAKERS.map(String::from).to_vec(),
                [none] if none == "none" => Vec::new(),
                given => given.iter().map(|t| unescape(t)).collect(),
            },
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            fsd_alpha: self.fsd_alpha,
            fsd_k: self.fsd_k,
            fsd_n: self.fsd_n,
            fsd_sample_steps: self.fsd_sample_steps,
        }
    }
}

/// A sequence breaker as typed: `\n`, `\t` and `\\` stand for a newline, a tab and a
/// backslash, as in llama.cpp's option.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some(next @ ('n' | 't' | '\\'))) => {
                chars.next();
                out.push(match next {
                    'n' => '\n',
                    't' => '\t',
                    _ => '\\',
                });
            }
            _ => out.push(c),
        }
    }
    out
}

/// llama.cpp's `TOKEN_ID(+/-)BIAS`: `15043+1`, `15043-0.5`, or `15043-inf` to ban the token.
pub fn parse_logit_bias(s: &str) -> std::result::Result<(u32, f32), String> {
    let bad =
        || format!("`{s}`: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS, e.g. 15043+1 or 15043-inf");
    let at = s.find(['+', '-']).ok_or_else(bad)?;
    let id: u32 = s[..at].trim().parse().map_err(|_| bad())?;
    let bias: f32 = match s[at..].trim() {
        "-inf" => f32::NEG_INFINITY,
        b => b.parse().map_err(|_| bad())?,
    };
    if !(bias.is_finite() || bias == f32::NEG_INFINITY) {
        return Err(bad());
    }
    Ok((id, bias))
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sampling: SamplingArgs,
    }

    fn params(args: &[&str]) -> SamplerParams {
        let args = std::iter::once("hearth").chain(args.iter().copied());
        Cli::parse_from(args).sampling.params()
    }

    #[test]
    fn llama_cpp_s_names_reach_the_sampler() {
        let p = params(&[
            "--typical",
            "0.9",
            "--tfs",
            "0.95",
            "--mirostat",
            "2",
            "--mirostat-lr",
            "0.2",
            "--mirostat-ent",
            "4",
            "--dry-multiplier",
            "0.8",
            "--dry-penalty-last-n",
            "256",
            "--xtc-probability",
            "0.5",
            "--xtc-threshold",
            "0.2",
            "--fsd-alpha",
            "0.4",
        ]);
        assert_eq!((p.typical_p, p.tfs_z), (0.9, 0.95));
        assert_eq!((p.mirostat, p.mirostat_eta, p.mirostat_tau), (2, 0.2, 4.0));
        assert_eq!((p.dry_multiplier, p.dry_penalty_last_n), (0.8, 256));
        assert_eq!(
            (p.xtc_probability, p.xtc_threshold, p.fsd_alpha),
            (0.5, 0.2, 0.4)
        );
        assert!(p.validate().is_ok());
        // Defaults: off, with llama.cpp's breakers and DRY over the whole history.
        let d = params(&[]);
        assert_eq!(d.dry_penalty_last_n, usize::MAX);
        assert_eq!(
            d.dry_sequence_breakers,
            DRY_SEQUENCE_BREAKERS.map(String::from)
        );
        assert_eq!(
            params(&["--dry-sequence-breaker", "none"]).dry_sequence_breakers,
            Vec::<String>::new()
        );
        let given = params(&[
            "--dry-sequence-breaker",
            "\\n\\n",
            "--dry-sequence-breaker",
            "a\\\\b",
        ]);
        assert_eq!(given.dry_sequence_breakers, ["\n\n", "a\\b"]);
    }
}
