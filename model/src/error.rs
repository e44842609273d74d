//! The error type of the model and of every executor: everything loading or running a model
//! can report. Each variant names the file, tensor, field or limit involved.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The executor's device failed (a Vulkan call, device memory); the executor's own error
    /// says what to do about it.
    #[error(transparent)]
    Device(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Model(#[from] hearth_models::Error),
    /// A weight tensor could not be read as the model needs it.
    #[error("{}: tensor `{tensor}`: {reason}", path.display())]
    Tensor {
        path: PathBuf,
        tensor: String,
        reason: String,
    },
    /// The model combines atoms this runtime cannot execute yet.
    #[error("{}: {what} is not supported yet", path.display())]
    Unsupported { path: PathBuf, what: String },
    /// The request needs more positions than the context holds.
    #[error(
        "{needed} tokens do not fit in the context of {n_ctx} ({used} already used); \
         use a larger --ctx-size or a shorter prompt"
    )]
    ContextFull {
        needed: usize,
        used: usize,
        n_ctx: usize,
    },
    /// The paged KV cache has too few free blocks for a step.
    #[error(
        "KV cache full: {needed} blocks of {block_tokens} tokens needed, {free} free; \
         raise --kv-budget or run fewer sequences at once"
    )]
    KvFull {
        needed: usize,
        free: usize,
        block_tokens: usize,
    },
    /// What a device would hold does not fit its free memory (found before loading).
    #[error("{device} has {free_mib:.1} MiB free; {what} would take {asked}. {advice}")]
    DeviceMemory {
        /// "vulkan:0 (NVIDIA GeForce RTX 4060)".
        device: String,
        free_mib: f64,
        /// What it would hold ("layers 12..32 and the output head").
        what: String,
        /// The bytes asked, itemised.
        asked: String,
        /// What would fit.
        advice: String,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    BadToken { id: u32, n_vocab: usize },
    /// Invalid options (sampling parameters, context size, ...), naming the field.
    #[error("{field}: {reason}")]
    Options { field: String, reason: String },
    /// A file Hearth writes or reads beside the model (a cache) failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An importance matrix file that cannot be used, and why.
    #[error("{}: importance matrix: {reason}", path.display())]
    Imatrix { path: PathBuf, reason: String },
    /// Loading was cancelled by the caller.
    #[error("cancelled")]
    Cancelled,
}

impl Error {
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn options(field: &str, reason: impl Into<String>) -> Self {
        Self::Options {
            field: field.to_string(),
            reason: reason.into(),
        }
    }
}
