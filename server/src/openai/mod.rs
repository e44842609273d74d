//! OpenAI's API shapes: the requests `/v1/chat/completions` and `/v1/completions` take
//! (`request.rs`, with a chat's `messages` in `messages.rs`, a completion's `prompt` in
//! `prompt.rs`, whole numbers as JSON Schema counts them in `whole.rs`, what one request may
//! ask for in `bounds.rs` and the 400 that names a field in `invalid.rs`), and the
//! responses, stream chunks and errors the server gives (`response.rs`); `/v1/embeddings`'
//! request and response (`embeddings.rs`); `/v1/rerank`'s (`rerank.rs`).

mod bounds;
mod embeddings;
mod invalid;
mod messages;
mod prompt;
mod request;
mod rerank;
mod response;
mod tools;
mod whole;

pub use embeddings::*;
pub use invalid::Invalid;
pub use messages::Message;
pub use prompt::{Prompt, PromptPart};
pub use request::*;
pub use rerank::*;
pub use response::*;
pub use tools::{ToolChoice, ToolRequest};
