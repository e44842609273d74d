//! OpenAI's API shapes: the requests `/v1/chat/completions` and `/v1/completions` take
//! (`request.rs`), and the responses, stream chunks and errors the server gives
//! (`response.rs`).

mod request;
mod response;

pub use request::*;
pub use response::*;
