//! Hugging Face weights in a model directory: one `model.safetensors`, or the shards that
//! `model.safetensors.index.json` lists; where neither is present, PyTorch checkpoints in the
//! same arrangement (`pytorch_model.bin`, or `pytorch_model.bin.index.json` and its shards),
//! as transformers prefers safetensors when a folder has both. Each file is memory-mapped and
//! read by its own reader (the `safetensors` crate's header parser, or [`crate::pickle`]);
//! either way a tensor is its dtype, its shape and a slice of the mapped bytes, so what
//! converts the folder never knows which kind of file it came from.

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::pickle::{self, Dtype as PickleDtype};

/// The single-file name, and the index of a sharded model.
pub const SINGLE: &str = "model.safetensors";
pub const INDEX: &str = "model.safetensors.index.json";

/// Whether `dir` holds weights [`SafetensorsWeights::open`] reads: safetensors or PyTorch
/// checkpoints, one file or an index.
pub fn has_weights(dir: &Path) -> bool {
    [SINGLE, INDEX, pickle::SINGLE, pickle::INDEX]
        .iter()
        .any(|name| dir.join(name).is_file())
}

/// The kind of file a folder's weights are in.
#[derive(Clone, Copy)]
enum Format {
    Safetensors,
    Pickle,
}

impl Format {
    /// Safetensors where the folder has them, else PyTorch checkpoints where it has those.
    fn of(dir: &Path) -> Format {
        let has = |name: &str| dir.join(name).is_file();
        if !has(SINGLE) && !has(INDEX) && (has(pickle::SINGLE) || has(pickle::INDEX)) {
            Format::Pickle
        } else {
            Format::Safetensors
        }
    }

    /// The single file's name and the index's.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Format::Safetensors => (SINGLE, INDEX),
            Format::Pickle => (pickle::SINGLE, pickle::INDEX),
        }
    }
}

/// A tensor's element type, as far as Hearth reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Element {
    F32,
    F16,
    BF16,
    /// Any other dtype, by its safetensors name (loading such a tensor is an error that names
    /// it).
    Other(String),
}

impl Element {
    fn of(dtype: Dtype) -> Self {
        match dtype {
            Dtype::F32 => Element::F32,
            Dtype::F16 => Element::F16,
            Dtype::BF16 => Element::BF16,
            other => Element::Other(format!("{other:?}")),
        }
    }

    fn of_pickle(dtype: PickleDtype) -> Self {
        match dtype {
            PickleDtype::F32 => Element::F32,
            PickleDtype::F16 => Element::F16,
            PickleDtype::BF16 => Element::BF16,
            other => Element::Other(other.name().to_string()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Element::F32 => "F32",
            Element::F16 => "F16",
            Element::BF16 => "BF16",
            Element::Other(name) => name,
        }
    }
}

/// One tensor: where it lives and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafeTensorInfo {
    pub element: Element,
    /// As PyTorch writes it: outermost first ([rows, cols] for a weight matrix).
    pub shape: Vec<usize>,
    shard: usize,
    bytes: Range<usize>,
}

/// A model directory's weights, memory-mapped: safetensors, or PyTorch checkpoints where the
/// folder has no safetensors.
pub struct SafetensorsWeights {
    shards: Vec<(PathBuf, Mmap)>,
    tensors: BTreeMap<String, SafeTensorInfo>,
}

#[derive(Deserialize)]
struct Index {
    weight_map: BTreeMap<String, String>,
}

impl SafetensorsWeights {
    /// Opens `dir`'s weights: the shards its index lists, else the single file (safetensors
    /// first, then PyTorch checkpoints). A shard that the index names but the directory lacks,
    /// a tensor the index places in a shard that does not hold it, and a file that is not what
    /// its name says are errors naming the file.
    pub fn open(dir: &Path) -> Result<Self> {
        let format = Format::of(dir);
        let (single, index_name) = format.names();
        let index_path = dir.join(index_name);
        let (files, placed) = if index_path.is_file() {
            let text = std::fs::read(&index_path).map_err(|e| Error::io(&index_path, e))?;
            let index: Index = serde_json::from_slice(&text)
                .map_err(|e| safetensors_error(&index_path, format!("not an index: {e}")))?;
            let mut files: Vec<String> = index.weight_map.values().cloned().collect();
            files.sort();
            files.dedup();
            (files, Some(index.weight_map))
        } else {
            (vec![single.to_string()], None)
        };
        let mut shards = Vec::with_capacity(files.len());
        let mut tensors = BTreeMap::new();
        for (i, name) in files.iter().enumerate() {
            // An index names files beside it, never a path out of the folder.
            if Path::new(name).file_name() != Some(name.as_ref()) {
                let reason = format!("shard `{name}` is not a file name in the folder");
                return Err(safetensors_error(&index_path, reason));
            }
            let path = dir.join(name);
            if !path.is_file() {
                let reason = match &placed {
                    Some(_) => format!("shard `{name}`, which {index_name} lists, is missing"),
                    None => format!(
                        "no weights: neither {SINGLE} nor {INDEX} is here (nor {} or {})",
                        pickle::SINGLE,
                        pickle::INDEX
                    ),
                };
                return Err(safetensors_error(dir, reason));
            }
            let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
            #[allow(unsafe_code)]
            // SAFETY: the map is read-only and lives as long as `self`; a file changed under
            // it by another process shows up as wrong values, not as memory unsafety here.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
            let found = match format {
                Format::Safetensors => safetensors_tensors(&path, &map, i)?,
                Format::Pickle => pickle_tensors(&path, &map, i)?,
            };
            for (tensor, info) in found {
                if tensors.insert(tensor.clone(), info).is_some() {
                    return Err(safetensors_error(
                        &path,
                        format!("tensor `{tensor}` is in more than one shard"),
                    ));
                }
            }
            shards.push((path, map));
        }
        if let Some(placed) = placed {
            for (tensor, file) in placed {
                let held = tensors.get(&tensor).map(|t| &shards[t.shard].0);
                if held.is_none_or(|p| p.file_name() != Some(file.as_ref())) {
                    return Err(safetensors_error(
                        &index_path,
                        format!("tensor `{tensor}` is listed in `{file}`, which does not hold it"),
                    ));
                }
            }
        }
        Ok(Self { shards, tensors })
    }

    /// Every tensor by name, in name order.
    pub fn tensors(&self) -> impl Iterator<Item = (&str, &SafeTensorInfo)> {
        self.tensors.iter().map(|(n, t)| (n.as_str(), t))
    }

    pub fn tensor(&self, name: &str) -> Option<&SafeTensorInfo> {
        self.tensors.get(name)
    }

    /// The tensor's bytes, little-endian as stored.
    pub fn bytes(&self, info: &SafeTensorInfo) -> &[u8] {
        &self.shards[info.shard].1[info.bytes.clone()]
    }

    /// The file that holds the tensor.
    pub fn file_of(&self, info: &SafeTensorInfo) -> &Path {
        &self.shards[info.shard].0
    }

    /// The files, in the order of their names.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|(p, _)| p.as_path())
    }
}

/// The tensors of the safetensors file `map`, shard `shard` of the folder.
fn safetensors_tensors(
    path: &Path,
    map: &[u8],
    shard: usize,
) -> Result<Vec<(String, SafeTensorInfo)>> {
    let parsed = SafeTensors::deserialize(map)
        .map_err(|e| safetensors_error(path, format!("not a safetensors file: {e}")))?;
    let base = map.as_ptr() as usize;
    let tensors = parsed.tensors().into_iter().map(|(tensor, view)| {
        let start = view.data().as_ptr() as usize - base;
        let info = SafeTensorInfo {
            element: Element::of(view.dtype()),
            shape: view.shape().to_vec(),
            shard,
            bytes: start..start + view.data().len(),
        };
        (tensor, info)
    });
    Ok(tensors.collect())
}

/// The tensors of the PyTorch checkpoint `map`, shard `shard` of the folder.
fn pickle_tensors(path: &Path, map: &[u8], shard: usize) -> Result<Vec<(String, SafeTensorInfo)>> {
    let tensors = pickle::read_checkpoint(path, map)?;
    let tensors = tensors.into_iter().map(|(name, t)| {
        let info = SafeTensorInfo {
            element: Element::of_pickle(t.dtype),
            shape: t.shape,
            shard,
            bytes: t.bytes,
        };
        (name, info)
    });
    Ok(tensors.collect())
}

fn safetensors_error(path: &Path, reason: String) -> Error {
    Error::Safetensors {
        path: path.to_path_buf(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file of `tensors` (name, dtype, shape, bytes), written by the crate.
    fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
            .iter()
            .map(|(n, d, s, b)| {
                let view = safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap();
                (n.to_string(), view)
            })
            .collect();
        safetensors::serialize_to_file(views, &None, path).unwrap();
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hearth-st-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn one_file_maps_every_tensor() {
        let d = dir("single");
        let w = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let h = vec![0u8, 0x3c, 0, 0x40]; // f16 1.0, 2.0
        write(
            &d.join(SINGLE),
            &[
                ("a.weight", Dtype::F32, vec![2, 3], w.clone()),
                ("b", Dtype::F16, vec![2], h.clone()),
            ],
        );
        let st = SafetensorsWeights::open(&d).unwrap();
        let names: Vec<&str> = st.tensors().map(|(n, _)| n).collect();
        assert_eq!(names, ["a.weight", "b"]);
        let a = st.tensor("a.weight").unwrap();
        assert_eq!(
            (a.element.clone(), a.shape.clone()),
            (Element::F32, vec![2, 3])
        );
        assert_eq!(st.bytes(a), &w[..]);
        assert_eq!(st.bytes(st.tensor("b").unwrap()), &h[..]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn sharded(name: &str) -> PathBuf {
        let d = dir(name);
        write(
            &d.join("model-00001-of-00002.safetensors"),
            &[("x", Dtype::F32, vec![1], f32_bytes(&[1.0]))],
        );
        write(
            &d.join("model-00002-of-00002.safetensors"),
            &[("y", Dtype::BF16, vec![1], vec![0x80, 0x3f])],
        );
        let index = r#"{"metadata": {}, "weight_map": {
            "x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}}"#;
        std::fs::write(d.join(INDEX), index).unwrap();
        d
    }

    #[test]
    fn shards_come_together_through_the_index() {
        let d = sharded("shards");
        let st = SafetensorsWeights::open(&d).unwrap();
        let y = st.tensor("y").unwrap();
        assert_eq!(y.element, Element::BF16);
        assert_eq!(st.bytes(y), &[0x80, 0x3f]);
        assert!(st.file_of(y).ends_with("model-00002-of-00002.safetensors"));
        assert_eq!(st.files().count(), 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_shard_a_misplaced_tensor_and_a_bad_file_are_named() {
        let d = sharded("missing");
        std::fs::remove_file(d.join("model-00002-of-00002.safetensors")).unwrap();
        let err = SafetensorsWeights::open(&d).err().unwrap().to_string();
        assert!(
            err.contains("model-00002-of-00002.safetensors") && err.contains("missing"),
            "{err}"
        );
        std::fs::remove_dir_all(&d).unwrap();

        let d = sharded("misplaced");
        let index = r#"{"weight_map": {"x": "model-00002-of-00002.safetensors",
            "y": "model-00002-of-00002.safetensors"}}"#;
        std::fs::write(d.join(INDEX), index).unwrap();
        let err = SafetensorsWeights::open(&d).err().unwrap().to_string();
        assert!(err.contains("tensor `x`") && err.contains(INDEX), "{err}");
        std::fs::remove_dir_all(&d).unwrap();

        let d = dir("bad");
        std::fs::write(d.join(SINGLE), b"\x10\0\0\0\0\0\0\0{not json at all").unwrap();
        let err = SafetensorsWeights::open(&d).err().unwrap().to_string();
        assert!(
            err.contains(SINGLE) && err.contains("not a safetensors file"),
            "{err}"
        );
        std::fs::write(d.join(SINGLE), b"\x05").unwrap();
        let err = SafetensorsWeights::open(&d).err().unwrap().to_string();
        assert!(err.contains("not a safetensors file"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
