//! Encoder-decoder models (T5, Flan-T5): text in, text out. The input is encoded once; the
//! decoder then generates from the model's start token, sampling each step as a decoder-only
//! model's session does ([`TokenStream`]), or keeping several hypotheses ([`beam_search`],
//! each beam a decoder row forked from its parent's, the encoder's output shared).
//!
//! [`beam_search`]: Seq2SeqEngine::beam_search

use std::path::{Path, PathBuf};
use std::time::Instant;

use hearth_cpu::NativeSeq2Seq;
use hearth_model::seq2seq::Seq2Seq;
use hearth_model::{Logits, ProgressFn};
use hearth_models::{resolve_with, GgufFile, ResolvedModel, Tokenizer};

use crate::engine::{BackendKind, EngineOptions};
use crate::sample::beam_scores::{BeamParams, BeamSearch, Hypothesis};
use crate::sample::{FinishReason, GenerateParams, TokenStream};
use crate::{Error, Result};

/// Whether the model at `path` is an encoder-decoder (read from its spec alone).
pub fn is_seq2seq(path: &Path, spec: Option<&hearth_models::ModelSpec>) -> Result<bool> {
    let network = hearth_models::model_network(path, spec)?;
    Ok(network == hearth_models::spec::NetworkType::EncoderDecoder)
}

/// What was loaded, for display.
#[derive(Clone, Debug)]
pub struct Seq2SeqInfo {
    pub path: PathBuf,
    pub name: String,
    pub architecture: String,
    pub device: String,
    /// The longest input and output the model was trained on (`n_positions`): the default
    /// bound on generated tokens.
    pub n_ctx_train: usize,
}

/// One generation's result.
#[derive(Clone, Debug)]
pub struct Seq2SeqOutput {
    pub text: String,
    /// The generated tokens (without the decoder's start token).
    pub tokens: Vec<u32>,
    pub finish: FinishReason,
    pub input_tokens: usize,
    /// Seconds spent encoding the input and decoding the output.
    pub encode_s: f64,
    pub decode_s: f64,
}

/// An encoder-decoder with its tokenizer, on an executor.
pub struct Seq2SeqEngine {
    model: Box<dyn Seq2Seq>,
    tokenizer: Tokenizer,
    info: Seq2SeqInfo,
}

impl Seq2SeqEngine {
    /// Opens `path` and loads it onto the executor `options` name: the native CPU executor,
    /// or the CPU reference. Encoder-decoders have no Vulkan kernels yet: a Vulkan choice
    /// runs on the native CPU executor, and the device says so.
    pub fn load(path: &Path, options: &EngineOptions, progress: &mut ProgressFn) -> Result<Self> {
        let file = hearth_models::open_model(path)?;
        Self::load_file(file, options, progress)
    }

    pub fn load_file(
        file: GgufFile,
        options: &EngineOptions,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let model: ResolvedModel = resolve_with(&file, options.spec.as_ref())?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let (executor, device): (Box<dyn Seq2Seq>, String) = match options.backend {
            BackendKind::Reference => (
                Box::new(hearth_reference::load_seq2seq(&file, &model, progress)?),
                "CPU reference".into(),
            ),
            kind => {
                let cpu = options.cpu_compute();
                let m = NativeSeq2Seq::load(&file, &model, cpu, progress)?;
                let mut device = format!("CPU ({}, {} threads)", m.isa, m.threads);
                if kind == BackendKind::Vulkan {
                    tracing::info!("encoder-decoders run on the CPU executor");
                    device.push_str("; encoder-decoders do not run on Vulkan yet");
                }
                (Box::new(m.model), device)
            }
        };
        let info = Seq2SeqInfo {
            path: file.path().to_path_buf(),
            name: crate::engine::model_name(&file)?,
            architecture: model.architecture.clone(),
            device,
            n_ctx_train: executor.config().n_ctx_train,
        };
        Ok(Self {
            model: executor,
            tokenizer,
            info,
        })
    }

    pub fn info(&self) -> &Seq2SeqInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The executor's model, for callers that step it themselves (tests, benchmarks).
    pub fn model(&mut self) -> &mut dyn Seq2Seq {
        self.model.as_mut()
    }

    /// `text` as the encoder reads it (with the end-of-text token T5's tokenizer adds).
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text)
    }

    /// Generates from `input` (tokens) under `params`, handing each piece of text to
    /// `on_text` as it is complete; `on_text` returning false stops.
    pub fn generate(
        &mut self,
        input: &[u32],
        params: &GenerateParams,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Seq2SeqOutput> {
        if params.speculative.is_some() {
            return Err(Error::options(
                "draft",
                "speculative decoding is for decoder-only models",
            ));
        }
        let start = self.model.config().decoder_start;
        let n_vocab = self.model.config().n_vocab;
        let limit = params.max_tokens.unwrap_or(self.info.n_ctx_train);
        let prompt = [start];
        let bounded = GenerateParams {
            max_tokens: Some(limit),
            ..params.clone()
        };
        // The start token and every generated token but the last pass the decoder.
        let positions = self.model.config().decoder_positions();
        bounded.check(&self.tokenizer, &prompt, positions + 1, n_vocab)?;
        let t0 = Instant::now();
        let memory = self.model.encode(input)?;
        self.model.begin(0, &memory)?;
        let encode_s = t0.elapsed().as_secs_f64();
        let mut stream = TokenStream::new(&self.tokenizer, &prompt, &bounded)?;
        let mut text = String::new();
        let mut tokens = Vec::new();
        let mut next = start;
        let t1 = Instant::now();
        let finish = loop {
            let logits = self.model.decode(0, &[next], Logits::Last)?;
            let s = stream.sample(&self.tokenizer, &logits);
            tokens.push(s.token);
            text.push_str(&s.text);
            let go_on = s.text.is_empty() || on_text(&s.text);
            if let Some(reason) = s.finish {
                break reason;
            }
            if !go_on {
                break FinishReason::Cancelled;
            }
            next = s.token;
        };
        let rest = stream.finish(finish);
        if !rest.is_empty() {
            on_text(&rest);
            text.push_str(&rest);
        }
        self.model.end(0);
        Ok(Seq2SeqOutput {
            text,
            tokens,
            finish,
            input_tokens: input.len(),
            encode_s,
            decode_s: t1.elapsed().as_secs_f64(),
        })
    }

    /// The `params.width` best outputs for `input` by beam search, best first.
    pub fn beam_search(&mut self, input: &[u32], params: &BeamParams) -> Result<Vec<Hypothesis>> {
        params.validate()?;
        let width = params.width;
        let most = self.model.rows() / 2;
        if width > most {
            return Err(Error::options(
                "beams",
                format!("{width} beams; an encoder-decoder keeps at most {most}"),
            ));
        }
        let positions = self.model.config().decoder_positions();
        if params.max_tokens > positions {
            return Err(Error::ContextFull {
                needed: params.max_tokens,
                used: 0,
                n_ctx: positions,
            });
        }
        let start = self.model.config().decoder_start;
        let memory = self.model.encode(input)?;
        self.model.begin(0, &memory)?;
        let tokenizer = &self.tokenizer;
        let is_eos = |t: u32| tokenizer.is_end_of_generation(t);
        let mut search = BeamSearch::new(*params);
        // The decoder row of each running beam; rows 0..2W, half of them free at each step.
        let mut rows = vec![0usize];
        let mut logits = vec![self.model.decode(0, &[start], Logits::Last)?];
        while !search.is_done() {
            let choices = search.advance(&logits, is_eos);
            if search.is_done() || choices.is_empty() {
                break;
            }
            let mut free = (0..2 * width).filter(|r| !rows.contains(r));
            let mut next = Vec::with_capacity(choices.len());
            for c in &choices {
                let dst = free.next().expect("2W rows hold W beams and W forks");
                self.model.fork(rows[c.parent], dst)?;
                next.push(dst);
            }
            for &r in &rows {
                self.model.end(r);
            }
            rows = next;
            logits = rows
                .iter()
                .zip(&choices)
                .map(|(&r, c)| self.model.decode(r, &[c.token], Logits::Last))
                .collect::<Result<_>>()?;
        }
        for &r in &rows {
            self.model.end(r);
        }
        Ok(search.finish())
    }
}
