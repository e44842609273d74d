//! PyTorch checkpoints (`pytorch_model.bin` and its shards) read as data, never run.
//!
//! A checkpoint is a pickle, which Python would execute: any global it names is imported and
//! called. Here a pickle is interpreted by a machine that knows only the opcodes `torch.save`
//! writes and an allow-list of globals (`collections.OrderedDict`, torch's tensor and
//! parameter rebuilders, the storage classes), each of which builds a description instead of
//! running anything; every other global is refused by its dotted name. Storages are never
//! allocated: a tensor is a slice of the memory-mapped file, checked to lie inside its storage
//! and the storage inside the file.
//!
//! - `opcodes`: the opcodes and their names;
//! - `globals`: the allow-list and the storage classes' element types;
//! - `value`: what a pickle builds, objects in an arena;
//! - `machine`: the interpreter, bounded in stack, nesting, memo and objects;
//! - `container`: the zip layout (torch 1.6 and later) and the legacy one;
//! - `tensor`: the state dict as named tensors.

mod container;
mod globals;
mod machine;
mod opcodes;
mod tensor;
mod value;

use std::collections::BTreeMap;
use std::path::Path;

pub use globals::Dtype;
pub use tensor::CheckpointTensor;

use crate::error::{Error, Result};

/// The single-file name, and the index of a sharded checkpoint.
pub const SINGLE: &str = "pytorch_model.bin";
pub const INDEX: &str = "pytorch_model.bin.index.json";

/// The tensors of the checkpoint whose bytes are `file` (the file at `path`, named in errors),
/// by name.
pub fn read_checkpoint(path: &Path, file: &[u8]) -> Result<BTreeMap<String, CheckpointTensor>> {
    let loaded = container::load(file).map_err(|reason| Error::Checkpoint {
        path: path.to_path_buf(),
        reason,
    })?;
    tensor::tensors(path, &loaded)
}
