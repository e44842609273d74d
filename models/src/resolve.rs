//! Finding a model by name in the models directory, the same way for every command that
//! takes `-m`: a path is used as is; otherwise the name is matched case-insensitively
//! against the models in the directory, by file name without `.gguf` and, failing that,
//! also without the quantization suffix (`smollm2-135m-instruct` finds
//! `SmolLM2-135M-Instruct.Q4_1.gguf`). A directory holding `config.json` and
//! `model.safetensors` (or a sharded `model.safetensors.index.json`) is a model too.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The models directory under a home directory: `~/.cache/hearth/models`. (The library
/// reads no environment; the CLI passes `$HOME` and honours `$HEARTH_MODELS`.)
pub fn default_models_dir(home: &Path) -> PathBuf {
    home.join(".cache").join("hearth").join("models")
}

/// Where compiled Vulkan pipelines are kept between runs, under a home directory:
/// `~/.cache/hearth/pipelines`.
pub fn default_pipeline_cache_dir(home: &Path) -> PathBuf {
    home.join(".cache").join("hearth").join("pipelines")
}

/// Where devices' kernel tunings are kept: `~/.cache/hearth/tuning`.
pub fn default_tuning_dir(home: &Path) -> PathBuf {
    home.join(".cache").join("hearth").join("tuning")
}

/// This user's tuning directory ([`default_tuning_dir`]), or none where `HEARTH_TUNE` is `0`
/// or there is no home directory.
pub fn user_tuning_dir() -> Option<PathBuf> {
    if std::env::var_os("HEARTH_TUNE").is_some_and(|v| v == "0") {
        return None;
    }
    let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE"))?;
    Some(default_tuning_dir(Path::new(&home)))
}

/// How a model is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelFormat {
    Gguf,
    /// A Hugging Face style directory: config.json + safetensors.
    SafetensorsDir,
}

/// A model found in the models directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelEntry {
    pub path: PathBuf,
    /// File or directory name without `.gguf`.
    pub name: String,
    /// `name` without its quantization suffix, when it has one.
    pub base_name: Option<String>,
    pub format: ModelFormat,
}

/// The models in `dir`, sorted by name. Hidden entries (such as partial downloads) are
/// skipped.
pub fn list_models(dir: &Path) -> Result<Vec<ModelEntry>> {
    let read = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut models = Vec::new();
    for entry in read {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if file_name.starts_with('.') {
            continue;
        }
        let (name, format) = if path.is_dir() {
            if !crate::hf::is_model_folder(&path) {
                continue;
            }
            (file_name.to_string(), ModelFormat::SafetensorsDir)
        } else {
            match strip_suffix_ignore_case(file_name, ".gguf") {
                Some(stem) => (stem.to_string(), ModelFormat::Gguf),
                None => continue,
            }
        };
        models.push(ModelEntry {
            base_name: strip_quant_suffix(&name).map(String::from),
            name,
            path,
            format,
        });
    }
    models.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(models)
}

/// Resolves `name` (a path, or a model name in `models_dir`) to a model path.
pub fn resolve_model(name: &str, models_dir: &Path) -> Result<PathBuf> {
    let as_path = Path::new(name);
    if as_path.exists() {
        return Ok(as_path.to_path_buf());
    }
    let models = list_models(models_dir)?;
    let wanted = strip_suffix_ignore_case(name, ".gguf").unwrap_or(name);
    let exact: Vec<&ModelEntry> = models
        .iter()
        .filter(|m| m.name.eq_ignore_ascii_case(wanted))
        .collect();
    let matches = if exact.is_empty() {
        models
            .iter()
            .filter(|m| {
                m.base_name
                    .as_deref()
                    .is_some_and(|b| b.eq_ignore_ascii_case(wanted))
            })
            .collect()
    } else {
        exact
    };
    match matches.as_slice() {
        [one] => Ok(one.path.clone()),
        [] => Err(Error::ModelNotFound {
            name: name.to_string(),
            dir: models_dir.to_path_buf(),
            available: models.into_iter().map(|m| m.name).collect(),
        }),
        many => Err(Error::AmbiguousModel {
            name: name.to_string(),
            dir: models_dir.to_path_buf(),
            candidates: many.iter().map(|m| m.path.clone()).collect(),
        }),
    }
}

fn strip_suffix_ignore_case<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(suffix.len())?;
    (s.is_char_boundary(cut) && s[cut..].eq_ignore_ascii_case(suffix)).then(|| &s[..cut])
}

/// `SmolLM2-135M-Instruct.Q4_1` -> `SmolLM2-135M-Instruct`; `Llama-3-8B-Q4_K_M` ->
/// `Llama-3-8B`; `None` when the last `.`/`-` separated part is not a quantization name.
fn strip_quant_suffix(name: &str) -> Option<&str> {
    let cut = name.rfind(['.', '-'])?;
    (cut > 0 && is_quant_name(&name[cut + 1..])).then(|| &name[..cut])
}

/// ggml quantization names as they appear in file names: F16, BF16, Q4_0, Q4_K_M, IQ4_XS,
/// TQ1_0, ...
fn is_quant_name(s: &str) -> bool {
    let u = s.to_ascii_uppercase();
    if matches!(u.as_str(), "F16" | "F32" | "BF16" | "F64" | "MXFP4") {
        return true;
    }
    let rest = u
        .strip_prefix("IQ")
        .or_else(|| u.strip_prefix("TQ"))
        .or_else(|| u.strip_prefix('Q'));
    match rest {
        Some(r) => {
            r.starts_with(|c: char| c.is_ascii_digit())
                && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quant_suffixes() {
        assert_eq!(
            strip_quant_suffix("SmolLM2-135M-Instruct.Q4_1"),
            Some("SmolLM2-135M-Instruct")
        );
        assert_eq!(
            strip_quant_suffix("Llama-3.2-1B-Instruct-Q4_K_M"),
            Some("Llama-3.2-1B-Instruct")
        );
        assert_eq!(strip_quant_suffix("phi-2.iq4_xs"), Some("phi-2"));
        assert_eq!(strip_quant_suffix("model-bf16"), Some("model"));
        assert_eq!(strip_quant_suffix("Llama-3.2-1B"), None);
        assert_eq!(strip_quant_suffix("qwen-7b"), None);
        assert_eq!(strip_quant_suffix("all-MiniLM-L6-v2"), None);
        assert_eq!(strip_suffix_ignore_case("a.GGUF", ".gguf"), Some("a"));
        assert_eq!(strip_suffix_ignore_case("é", ".gguf"), None);
    }
}
