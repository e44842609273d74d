//! What a hub name became in the models directory, so that `-m ORG/REPO:QUANT` finds it
//! again without the network: one small JSON file per name pulled,
//! `.hub/ORG/REPO/QUANT.json` (`default.json` without a quantization), under the models
//! directory, hidden from its listing of models.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ModelRef;
use crate::error::{Error, Result};

/// The record of one pulled name.
#[derive(Serialize, Deserialize)]
struct Record {
    /// `ORG/REPO[:QUANT]`, for a person reading the file.
    model: String,
    /// The file or folder, relative to the models directory.
    path: String,
}

/// Where the record of `model` lives. Repository names and quantizations match in any case
/// on the hub, so the record's path is lowercase.
fn record_path(models_dir: &Path, model: &ModelRef) -> PathBuf {
    let quant = model.quant.as_deref().unwrap_or("default");
    models_dir
        .join(".hub")
        .join(model.repo.to_ascii_lowercase())
        .join(format!("{}.json", quant.to_ascii_lowercase()))
}

/// The model `model` became, where its record is there and so is the model.
pub(super) fn read(models_dir: &Path, model: &ModelRef) -> Option<PathBuf> {
    let text = std::fs::read_to_string(record_path(models_dir, model)).ok()?;
    let record: Record = serde_json::from_str(&text).ok()?;
    let rel = Path::new(&record.path);
    // Only a plain name: a record never points out of the directory.
    if rel.components().count() != 1
        || !matches!(
            rel.components().next(),
            Some(std::path::Component::Normal(_))
        )
    {
        return None;
    }
    let path = models_dir.join(rel);
    path.exists().then_some(path)
}

/// Records that `model` became `path` (in `models_dir`).
pub(super) fn write(models_dir: &Path, model: &ModelRef, path: &Path) -> Result<()> {
    let file = record_path(models_dir, model);
    let dir = file.parent().unwrap_or(models_dir);
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let record = Record {
        model: model.to_string(),
        path: path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned(),
    };
    let text = serde_json::to_string_pretty(&record)
        .map_err(|e| Error::hub(&model.repo, e.to_string()))?;
    // Written whole, then renamed: a reader never sees half a record.
    let tmp = file.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n").map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &file).map_err(|e| Error::io(&file, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_finds_its_model_in_any_case() {
        let dir = std::env::temp_dir().join(format!("hearth-hub-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let model = ModelRef::parse("Org/Repo:Q4_K_M").unwrap();
        assert_eq!(read(&dir, &model), None);
        let gguf = dir.join("Repo-Q4_K_M.gguf");
        std::fs::write(&gguf, b"GGUF").unwrap();
        write(&dir, &model, &gguf).unwrap();
        assert_eq!(read(&dir, &model), Some(gguf.clone()));
        let other_case = ModelRef::parse("org/repo:q4_k_m").unwrap();
        assert_eq!(read(&dir, &other_case), Some(gguf.clone()));
        assert_eq!(read(&dir, &ModelRef::parse("org/repo").unwrap()), None);
        std::fs::remove_file(&gguf).unwrap();
        assert_eq!(read(&dir, &model), None, "the model is gone");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
