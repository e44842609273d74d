//! Hearth's benchmarks as a library, for the `hearth bench` command, the desktop app and a
//! server alike: each measures and returns plain results (serializable, in the field names
//! `hearth bench -o json` prints); printing them is the caller's part.
//!
//! - [`bench_model`]: prompt processing and generation speed of loaded engines, llama-bench's
//!   way, one engine per KV placement compared in one run;
//! - [`bench_serving`]: throughput and latency of a stream of requests served by continuous
//!   and by static batching;
//! - [`bench_kernels`]: the kernels' speed on a device, beside the memory bandwidth that
//!   bounds them;
//! - [`bench_embed`]: an embedding model's sentences per second at each batch size.

pub mod embed;
pub mod kernels;
pub mod model;
mod params;
pub mod report;
pub mod serving;
mod stats;

pub use embed::{bench_embed, EmbedBenchParams, EmbedBenchRow};
pub use kernels::{bench_kernels, KernelBenchParams, KernelReport, KernelRow};
pub use model::{bench_model, ModelBenchParams, ModelSource, Test};
pub use report::{BenchRow, KvSummary, PlacementReport};
pub use serving::{bench_serving, Batching, ServingParams, ServingRun};
