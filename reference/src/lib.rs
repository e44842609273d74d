//! The f32 CPU reference executor: operations written for clarity (`ops`, accumulating in f64
//! so they are a trustworthy oracle for single kernels) and a whole-model forward pass
//! (`forward`, with its KV policies in `policy`). It is the oracle other executors are tested
//! against, which depend on it only for their tests; the engine also runs it (`--cpu`), and
//! the importance matrix and InfiniGen's skew matrices are computed on it.

pub mod encoder;
pub mod forward;
mod latent;
mod matmul;
pub mod moe;
pub mod ops;
mod policy;
pub mod seq2seq;

pub use encoder::RefEncoder;
pub use forward::{CpuKvState, CpuModel};
pub use seq2seq::{load_seq2seq, RefSeq2Seq};

use forward::CpuLayer;
