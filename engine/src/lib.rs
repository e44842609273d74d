//! Hearth's engine: a model file loaded onto an executor (the Vulkan one, or the CPU
//! reference) with its tokenizer and chat template ([`Engine`]), one conversation's generation
//! loop (`session`), sampling (`sample`), continuous batching (`sched`), beam search
//! (`beam_search`), the engine on a thread of its own taking requests from the server,
//! the chat and the app (`service`), and embedding models ([`Embedder`], `embed`).

pub mod beam_search;
pub mod embed;
mod engine;
pub mod grammar;
pub mod placement;
pub mod sample;
pub mod sched;
pub mod seq2seq;
pub mod service;
pub mod session;
pub mod speculative;
pub mod split;
pub mod tune;

pub use embed::Embedder;
pub use engine::*;
pub use hearth_model::{Error, Result};
pub use placement::Placement;
pub use seq2seq::Seq2SeqEngine;
