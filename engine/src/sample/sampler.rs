//! The sampling chain: [`SamplerParams`] and the [`Sampler`] that applies them to logits.

use hearth_models::Tokenizer;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::dry::Dry;
use super::filters::{self, Candidate};
use super::fsd::Fsd;
use super::mirostat::Mirostat;
use super::tail::{tail_free, typical};
use super::xtc::xtc;
use crate::speculative::Distribution;

/// The seed [`SamplerParams::default`] uses. Fixed, unlike llama.cpp's default of a fresh random
/// seed per run, so that the same prompt and settings reproduce the same text unless a caller
/// asks for a different seed.
pub const DEFAULT_SEED: u64 = 0xDECAF_C0FFEE;

/// How to pick tokens. Every filter has a value that turns it off; the defaults are
/// llama.cpp's (`common_params_sampling`) except for the fixed seed.
///
/// Missing fields deserialize to their defaults, so a config may name only what it changes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerParams {
    /// Divides the logits before the final softmax: below 1 sharpens, above 1 flattens.
    /// 0 or below means greedy (argmax). Default 0.8.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens. 0 turns it off. Default 40.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probabilities add up to at least
    /// `top_p`, in [0, 1]. 1 turns it off. Default 0.95.
    pub top_p: f32,
    /// Keep tokens at least `min_p` times as likely as the most likely one, in [0, 1]. 0 turns
    /// it off. Default 0.05.
    pub min_p: f32,
    /// Divides positive logits (multiplies negative ones) of recently seen tokens; above 1
    /// discourages repetition. 1 turns it off. Default 1.0.
    pub repeat_penalty: f32,
    /// Subtracted from the logit of every token seen recently (OpenAI's `presence_penalty`);
    /// above 0 discourages repeating a topic. 0 turns it off. Default 0.
    pub presence_penalty: f32,
    /// Subtracted from the logit of a recently seen token once per occurrence (OpenAI's
    /// `frequency_penalty`); above 0 discourages repeating words verbatim. 0 turns it off.
    /// Default 0.
    pub frequency_penalty: f32,
    /// How many of the most recent tokens of the history the penalties look at. 0 turns the
    /// penalties off; `usize::MAX` means the whole history. Default 64.
    pub repeat_last_n: usize,
    /// Seed of the random draws. Default [`DEFAULT_SEED`].
    pub seed: u64,
    /// Added to these tokens' logits before every other step (OpenAI's `logit_bias`,
    /// llama.cpp's `--logit-bias`); `-inf` bans a token. Default none.
    pub logit_bias: Vec<(u32, f32)>,
    /// Locally typical sampling: keep the tokens whose information content is nearest the
    /// distribution's entropy, until their probabilities add up to more than `typical_p`, in
    /// [0, 1]. 1 turns it off. Default 1.
    pub typical_p: f32,
    /// Tail-free sampling: cut the tail where the sorted probabilities' curve flattens, `z`
    /// in [0, 1]. 1 turns it off. Default 1.
    pub tfs_z: f32,
    /// Mirostat version: 0 off, 1 or 2. It replaces top-k, tail-free, typical, top-p, min-p
    /// and XTC, steering each token's surprise towards `mirostat_tau`. Default 0.
    pub mirostat: u8,
    /// Mirostat's target surprise, in bits per token. Default 5.
    pub mirostat_tau: f32,
    /// Mirostat's learning rate. Default 0.1.
    pub mirostat_eta: f32,
    /// DRY: the penalty on a token that would extend a repeat of `dry_allowed_length` tokens,
    /// growing by `dry_base` for each further repeated token. 0 turns it off. Default 0.
    pub dry_multiplier: f32,
    /// DRY's growth per repeated token, at least 1. Default 1.75.
    pub dry_base: f32,
    /// The longest repeat DRY lets pass. Default 2.
    pub dry_allowed_length: usize,
    /// How many of the most recent tokens DRY looks at; `usize::MAX` is the whole history, 0
    /// turns DRY off. Default the whole history.
    pub dry_penalty_last_n: usize,
    /// Texts that a repeat DRY measures may not reach back across: a token whose text holds
    /// one of them breaks it. Default newline, colon, double quote and asterisk.
    pub dry_sequence_breakers: Vec<String>,
    /// XTC: how often the most likely tokens are excluded, in [0, 1]. 0 turns it off.
    /// Default 0.
    pub xtc_probability: f32,
    /// XTC: tokens at least this likely are excluded, all but the least likely of them, in
    /// [0, 1] (above 0.5 it never acts). Default 0.1.
    pub xtc_threshold: f32,
    /// Frustratingly simple decoding: the weight, in [0, 1], of an n-gram model of the text
    /// so far against the model's probability when choosing among its `fsd_k` likeliest
    /// tokens. Deterministic; 0 turns it off. Default 0.
    pub fsd_alpha: f32,
    /// How many of the model's likeliest tokens FSD chooses among, at least 1. Default 5.
    pub fsd_k: usize,
    /// The order of FSD's n-gram model, at least 2. Default 3.
    pub fsd_n: usize,
    /// Randomized FSD: the first this many tokens are sampled by the rest of the chain, FSD
    /// decodes after them. Default 0.
    pub fsd_sample_steps: usize,
}

/// llama.cpp's default DRY sequence breakers.
pub const DRY_SEQUENCE_BREAKERS: [&str; 4] = ["\n", ":", "\"", "*"];

impl Default for SamplerParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repeat_last_n: 64,
            seed: DEFAULT_SEED,
            logit_bias: Vec::new(),
            typical_p: 1.0,
            tfs_z: 1.0,
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: usize::MAX,
            dry_sequence_breakers: DRY_SEQUENCE_BREAKERS.map(String::from).to_vec(),
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            fsd_alpha: 0.0,
            fsd_k: 5,
            fsd_n: 3,
            fsd_sample_steps: 0,
        }
    }
}

/// A sampler parameter outside the range it has a meaning in.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("sampler parameter `{field}` is {value}; it must be {expected}")]
pub struct SamplerParamError {
    /// The field's name, as in [`SamplerParams`] and its serialized form.
    pub field: &'static str,
    pub value: f32,
    /// The accepted range, in words.
    pub expected: &'static str,
}

impl SamplerParams {
    /// Always the most likely token (after the penalties): deterministic, and the
    /// setting reference outputs are compared under.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Whether sampling reduces to argmax. NaN counts as greedy, being no temperature at all.
    pub fn is_greedy(&self) -> bool {
        self.temperature.is_nan() || self.temperature <= 0.0
    }

    /// Checks every value is in its range; the error names the first field that is not.
    /// Call this where parameters come from a user: [`Sampler`] itself never panics on bad
    /// values but reads them as "off" (or greedy, for a NaN temperature), which would hide a
    /// typo.
    pub fn validate(&self) -> Result<(), SamplerParamError> {
        let check = |field, value: f32, ok: bool, expected| {
            if ok {
                Ok(())
            } else {
                Err(SamplerParamError {
                    field,
                    value,
                    expected,
                })
            }
        };
        let t = self.temperature;
        check(
            "temperature",
            t,
            t.is_finite(),
            "a finite number (0 or below for greedy)",
        )?;
        let p = self.top_p;
        check("top_p", p, (0.0..=1.0).contains(&p), "in [0, 1] (1 is off)")?;
        let m = self.min_p;
        check("min_p", m, (0.0..=1.0).contains(&m), "in [0, 1] (0 is off)")?;
        let r = self.repeat_penalty;
        check(
            "repeat_penalty",
            r,
            r > 0.0 && r.is_finite(),
            "a finite number above 0 (1 is off)",
        )?;
        for (field, value) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            check(
                field,
                value,
                value.is_finite(),
                "a finite number (0 is off)",
            )?;
        }
        for (field, value) in [
            ("typical_p", self.typical_p),
            ("tfs_z", self.tfs_z),
            ("xtc_probability", self.xtc_probability),
            ("xtc_threshold", self.xtc_threshold),
            ("fsd_alpha", self.fsd_alpha),
        ] {
            check(field, value, (0.0..=1.0).contains(&value), "in [0, 1]")?;
        }
        let m = self.mirostat;
        check("mirostat", f32::from(m), m <= 2, "0 (off), 1 or 2")?;
        let tau = self.mirostat_tau;
        check(
            "mirostat_tau",
            tau,
            tau >= 0.0 && tau.is_finite(),
            "a finite number of bits, 0 or more",
        )?;
        let eta = self.mirostat_eta;
        check(
            "mirostat_eta",
            eta,
            eta > 0.0 && eta.is_finite(),
            "a finite number above 0",
        )?;
        let d = self.dry_multiplier;
        check(
            "dry_multiplier",
            d,
            d >= 0.0 && d.is_finite(),
            "a finite number, 0 or more (0 is off)",
        )?;
        let b = self.dry_base;
        check(
            "dry_base",
            b,
            b >= 1.0 && b.is_finite(),
            "a finite number, 1 or more",
        )?;
        check(
            "dry_allowed_length",
            self.dry_allowed_length as f32,
            self.dry_allowed_length >= 1,
            "1 or more",
        )?;
        if let Some(empty) = self.dry_sequence_breakers.iter().position(String::is_empty) {
            check(
                "dry_sequence_breakers",
                empty as f32,
                false,
                "texts that are not empty (the value is the empty one's index)",
            )?;
        }
        check("fsd_k", self.fsd_k as f32, self.fsd_k >= 1, "1 or more")?;
        check("fsd_n", self.fsd_n as f32, self.fsd_n >= 2, "2 or more")?;
        for &(_, bias) in &self.logit_bias {
            check(
                "logit_bias",
                bias,
                bias.is_finite() || bias == f32::NEG_INFINITY,
                "a finite number, or -inf to ban the token",
            )?;
        }
        Ok(())
    }

    /// The first biased token outside a vocabulary of `n_vocab`, if any.
    pub fn bias_outside(&self, n_vocab: usize) -> Option<u32> {
        self.logit_bias
            .iter()
            .map(|&(id, _)| id)
            .find(|&id| id as usize >= n_vocab)
    }
}

/// Picks tokens from logits under one set of [`SamplerParams`], with its own seeded random
/// number generator: the same parameters and the same logits give the same tokens.
#[derive(Clone)]
pub struct Sampler {
    params: SamplerParams,
    rng: StdRng,
    /// Reused between calls: a vocabulary-sized list per token is worth not reallocating.
    candidates: Vec<Candidate>,
    /// Mirostat's bound, moved after every token.
    mirostat: Option<Mirostat>,
    /// Whether the last chain ended in Mirostat's truncation (not a deterministic choice).
    mirostat_cut: bool,
    /// DRY's sequence breakers, as sorted token ids.
    breakers: Vec<u32>,
    /// Tokens chosen so far (randomized FSD samples the first ones).
    chosen: usize,
}

impl std::fmt::Debug for Sampler {
    // The candidate list is scratch space, up to a vocabulary long: not worth printing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// Does not validate `params` (see [`SamplerParams::validate`]): a value out of range turns
    /// its step off rather than failing.
    pub fn new(params: SamplerParams) -> Self {
        Self {
            rng: StdRng::seed_from_u64(params.seed),
            mirostat: Mirostat::new(params.mirostat, params.mirostat_tau, params.mirostat_eta),
            params,
            candidates: Vec::new(),
            mirostat_cut: false,
            breakers: Vec::new(),
            chosen: 0,
        }
    }

    /// A sampler for `tokenizer`'s vocabulary: DRY's sequence breakers become the tokens
    /// whose text holds one of them (found only where DRY is on). Without a vocabulary no
    /// token breaks a repeat.
    pub fn for_vocabulary(params: SamplerParams, tokenizer: &Tokenizer) -> Self {
        let mut sampler = Self::new(params);
        let p = &sampler.params;
        if p.dry_multiplier > 0.0 && p.dry_penalty_last_n > 0 {
            let texts: Vec<&[u8]> = p
                .dry_sequence_breakers
                .iter()
                .map(|t| t.as_bytes())
                .filter(|t| !t.is_empty())
                .collect();
            sampler.breakers = (0..tokenizer.vocab_size() as u32)
                .filter(|&id| {
                    let bytes = tokenizer.token_bytes(id).unwrap_or_default();
                    texts
                        .iter()
                        .any(|t| bytes.windows(t.len()).any(|w| w == *t))
                })
                .collect();
        }
        sampler
    }

    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// Picks the next token. `logits` (vocab) are the model's scores for it; `history` holds
    /// the tokens so far (prompt and generated, oldest first), of which the penalties look at
    /// the last `repeat_last_n`.
    ///
    /// NaN logits count as -inf: never chosen while any token has a number. If none has one
    /// (every logit NaN or -inf, or `logits` empty), returns token 0, as argmax's tie-break
    /// would. Greedy calls draw no random number; every other call draws exactly one.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let token = match self.filter(logits, history) {
            Some(token) => token,
            None => {
                let u: f64 = self.rng.gen();
                filters::sample_softmax(&self.candidates, self.params.temperature, u).unwrap_or(0)
            }
        };
        self.observe(token);
        token
    }

    /// The distribution [`sample`](Self::sample) draws from: the tokens the chain leaves and
    /// their probabilities (one token with probability 1 when greedy or under FSD). Draws
    /// nothing but XTC's coin. Speculative decoding verifies a draft against it, then tells
    /// the sampler the token kept with [`observe`](Self::observe).
    pub fn distribution(&mut self, logits: &[f32], history: &[u32]) -> Distribution {
        if let Some(token) = self.filter(logits, history) {
            return Distribution::certain(token);
        }
        let weights = filters::softmax_weights(&self.candidates, self.params.temperature);
        Distribution::from_weights(self.candidates.iter().zip(weights).map(|(c, w)| (c.id, w)))
    }

    /// Records that `token` was kept after the last [`distribution`](Self::distribution):
    /// Mirostat moves its bound by the token's surprise, and randomized FSD counts the step.
    /// [`sample`](Self::sample) calls it itself.
    pub fn observe(&mut self, token: u32) {
        self.chosen += 1;
        if let (Some(mirostat), true) = (&mut self.mirostat, self.mirostat_cut) {
            let weights = filters::softmax_weights(&self.candidates, self.params.temperature);
            let total: f64 = weights.iter().sum();
            let kept = self.candidates.iter().position(|c| c.id == token);
            if let (Some(i), true) = (kept, total > 0.0) {
                mirostat.observe(weights[i] / total);
            }
        }
    }

    /// A uniform draw in [0, 1) from this sampler's generator.
    pub fn uniform(&mut self) -> f64 {
        self.rng.gen()
    }

    /// Runs the chain up to the final draw on `logits`: bias, penalties and DRY, then either
    /// a deterministic choice (FSD's, or greedy's; returned), Mirostat's truncation, or the
    /// filters, leaving the candidates in `self.candidates`.
    fn filter(&mut self, logits: &[f32], history: &[u32]) -> Option<u32> {
        self.mirostat_cut = false;
        let params = &self.params;
        let cands = &mut self.candidates;
        cands.clear();
        cands.extend(logits.iter().enumerate().map(|(id, &logit)| Candidate {
            id: id as u32,
            logit: if logit.is_nan() {
                f32::NEG_INFINITY
            } else {
                logit
            },
        }));
        // Candidates are still indexed by id here: the bias comes first, as in llama.cpp's
        // chain.
        for &(id, bias) in &params.logit_bias {
            if let Some(c) = cands.get_mut(id as usize) {
                c.logit += bias;
            }
        }

        let recent = history.len().saturating_sub(params.repeat_last_n);
        let penalties = filters::Penalties {
            repeat: params.repeat_penalty,
            presence: params.presence_penalty,
            frequency: params.frequency_penalty,
        };
        filters::penalties(cands, &history[recent..], penalties);
        if params.dry_penalty_last_n > 0 {
            let dry = Dry {
                multiplier: params.dry_multiplier,
                base: params.dry_base,
                allowed_length: params.dry_allowed_length,
            };
            let window = &history[history.len().saturating_sub(params.dry_penalty_last_n)..];
            let breakers = &self.breakers;
            dry.apply(cands, window, &|t| breakers.binary_search(&t).is_ok());
        }

        if params.fsd_alpha > 0.0 && self.chosen >= params.fsd_sample_steps {
            let fsd = Fsd {
                alpha: params.fsd_alpha,
                k: params.fsd_k,
                n: params.fsd_n,
            };
            return Some(
                fsd.choose(cands, history)
                    .unwrap_or_else(|| filters::argmax(cands).map_or(0, |c| c.id)),
            );
        }
        if params.is_greedy() {
            return Some(filters::argmax(cands).map_or(0, |c| c.id));
        }
        if let Some(mirostat) = &self.mirostat {
            mirostat.truncate(cands, params.temperature, logits.len());
            self.mirostat_cut = true;
            return None;
        }
        filters::top_k(cands, params.top_k);
        tail_free(cands, params.tfs_z);
        typical(cands, params.typical_p);
        filters::top_p(cands, params.top_p);
        filters::min_p(cands, params.min_p);
        let rng = &mut self.rng;
        xtc(cands, params.xtc_probability, params.xtc_threshold, || {
            rng.gen()
        });
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only temperature and seed set: every filter off.
    fn plain(temperature: f32, seed: u64) -> SamplerParams {
        SamplerParams {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repeat_last_n: 64,
            seed,
            ..SamplerParams::default()
        }
    }

    /// The bias is added to the logits before anything else: it moves the argmax, `-inf`
    /// bans a token, and with sampling the draws follow the biased softmax.
    #[test]
    fn logit_bias_is_added_first() {
        let logits = [1.0, 3.0, 2.0, 0.5];
        let biased = |bias: Vec<(u32, f32)>| SamplerParams {
            logit_bias: bias,
            ..SamplerParams::greedy()
        };
        assert_eq!(Sampler::new(biased(vec![])).sample(&logits, &[]), 1);
        assert_eq!(Sampler::new(biased(vec![(2, 1.5)])).sample(&logits, &[]), 2);
        let ban = biased(vec![(1, f32::NEG_INFINITY), (2, f32::NEG_INFINITY)]);
        assert!(ban.validate().is_ok());
        assert_eq!(Sampler::new(ban).sample(&logits, &[]), 0);
        // An id past the logits is ignored by the sampler (the request check refuses it).
        assert_eq!(
            Sampler::new(biased(vec![(9, 50.0)])).sample(&logits, &[]),
            1
        );
        assert_eq!(biased(vec![(9, 1.0)]).bias_outside(4), Some(9));
        for bad in [f32::NAN, f32::INFINITY] {
            let err = biased(vec![(0, bad)]).validate().unwrap_err();
            assert_eq!(err.field, "logit_bias");
        }
        // Sampling: the draws' frequencies follow softmax(logits + bias).
        let bias = vec![(0, 2.0), (3, 1.0)];
        let params = SamplerParams {
            logit_bias: bias.clone(),
            ..plain(1.0, 7)
        };
        let mut sampler = Sampler::new(params);
        let draws = 20_000;
        let mut counts = [0usize; 4];
        for _ in 0..draws {
            counts[sampler.sample(&logits, &[]) as usize] += 1;
        }
        let mut shifted = logits;
        for (id, b) in bias {
            shifted[id as usize] += b;
        }
        for (p, &count) in softmax(&shifted, 1.0).iter().zip(&counts) {
            let got = count as f64 / draws as f64;
            assert!((got - p).abs() < 0.015, "{got} vs {p}");
        }
    }

    fn random_logits(rng: &mut StdRng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.gen_range(-5.0..5.0)).collect()
    }

    fn softmax(logits: &[f32], temperature: f32) -> Vec<f64> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let w: Vec<f64> = logits
            .iter()
            .map(|&l| (f64::from(l - max) / f64::from(temperature)).exp())
            .collect();
        let total: f64 = w.iter().sum();
        w.iter().map(|w| w / total).collect()
    }

    fn draw(params: SamplerParams, logits: &[f32], n: usize) -> Vec<u32> {
        let mut sampler = Sampler::new(params);
        (0..n).map(|_| sampler.sample(logits, &[])).collect()
    }

    #[test]
    fn defaults_are_llama_cpp_s() {
        let p = SamplerParams::default();
        assert_eq!(
            (p.temperature, p.top_k, p.top_p, p.min_p),
            (0.8, 40, 0.95, 0.05)
        );
        assert_eq!((p.repeat_penalty, p.repeat_last_n), (1.0, 64));
        assert_eq!(p.seed, DEFAULT_SEED);
        assert!(p.validate().is_ok());
        assert!(SamplerParams::greedy().validate().is_ok());
        assert!(SamplerParams::greedy().is_greedy());
        assert!(!p.is_greedy());
    }

    #[test]
    fn params_deserialize_with_defaults_for_missing_fields() {
        let p: SamplerParams = serde_json::from_str(r#"{"temperature": 0.0, "seed": 7}"#).unwrap();
        assert_eq!(
            p,
            SamplerParams {
                seed: 7,
                ..SamplerParams::greedy()
            }
        );
        let text = serde_json::to_string(&SamplerParams::default()).unwrap();
        let back: SamplerParams = serde_json::from_str(&text).unwrap();
        assert_eq!(back, SamplerParams::default());
    }

    #[test]
    fn validate_names_the_bad_field() {
        let bad = |change: fn(&mut SamplerParams)| {
            let mut p = SamplerParams::default();
            change(&mut p);
            p.validate().unwrap_err().field
        };
        assert_eq!(bad(|p| p.temperature = f32::NAN), "temperature");
        assert_eq!(bad(|p| p.temperature = f32::INFINITY), "temperature");
        assert_eq!(bad(|p| p.top_p = -0.1), "top_p");
        assert_eq!(bad(|p| p.top_p = 1.5), "top_p");
        assert_eq!(bad(|p| p.top_p = f32::NAN), "top_p");
        assert_eq!(bad(|p| p.min_p = -0.01), "min_p");
        assert_eq!(bad(|p| p.min_p = 1.01), "min_p");
        assert_eq!(bad(|p| p.min_p = f32::NAN), "min_p");
        assert_eq!(bad(|p| p.repeat_penalty = 0.0), "repeat_penalty");
        assert_eq!(bad(|p| p.repeat_penalty = -1.0), "repeat_penalty");
        assert_eq!(bad(|p| p.repeat_penalty = f32::NAN), "repeat_penalty");

        // Edges that mean something are accepted.
        for ok in [
            SamplerParams {
                temperature: -1.0,
                top_p: 0.0,
                min_p: 1.0,
                repeat_penalty: 0.5,
                ..SamplerParams::default()
            },
            SamplerParams {
                top_p: 1.0,
                min_p: 0.0,
                ..SamplerParams::default()
            },
        ] {
            assert_eq!(ok.validate(), Ok(()));
        }

        let err = SamplerParams {
            top_p: 1.5,
            ..SamplerParams::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "sampler parameter `top_p` is 1.5; it must be in [0, 1] (1 is off)"
        );
    }

    #[test]
    fn greedy_is_argmax_with_ties_to_the_lowest_id() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut sampler = Sampler::new(SamplerParams::greedy());
        for _ in 0..20 {
            let logits = random_logits(&mut rng, 1000);
            let best = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap();
            assert_eq!(sampler.sample(&logits, &[]), best as u32);
        }
        assert_eq!(sampler.sample(&[1.0, 7.0, 3.0, 7.0], &[]), 1);
        // Negative temperatures are greedy too.
        let mut sampler = Sampler::new(plain(-1.0, 0));
        assert_eq!(sampler.sample(&[1.0, 7.0, 3.0, 7.0], &[]), 1);
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut greedy = Sampler::new(SamplerParams::greedy());
        for temperature in [0.1, 1.0, 5.0, 100.0] {
            let mut sampler = Sampler::new(SamplerParams {
                temperature,
                top_k: 1,
                ..SamplerParams::default()
            });
            for _ in 0..20 {
                let mut logits = random_logits(&mut rng, 500);
                logits[17] = logits[3]; // a tie somewhere
                assert_eq!(
                    sampler.sample(&logits, &[]),
                    greedy.sample(&logits, &[]),
                    "temperature {temperature}"
                );
            }
        }
    }

    #[test]
    fn same_seed_same_tokens_different_seed_different_tokens() {
        let logits = vec![0.0; 1000]; // uniform: every draw is pure seed
        let a = draw(plain(1.0, 42), &logits, 200);
        assert_eq!(a, draw(plain(1.0, 42), &logits, 200));
        assert_ne!(a, draw(plain(1.0, 43), &logits, 200));

        // With the default filters and the default seed too.
        let mut rng = StdRng::seed_from_u64(3);
        let logits = random_logits(&mut rng, 32_000);
        let a = draw(SamplerParams::default(), &logits, 200);
        assert_eq!(a, draw(SamplerParams::default(), &logits, 200));
    }

    /// The draw must follow the softmax: 20k draws put each token's frequency within 0.015 of
    /// its probability (over 4 standard deviations), at the default and a lower temperature.
    #[test]
    fn frequencies_match_softmax_probabilities() {
        let logits = [1.0, 2.0, 0.5, 3.0, -1.0, 2.5];
        for temperature in [1.0, 0.5] {
            let expected = softmax(&logits, temperature);
            let n = 20_000;
            let mut counts = [0usize; 6];
            for token in draw(plain(temperature, 11), &logits, n) {
                counts[token as usize] += 1;
            }
            for (token, (&count, p)) in counts.iter().zip(&expected).enumerate() {
                let freq = count as f64 / n as f64;
                assert!(
                    (freq - p).abs() < 0.015,
                    "temperature {temperature}, token {token}: {freq} vs {p}"
                );
            }
        }
    }

    #[test]
    fn filters_limit_what_can_be_drawn() {
        // Probabilities 0.5, 0.25, 0.15, 0.1 at temperature 1.
        let logits: Vec<f32> = [0.25_f32, 0.5, 0.1, 0.15].iter().map(|p| p.ln()).collect();
        let seen = |params: SamplerParams| {
            let mut seen: Vec<u32> = draw(params, &logits, 2000);
            seen.sort_unstable();
            seen.dedup();
            seen
        };
        // A high temperature flattens the distribution, so every kept token shows up.
        let hot = plain(10.0, 5);
        assert_eq!(seen(hot.clone()), vec![0, 1, 2, 3]);
        assert_eq!(
            seen(SamplerParams {
                top_k: 2,
                ..hot.clone()
            }),
            vec![0, 1]
        );
        assert_eq!(
            seen(SamplerParams {
                top_p: 0.7,
                ..hot.clone()
            }),
            vec![0, 1]
        );
        assert_eq!(
            seen(SamplerParams {
                top_p: 0.8,
                ..hot.clone()
            }),
            vec![0, 1, 3]
        );
        assert_eq!(
            seen(SamplerParams {
                min_p: 0.25,
                ..hot.clone()
            }),
            vec![0, 1, 3]
        );
        assert_eq!(
            seen(SamplerParams {
                min_p: 0.4,
                ..hot.clone()
            }),
            vec![0, 1]
        );
        // The chain composes: top-k 3 leaves {1, 0, 3}, renormalised to 0.56, 0.28, 0.17;
        // top-p 0.8 then keeps {1, 0}.
        let chained = SamplerParams {
            top_k: 3,
            top_p: 0.8,
            ..hot
        };
        assert_eq!(seen(chained), vec![0, 1]);
    }

    #[test]
    fn repetition_penalty_discourages_recent_tokens() {
        let params = SamplerParams {
            repeat_penalty: 1.5,
            repeat_last_n: 3,
            ..SamplerParams::greedy()
        };
        let mut sampler = Sampler::new(params);
        // 2.0 / 1.5 < 1.9: token 0 loses to token 1.
        assert_eq!(sampler.sample(&[2.0, 1.9, -1.0], &[0]), 1);
        // Negative logits are multiplied: -1.0 * 1.5 < -1.2.
        assert_eq!(sampler.sample(&[-1.0, -1.2], &[0]), 1);
        // Token 0 is older than the last 3 tokens, so it is not penalised.
        assert_eq!(sampler.sample(&[2.0, 1.9, -1.0], &[0, 2, 2, 2]), 0);
        // Repeats are penalised once, and ids beyond the vocabulary are ignored.
        assert_eq!(sampler.sample(&[2.0, 1.9, -1.0], &[0, 0, 0]), 1);
        assert_eq!(sampler.sample(&[2.0, 1.9, -1.0], &[1_000_000]), 0);

        let off = SamplerParams {
            repeat_last_n: 0,
            ..sampler.params().clone()
        };
        assert_eq!(Sampler::new(off).sample(&[2.0, 1.9, -1.0], &[0]), 0);
    }

    #[test]
    fn nan_logits_are_never_chosen() {
        let logits = [f32::NAN, 1.0, f32::NAN, 0.5, f32::NAN];
        assert_eq!(
            Sampler::new(SamplerParams::greedy()).sample(&logits, &[]),
            1
        );
        for params in [plain(1.0, 9), plain(100.0, 9), SamplerParams::default()] {
            for token in draw(params, &logits, 500) {
                assert!(token == 1 || token == 3, "drew {token}");
            }
        }
        // With a penalty on a NaN token too.
        let penalised = SamplerParams {
            repeat_penalty: 1.3,
            ..plain(1.0, 9)
        };
        let mut sampler = Sampler::new(penalised);
        for _ in 0..100 {
            let token = sampler.sample(&logits, &[0, 2, 4]);
            assert!(token == 1 || token == 3, "drew {token}");
        }
    }

    #[test]
    fn logits_without_numbers_give_token_zero() {
        for params in [
            SamplerParams::greedy(),
            SamplerParams::default(),
            plain(1.0, 0),
        ] {
            let mut sampler = Sampler::new(params);
            assert_eq!(sampler.sample(&[f32::NAN; 8], &[]), 0);
            assert_eq!(sampler.sample(&[f32::NEG_INFINITY; 8], &[]), 0);
            assert_eq!(sampler.sample(&[], &[3]), 0);
        }
    }

    #[test]
    fn new_fields_are_validated_by_name() {
        let bad = |change: fn(&mut SamplerParams)| {
            let mut p = SamplerParams::default();
            change(&mut p);
            p.validate().unwrap_err().field
        };
        assert_eq!(bad(|p| p.typical_p = 1.5), "typical_p");
        assert_eq!(bad(|p| p.tfs_z = -0.5), "tfs_z");
        assert_eq!(bad(|p| p.xtc_probability = f32::NAN), "xtc_probability");
        assert_eq!(bad(|p| p.xtc_threshold = 2.0), "xtc_threshold");
        assert_eq!(bad(|p| p.mirostat = 3), "mirostat");
        assert_eq!(bad(|p| p.mirostat_tau = -1.0), "mirostat_tau");
        assert_eq!(bad(|p| p.mirostat_eta = 0.0), "mirostat_eta");
        assert_eq!(bad(|p| p.dry_multiplier = -0.1), "dry_multiplier");
        assert_eq!(bad(|p| p.dry_base = 0.5), "dry_base");
        assert_eq!(bad(|p| p.dry_allowed_length = 0), "dry_allowed_length");
        assert_eq!(
            bad(|p| p.dry_sequence_breakers = vec!["\n".into(), String::new()]),
            "dry_sequence_breakers"
        );
        assert_eq!(bad(|p| p.fsd_alpha = 1.2), "fsd_alpha");
        assert_eq!(bad(|p| p.fsd_k = 0), "fsd_k");
        assert_eq!(bad(|p| p.fsd_n = 1), "fsd_n");
    }

    /// Whatever the chain, `distribution` is what `sample` draws from: 20k draws land within
    /// 0.015 of its probabilities, with typical, tail-free and min-p on, and with Mirostat
    /// (whose bound then moves with each draw).
    #[test]
    fn sample_draws_from_distribution_under_every_chain() {
        let logits = [1.0, 2.0, 0.5, 3.0, -1.0, 2.5, 1.5, 0.0];
        for params in [
            SamplerParams {
                typical_p: 0.9,
                tfs_z: 0.95,
                ..plain(0.9, 5)
            },
            SamplerParams {
                mirostat: 2,
                mirostat_tau: 2.0,
                mirostat_eta: 1e-7,
                ..plain(1.0, 6)
            },
            SamplerParams {
                mirostat: 1,
                mirostat_tau: 2.5,
                mirostat_eta: 1e-7,
                ..plain(1.0, 7)
            },
        ] {
            let want = Sampler::new(params.clone()).distribution(&logits, &[]);
            let n = 20_000;
            let mut counts = [0usize; 8];
            let mut sampler = Sampler::new(params.clone());
            for _ in 0..n {
                counts[sampler.sample(&logits, &[]) as usize] += 1;
            }
            for (token, &count) in counts.iter().enumerate() {
                let p = want.prob(token as u32);
                let freq = count as f64 / n as f64;
                assert!(
                    (freq - p).abs() < 0.015,
                    "{params:?} {token}: {freq} vs {p}"
                );
            }
        }
    }

    /// Mirostat moves its bound after every token, whether drawn by `sample` or kept after
    /// `distribution` and `observe` (speculative decoding's path): the two paths agree.
    #[test]
    fn mirostat_steers_the_bound_on_both_paths() {
        let logits: Vec<f32> = (0..64).map(|i| -(i as f32) * 0.3).collect();
        let params = SamplerParams {
            mirostat: 2,
            mirostat_tau: 3.0,
            mirostat_eta: 0.5,
            ..plain(1.0, 9)
        };
        let mut drawn = Sampler::new(params.clone());
        let mut kept = Sampler::new(params);
        for _ in 0..50 {
            let token = drawn.sample(&logits, &[]);
            let dist = kept.distribution(&logits, &[]);
            assert!(dist.prob(token) > 0.0);
            kept.observe(token);
            assert_eq!(drawn.mirostat, kept.mirostat);
        }
        // The bound moved from its start at twice the target.
        assert_ne!(
            drawn.mirostat.as_ref().unwrap(),
            &Mirostat::new(2, 3.0, 0.5).unwrap()
        );
    }

    /// FSD through the sampler: deterministic, it avoids the continuation the text keeps
    /// repeating; randomized FSD samples its first tokens.
    #[test]
    fn fsd_decodes_by_the_anti_lm_after_its_random_steps() {
        // Greedy would pick 3 after "1 2" every time; the text has followed "1 2" by 3.
        let logits = [0.0, 0.0, 0.0, 2.0, 1.9];
        let history = [1, 2, 3, 1, 2, 3, 1, 2];
        let fsd = SamplerParams {
            fsd_alpha: 0.3,
            ..SamplerParams::greedy()
        };
        let mut s = Sampler::new(fsd.clone());
        assert_eq!(s.sample(&logits, &history), 4);
        assert_eq!(s.distribution(&logits, &history).prob(4), 1.0);
        // Randomized: the first 100 draws are samples (at temperature 5, not all 4).
        let mut s = Sampler::new(SamplerParams {
            temperature: 5.0,
            top_k: 0,
            fsd_sample_steps: 100,
            ..fsd
        });
        let sampled: Vec<u32> = (0..100).map(|_| s.sample(&logits, &history)).collect();
        assert!(sampled.iter().any(|&t| t != 4), "{sampled:?}");
        assert!((0..20).all(|_| s.sample(&logits, &history) == 4));
    }

    /// DRY as the sampler runs it: the penalty breaks greedy's loop, and a breaker token
    /// (found in the vocabulary by its text) stops it.
    #[test]
    fn dry_breaks_a_greedy_loop() {
        let logits = [0.0, 0.0, 0.0, 1.0, 0.5];
        let history = [1, 2, 3, 1, 2];
        let dry = |breakers: Vec<u32>| {
            let mut s = Sampler::new(SamplerParams {
                dry_multiplier: 0.8,
                ..SamplerParams::greedy()
            });
            s.breakers = breakers;
            s.sample(&logits, &history)
        };
        // "1 2" repeats: 3 (logit 1) loses 0.8 and falls below 4 (0.5)...
        assert_eq!(dry(vec![]), 4);
        // ...unless 1 breaks the repeat.
        assert_eq!(dry(vec![1]), 3);
    }

    #[test]
    fn out_of_range_params_do_not_panic() {
        let mut rng = StdRng::seed_from_u64(4);
        let logits = random_logits(&mut rng, 1000);
        for params in [
            plain(f32::NAN, 0),
            plain(f32::INFINITY, 0),
            plain(1e-30, 0),
            SamplerParams {
                top_p: f32::NAN,
                min_p: f32::NAN,
                repeat_penalty: f32::NAN,
                ..SamplerParams::default()
            },
            SamplerParams {
                top_p: -3.0,
                min_p: 7.0,
                repeat_penalty: f32::INFINITY,
                repeat_last_n: usize::MAX,
                ..SamplerParams::default()
            },
        ] {
            let mut sampler = Sampler::new(params);
            for _ in 0..10 {
                let token = sampler.sample(&logits, &[1, 2, 3]);
                assert!((token as usize) < logits.len());
            }
        }
    }
}
