//! One module per `hearth` command.

pub mod bench;
pub mod chat;
pub mod completions;
pub mod convert;
pub mod devices;
pub mod embed;
pub mod generate;
pub mod imatrix;
pub mod inspect;
pub mod perplexity;
pub mod pull;
pub mod quantize;
pub mod rerank;
pub mod serve;
pub mod tokenize;
pub mod tune;
