//! Embedding models: an encoder (BERT and its kind) loaded onto an executor with its
//! tokenizer, turning texts into one vector each (pooled as the model says, L2-normalized as
//! sentence-transformers' Normalize module and OpenAI's API return them).
//!
//! Texts run in batches of up to [`BATCH_TOKENS`] tokens, each batch one step of the
//! executor. A text longer than the model's positions is cut to them, its closing [SEP] kept,
//! as transformers' tokenizers truncate.

use std::path::{Path, PathBuf};

use hearth_cpu::{CpuOptions, NativeEncoder};
pub use hearth_model::encoder::{l2_normalize, Pooling};

use hearth_model::encoder::{pool, Encoder, EncoderInput};
use hearth_model::{Error, ProgressFn, Result};
use hearth_models::{resolve_with, GgufFile, ResolvedModel, Tokenizer};
use hearth_reference::RefEncoder;
use hearth_vulkan::VkEncoder;

use crate::{BackendKind, EngineOptions, Placement};

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
    let file = hearth_models::open_model(path)?;
    Ok(resolve_with(&file, spec)?.spec.network == hearth_models::spec::NetworkType::EncoderOnly)
}

impl Embedder {
    /// Opens `path` and loads its encoder onto the executor `options` name: the native CPU
    /// executor, the CPU reference, or a Vulkan device. A Vulkan choice naming no device runs
    /// on the best device where one is a GPU, and on the CPU executor where the only Vulkan
    /// devices are CPUs (as [`Placement::default_for_host`] chooses); the device string says
    /// which.
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
            BackendKind::Vulkan if on_device(options) => {
                // An encoder runs on one device: the first one named.
                let devices = crate::split::load::open_devices(options)?;
                let Some(device) = devices.into_iter().next() else {
                    return Err(Error::options("device", "no Vulkan device to open"));
                };
                let m = VkEncoder::load(&device, &file, &model, progress)?;
                (Box::new(m), device.info().name.clone())
            }
            BackendKind::Cpu | BackendKind::Vulkan => {
                let cpu = CpuOptions {
                    threads: options.threads,
                    isa: options.isa,
                    activations: options.activations,
                    ..CpuOptions::default()
                };
                let m = NativeEncoder::load(&file, &model, cpu, progress)?;
                let device = format!("CPU ({}, {} threads)", m.isa(), m.threads());
                (Box::new(m), device)
            }
        };
        let c = encoder.config();
        let path = file.path().to_path_buf();
        let name = file
            .get::<&str>("general.name")?
            .map(str::to_string)
            .unwrap_or_else(|| {
                path.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
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
        let mut out = Vec::with_capacity(inputs.len());
        let mut batch: Vec<EncoderInput> = Vec::new();
        let mut tokens = 0;
        for (i, ids) in inputs.iter().enumerate() {
            if ids.is_empty() {
                return Err(Error::options("input", format!("text {i} has no tokens")));
            }
            let mut ids = ids.clone();
            self.truncate(&mut ids);
            if tokens + ids.len() > BATCH_TOKENS && !batch.is_empty() {
                self.run(&batch, normalize, &mut out)?;
                batch.clear();
                tokens = 0;
            }
            tokens += ids.len();
            batch.push(EncoderInput {
                tokens: ids,
                types: Vec::new(),
            });
        }
        if !batch.is_empty() {
            self.run(&batch, normalize, &mut out)?;
        }
        Ok(out)
    }

    fn run(
        &mut self,
        batch: &[EncoderInput],
        normalize: bool,
        out: &mut Vec<Vec<f32>>,
    ) -> Result<()> {
        let states = self.encoder.encode(batch)?;
        let (e, pooling) = (self.info.dims, self.info.pooling);
        for s in states {
            let mut v = pool(&s, e, pooling);
            if normalize {
                l2_normalize(&mut v);
            }
            out.push(v);
        }
        Ok(())
    }
}

/// Whether a Vulkan choice runs on a device: one it names, or without one, the best where
/// some device is a GPU.
fn on_device(options: &EngineOptions) -> bool {
    options.device.is_some()
        || !options.devices.is_empty()
        || Placement::default_for_host() != Placement::Cpu
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
