//! Parses a GGUF header, metadata and tensor index out of a byte slice.
//!
//! Every count read from the file is checked against the bytes that remain before anything
//! is allocated for it, so a hostile file cannot make the reader allocate more than a small
//! multiple of its own size; every failure names the field it happened in.
//!
//! Tensors in Hearth's private formats are accepted only when the file's `hearth.quant.version`
//! is the layout version this build reads: a file from another Hearth version could hold the
//! same ids with other bytes, and reading those as ours would give garbage weights.

use std::collections::HashMap;
use std::path::Path;

use super::value::{MetaArray, MetaValue, ValueType};
use super::{GgufIndex, Metadata, TensorInfo};
use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;
use hearth_quant::{FORMAT_VERSION, PRIVATE_ID_BASE, VERSION_KEY};

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Deepest array-of-array nesting accepted. Real files never nest; the limit keeps a crafted
/// file from recursing the parser off the stack.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// ggml tensors have at most four dimensions.
pub const MAX_DIMS: u32 = 4;
/// Largest `general.alignment` accepted: ggml uses 32; anything beyond a huge page is nonsense.
const MAX_ALIGNMENT: u64 = 1 << 21;

/// Smallest possible encoding of one metadata entry: key length, type tag, one byte of value.
const MIN_KV_LEN: u64 = 8 + 4 + 1;
/// Smallest possible tensor index entry: name length, n_dims, type, offset.
const MIN_TENSOR_INFO_LEN: u64 = 8 + 4 + 4 + 8;

/// Where parsing failed and why; turned into [`Error::Gguf`] with the file's path.
struct Fail {
    field: String,
    reason: String,
}

type Parse<T> = std::result::Result<T, String>;

/// A bounds-checked little-endian reader over the file's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64) -> Parse<&'a [u8]> {
        if n > self.remaining() {
            return Err(format!(
                "truncated: needs {n} bytes at offset {}, but the file ends at {}",
                self.pos,
                self.bytes.len()
            ));
        }
        // n <= remaining <= usize::MAX, so the casts are exact.
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    fn array<const N: usize>(&mut self) -> Parse<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64)?);
        Ok(out)
    }

    fn u8(&mut self) -> Parse<u8> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Parse<u16> {
        self.array().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Parse<u32> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Parse<u64> {
        self.array().map(u64::from_le_bytes)
    }

    /// A count of items, each at least `min_item_len` bytes long, checked against what is
    /// left of the file so it can size an allocation.
    fn count(&mut self, what: &str, min_item_len: u64) -> Parse<usize> {
        let n = self.u64()?;
        let fits = n
            .checked_mul(min_item_len)
            .is_some_and(|need| need <= self.remaining());
        if !fits {
            return Err(format!(
                "{what} {n} is impossible: {n} items of at least {min_item_len} bytes \
                 do not fit in the {} bytes left in the file (truncated or corrupt)",
                self.remaining()
            ));
        }
        usize::try_from(n).map_err(|_| format!("{what} {n} does not fit in memory"))
    }

    fn string(&mut self) -> Parse<String> {
        let len = self.count("string length", 1)?;
        let bytes = self.take(len as u64)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(format!(
                "string at offset {} is not valid UTF-8 ({e})",
                self.pos - len
            )),
        }
    }

    fn value_type(&mut self) -> Parse<ValueType> {
        let id = self.u32()?;
        ValueType::from_id(id).ok_or_else(|| format!("unknown value type {id}"))
    }

    fn value(&mut self, ty: ValueType, depth: usize) -> Parse<MetaValue> {
        Ok(match ty {
            ValueType::U8 => MetaValue::U8(self.u8()?),
            ValueType::I8 => MetaValue::I8(self.u8()? as i8),
            ValueType::U16 => MetaValue::U16(self.u16()?),
            ValueType::I16 => MetaValue::I16(self.u16()? as i16),
            ValueType::U32 => MetaValue::U32(self.u32()?),
            ValueType::I32 => MetaValue::I32(self.u32()? as i32),
            ValueType::F32 => MetaValue::F32(f32::from_bits(self.u32()?)),
            ValueType::Bool => MetaValue::Bool(self.bool()?),
            ValueType::String => MetaValue::String(self.string()?),
            ValueType::Array => MetaValue::Array(self.meta_array(depth + 1)?),
            ValueType::U64 => MetaValue::U64(self.u64()?),
            ValueType::I64 => MetaValue::I64(self.u64()? as i64),
            ValueType::F64 => MetaValue::F64(f64::from_bits(self.u64()?)),
        })
    }

    fn bool(&mut self) -> Parse<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("bool byte is {b}, not 0 or 1")),
        }
    }

    /// An array (element type, length, elements) at nesting `depth` (1 for a top-level array).
    fn meta_array(&mut self, depth: usize) -> Parse<MetaArray> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(format!(
                "arrays nested deeper than {MAX_ARRAY_DEPTH} levels"
            ));
        }
        let elem = self.value_type()?;
        let n = self.count("array length", elem.min_encoded_len())?;
        // Reads `n` elements with `read`, naming the element index in any error.
        fn collect<T>(n: usize, mut read: impl FnMut() -> Parse<T>) -> Parse<Vec<T>> {
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                out.push(read().map_err(|e| format!("element {i}: {e}"))?);
            }
            Ok(out)
        }
        Ok(match elem {
            ValueType::U8 => MetaArray::U8(self.take(n as u64)?.to_vec()),
            ValueType::I8 => MetaArray::I8(collect(n, || self.u8().map(|v| v as i8))?),
            ValueType::U16 => MetaArray::U16(collect(n, || self.u16())?),
            ValueType::I16 => MetaArray::I16(collect(n, || self.u16().map(|v| v as i16))?),
            ValueType::U32 => MetaArray::U32(collect(n, || self.u32())?),
            ValueType::I32 => MetaArray::I32(collect(n, || self.u32().map(|v| v as i32))?),
            ValueType::F32 => MetaArray::F32(collect(n, || self.u32().map(f32::from_bits))?),
            ValueType::Bool => MetaArray::Bool(collect(n, || self.bool())?),
            ValueType::String => MetaArray::String(collect(n, || self.string())?),
            ValueType::Array => MetaArray::Array(collect(n, || self.meta_array(depth + 1))?),
            ValueType::U64 => MetaArray::U64(collect(n, || self.u64())?),
            ValueType::I64 => MetaArray::I64(collect(n, || self.u64().map(|v| v as i64))?),
            ValueType::F64 => MetaArray::F64(collect(n, || self.u64().map(f64::from_bits))?),
        })
    }
}

/// Parses the header, metadata and tensor index of the GGUF file `bytes` (named `path` in
/// errors), checking every tensor's data lies inside the file.
pub fn parse_index(path: &Path, bytes: &[u8]) -> Result<GgufIndex> {
    parse(bytes).map_err(|f| Error::Gguf {
        path: path.to_path_buf(),
        field: f.field,
        reason: f.reason,
    })
}

fn fail(field: impl Into<String>) -> impl FnOnce(String) -> Fail {
    let field = field.into();
    move |reason| Fail { field, reason }
}

fn parse(bytes: &[u8]) -> std::result::Result<GgufIndex, Fail> {
    let mut c = Cursor { bytes, pos: 0 };

    let magic: [u8; 4] = c.array().map_err(fail("header: magic"))?;
    if magic != MAGIC {
        return Err(Fail {
            field: "header: magic".into(),
            reason: format!("expected \"GGUF\", found {magic:02x?}: not a GGUF file"),
        });
    }
    let version = c.u32().map_err(fail("header: version"))?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(fail("header: version")(
                "GGUF v1 files are not supported (v2 and v3 are)".into(),
            ))
        }
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
            return Err(fail("header: version")(
                "big-endian GGUF files are not supported".into(),
            ))
        }
        v => return Err(fail("header: version")(format!("unknown GGUF version {v}"))),
    }
    let n_tensors = c
        .count("tensor count", MIN_TENSOR_INFO_LEN)
        .map_err(fail("header: tensor count"))?;
    let n_kv = c
        .count("metadata count", MIN_KV_LEN)
        .map_err(fail("header: metadata count"))?;

    let mut entries = Vec::with_capacity(n_kv);
    let mut lookup = HashMap::with_capacity(n_kv);
    for i in 0..n_kv {
        let key = c
            .string()
            .map_err(fail(format!("metadata entry {i}: key")))?;
        let field = format!("metadata `{key}`");
        let ty = c.value_type().map_err(fail(field.clone()))?;
        let value = c.value(ty, 0).map_err(fail(field.clone()))?;
        if lookup.insert(key.clone(), entries.len()).is_some() {
            return Err(fail(field)("key appears more than once".into()));
        }
        entries.push((key, value));
    }
    let metadata = Metadata { entries, lookup };

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => a,
            _ => {
                return Err(fail("metadata `general.alignment`")(format!(
                    "{v} is not a power of two up to {MAX_ALIGNMENT}"
                )))
            }
        },
    };

    let mut tensors = Vec::with_capacity(n_tensors);
    let mut by_name = HashMap::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let name = c
            .string()
            .map_err(fail(format!("tensor entry {i}: name")))?;
        let field = format!("tensor `{name}`");
        let info = tensor_info(&mut c, name, alignment).map_err(fail(field.clone()))?;
        if info.ggml_type.is_private() {
            check_private_type(metadata.get(VERSION_KEY), info.ggml_type)
                .map_err(fail(field.clone()))?;
        }
        if by_name.insert(info.name.clone(), tensors.len()).is_some() {
            return Err(fail(field)("name appears more than once".into()));
        }
        tensors.push(info);
    }

    // Tensor data starts at the next multiple of the alignment after the index.
    let data_offset = (c.pos as u64).next_multiple_of(alignment);
    if data_offset > bytes.len() as u64 && !tensors.is_empty() {
        // Even an empty tensor's data would start past the end.
        return Err(Fail {
            field: "tensor data".into(),
            reason: format!(
                "the data section would start at {data_offset}, past the end of the file ({} \
                 bytes)",
                bytes.len()
            ),
        });
    }
    let data_len = (bytes.len() as u64).saturating_sub(data_offset);
    for t in &tensors {
        // offset and n_bytes are each bounded by u64; their sum may not be.
        let end = t.offset.checked_add(t.n_bytes);
        if end.is_none_or(|end| end > data_len) {
            return Err(Fail {
                field: format!("tensor `{}`", t.name),
                reason: format!(
                    "data [{}, +{}) relative to the data section at {data_offset} runs past \
                     the end of the file ({} bytes)",
                    t.offset,
                    t.n_bytes,
                    bytes.len()
                ),
            });
        }
    }

    check_no_overlap(&tensors)?;

    Ok(GgufIndex {
        version,
        alignment,
        metadata,
        tensors,
        by_name,
        data_offset,
    })
}

/// The rest of one tensor index entry after its name.
fn tensor_info(c: &mut Cursor<'_>, name: String, alignment: u64) -> Parse<TensorInfo> {
    let n_dims = c.u32()?;
    if n_dims > MAX_DIMS {
        return Err(format!("{n_dims} dimensions (at most {MAX_DIMS})"));
    }
    let mut shape = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        shape.push(c.u64()?);
    }
    let type_id = c.u32()?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| {
        if type_id >= PRIVATE_ID_BASE {
            format!(
                "unknown tensor type id {type_id}: in Hearth's private range but not a format \
                 this build knows (written by a newer Hearth?)"
            )
        } else {
            format!("unknown tensor type id {type_id}")
        }
    })?;
    let offset = c.u64()?;

    let n_elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| format!("shape {shape:?} has too many elements"))?;
    let row = shape.first().copied().unwrap_or(1);
    if row % ggml_type.block_size() != 0 {
        return Err(format!(
            "rows of {row} values are not a whole number of {ggml_type} blocks ({} values)",
            ggml_type.block_size()
        ));
    }
    let n_bytes = ggml_type
        .bytes_for(n_elements)
        .ok_or_else(|| format!("shape {shape:?} of {ggml_type} is too large"))?;
    if offset % alignment != 0 {
        return Err(format!(
            "data offset {offset} is not a multiple of the alignment {alignment}"
        ));
    }
    Ok(TensorInfo {
        name,
        ggml_type,
        shape,
        offset,
        n_bytes,
    })
}

/// A tensor of Hearth's private type `ty` is readable only when the file says its layouts are
/// version [`FORMAT_VERSION`]; `version` is the file's `hearth.quant.version` entry.
fn check_private_type(version: Option<&MetaValue>, ty: GgmlType) -> Parse<()> {
    let Some(value) = version else {
        return Err(format!(
            "type {ty} is one of Hearth's own formats, but the file has no `{VERSION_KEY}` \
             saying which version of their layout it holds (this build reads version \
             {FORMAT_VERSION})"
        ));
    };
    match value.as_u64() {
        Some(v) if v == u64::from(FORMAT_VERSION) => Ok(()),
        Some(v) if v > u64::from(FORMAT_VERSION) => Err(format!(
            "type {ty} is stored in Hearth format version {v}, but this build reads version \
             {FORMAT_VERSION}: the file was written by a newer Hearth"
        )),
        Some(v) => Err(format!(
            "type {ty} is stored in Hearth format version {v}, but this build reads version \
             {FORMAT_VERSION}: the file was written by an older Hearth; quantize the original \
             model again"
        )),
        None => Err(format!(
            "type {ty} needs `{VERSION_KEY}` to be a version number, found {} ({value})",
            value.type_description()
        )),
    }
}

/// Tensors must not share bytes. A writer that sized a type differently from this reader (a
/// private format of another layout version, say) lays tensors out at offsets that overlap
/// under our sizes; reading on would hand one tensor another's bytes.
fn check_no_overlap(tensors: &[TensorInfo]) -> std::result::Result<(), Fail> {
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // Both ends were checked to lie inside the file, so the sum does not overflow.
        if a.offset + a.n_bytes > b.offset {
            return Err(Fail {
                field: format!("tensor `{}`", b.name),
                reason: format!(
                    "data at offset {} overlaps tensor `{}` ({} bytes of {} at offset {}): \
                     the file's tensor sizes disagree with this reader's",
                    b.offset, a.name, a.n_bytes, a.ggml_type, a.offset
                ),
            });
        }
    }
    Ok(())
}
