//! GGUF model files (versions 2 and 3): metadata, tensor index, zero-copy tensor data.
//!
//! [`GgufFile::open`] maps the file with memmap2 and parses its index; tensor data is never
//! copied, [`GgufFile::tensor_data`] hands out slices of the mapping. [`GgufWriter`] writes
//! files (atomically) for conversion tools and for tests that need small or broken files.

mod reader;
mod value;
mod writer;

use std::collections::HashMap;
use std::fs::File;
use std::ops::Deref;
use std::path::{Path, PathBuf};

pub use reader::{parse_index, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS};
pub use value::{FromMeta, MetaArray, MetaValue, ValueType};
pub use writer::GgufWriter;

use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;

/// Metadata entries in file order, with lookup by key.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, MetaValue)>,
    lookup: HashMap<String, usize>,
}

impl Metadata {
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.lookup.get(key).map(|&i| &self.entries[i].1)
    }

    /// Entries in the order the file stores them.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets `key`, keeping its position when it already exists.
    pub(crate) fn insert(&mut self, key: String, value: MetaValue) {
        match self.lookup.get(&key) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.lookup.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
            }
        }
    }

    /// Removes `key`, keeping the other entries in order; returns its value if it was there.
    pub(crate) fn remove(&mut self, key: &str) -> Option<MetaValue> {
        let i = self.lookup.remove(key)?;
        let (_, value) = self.entries.remove(i);
        for j in self.lookup.values_mut() {
            if *j > i {
                *j -= 1;
            }
        }
        Some(value)
    }
}

/// One tensor index entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub ggml_type: GgmlType,
    /// Dimensions in ggml order: `shape[0]` is the contiguous one (a row), so a weight
    /// matrix applied as `y = W x` with `x` of width `n_in` has shape `[n_in, n_out]`.
    pub shape: Vec<u64>,
    /// Byte offset of the data from the start of the data section.
    pub offset: u64,
    /// Bytes of data.
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        // The reader checked the product fits.
        self.shape.iter().product()
    }
}

/// What a GGUF file says about itself, parsed from its first bytes.
#[derive(Clone, Debug)]
pub struct GgufIndex {
    pub version: u32,
    /// Alignment of tensor data (`general.alignment`, default 32).
    pub alignment: u64,
    pub metadata: Metadata,
    /// Tensors in file order.
    pub tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    /// Absolute file offset where tensor data starts.
    pub data_offset: u64,
}

impl GgufIndex {
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }
}

/// The bytes of a file: mapped from disk, or owned (for files built in memory).
enum Storage {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Deref for Storage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// An open GGUF file: its index plus zero-copy access to tensor data.
pub struct GgufFile {
    path: PathBuf,
    bytes: Storage,
    index: GgufIndex,
}

/// A tensor's index entry together with its bytes.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub info: &'a TensorInfo,
    /// `info.n_bytes` bytes, aligned in memory to the file's alignment (the mapping starts on
    /// a page boundary and tensor offsets are multiples of the alignment).
    pub data: &'a [u8],
}

impl GgufFile {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let bytes = if len == 0 {
            // An empty mapping is an error on some platforms; an empty file is just truncated.
            Storage::Owned(Vec::new())
        } else {
            #[allow(unsafe_code)]
            // SAFETY: the mapping is read-only and private to this process. Another process
            // truncating or rewriting the file while it is mapped would change the bytes under
            // us (or raise SIGBUS); that is the accepted contract of memory-mapping model files,
            // and writers in this crate replace files by rename instead of rewriting them.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
            Storage::Mapped(map)
        };
        let index = parse_index(path, &bytes)?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            bytes,
            index,
        })
    }

    /// Parses a file held in memory; `name` is used in error messages.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self> {
        let path = name.into();
        let index = parse_index(&path, &bytes)?;
        Ok(GgufFile {
            path,
            bytes: Storage::Owned(bytes),
            index,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn index(&self) -> &GgufIndex {
        &self.index
    }

    pub fn version(&self) -> u32 {
        self.index.version
    }

    pub fn alignment(&self) -> u64 {
        self.index.alignment
    }

    pub fn metadata(&self) -> &Metadata {
        &self.index.metadata
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.index.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.tensor(name)
    }

    /// Size of the whole file in bytes.
    pub fn file_size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The data of tensor `info` (an entry of this file's index).
    pub fn tensor_data(&self, info: &TensorInfo) -> Result<&[u8]> {
        let range = self
            .index
            .data_offset
            .checked_add(info.offset)
            .and_then(|start| Some(start..start.checked_add(info.n_bytes)?))
            .and_then(|r| Some(usize::try_from(r.start).ok()?..usize::try_from(r.end).ok()?));
        range
            .and_then(|r| self.bytes.get(r))
            .ok_or_else(|| Error::tensor(&self.path, &info.name, "data lies outside the file"))
    }

    /// The named tensor's index entry and data.
    pub fn tensor_view(&self, name: &str) -> Result<TensorView<'_>> {
        let info = self
            .tensor(name)
            .ok_or_else(|| Error::tensor(&self.path, name, "not in the file"))?;
        Ok(TensorView {
            info,
            data: self.tensor_data(info)?,
        })
    }

    /// The value of `key` converted to `T`, `None` when absent; an error names the key when
    /// the stored type does not convert.
    pub fn get<'a, T: FromMeta<'a>>(&'a self, key: &str) -> Result<Option<T>> {
        match self.metadata().get(key) {
            None => Ok(None),
            Some(v) => T::from_meta(v).map(Some).ok_or_else(|| {
                Error::metadata(
                    &self.path,
                    key,
                    format!(
                        "expected {}, found {} ({v})",
                        T::EXPECTED,
                        v.type_description()
                    ),
                )
            }),
        }
    }

    /// Like [`get`](Self::get), but a missing key is an error too.
    pub fn require<'a, T: FromMeta<'a>>(&'a self, key: &str) -> Result<T> {
        self.get(key)?
            .ok_or_else(|| Error::metadata(&self.path, key, "missing"))
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.require("general.architecture")
    }
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.index.version)
            .field("metadata", &self.index.metadata.len())
            .field("tensors", &self.index.tensors.len())
            .finish()
    }
}
