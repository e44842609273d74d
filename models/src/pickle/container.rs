//! The two layouts `torch.save` writes, and where each puts a storage's bytes.
//!
//! - **Zip** (torch 1.6 and later): an archive whose entries sit under one folder named
//!   after the file: `{prefix}/data.pkl` is the pickle, `{prefix}/data/{key}` each storage's
//!   raw little-endian bytes, `{prefix}/byteorder` (when present) says `little`. torch writes
//!   every entry stored, not compressed, so a storage is a slice of the mapped file. A
//!   compressed or encrypted entry is refused rather than inflated into memory. CRCs are not
//!   checked: that would read every weight at open.
//! - **Legacy** (`_use_new_zipfile_serialization=False`): five pickles back to back (a magic
//!   number, the format version 1001, the writer's byte order and type sizes, the object, the
//!   sorted list of storage keys), then each storage in that order as its element count (a
//!   little-endian i64) and its bytes.
//!
//! Either way every storage a persistent id declares must lie wholly inside the file, and no
//! two storages may share bytes.

use std::collections::HashMap;
use std::io::Cursor;
use std::ops::Range;

use zip::{CompressionMethod, ZipArchive};

use super::machine::unpickle;
use super::value::{Object, Pickled, Value};

/// A checkpoint's pickle and the bytes of each storage it declares.
pub(super) struct Loaded {
    pub pickled: Pickled,
    /// Where each of `pickled.storages` lies in the file, in the same order.
    pub storages: Vec<Range<usize>>,
}

/// Reads either layout; an error says what is wrong, and in which entry or pickle.
pub(super) fn load(file: &[u8]) -> Result<Loaded, String> {
    if file.starts_with(b"PK") {
        zip(file)
    } else if file.first() == Some(&0x80) {
        legacy(file)
    } else {
        Err(
            "not a PyTorch checkpoint: neither a zip archive nor a pickle (the tar format of \
             torch before 0.4 is not read)"
                .into(),
        )
    }
}

/// An archive entry's data, as stored.
struct Entry {
    bytes: Range<usize>,
    compression: CompressionMethod,
    encrypted: bool,
}

fn zip(file: &[u8]) -> Result<Loaded, String> {
    let mut archive = ZipArchive::new(Cursor::new(file))
        .map_err(|e| format!("not a readable zip archive: {e}"))?;
    let mut entries = HashMap::new();
    for i in 0..archive.len() {
        let entry = archive
            .by_index_raw(i)
            .map_err(|e| format!("zip entry {i}: {e}"))?;
        let name = entry.name().to_string();
        let start = entry
            .data_start()
            .ok_or_else(|| format!("`{name}`: no data offset"))?;
        let end = start.checked_add(entry.compressed_size());
        let bytes = match end {
            Some(end) if end <= file.len() as u64 => start as usize..end as usize,
            _ => return Err(format!("entry `{name}` runs past the end of the file")),
        };
        let found = Entry {
            bytes,
            compression: entry.compression(),
            encrypted: entry.encrypted(),
        };
        entries.insert(name, found);
    }
    // The pickle names the folder every other record is in.
    let mut pickles = entries
        .keys()
        .filter_map(|n| n.strip_suffix("/data.pkl"))
        .filter(|prefix| !prefix.contains('/'));
    let prefix = match (pickles.next(), pickles.next()) {
        (Some(prefix), None) => prefix.to_string(),
        (None, _) => return Err("a zip archive without a `data.pkl`: not a checkpoint".into()),
        (Some(_), Some(_)) => return Err("a zip archive with more than one `data.pkl`".into()),
    };
    let data = |name: &str| -> Result<Option<&[u8]>, String> {
        let Some(entry) = entries.get(name) else {
            return Ok(None);
        };
        if entry.encrypted {
            return Err(format!("entry `{name}` is encrypted"));
        }
        if entry.compression != CompressionMethod::Stored {
            return Err(format!(
                "entry `{name}` is compressed ({}); torch.save stores entries uncompressed, \
                 and only those are read",
                entry.compression
            ));
        }
        Ok(file.get(entry.bytes.clone()))
    };
    if let Some(order) = data(&format!("{prefix}/byteorder"))? {
        if order != b"little" {
            let order = String::from_utf8_lossy(order);
            return Err(format!("byte order `{order}`: only little-endian is read"));
        }
    }
    let pkl = format!("{prefix}/data.pkl");
    let pickle = data(&pkl)?.unwrap_or_default();
    let pickled = unpickle(pickle).map_err(|e| format!("{pkl}, {e}"))?;
    let mut storages = Vec::with_capacity(pickled.storages.len());
    for decl in &pickled.storages {
        let name = format!("{prefix}/data/{}", decl.key);
        if data(&name)?.is_none() {
            return Err(format!("storage `{}` has no entry `{name}`", decl.key));
        }
        let entry = entries.get(&name).map_or(0..0, |e| e.bytes.clone());
        let len = byte_len(decl.numel, decl.dtype.size())
            .filter(|&len| len <= entry.len())
            .ok_or_else(|| {
                format!(
                    "storage `{}` declares {} {} elements, more than its entry's {} bytes",
                    decl.key,
                    decl.numel,
                    decl.dtype.name(),
                    entry.len()
                )
            })?;
        storages.push(entry.start..entry.start + len);
    }
    disjoint(&pickled, &storages)?;
    Ok(Loaded { pickled, storages })
}

/// The legacy format's magic number, 0x1950a86a20f9469cfc6c, as LONG1 writes it.
const MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
const LEGACY_VERSION: i64 = 1001;

fn legacy(file: &[u8]) -> Result<Loaded, String> {
    let mut pos = 0;
    let mut next = |what: &str| -> Result<Pickled, String> {
        let rest = file.get(pos..).unwrap_or_default();
        let pickled = unpickle(rest).map_err(|e| format!("{what} at byte {pos}, {e}"))?;
        pos += pickled.end;
        Ok(pickled)
    };
    let magic = next("the magic number's pickle")?;
    if !matches!(magic.object(magic.root), Some(Object::BigInt(b)) if *b == MAGIC) {
        return Err("a pickle, but not a PyTorch checkpoint (no magic number)".into());
    }
    let version = next("the format version's pickle")?;
    if version.root != Value::Int(LEGACY_VERSION) {
        return Err(format!(
            "legacy format version {:?} (1001 is read)",
            version.root
        ));
    }
    let sys_info = next("the system information's pickle")?;
    if let Some(Object::Dict(items)) = sys_info.object(sys_info.root) {
        let little = items
            .iter()
            .find(|(k, _)| sys_info.str(*k) == Some("little_endian"));
        if little.is_some_and(|(_, v)| *v == Value::Bool(false)) {
            return Err("written on a big-endian machine: only little-endian is read".into());
        }
    }
    let pickled = next("the checkpoint's pickle")?;
    let keys = next("the storage keys' pickle")?;
    let Some(Object::List(listed)) = keys.object(keys.root) else {
        return Err("the storage keys' pickle is not a list".into());
    };
    let declared: HashMap<&str, usize> = pickled
        .storages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.key.as_str(), i))
        .collect();
    let mut storages: Vec<Option<Range<usize>>> = vec![None; pickled.storages.len()];
    for &key in listed {
        let key = keys.str(key).ok_or("a storage key that is not a string")?;
        let (i, decl) = declared
            .get(key)
            .and_then(|&i| Some((i, pickled.storages.get(i)?)))
            .ok_or_else(|| format!("storage `{key}` is stored, but no tensor declares it"))?;
        let count = file
            .get(pos..pos + 8)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_le_bytes)
            .ok_or_else(|| format!("truncated: storage `{key}` has no length"))?;
        if u64::try_from(count) != Ok(decl.numel) {
            return Err(format!(
                "storage `{key}` is stored with {count} elements but declared with {}",
                decl.numel
            ));
        }
        let start = pos + 8;
        let end = byte_len(decl.numel, decl.dtype.size())
            .and_then(|len| start.checked_add(len))
            .filter(|&end| end <= file.len())
            .ok_or_else(|| format!("truncated: storage `{key}` runs past the end of the file"))?;
        let slot = storages.get_mut(i).ok_or("a storage out of range")?;
        if slot.replace(start..end).is_some() {
            return Err(format!("storage `{key}` is stored twice"));
        }
        pos = end;
    }
    let storages = storages
        .into_iter()
        .zip(&pickled.storages)
        .map(|(range, decl)| {
            range.ok_or_else(|| format!("storage `{}` is declared but not stored", decl.key))
        })
        .collect::<Result<Vec<_>, _>>()?;
    disjoint(&pickled, &storages)?;
    Ok(Loaded { pickled, storages })
}

/// `numel` elements of `size` bytes, where that fits in memory's addresses.
fn byte_len(numel: u64, size: usize) -> Option<usize> {
    usize::try_from(numel).ok()?.checked_mul(size)
}

/// Distinct storages never share bytes: each is its own allocation in torch, so bytes that two
/// storages claim would make the file say two things about one weight.
fn disjoint(pickled: &Pickled, storages: &[Range<usize>]) -> Result<(), String> {
    let mut spans: Vec<(&Range<usize>, &str)> = storages
        .iter()
        .zip(&pickled.storages)
        .filter(|(range, _)| !range.is_empty())
        .map(|(range, decl)| (range, decl.key.as_str()))
        .collect();
    spans.sort_by_key(|(range, _)| range.start);
    for pair in spans.windows(2) {
        if let [(a, a_key), (b, b_key)] = pair {
            if b.start < a.end {
                return Err(format!(
                    "storages `{a_key}` and `{b_key}` share bytes of the file"
                ));
            }
        }
    }
    Ok(())
}
