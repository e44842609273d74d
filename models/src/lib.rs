//! Model files, specs, tokenizers and chat templates.
//!
//! - [`gguf`]: read (zero-copy) and write GGUF v2/v3 files.
//! - [`ggml_type`]: tensor element types and their block geometry.
//! - [`spec`]: TOML model specifications and their resolution against a file into a
//!   [`ResolvedModel`] the runtime executes.
//! - [`tokenizer`]: byte-level BPE and SentencePiece BPE from GGUF metadata, HF
//!   `tokenizer.json` files, and streaming detokenization.
//! - [`chat`]: chat templates rendered with minijinja.
//! - [`resolve`]: finding a model by name in the models directory.

pub mod chat;
pub mod error;
pub mod ggml_type;
pub mod gguf;
pub mod resolve;
pub mod spec;
pub mod tokenizer;

pub use chat::{ChatMessage, ChatOptions, ChatTemplate};
pub use error::{Error, Result};
pub use ggml_type::GgmlType;
pub use gguf::{GgufFile, GgufWriter, MetaArray, MetaValue, TensorInfo, TensorView};
pub use resolve::{default_models_dir, list_models, resolve_model};
pub use spec::{resolve_gguf, HyperParams, ModelSpec, ResolvedModel};
pub use tokenizer::{EncodeOptions, HfTokenizer, StreamDecoder, Tokenizer};
