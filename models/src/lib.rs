//! Model files, specs, tokenizers and chat templates.
//!
//! - [`gguf`]: read (zero-copy) and write GGUF v2/v3 files.
//! - [`ggml_type`]: tensor element types and their block geometry.
//! - [`spec`]: TOML model specifications and their resolution against a file into a
//!   [`ResolvedModel`] the runtime executes.
//! - [`tokenizer`]: byte-level BPE and SentencePiece BPE from GGUF metadata, HF
//!   `tokenizer.json` files, and streaming detokenization.
//! - [`chat`]: chat templates rendered with minijinja; [`chat_text`]: a chat tokenized so
//!   that message text stays text.
//! - [`resolve`]: finding a model by name in the models directory.
//! - [`hub`]: pulling a model by name (`ORG/REPO[:QUANT]`) from the Hugging Face hub into it.
//! - [`hf`]: Hugging Face folders (safetensors and tokenizer files) converted to GGUF.
//! - [`pickle`]: PyTorch checkpoints (`pytorch_model.bin`) read as data, never executed.
//! - [`synthetic`]: GGUF files of a given shape, built in memory, for benchmarks and tests.
//!
//! Loading a GGUF model for execution:
//!
//! ```no_run
//! # fn main() -> hearth_models::Result<()> {
//! use hearth_models::{resolve_gguf, ChatMessage, ChatOptions, ChatTemplate, GgufFile, Tokenizer};
//!
//! let file = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?; // memory-mapped
//! let model = resolve_gguf(&file)?; // spec + hyperparameters + checked tensor names
//! let embd = file.tensor_view(&model.tensors.token_embd)?; // zero-copy
//! println!("{} {:?} {} bytes", embd.info.ggml_type, embd.info.shape, embd.data.len());
//!
//! let tokenizer = Tokenizer::from_gguf(&file)?;
//! let template = ChatTemplate::from_gguf(&file)?;
//! let prompt = template.render(
//!     &[ChatMessage::new("user", "Hi")],
//!     &ChatOptions::for_tokenizer(&tokenizer, true),
//! )?;
//! let ids = tokenizer.encode(&prompt);
//!
//! let mut stream = tokenizer.stream_decoder(true);
//! for &id in &ids {
//!     print!("{}", stream.push(&tokenizer, id)); // never a partial character
//! }
//! # Ok(()) }
//! ```

pub mod chat;
pub mod chat_sandbox;
pub mod chat_text;
pub mod error;
pub mod ggml_type;
pub mod gguf;
pub mod hf;
pub mod hub;
pub mod pickle;
pub mod resolve;
pub mod safetensors;
pub mod spec;
pub mod synthetic;
pub mod tokenizer;
pub mod tool_calls;

pub use chat::{ChatMessage, ChatOptions, ChatTemplate, FunctionCall, ToolCall};
pub use error::{Error, Result};
pub use ggml_type::GgmlType;
pub use gguf::{GgufFile, GgufWriter, MetaArray, MetaValue, TensorInfo, TensorView};
pub use hf::{model_network, open_model, HfFolder};
pub use resolve::{
    default_models_dir, default_pipeline_cache_dir, default_tuning_dir, list_models, resolve_model,
    user_tuning_dir, ModelEntry, ModelFormat,
};
pub use safetensors::SafetensorsWeights;
pub use spec::{resolve_gguf, resolve_with, HyperParams, ModelSpec, ResolvedModel};
pub use tokenizer::{EncodeOptions, HfTokenizer, StreamDecoder, Tokenizer};
pub use tool_calls::{hermes_conversation, ParsedReply, ToolCallFormat};

#[cfg(test)]
mod tests {
    /// The runtime shares these across threads (one model, many requests).
    #[test]
    fn shared_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::GgufFile>();
        check::<crate::ResolvedModel>();
        check::<crate::Tokenizer>();
        check::<crate::ChatTemplate>();
        check::<crate::HfTokenizer>();
        check::<crate::StreamDecoder>();
    }
}
