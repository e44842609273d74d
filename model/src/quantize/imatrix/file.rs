//! llama.cpp's importance matrix files. The current form is a GGUF file with
//! `general.type = "imatrix"`, the metadata `imatrix.datasets` (strings),
//! `imatrix.chunk_count` and `imatrix.chunk_size` (u32), and per matrix two F32 tensors,
//! `<name>.in_sum2` (the sums of squares, [columns, 1]) and `<name>.counts` (the tokens
//! summed, [1, 1]). The older binary form is read too.

use std::collections::BTreeMap;
use std::path::Path;

use hearth_models::{GgmlType, GgufFile, GgufWriter, MetaArray, MetaValue};

use super::ImportanceMatrix;
use crate::activations::SquareSums;
use crate::error::{Error, Result};

const SUMS: &str = ".in_sum2";
const COUNTS: &str = ".counts";

impl ImportanceMatrix {
    /// Writes the GGUF form, atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut w = GgufWriter::new();
        w.set_metadata("general.type", MetaValue::String("imatrix".into()));
        w.set_metadata(
            "imatrix.datasets",
            MetaValue::Array(MetaArray::String(self.datasets.clone())),
        );
        w.set_metadata("imatrix.chunk_count", MetaValue::U32(self.chunk_count));
        w.set_metadata("imatrix.chunk_size", MetaValue::U32(self.chunk_size));
        for (name, e) in &self.entries {
            let sums: Vec<u8> = e
                .sums
                .iter()
                .flat_map(|&s| (s as f32).to_le_bytes())
                .collect();
            let count = (e.tokens as f32).to_le_bytes().to_vec();
            w.add_tensor(
                &format!("{name}{SUMS}"),
                GgmlType::F32,
                &[e.sums.len() as u64, 1],
                sums,
            )?;
            w.add_tensor(&format!("{name}{COUNTS}"), GgmlType::F32, &[1, 1], count)?;
        }
        w.write_atomic(path)?;
        Ok(())
    }

    /// Reads a file in either of llama.cpp's forms.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::Io {
            path: path.to_path_buf(),
            source: e,
        })?;
        if bytes.starts_with(b"GGUF") {
            Self::read_gguf(path)
        } else {
            read_legacy(&bytes).map_err(|reason| imatrix_error(path, reason))
        }
    }

    fn read_gguf(path: &Path) -> Result<Self> {
        let file = GgufFile::open(path)?;
        let meta = file.metadata();
        let u32_of = |key: &str| meta.get(key).and_then(MetaValue::as_u64).unwrap_or(0) as u32;
        let datasets = match meta.get("imatrix.datasets") {
            Some(MetaValue::Array(MetaArray::String(d))) => d.clone(),
            _ => Vec::new(),
        };
        let mut entries = BTreeMap::new();
        for info in file.tensors() {
            let Some(name) = info.name.strip_suffix(SUMS) else {
                continue;
            };
            let floats = |tensor: &str| -> Result<Vec<f32>> {
                let info = file.tensor(tensor).ok_or_else(|| {
                    imatrix_error(path, format!("`{tensor}` is missing beside `{name}{SUMS}`"))
                })?;
                if info.ggml_type != GgmlType::F32 {
                    return Err(imatrix_error(
                        path,
                        format!("`{tensor}` is {}, not F32", info.ggml_type),
                    ));
                }
                let data = file.tensor_data(info)?;
                Ok(data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect())
            };
            let sums = floats(&info.name)?;
            let counts = floats(&format!("{name}{COUNTS}"))?;
            if counts.len() != 1 {
                return Err(imatrix_error(
                    path,
                    format!(
                        "`{name}` has {} counts: importance matrices of expert tensors are not \
                         supported",
                        counts.len()
                    ),
                ));
            }
            if !counts[0].is_finite() || counts[0] < 0.0 || sums.iter().any(|s| !s.is_finite()) {
                return Err(imatrix_error(
                    path,
                    format!("`{name}` holds values that are not finite"),
                ));
            }
            entries.insert(
                name.to_string(),
                SquareSums {
                    sums: sums.into_iter().map(f64::from).collect(),
                    tokens: counts[0].round() as u64,
                },
            );
        }
        if entries.is_empty() {
            return Err(imatrix_error(path, "no `*.in_sum2` tensors".into()));
        }
        Ok(Self {
            entries,
            datasets,
            chunk_count: u32_of("imatrix.chunk_count"),
            chunk_size: u32_of("imatrix.chunk_size"),
        })
    }
}

fn imatrix_error(path: &Path, reason: String) -> Error {
    Error::Imatrix {
        path: path.to_path_buf(),
        reason,
    }
}

/// The older binary form: an i32 entry count; per entry the name (i32 length, bytes), the
/// calls summed (i32), the value count (i32) and the values (f32), which are means of squares
/// times the calls; then optionally the chunk count (i32) and the dataset's name.
fn read_legacy(bytes: &[u8]) -> std::result::Result<ImportanceMatrix, String> {
    let mut at = 0usize;
    let mut take = |n: usize, what: &str| -> std::result::Result<&[u8], String> {
        let end = at
            .checked_add(n)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| format!("cut short reading {what} at byte {at}"))?;
        let s = &bytes[at..end];
        at = end;
        Ok(s)
    };
    let i32_at = |b: &[u8]| i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let count =
        |v: i32, what: &str| usize::try_from(v).map_err(|_| format!("negative {what} ({v})"));
    let n_entries = count(i32_at(take(4, "the entry count")?), "entry count")?;
    if n_entries == 0 {
        return Err("no entries".into());
    }
    let mut m = ImportanceMatrix::default();
    for i in 0..n_entries {
        let len = count(i32_at(take(4, "a name's length")?), "name length")?;
        let name = String::from_utf8(take(len, "a name")?.to_vec())
            .map_err(|_| format!("entry {i}'s name is not UTF-8"))?;
        let calls = count(i32_at(take(4, "a call count")?), "call count")?;
        let n = count(i32_at(take(4, "a value count")?), "value count")?;
        let raw = take(n.checked_mul(4).ok_or("value count overflows")?, "values")?;
        // Means times calls: sums over `calls` tokens, as the GGUF form keeps them.
        let sums = raw
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        m.entries.insert(
            name,
            SquareSums {
                sums: sums.collect(),
                tokens: calls as u64,
            },
        );
    }
    if let Ok(chunks) = take(4, "the chunk count") {
        m.chunk_count = i32_at(chunks).max(0) as u32;
        if let Ok(len) = take(4, "the dataset's length") {
            let len = i32_at(len).max(0) as usize;
            if let Ok(name) = take(len, "the dataset's name") {
                m.datasets.push(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ImportanceMatrix {
        let mut entries = BTreeMap::new();
        entries.insert(
            "blk.0.attn_q.weight".to_string(),
            SquareSums {
                sums: vec![4.0, 9.0, 0.5],
                tokens: 2,
            },
        );
        entries.insert(
            "blk.0.ffn_down.weight".to_string(),
            SquareSums {
                sums: vec![1.0; 8],
                tokens: 4,
            },
        );
        ImportanceMatrix {
            entries,
            datasets: vec!["GPL-3".into()],
            chunk_count: 3,
            chunk_size: 512,
        }
    }

    #[test]
    fn gguf_round_trip_and_means() {
        let dir = std::env::temp_dir().join(format!("hearth-imatrix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf");
        let m = sample();
        m.write(&path).unwrap();
        let back = ImportanceMatrix::read(&path).unwrap();
        assert_eq!(back, m);
        assert_eq!(
            back.weights("blk.0.attn_q.weight").unwrap(),
            [2.0, 4.5, 0.25]
        );
        assert_eq!(back.weights("blk.0.attn_k.weight"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn legacy_bytes() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(1i32.to_le_bytes());
        let name = b"blk.0.attn_q.weight";
        b.extend((name.len() as i32).to_le_bytes());
        b.extend(name);
        b.extend(2i32.to_le_bytes());
        b.extend(3i32.to_le_bytes());
        for v in [4.0f32, 9.0, 0.5] {
            b.extend(v.to_le_bytes());
        }
        b.extend(3i32.to_le_bytes());
        b.extend(5i32.to_le_bytes());
        b.extend(b"GPL-3");
        b
    }

    #[test]
    fn legacy_form_reads() {
        let m = read_legacy(&legacy_bytes()).unwrap();
        assert_eq!(m.weights("blk.0.attn_q.weight").unwrap(), [2.0, 4.5, 0.25]);
        assert_eq!(m.chunk_count, 3);
        assert_eq!(m.datasets, ["GPL-3"]);
    }

    #[test]
    fn truncated_and_hostile_legacy_files_are_errors() {
        let full = legacy_bytes();
        // Cut anywhere inside the entries: an error naming what was being read.
        for cut in [0, 3, 4, 10, 27, 30, 40] {
            let err = read_legacy(&full[..cut]).unwrap_err();
            assert!(err.contains("cut short"), "{cut}: {err}");
        }
        // Without the optional trailer it still reads.
        assert!(read_legacy(&full[..full.len() - 13]).is_ok());
        let mut huge = full.clone();
        huge[4..8].copy_from_slice(&i32::MAX.to_le_bytes());
        assert!(read_legacy(&huge).unwrap_err().contains("cut short"));
        let mut negative = full.clone();
        negative[0..4].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(read_legacy(&negative)
            .unwrap_err()
            .contains("negative entry count"));
        assert_eq!(read_legacy(&0i32.to_le_bytes()).unwrap_err(), "no entries");
    }

    #[test]
    fn gguf_without_entries_or_with_wrong_types_is_an_error() {
        let dir = std::env::temp_dir().join(format!("hearth-imatrix-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.gguf");
        let mut w = GgufWriter::new();
        w.set_metadata("general.type", MetaValue::String("imatrix".into()));
        w.write_atomic(&path).unwrap();
        let err = ImportanceMatrix::read(&path).unwrap_err().to_string();
        assert!(
            err.contains("empty.gguf") && err.contains("in_sum2"),
            "{err}"
        );

        let path = dir.join("lonely.gguf");
        let mut w = GgufWriter::new();
        w.add_tensor("a.weight.in_sum2", GgmlType::F32, &[2, 1], vec![0u8; 8])
            .unwrap();
        w.write_atomic(&path).unwrap();
        let err = ImportanceMatrix::read(&path).unwrap_err().to_string();
        assert!(
            err.contains("a.weight.counts") && err.contains("missing"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
