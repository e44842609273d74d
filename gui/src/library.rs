//! The model library: GGUF files and Hugging Face folders in the models directory, described
//! from their headers.

use std::path::{Path, PathBuf};

use hearth_models::hf::{converted_decoder, HfFolder};
use hearth_models::safetensors::Element;
use hearth_models::{list_models, GgufFile, ModelFormat};

/// What the library shows about a model file. Reading it maps the file and parses the
/// header only; no weights are touched.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelCard {
    pub path: PathBuf,
    /// `general.name`, or the file name.
    pub name: String,
    pub architecture: String,
    pub n_params: u64,
    /// The tensor type holding most of the weights (`Q4_1`, `F16`, ...).
    pub format: String,
    pub file_bytes: u64,
    /// `{arch}.context_length`, when the file says.
    pub n_ctx_train: Option<usize>,
    /// Transformer layers (`{arch}.block_count`), when the file says.
    pub n_layer: Option<usize>,
    /// Sampling the model's authors recommend (`general.sampling.*`).
    pub sampling: RecommendedSampling,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecommendedSampling {
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
}

impl ModelCard {
    pub fn read(path: &Path) -> Result<Self, hearth_models::Error> {
        if path.is_dir() {
            return Self::read_folder(path);
        }
        let file = GgufFile::open(path)?;
        let architecture = file.architecture().unwrap_or("unknown").to_string();
        let name = file
            .get::<&str>("general.name")
            .ok()
            .flatten()
            .map(str::to_string)
            .unwrap_or_else(|| file_stem(path));
        let format = heaviest_type(
            file.tensors()
                .iter()
                .map(|t| (t.ggml_type.name().to_string(), t.n_bytes)),
        );
        let number = |key: &str| file.metadata().get(key).and_then(|v| v.as_f64());
        let sampling = RecommendedSampling {
            temperature: number("general.sampling.temp").map(|v| v as f32),
            top_k: number("general.sampling.top_k").map(|v| v as usize),
            top_p: number("general.sampling.top_p").map(|v| v as f32),
            min_p: number("general.sampling.min_p").map(|v| v as f32),
            repeat_penalty: number("general.sampling.penalty_repeat").map(|v| v as f32),
        };
        Ok(Self {
            path: path.to_path_buf(),
            name,
            n_params: file.tensors().iter().map(|t| t.n_elements()).sum(),
            format,
            file_bytes: file.file_size(),
            n_ctx_train: number(&format!("{architecture}.context_length")).map(|v| v as usize),
            n_layer: number(&format!("{architecture}.block_count")).map(|v| v as usize),
            architecture,
            sampling,
        })
    }

    /// A Hugging Face folder, from `config.json`, the safetensors headers and
    /// `generation_config.json` (its authors' sampling); nothing is converted until it loads.
    fn read_folder(path: &Path) -> Result<Self, hearth_models::Error> {
        let folder = HfFolder::open(path)?;
        let count = |shape: &[usize]| shape.iter().product::<usize>() as u64;
        let n_params = folder
            .weights()
            .tensors()
            .map(|(_, t)| count(&t.shape))
            .sum();
        let format = heaviest_type(folder.weights().tensors().map(|(_, t)| {
            let width = if t.element == Element::F32 { 4 } else { 2 };
            (t.element.name().to_string(), count(&t.shape) * width)
        }));
        let file_bytes = folder
            .weights()
            .files()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        let json = |name: &str| -> serde_json::Value {
            std::fs::read(path.join(name))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default()
        };
        let config = json("config.json");
        // A multimodal model's language layers are under `text_config`.
        let n_layer = [&config, &config["text_config"]]
            .iter()
            .find_map(|c| c.get("num_hidden_layers")?.as_u64())
            .map(|n| n as usize);
        let generation = json("generation_config.json");
        let number = |key: &str| generation.get(key).and_then(serde_json::Value::as_f64);
        // Hugging Face's defaults are sampling only when `do_sample` says so.
        let sampled = generation
            .get("do_sample")
            .and_then(serde_json::Value::as_bool)
            == Some(true);
        let sampling = match sampled {
            true => RecommendedSampling {
                temperature: number("temperature").map(|v| v as f32),
                top_k: number("top_k").map(|v| v as usize),
                top_p: number("top_p").map(|v| v as f32),
                min_p: number("min_p").map(|v| v as f32),
                repeat_penalty: number("repetition_penalty").map(|v| v as f32),
            },
            false => RecommendedSampling::default(),
        };
        Ok(Self {
            path: path.to_path_buf(),
            name: file_stem(path),
            architecture: folder.architecture().to_string(),
            n_params,
            format,
            file_bytes,
            n_ctx_train: folder.context_length().map(|n| n as usize),
            n_layer,
            sampling,
        })
    }

    /// "135M", "6.7B".
    pub fn params_label(&self) -> String {
        let n = self.n_params as f64;
        if n >= 1e9 {
            format!("{:.1}B", n / 1e9)
        } else {
            format!("{:.0}M", n / 1e6)
        }
    }
}

/// A library row: a model file and what reading its header gave.
#[derive(Clone, Debug)]
pub struct LibraryEntry {
    pub path: PathBuf,
    pub card: Result<ModelCard, String>,
}

/// The GGUF models in `dir`, and the Hugging Face folders of families Hearth runs (not an
/// embedding model's), sorted by name (an unreadable directory is an error; an unreadable
/// file is a row with its error).
pub fn scan(dir: &Path) -> Result<Vec<LibraryEntry>, String> {
    let models = list_models(dir).map_err(|e| e.to_string())?;
    Ok(models
        .into_iter()
        .filter(|m| match m.format {
            ModelFormat::Gguf => true,
            ModelFormat::SafetensorsDir => converted_decoder(&m.path).is_some(),
        })
        .map(|m| LibraryEntry {
            card: ModelCard::read(&m.path).map_err(|e| e.to_string()),
            path: m.path,
        })
        .collect())
}

/// The type holding the most bytes, of (type, bytes) pairs (of equal totals, the one seen
/// first last, as `max_by_key` picks).
fn heaviest_type(tensors: impl Iterator<Item = (String, u64)>) -> String {
    let mut by_type: Vec<(String, u64)> = Vec::new();
    for (name, bytes) in tensors {
        match by_type.iter_mut().find(|(n, _)| *n == name) {
            Some((_, b)) => *b += bytes,
            None => by_type.push((name, bytes)),
        }
    }
    by_type
        .into_iter()
        .max_by_key(|(_, bytes)| *bytes)
        .map(|(n, _)| n)
        .unwrap_or_default()
}

pub fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// "91.7 MiB".
pub fn size_label(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_files_are_rows_with_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("broken.gguf"), b"GGUF\x03\0\0\0").unwrap();
        std::fs::write(dir.path().join("readme.txt"), b"hello").unwrap();
        let rows = scan(dir.path()).unwrap();
        assert_eq!(rows.len(), 1);
        let err = rows[0].card.as_ref().unwrap_err();
        assert!(err.contains("broken.gguf"), "{err}");
        assert!(scan(&dir.path().join("missing")).is_err());
    }

    /// A Hugging Face folder (the qwen2 conformance model) is a row with its card; a folder of
    /// an embedding model (BERT) is no row: the app chats.
    #[test]
    fn folders_of_families_hearth_runs_are_rows() {
        let Some(model) = hearth_testkit::conformance_model("qwen2") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("Qwen2-tiny");
        std::fs::create_dir(&folder).unwrap();
        for entry in std::fs::read_dir(model.join("hf")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), folder.join(entry.file_name())).unwrap();
        }
        let bert = dir.path().join("bert");
        std::fs::create_dir(&bert).unwrap();
        std::fs::write(
            bert.join("config.json"),
            br#"{"architectures": ["BertModel"]}"#,
        )
        .unwrap();
        std::fs::write(bert.join("model.safetensors"), b"").unwrap();
        let rows = scan(dir.path()).unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        let card = rows[0].card.as_ref().unwrap();
        assert_eq!(
            (
                card.name.as_str(),
                card.architecture.as_str(),
                card.format.as_str()
            ),
            ("Qwen2-tiny", "qwen2", "F32")
        );
        assert_eq!(card.n_ctx_train, Some(256));
        assert_eq!(card.n_layer, Some(2));
        assert!(card.n_params > 19_000_000, "{}", card.n_params);
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(size_label(96_153_088), "91.7 MiB");
        assert_eq!(size_label(4 << 30), "4.0 GiB");
    }
}
