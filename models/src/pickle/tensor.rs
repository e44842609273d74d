//! A checkpoint's state dict as named tensors: each a dtype, a shape and a slice of the file.
//! Views at an offset into a storage, and several names on one tensor or one storage (tied
//! weights), are read as they are; a tensor whose strides are not those of its shape laid out
//! row-major (a transposed view) is refused by name, since its elements are not one slice.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use super::container::Loaded;
use super::globals::Dtype;
use super::value::{Object, TensorDecl};
use crate::error::{Error, Result};

/// One tensor of a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointTensor {
    pub dtype: Dtype,
    /// Outermost first, as PyTorch gives it.
    pub shape: Vec<usize>,
    /// Its bytes in the file, little-endian.
    pub bytes: Range<usize>,
}

/// The tensors of the dict at the pickle's root, by name. Any other root, a key that is not
/// a string, a value that is not a tensor and a name given twice are errors.
pub(super) fn tensors(path: &Path, loaded: &Loaded) -> Result<BTreeMap<String, CheckpointTensor>> {
    let pickled = &loaded.pickled;
    let bad = |reason: &str| Error::Checkpoint {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let Some(Object::Dict(items)) = pickled.object(pickled.root) else {
        return Err(bad("the pickle holds no dict of tensors (a state dict)"));
    };
    let mut out = BTreeMap::new();
    for &(key, value) in items {
        let name = pickled
            .str(key)
            .ok_or_else(|| bad("a state dict key that is not a string"))?;
        let Some(Object::Tensor(decl)) = pickled.object(value) else {
            return Err(Error::tensor(path, name, "not a tensor"));
        };
        let tensor = tensor(loaded, decl).map_err(|reason| Error::tensor(path, name, reason))?;
        if out.insert(name.to_string(), tensor).is_some() {
            return Err(Error::tensor(path, name, "named twice in the state dict"));
        }
    }
    Ok(out)
}

fn tensor(loaded: &Loaded, decl: &TensorDecl) -> Result<CheckpointTensor, String> {
    let (storage, bytes) = loaded
        .pickled
        .storages
        .get(decl.storage)
        .zip(loaded.storages.get(decl.storage))
        .ok_or("a storage out of range")?;
    let TensorDecl {
        offset,
        size,
        stride,
        ..
    } = decl;
    let shape = size
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| format!("shape {size:?} does not fit in memory"))?;
    let numel = size
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("shape {size:?} has too many elements"))?;
    // Row-major strides, ignoring dimensions of one (torch gives those any stride).
    let mut expected = 1u64;
    for (&d, &s) in size.iter().zip(stride).rev() {
        if d != 1 && s != expected && numel != 0 {
            return Err(format!(
                "strides {stride:?} for shape {size:?} are not contiguous (a transposed or \
                 strided view); only contiguous tensors are read"
            ));
        }
        expected = expected.saturating_mul(d);
    }
    let end = offset
        .checked_add(numel)
        .filter(|&end| end <= storage.numel);
    let Some(end) = end else {
        return Err(format!(
            "elements {offset}..{} overrun storage `{}` of {} elements",
            offset.saturating_add(numel),
            storage.key,
            storage.numel
        ));
    };
    let size_of = storage.dtype.size();
    // Within the storage's bytes, which the container checked against the file.
    let start = bytes.start + (*offset as usize) * size_of;
    let stop = bytes.start + (end as usize) * size_of;
    Ok(CheckpointTensor {
        dtype: storage.dtype,
        shape,
        bytes: start..stop,
    })
}
