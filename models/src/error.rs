//! The crate's one error type. Every variant names the file and the field, tensor, key or
//! template line it is about, so a message alone tells the user what to fix.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong reading a model file, resolving its spec, tokenizing,
/// rendering a chat template or pulling a model from the hub.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a well-formed GGUF file; `field` says where (header, a metadata key,
    /// a tensor's index entry).
    #[error("{}: {field}: {reason}", path.display())]
    Gguf {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// A metadata key the loader needs is missing, has the wrong type or an impossible value.
    #[error("{}: metadata `{key}`: {reason}", path.display())]
    Metadata {
        path: PathBuf,
        key: String,
        reason: String,
    },
    /// A safetensors weight file or its index is missing or malformed.
    #[error("{}: {reason}", path.display())]
    Safetensors { path: PathBuf, reason: String },
    /// A PyTorch checkpoint (`.bin`) is malformed, or asks for what a data-only reader
    /// refuses (a global outside the allow-list, an opcode it does not read); `reason` names
    /// the entry or pickle, the byte, and the global or storage.
    #[error("{}: {reason}", path.display())]
    Checkpoint { path: PathBuf, reason: String },
    /// A tensor the model spec requires is missing or disagrees with the spec.
    #[error("{}: tensor `{tensor}`: {reason}", path.display())]
    Tensor {
        path: PathBuf,
        tensor: String,
        reason: String,
    },
    /// A model specification (TOML) is invalid.
    #[error("model spec `{spec}`: {reason}")]
    Spec { spec: String, reason: String },
    /// No shipped spec serves the file's `general.architecture`.
    #[error(
        "{}: no model spec for architecture `{arch}` (shipped specs serve: {}); a family built \
         from known atoms needs only a spec file in models/specs/, see docs/adding-a-model.md",
        path.display(),
        known.join(", ")
    )]
    UnknownArchitecture {
        path: PathBuf,
        arch: String,
        known: Vec<String>,
    },
    /// The tokenizer could not be built or used.
    #[error("{source_name}: tokenizer: {reason}")]
    Tokenizer { source_name: String, reason: String },
    /// A chat template failed to compile or render.
    #[error("chat template{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Template {
        line: Option<usize>,
        message: String,
    },
    /// A value the caller chose cannot be used (a synthetic model's shape or preset name),
    /// naming what it was for.
    #[error("{field}: {reason}")]
    Options { field: String, reason: String },
    /// No model in the models directory matches the name.
    #[error("no model named `{name}` in {}{}", dir.display(), list_available(available))]
    ModelNotFound {
        name: String,
        dir: PathBuf,
        available: Vec<String>,
    },
    /// Several models match the name.
    #[error("model name `{name}` is ambiguous in {}; candidates: {}", dir.display(), list_paths(candidates))]
    AmbiguousModel {
        name: String,
        dir: PathBuf,
        candidates: Vec<PathBuf>,
    },
    /// The hub has no repository of that name, or refused to list it (a private or gated
    /// one, without a token that may read it).
    #[error(
        "{repo}: no such repository on the hub ({url}: status {status}){}",
        if *token_sent {
            "; if it is private, the token sent may not read it"
        } else {
            "; if it is private or gated, a token is needed (HF_TOKEN)"
        }
    )]
    HubRepoNotFound {
        repo: String,
        url: String,
        status: u16,
        token_sent: bool,
    },
    /// The repository has no GGUF file of the quantization asked for; `available` lists
    /// what it has (`Q4_K_M: Model-Q4_K_M.gguf`).
    #[error(
        "{repo} has no GGUF file of quantization `{quant}`; {}",
        list_quants(available)
    )]
    HubQuantNotFound {
        repo: String,
        quant: String,
        available: Vec<String>,
    },
    /// A pull cannot go on: the repository holds no model Hearth pulls, its listing is
    /// malformed, a file of the same name is in the way.
    #[error("{repo}: {reason}")]
    Hub { repo: String, reason: String },
    /// An HTTP request failed or was answered with an error.
    #[error("{url}: {reason}")]
    Http { url: String, reason: String },
    /// A pull was cancelled. A file cut off midway keeps its bytes in its `.part`, which
    /// the next pull continues.
    #[error(
        "{file}: download cancelled after {kept} of {size} bytes; {} keeps them, and pulling \
         again resumes there",
        part.display()
    )]
    PullCancelled {
        /// `ORG/REPO/PATH`.
        file: String,
        part: PathBuf,
        kept: u64,
        size: u64,
    },
    /// A downloaded file is not the one the hub lists: its checksum differs.
    #[error(
        "{file} ({url}): checksum mismatch: the hub lists {expected}, the download has \
         {actual}; the partial file was removed"
    )]
    Checksum {
        file: String,
        url: String,
        expected: String,
        actual: String,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn metadata(path: &Path, key: &str, reason: impl Into<String>) -> Self {
        Error::Metadata {
            path: path.to_path_buf(),
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn tensor(path: &Path, tensor: &str, reason: impl Into<String>) -> Self {
        Error::Tensor {
            path: path.to_path_buf(),
            tensor: tensor.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn spec(spec: &str, reason: impl Into<String>) -> Self {
        Error::Spec {
            spec: spec.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn options(field: &str, reason: impl Into<String>) -> Self {
        Error::Options {
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn hub(repo: &str, reason: impl Into<String>) -> Self {
        Error::Hub {
            repo: repo.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn http(url: &str, reason: impl Into<String>) -> Self {
        Error::Http {
            url: url.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn tokenizer(source_name: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Tokenizer {
            source_name: source_name.into(),
            reason: reason.into(),
        }
    }
}

fn list_available(available: &[String]) -> String {
    if available.is_empty() {
        return " (the directory holds no models)".to_string();
    }
    let mut s = String::from("; available: ");
    for (i, name) in available.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(name);
    }
    s
}

fn list_quants(available: &[String]) -> String {
    if available.is_empty() {
        "it holds no GGUF model files".to_string()
    } else {
        format!("it has: {}", available.join(", "))
    }
}

fn list_paths(paths: &[PathBuf]) -> String {
    let mut s = String::new();
    for (i, p) in paths.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{}", p.display());
    }
    s
}
