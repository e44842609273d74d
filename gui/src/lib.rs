//! Hearth's desktop chat application: a model library that searches and downloads from the
//! Hugging Face hub, streaming chat with saved conversations, generation settings and live
//! figures, on top of the runtime's engine.

pub mod app;
pub mod conversations;
pub mod hub;
pub mod library;
pub mod planner;
pub mod settings;
mod views;
pub mod worker;

pub use app::{App, AppConfig};
