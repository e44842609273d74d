//! Tools over the engine: benchmarks of models, serving and kernels (`bench`), and collecting
//! an importance matrix on the CPU reference (`imatrix`).

pub mod bench;
pub mod imatrix;
