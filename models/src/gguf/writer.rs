//! Writes GGUF v3 (or v2) files: header, metadata, tensor index, aligned tensor data.
//!
//! The layout matches llama.cpp's writer (tensors in insertion order, each padded to the
//! alignment with zeros), so reading a file and writing it back reproduces it byte for byte.
//! [`GgufWriter::write_atomic`] writes a temporary file beside the target and renames it into
//! place, so a failed or interrupted write never leaves a half-written model behind.

use std::borrow::Cow;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::reader::{DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS};
use super::value::{MetaArray, MetaValue};
use super::{GgufFile, Metadata};
use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;

/// A tensor waiting to be written; its data is borrowed when it comes from an open file.
struct PendingTensor<'a> {
    name: String,
    ggml_type: GgmlType,
    shape: Vec<u64>,
    data: Cow<'a, [u8]>,
}

/// Builds a GGUF file in memory order: set metadata, add tensors, then write.
pub struct GgufWriter<'a> {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor<'a>>,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// Path used in errors about a file that exists only in the writer so far.
const UNWRITTEN: &str = "<new GGUF file>";

impl<'a> GgufWriter<'a> {
    /// An empty GGUF v3 file.
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            metadata: Metadata::default(),
            tensors: Vec::new(),
        }
    }

    /// A writer holding everything `file` holds (version, metadata in order, tensors in order,
    /// data borrowed from the mapping), ready to be modified or written back.
    pub fn from_file(file: &'a GgufFile) -> Result<Self> {
        let mut w = GgufWriter {
            version: file.version(),
            metadata: file.metadata().clone(),
            tensors: Vec::with_capacity(file.tensors().len()),
        };
        for t in file.tensors() {
            w.add_tensor(&t.name, t.ggml_type, &t.shape, file.tensor_data(t)?)?;
        }
        Ok(w)
    }

    /// GGUF version to write: 2 or 3 (identical little-endian layouts).
    pub fn set_version(&mut self, version: u32) -> Result<()> {
        if !(2..=3).contains(&version) {
            return Err(Error::Gguf {
                path: UNWRITTEN.into(),
                field: "header: version".into(),
                reason: format!("cannot write GGUF version {version} (only 2 and 3)"),
            });
        }
        self.version = version;
        Ok(())
    }

    /// Sets a metadata key; an existing key keeps its position.
    pub fn set_metadata(&mut self, key: impl Into<String>, value: MetaValue) {
        self.metadata.insert(key.into(), value);
    }

    /// Removes a metadata key; returns its value if it was set.
    pub fn remove_metadata(&mut self, key: &str) -> Option<MetaValue> {
        self.metadata.remove(key)
    }

    /// Sets `general.alignment` (must be a power of two).
    pub fn set_alignment(&mut self, alignment: u32) {
        self.set_metadata("general.alignment", MetaValue::U32(alignment));
    }

    /// Adds a tensor; `data` must hold exactly the bytes its type and shape need.
    ///
    /// A tensor in one of Hearth's private formats is readable only when the file also sets
    /// `hearth.quant.version` (`hearth_quant::VERSION_KEY`) to the layout version its bytes
    /// follow; the writer leaves that to the caller, so tests can build files without it.
    pub fn add_tensor(
        &mut self,
        name: &str,
        ggml_type: GgmlType,
        shape: &[u64],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<()> {
        let data = data.into();
        let bad = |reason: String| Error::tensor(Path::new(UNWRITTEN), name, reason);
        if shape.len() > MAX_DIMS as usize {
            return Err(bad(format!(
                "{} dimensions (at most {MAX_DIMS})",
                shape.len()
            )));
        }
        let expected = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|_| shape.first().copied().unwrap_or(1) % ggml_type.block_size() == 0)
            .and_then(|n| ggml_type.bytes_for(n))
            .ok_or_else(|| bad(format!("shape {shape:?} does not fit {ggml_type} blocks")))?;
        if data.len() as u64 != expected {
            return Err(bad(format!(
                "{} bytes of data, but {shape:?} of {ggml_type} takes {expected}",
                data.len()
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(bad("added twice".into()));
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            ggml_type,
            shape: shape.to_vec(),
            data,
        });
        Ok(())
    }

    /// The alignment the file will use.
    fn alignment(&self) -> io::Result<u64> {
        match self.metadata.get("general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(v) => v.as_u64().filter(|a| a.is_power_of_two()).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("general.alignment {v} is not a power of two"),
                )
            }),
        }
    }

    /// Writes the whole file to `w`.
    pub fn write_to(&self, w: &mut dyn Write) -> io::Result<()> {
        let alignment = self.alignment()?;
        let mut out = Counting {
            inner: w,
            written: 0,
        };
        out.write_all(&MAGIC)?;
        out.write_all(&self.version.to_le_bytes())?;
        out.write_all(&(self.tensors.len() as u64).to_le_bytes())?;
        out.write_all(&(self.metadata.len() as u64).to_le_bytes())?;
        for (key, value) in self.metadata.iter() {
            write_string(&mut out, key)?;
            out.write_all(&(value.value_type() as u32).to_le_bytes())?;
            write_value(&mut out, value)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            write_string(&mut out, &t.name)?;
            out.write_all(&(t.shape.len() as u32).to_le_bytes())?;
            for d in &t.shape {
                out.write_all(&d.to_le_bytes())?;
            }
            out.write_all(&t.ggml_type.id().to_le_bytes())?;
            out.write_all(&offset.to_le_bytes())?;
            offset += (t.data.len() as u64).next_multiple_of(alignment);
        }
        out.pad_to(alignment)?;
        for t in &self.tensors {
            out.write_all(&t.data)?;
            out.pad_to(alignment)?;
        }
        out.flush()
    }

    /// The whole file as bytes.
    pub fn to_bytes(&self) -> io::Result<Vec<u8>> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }

    /// Writes the file to `path` atomically: into a temporary file in the same directory,
    /// synced, then renamed over `path`. On failure the temporary file is removed and `path`
    /// is untouched.
    pub fn write_atomic(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let tmp = temp_path_for(path);
        let result = (|| {
            let file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            let mut buf = BufWriter::new(file);
            self.write_to(&mut buf)?;
            let file: File = buf.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            fs::rename(&tmp, path)
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(Error::io(path, e));
        }
        Ok(())
    }
}

/// `dir/.name.tmp-<pid>`: same directory so the rename stays on one filesystem; the pid
/// keeps two processes writing the same model from colliding.
fn temp_path_for(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "gguf".into());
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// A writer that knows how many bytes went through it, for padding.
struct Counting<'w> {
    inner: &'w mut dyn Write,
    written: u64,
}

impl Counting<'_> {
    fn pad_to(&mut self, alignment: u64) -> io::Result<()> {
        const ZEROS: [u8; 64] = [0; 64];
        let mut pad = self.written.next_multiple_of(alignment) - self.written;
        while pad > 0 {
            let n = pad.min(ZEROS.len() as u64);
            self.write_all(&ZEROS[..n as usize])?;
            pad -= n;
        }
        Ok(())
    }
}

impl Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn write_string(w: &mut dyn Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_value(w: &mut dyn Write, value: &MetaValue) -> io::Result<()> {
    match value {
        MetaValue::U8(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::I8(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::U16(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::I16(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::U32(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::I32(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::F32(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::Bool(v) => w.write_all(&[u8::from(*v)]),
        MetaValue::String(s) => write_string(w, s),
        MetaValue::Array(a) => write_array(w, a),
        MetaValue::U64(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::I64(v) => w.write_all(&v.to_le_bytes()),
        MetaValue::F64(v) => w.write_all(&v.to_le_bytes()),
    }
}

fn write_array(w: &mut dyn Write, a: &MetaArray) -> io::Result<()> {
    w.write_all(&(a.elem_type() as u32).to_le_bytes())?;
    w.write_all(&(a.len() as u64).to_le_bytes())?;
    fn each<T: Copy, const N: usize>(
        w: &mut dyn Write,
        v: &[T],
        to_bytes: impl Fn(T) -> [u8; N],
    ) -> io::Result<()> {
        v.iter().try_for_each(|&x| w.write_all(&to_bytes(x)))
    }
    match a {
        MetaArray::U8(v) => w.write_all(v),
        MetaArray::I8(v) => each(w, v, |x| x.to_le_bytes()),
        MetaArray::U16(v) => each(w, v, |x| x.to_le_bytes()),
        MetaArray::I16(v) => each(w, v, |x| x.to_le_bytes()),
        MetaArray::U32(v) => each(w, v, |x| x.to_le_bytes()),
        MetaArray::I32(v) => each(w, v, |x| x.to_le_bytes()),
        MetaArray::F32(v) => each(w, v, |x| x.to_le_bytes()),
        MetaArray::Bool(v) => each(w, v, |x| [u8::from(x)]),
        MetaArray::String(v) => v.iter().try_for_each(|s| write_string(w, s)),
        MetaArray::Array(v) => v.iter().try_for_each(|inner| write_array(w, inner)),
        MetaArray::U64(v) => each(w, v, |x| x.to_le_bytes()),
        MetaArray::I64(v) => each(w, v, |x| x.to_le_bytes()),
        MetaArray::F64(v) => each(w, v, |x| x.to_le_bytes()),
    }
}
