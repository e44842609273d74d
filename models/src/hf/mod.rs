//! Hugging Face model folders (`config.json`, safetensors weights, tokenizer files) as GGUF.
//!
//! A folder becomes the GGUF file llama.cpp's `convert_hf_to_gguf.py` would write for it: the
//! same metadata keys, tensor names, layouts and vocabulary. Everything past this module (the
//! spec that `general.architecture` picks, the tokenizer, the chat template) then reads it as
//! it reads any GGUF file, so a folder runs exactly as its converted file does.
//!
//! [`HfFolder::to_gguf`] builds the file in a [`GgufWriter`] whose tensors borrow the mapped
//! safetensors where they pass through unchanged (most of them): `hearth convert` writes it,
//! and running a folder parses it from memory.
//!
//! - `family`: the families, derived from the shipped specs' `[hf]` tables;
//! - `config`: `config.json`, its family (`architectures`) and the hyperparameters;
//! - `metadata` and `hooks`: the `{arch}.*` keys, common and each family's own;
//! - `tensors`: names (`encoder_names` for BERT's, `t5_names` for T5's), layouts, stacked
//!   experts, computed RoPE tensors; `shapes`: the config's sizes against them;
//! - `vocab` and `sentencepiece`: the vocabulary, special tokens and chat template
//!   (`unigram`: a SentencePiece Unigram vocabulary, T5's or XLM-RoBERTa's; `unigram_json`: one
//!   from tokenizer.json)

mod config;
mod encoder_names;
mod family;
mod hooks;
mod meta;
mod metadata;
mod rope;
mod sentencepiece;
mod shapes;
mod spm_json;
mod t5_names;
mod tensors;
mod token_ids;
mod unigram;
mod unigram_json;
mod vocab;
mod wordpiece;

use std::path::{Path, PathBuf};

pub use rope::Llama3Rope;

use crate::error::Result;
use crate::gguf::{GgufFile, GgufWriter, MetaValue};
use crate::safetensors::SafetensorsWeights;
use crate::spec::{ModelSpec, NetworkType};

/// Opens a model for loading: a GGUF file, memory-mapped, or a Hugging Face folder,
/// converted in memory.
pub fn open_model(path: &Path) -> Result<GgufFile> {
    if is_model_folder(path) {
        HfFolder::open(path)?.to_gguf_file()
    } else {
        GgufFile::open(path)
    }
}

/// The network of the model at `path` (decoder, encoder, encoder-decoder), resolved with
/// `spec` where given, else the shipped spec. A folder without a spec of the user's is read
/// from `config.json` alone, not converted: frontends ask this before loading.
pub fn model_network(path: &Path, spec: Option<&ModelSpec>) -> Result<NetworkType> {
    if spec.is_none() && is_model_folder(path) {
        return Ok(config::Config::read(path)?.family.network);
    }
    let file = open_model(path)?;
    Ok(crate::spec::resolve_with(&file, spec)?.spec.network)
}

/// Whether `path` is a Hugging Face model folder: `config.json` beside safetensors weights
/// or PyTorch checkpoints (`pytorch_model.bin`), one file or an index.
pub fn is_model_folder(path: &Path) -> bool {
    path.is_dir() && path.join("config.json").is_file() && crate::safetensors::has_weights(path)
}

/// `general.architecture` for the folder at `dir` when it is a model folder of a text
/// generator Hearth converts (a decoder, not an embedding model; read from `config.json`
/// alone), else `None`: what a chat app lists.
pub fn converted_decoder(dir: &Path) -> Option<&'static str> {
    converted_family(dir)
        .filter(|f| f.network == NetworkType::DecoderOnly)
        .map(|f| f.arch.as_str())
}

/// The family of the model folder at `dir`, read from `config.json` alone.
fn converted_family(dir: &Path) -> Option<&'static family::Family> {
    if !is_model_folder(dir) {
        return None;
    }
    config::Config::read(dir).ok().map(|c| c.family)
}

/// An open model folder.
pub struct HfFolder {
    dir: PathBuf,
    config: config::Config,
    weights: SafetensorsWeights,
}

impl HfFolder {
    /// Reads `config.json` (an unknown family is an error listing those Hearth converts) and
    /// maps the weights.
    pub fn open(dir: &Path) -> Result<Self> {
        let config = config::Config::read(dir)?;
        let weights = SafetensorsWeights::open(dir)?;
        Ok(HfFolder {
            dir: dir.to_path_buf(),
            config,
            weights,
        })
    }

    /// `general.architecture` of the converted file.
    pub fn architecture(&self) -> &'static str {
        &self.config.family.arch
    }

    pub fn weights(&self) -> &SafetensorsWeights {
        &self.weights
    }

    /// `max_position_embeddings`, where `config.json` gives it.
    pub fn context_length(&self) -> Option<u64> {
        self.config.u64("max_position_embeddings").ok().flatten()
    }

    /// The folder as a GGUF file, ready to write or parse; tensors that pass through unchanged
    /// borrow the mapped weights.
    pub fn to_gguf(&self) -> Result<GgufWriter<'_>> {
        let tensors = tensors::tensors(&self.weights, &self.config)?;
        let meta = metadata::metadata(&self.config)?;
        let mut w = GgufWriter::new();
        w.set_metadata("general.architecture", MetaValue::String(meta.arch.into()));
        w.set_metadata("general.type", MetaValue::String("model".into()));
        let name = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        w.set_metadata("general.name", MetaValue::String(name.unwrap_or_default()));
        for (key, value) in meta.entries {
            w.set_metadata(key, value);
        }
        // The embeddings give llama.cpp's file type (what they, and so most matrices, are
        // stored in) and the vocabulary's length.
        let embd = tensors.iter().find(|t| t.name == "token_embd.weight");
        let file_type = match embd.map(|t| t.ty) {
            Some(crate::GgmlType::F16) => 1,
            Some(crate::GgmlType::BF16) => 32,
            _ => 0,
        };
        w.set_metadata("general.file_type", MetaValue::U32(file_type));
        w.set_metadata("general.quantization_version", MetaValue::U32(2));
        let n_vocab = embd.and_then(|t| t.shape.get(1)).map_or(0, |&n| n as usize);
        for (key, value) in vocab::vocabulary(&self.dir, &self.config, n_vocab)? {
            w.set_metadata(key, value);
        }
        for t in tensors {
            w.add_tensor(&t.name, t.ty, &t.shape, t.data)?;
        }
        Ok(w)
    }

    /// The converted file, parsed from memory (named after the folder in errors).
    pub fn to_gguf_file(&self) -> Result<GgufFile> {
        let bytes = self
            .to_gguf()?
            .to_bytes()
            .map_err(|e| crate::Error::io(&self.dir, e))?;
        GgufFile::from_bytes(&self.dir, bytes)
    }
}
