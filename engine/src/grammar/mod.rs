//! Constrained output: the generated text held to a GBNF grammar (llama.cpp's format) or a
//! JSON Schema, by setting the logits of every token that would break it to -inf before the
//! sampler sees them.
//!
//! The work is llguidance's (what llama.cpp and vLLM use): an Earley parser with a lexer,
//! walked over a trie of the vocabulary's tokens, so that a step's mask costs tens of
//! microseconds for a JSON Schema on a 50k vocabulary. Hearth adds what sits around it:
//!
//! - `vocabulary`: the tokenizer's tokens in llguidance's trie, built once per tokenizer;
//! - `gbnf`: GBNF read into rules, with errors at a line and column;
//! - `json`: how JSON Schemas compile (strict, with llama.cpp's whitespace);
//! - `lark`: those rules in llguidance's Lark syntax, meaning what they meant in llama.cpp;
//! - `spec`: what a request asks for ([`GrammarSpec`]) in llguidance's terms;
//! - `tool_call`: the grammar of a tool call the model must make, in its template's format;
//! - `constraint`: one sequence's grammar state, its masks and commits ([`Constraint`]).
//!
//! [`TokenStream`](crate::sample::TokenStream) applies a request's constraint at every step.

mod constraint;
mod gbnf;
mod json;
mod lark;
mod spec;
mod tool_call;
mod vocabulary;

pub use constraint::Constraint;
pub use gbnf::{Gbnf, GbnfError};
pub use lark::to_lark;
pub use spec::GrammarSpec;
pub use tool_call::{Function, ToolCalls};
pub use vocabulary::Vocabulary;
