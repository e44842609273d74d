//! Embedding models: an encoder (BERT and its kind) loaded onto an executor with its
//! tokenizer, turning texts into one vector each (pooled as the model says, L2-normalized as
//! sentence-transformers' Normalize module and OpenAI's API return them).
//!
//! Texts run in batches of up to [`BATCH_TOKENS`] tokens, each batch one step of the
//! executor. A text longer than the model's positions is cut to them, its closing [SEP] kept,
//! as transformers' tokenizers truncate.

use std::path::{Path, PathBuf};

use hearth_cpu::NativeEncoder;
pub use hearth_model::encoder::{l2_normalize, Pooling};

use hearth_model::encoder::{pool, Encoder, EncoderInput};
use hearth_model::{Error, ProgressFn, Result};
use hearth_models::{resolve_with, GgufFile, ResolvedModel, Tokenizer};
use hearth_reference::RefEncoder;
use hearth_vulkan::VkEncoder;

use crate::{BackendKind, EngineOptions};

/// Most tokens one step of the executor takes.
pub const BATCH_TOKENS: usize = 8192;

/// What was loaded, for display.
#[derive(Clone, Debug)]
pub struct EmbedderInfo {
    pub path: PathBuf,
    pub name: String,
    pub architecture: String,
    /// The vectors' width.
    pub dims: usize,
    /// The most tokens one text may have.
    pub max_tokens: usize,
    pub pooling: Pooling,
    pub device: String,
}

/// An embedding model, ready to embed.
pub struct Embedder {
    encoder: Box<dyn Encoder + Send>,
    tokenizer: Tokenizer,
    info: EmbedderInfo,
}

/// Whether the model at `path` (a GGUF file or a Hugging Face folder) is an encoder, which
/// [`Embedder`] loads, rather than a decoder, which [`crate::Engine`] loads.
pub fn is_encoder(path: &Path, spec: Option<&hearth_models::ModelSpec>) -> Result<bool> {
    Ok(hearth_models::model_network(path, spec)? == hearth_models::spec::NetworkType::EncoderOnly)
}

impl Embedder {
    /// Opens `path` and loads its encoder onto the executor `options` name: the native CPU
    /// executor, the CPU reference, or a Vulkan device (`options.device`, else the best;
    /// frontends choose between the CPU executor and a device with
    /// [`Placement`](crate::Placement), as for decoders).
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
        let (encoder, device): (Box<dyn Encoder + Send>, String) = match options.backend {
            BackendKind::Reference => (
                Box::new(RefEncoder::load(&file, &model, progress)?),
                "CPU reference".into(),
            ),
            BackendKind::Vulkan => {
                // An encoder runs on one device: the first one named.
                let devices = crate::split::load::open_devices(options)?;
                let Some(device) = devices.into_iter().next() else {
                    return Err(Error::options("device", "no Vulkan device to open"));
                };
                let m = VkEncoder::load(&device, &file, &model, progress)?;
                (Box::new(m), device.info().name.clone())
            }
            BackendKind::Cpu => {
                let cpu = options.cpu_compute();
                let m = NativeEncoder::load(&file, &model, cpu, progress)?;
                let device = format!("CPU ({}, {} threads)", m.isa(), m.threads());
                (Box::new(m), device)
            }
        };
        let c = encoder.config();
        let path = file.path().to_path_buf();
        let name = crate::engine::model_name(&file)?;
        let info = EmbedderInfo {
            path,
            name,
            architecture: model.architecture.clone(),
            dims: c.n_embd,
            max_tokens: c.n_positions,
            pooling: c.pooling,
            device,
        };
        Ok(Self {
            encoder,
            tokenizer,
            info,
        })
    }

    pub fn info(&self) -> &EmbedderInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// `text`'s tokens as the model reads them: [CLS] ... [SEP], cut to the model's
    /// positions.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        let opts = hearth_models::EncodeOptions {
            add_special: true,
            parse_special: false,
        };
        let mut ids = self.tokenizer.encode_with(text, opts);
        self.truncate(&mut ids);
        ids
    }

    /// Cuts `ids` to the model's positions, keeping the closing separator where there is one.
    fn truncate(&self, ids: &mut Vec<u32>) {
        let max = self.info.max_tokens;
        if ids.len() <= max {
            return;
        }
        let sep = self
            .tokenizer
            .special()
            .eos
            .filter(|&s| ids.last() == Some(&s));
        ids.truncate(max);
        if let (Some(sep), Some(last)) = (sep, ids.last_mut()) {
            *last = sep;
        }
    }

    /// One unit-length vector per text.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let inputs: Vec<Vec<u32>> = texts.iter().map(|t| self.tokenize(t)).collect();
        self.embed_tokens(&inputs, true)
    }

    /// One vector per token list (used as given, cut to the model's positions), unit length
    /// when `normalize`.
    pub fn embed_tokens(&mut self, inputs: &[Vec<u32>], normalize: bool) -> Result<Vec<Vec<f32>>> {
        let mut batch = Vec::with_capacity(inputs.len());
        for (i, ids) in inputs.iter().enumerate() {
            if ids.is_empty() {
                return Err(Error::options("input", format!("text {i} has no tokens")));
            }
            let mut ids = ids.clone();
            self.truncate(&mut ids);
            batch.push(EncoderInput {
                tokens: ids,
                types: Vec::new(),
            });
        }
        let (e, pooling) = (self.info.dims, self.info.pooling);
        let mut out = Vec::with_capacity(inputs.len());
        self.encode_batched(&batch, |states| {
            let mut v = pool(&states, e, pooling);
            if normalize {
                l2_normalize(&mut v);
            }
            out.push(v);
        })?;
        Ok(out)
    }

    /// Each input's hidden states in turn, in order: the inputs run in steps of up to
    /// [`BATCH_TOKENS`] tokens, at least one input a step, so that only a step's states are
    /// held at once.
    fn encode_batched(
        &mut self,
        inputs: &[EncoderInput],
        mut each: impl FnMut(Vec<f32>),
    ) -> Result<()> {
        let mut start = 0;
        while start < inputs.len() {
            let mut end = start + 1;
            let mut tokens = inputs[start].tokens.len();
            while end < inputs.len() && tokens + inputs[end].tokens.len() <= BATCH_TOKENS {
                tokens += inputs[end].tokens.len();
                end += 1;
            }
            for states in self.encoder.encode(&inputs[start..end])? {
                each(states);
            }
            start = end;
        }
        Ok(())
    }
}

impl Embedder {
    /// Whether the model scores query-document pairs (a cross-encoder: a classifier head).
    pub fn reranks(&self) -> bool {
        self.encoder.head().is_some()
    }

    /// `query` and `document` as a cross-encoder reads them: [CLS] query [SEP] document
    /// [SEP] with token types 0 then 1, or for a model of one token type (RoBERTa,
    /// XLM-RoBERTa) <s> query </s></s> document </s>, all 0; cut to the model's positions as
    /// transformers cuts a pair (`longest_first`, `pair_lengths`).
    pub fn tokenize_pair(&self, query: &str, document: &str) -> EncoderInput {
        let opts = hearth_models::EncodeOptions {
            add_special: false,
            parse_special: false,
        };
        let mut q = self.tokenizer.encode_with(query, opts);
        let mut d = self.tokenizer.encode_with(document, opts);
        let segments = self.encoder.config().n_token_types > 1;
        let max = self
            .info
            .max_tokens
            .saturating_sub(if segments { 3 } else { 4 });
        let (nq, nd) = pair_lengths(q.len(), d.len(), max);
        q.truncate(nq);
        d.truncate(nd);
        let s = self.tokenizer.special();
        let (cls, sep) = (s.bos.into_iter(), s.eos.into_iter());
        let first: Vec<u32> = cls.chain(q).chain(sep.clone()).collect();
        let second: Vec<u32> = match segments {
            true => d.into_iter().chain(sep).collect(),
            false => sep.clone().chain(d).chain(sep).collect(),
        };
        let types = [
            vec![0; first.len()],
            vec![u32::from(segments); second.len()],
        ]
        .concat();
        EncoderInput {
            tokens: [first, second].concat(),
            types,
        }
    }

    /// Each document's relevance to `query`: the classifier's first output (a logit: higher
    /// is more relevant), in the documents' order. A model without a classifier head is an
    /// error.
    pub fn rerank(&mut self, query: &str, documents: &[&str]) -> Result<Vec<f32>> {
        if !self.reranks() {
            return Err(Error::options(
                "model",
                format!(
                    "`{}` has no classifier head: reranking needs a cross-encoder",
                    self.info.name
                ),
            ));
        }
        let pairs: Vec<EncoderInput> = documents
            .iter()
            .map(|d| self.tokenize_pair(query, d))
            .collect();
        self.score(&pairs)
    }

    /// The classifier's first output for each input (token types as given).
    pub fn score(&mut self, inputs: &[EncoderInput]) -> Result<Vec<f32>> {
        let e = self.info.dims;
        let mut firsts = Vec::with_capacity(inputs.len());
        self.encode_batched(inputs, |states| {
            firsts.push(states[..e.min(states.len())].to_vec())
        })?;
        let head = self.encoder.head().ok_or_else(|| {
            Error::options("model", "reranking needs a cross-encoder's classifier head")
        })?;
        Ok(firsts
            .iter()
            .map(|first| head.classify(first).first().copied().unwrap_or(0.0))
            .collect())
    }
}

/// How many of a pair's tokens (`a` of the first text, `b` of the second) are kept when at most
/// `max` fit, as the `tokenizers` crate's `longest_first` keeps them (transformers' tokenizers
/// run it): where the shorter fits in half, it stays whole and the longer is cut to the rest;
/// else each gets half, and the longer one (the second, where they are as long) the odd token.
fn pair_lengths(a: usize, b: usize, max: usize) -> (usize, usize) {
    if a + b <= max {
        return (a, b);
    }
    let short = a.min(b);
    let (short, long) = match 2 * short <= max {
        true => (short, max - short),
        false => (max / 2, max / 2 + max % 2),
    };
    if a > b {
        (long, short)
    } else {
        (short, long)
    }
}

/// The indices of `scores`, highest score first, at most `top_n` of them.
pub fn ranking(scores: &[f32], top_n: Option<usize>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order.truncate(top_n.unwrap_or(order.len()));
    order
}

/// The cosine similarity of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    (dot / (na * nb)) as f32
}

#[cfg(test)]
mod tests {
    use super::pair_lengths;

    /// `tokenizers`' `longest_first` on a pair: nothing cut where it fits; the longer cut
    /// where the shorter fits in half; else halves, the odd token to the longer part, or to
    /// the second where they are as long.
    #[test]
    fn pairs_are_cut_as_tokenizers_cuts_them() {
        assert_eq!(pair_lengths(10, 20, 30), (10, 20));
        assert_eq!(pair_lengths(10, 300, 125), (10, 115));
        assert_eq!(pair_lengths(300, 10, 125), (115, 10));
        assert_eq!(pair_lengths(62, 300, 124), (62, 62));
        assert_eq!(pair_lengths(300, 300, 125), (62, 63));
        assert_eq!(pair_lengths(280, 300, 509), (254, 255));
        assert_eq!(pair_lengths(300, 280, 509), (255, 254));
        assert_eq!(pair_lengths(5, 5, 0), (0, 0));
    }
}
