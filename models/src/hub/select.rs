//! What a pull fetches from a repository's files: the GGUF file of a quantization, chosen as
//! llama.cpp's `-hf` chooses it (`common/download.cpp`), or a Hugging Face folder.

use std::path::Path;

use super::listing::RepoFile;
use crate::error::{Error, Result};

/// The quantizations taken, in order, where none is asked for (llama.cpp's default).
const DEFAULT_QUANTS: [&str; 2] = ["Q4_K_M", "Q8_0"];

/// What to fetch.
pub(super) enum Choice<'a> {
    Gguf(&'a RepoFile),
    Folder(Folder<'a>),
}

/// A Hugging Face folder's files: the small ones (configuration, tokenizer, the weights'
/// index), then the weights.
pub(super) struct Folder<'a> {
    pub files: Vec<&'a RepoFile>,
    weights: Weights<'a>,
}

enum Weights<'a> {
    /// `model.safetensors` (or `pytorch_model.bin`).
    One(&'a RepoFile),
    /// An index (among the folder's `files`) whose `weight_map` names the shards.
    Index(&'a RepoFile),
}

/// The GGUF file of `quant` where one is asked for, else llama.cpp's default; a repository
/// without GGUF model files is a folder (`config.json` beside weights Hearth reads).
pub(super) fn choose<'a>(
    repo: &str,
    files: &'a [RepoFile],
    quant: Option<&str>,
) -> Result<Choice<'a>> {
    let models = model_files(files);
    let chosen = match quant {
        Some(q) => match models.iter().find(|f| has_tag(&f.path, q)) {
            Some(f) => *f,
            None if models.is_empty() && folder(files).is_some() => {
                return Err(Error::hub(
                    repo,
                    format!(
                        "holds no GGUF files, so no quantization `{q}`: it is a Hugging Face \
                         folder; pull `{repo}` without a quantization"
                    ),
                ))
            }
            None => {
                return Err(Error::HubQuantNotFound {
                    repo: repo.to_string(),
                    quant: q.to_string(),
                    available: models.iter().map(|f| describe(f)).collect(),
                })
            }
        },
        None => match default_file(&models) {
            Some(f) => f,
            None => {
                return folder(files).map(Choice::Folder).ok_or_else(|| {
                    let listed: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
                    Error::hub(
                        repo,
                        format!(
                            "holds neither a GGUF model file nor a Hugging Face folder \
                             (config.json beside model.safetensors, its index or \
                             pytorch_model.bin); its files: {}",
                            listed.join(", ")
                        ),
                    )
                })
            }
        },
    };
    if let Some((_, count)) = split(&chosen.path) {
        return Err(split_refused(repo, &chosen.path, count));
    }
    Ok(Choice::Gguf(chosen))
}

/// The first part of each model file: what llama.cpp offers (mmproj, imatrix, drafts are
/// not models).
fn model_files(files: &[RepoFile]) -> Vec<&RepoFile> {
    files
        .iter()
        .filter(|f| is_model_gguf(&f.path) && split(&f.path).is_none_or(|(i, _)| i == 1))
        .collect()
}

/// The model file llama.cpp takes without a quantization: Q4_K_M, else Q8_0, else the first.
fn default_file<'a>(models: &[&'a RepoFile]) -> Option<&'a RepoFile> {
    DEFAULT_QUANTS
        .iter()
        .find_map(|q| models.iter().find(|f| has_tag(&f.path, q)))
        .or(models.first())
        .copied()
}

/// A GGUF model file of a repository, as a list of quantizations to choose from shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantFile {
    /// Its path in the repository (a split model's first part).
    pub path: String,
    /// The quantization its name gives (`Q4_K_M`), uppercase.
    pub quant: Option<String>,
    /// Bytes, every part of a split model together.
    pub size: u64,
    /// How many files a split model is in (`None`: one). Hearth does not load split models.
    pub parts: Option<u32>,
    /// The file a pull without a quantization takes, as llama.cpp's `-hf` chooses it.
    pub default: bool,
}

/// The GGUF model files among a repository's `files`, in the listing's order (projectors,
/// importance matrices and drafters left out).
pub fn quant_files(files: &[RepoFile]) -> Vec<QuantFile> {
    let models = model_files(files);
    let default = default_file(&models).map(|f| f.path.as_str());
    models
        .iter()
        .map(|f| {
            let parts = split(&f.path).map(|(_, count)| count);
            let size = match parts {
                // Every part of the same model: the name but for its index.
                Some(_) => {
                    let stem = split_stem(&f.path);
                    files
                        .iter()
                        .filter(|g| split(&g.path).is_some() && split_stem(&g.path) == stem)
                        .map(|g| g.size)
                        .sum()
                }
                None => f.size,
            };
            QuantFile {
                path: f.path.clone(),
                quant: quant_tag(&f.path),
                size,
                parts,
                default: Some(f.path.as_str()) == default,
            }
        })
        .collect()
}

/// The GGUF file at `path` in `files`, where it is a model file Hearth loads (one part).
pub(super) fn choose_file<'a>(
    repo: &str,
    files: &'a [RepoFile],
    path: &str,
) -> Result<&'a RepoFile> {
    let Some(file) = files.iter().find(|f| f.path == path) else {
        return Err(Error::hub(repo, format!("holds no file `{path}`")));
    };
    if !is_model_gguf(path) {
        return Err(Error::hub(repo, format!("{path} is not a GGUF model file")));
    }
    if let Some((_, count)) = split(path) {
        return Err(split_refused(repo, path, count));
    }
    Ok(file)
}

fn split_refused(repo: &str, path: &str, count: u32) -> Error {
    Error::hub(
        repo,
        format!(
            "{path} is split into {count} files, which Hearth does not load as one model; \
             merge them with llama.cpp's `llama-gguf-split --merge` and load the result"
        ),
    )
}

/// Whether a pull of `repo` with `quant` (or without one) takes the file at `path`.
pub(super) fn takes(repo: &str, files: &[RepoFile], quant: Option<&str>, path: &str) -> bool {
    matches!(choose(repo, files, quant), Ok(Choice::Gguf(f)) if f.path == path)
}

/// The weights of `folder`: the one file, or the shards its index names (read from the
/// index already downloaded into `dir`).
pub(super) fn weights<'a>(
    repo: &str,
    files: &'a [RepoFile],
    folder: &Folder<'a>,
    dir: &Path,
) -> Result<Vec<&'a RepoFile>> {
    let index = match folder.weights {
        Weights::One(file) => return Ok(vec![file]),
        Weights::Index(index) => index,
    };
    let path = dir.join(&index.path);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let bad = |reason: &str| Error::Safetensors {
        path: path.clone(),
        reason: reason.to_string(),
    };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(&format!("not JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no `weight_map` object"))?;
    let mut names: Vec<&str> = map.values().filter_map(|v| v.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            files
                .iter()
                .find(|f| f.path == name && is_top_level(&f.path))
                .ok_or_else(|| {
                    Error::hub(
                        repo,
                        format!(
                            "{} names `{name}`, which the repository does not hold",
                            index.path
                        ),
                    )
                })
        })
        .collect()
}

/// The folder among `files`, where they hold `config.json` and weights Hearth reads:
/// safetensors where there are any, else PyTorch checkpoints (other weight files, such as
/// Mistral's `consolidated.safetensors` beside the shards, are left on the hub).
fn folder(files: &[RepoFile]) -> Option<Folder<'_>> {
    let top = |name: &str| files.iter().find(|f| f.path == name);
    top("config.json")?;
    let weights = [
        (crate::safetensors::SINGLE, false),
        (crate::safetensors::INDEX, true),
        (crate::pickle::SINGLE, false),
        (crate::pickle::INDEX, true),
    ]
    .into_iter()
    .find_map(|(name, index)| {
        top(name).map(|f| {
            if index {
                Weights::Index(f)
            } else {
                Weights::One(f)
            }
        })
    })?;
    let small = files
        .iter()
        .filter(|f| {
            is_top_level(&f.path)
                && !f.path.starts_with('.')
                && [".json", ".txt", ".model", ".jinja"]
                    .iter()
                    .any(|ext| f.path.ends_with(ext))
        })
        .collect();
    Some(Folder {
        files: small,
        weights,
    })
}

fn is_top_level(path: &str) -> bool {
    !path.contains('/')
}

/// A GGUF file that is a model: not a projector, an importance matrix or a drafter beside
/// one (llama.cpp's `gguf_filename_is_model`).
fn is_model_gguf(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.ends_with(".gguf")
        && !["mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"]
            .iter()
            .any(|word| name.contains(word))
}

/// Whether `path` names quantization `tag`: the tag followed by `.` or `-`, in any case
/// (llama.cpp's `TAG[.-]`).
fn has_tag(path: &str, tag: &str) -> bool {
    let path = path.to_ascii_uppercase();
    let tag = tag.to_ascii_uppercase();
    path.match_indices(&tag)
        .any(|(i, _)| matches!(path.as_bytes().get(i + tag.len()), Some(b'.' | b'-')))
}

/// `(index, count)` of a file split by llama.cpp's `gguf-split`: `M-Q4_K_M-00001-of-00003.gguf`.
fn split(path: &str) -> Option<(u32, u32)> {
    let stem = path.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (_, index) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !(digits(index) && digits(count)) {
        return None;
    }
    Some((index.parse().ok()?, count.parse().ok()?))
}

/// A split file's path without its `-00001-of-00003.gguf`.
fn split_stem(path: &str) -> &str {
    let stem = path.strip_suffix(".gguf").unwrap_or(path);
    stem.rsplit_once("-of-")
        .and_then(|(rest, _)| rest.rsplit_once('-'))
        .map_or(stem, |(stem, _)| stem)
}

/// The quantization a GGUF file's name gives, uppercase: the last `-` or `.` separated part
/// of its name, split suffix and `.gguf` left out (`Model-Q4_K_M.gguf` -> `Q4_K_M`).
pub fn quant_tag(path: &str) -> Option<String> {
    let stem = path.strip_suffix(".gguf")?;
    let stem = match split(path) {
        Some(_) => stem.rsplit_once("-of-")?.0.rsplit_once('-')?.0,
        None => stem,
    };
    let (_, tag) = stem.rsplit_once(['-', '.'])?;
    (!tag.is_empty() && tag.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then(|| tag.to_ascii_uppercase())
}

/// `Q4_K_M (Model-Q4_K_M.gguf)`, for the list of what a repository has.
fn describe(file: &RepoFile) -> String {
    let tag = quant_tag(&file.path).unwrap_or_else(|| "?".into());
    match split(&file.path) {
        Some((_, count)) => format!("{tag} ({}, {count} parts)", file.path),
        None => format!("{tag} ({})", file.path),
    }
}

#[cfg(test)]
mod tests {
    use super::super::listing::Checksum;
    use super::*;

    fn files(paths: &[&str]) -> Vec<RepoFile> {
        paths
            .iter()
            .map(|p| RepoFile {
                path: p.to_string(),
                size: 1,
                checksum: Checksum::Sha256("0".repeat(64)),
            })
            .collect()
    }

    fn chosen(paths: &[&str], quant: Option<&str>) -> Result<String> {
        let files = files(paths);
        match choose("o/r", &files, quant)? {
            Choice::Gguf(f) => Ok(f.path.clone()),
            Choice::Folder(_) => Ok("folder".into()),
        }
    }

    #[test]
    fn a_quant_is_matched_in_any_case_before_a_dot_or_dash() {
        let repo = [
            "M-IQ4_XS.gguf",
            "M-Q4_K_S.gguf",
            "M-Q4_K_M.gguf",
            "M.Q8_0.gguf",
            "M-UD-Q4_K_XL.gguf",
            "mmproj-M-f16.gguf",
        ];
        assert_eq!(chosen(&repo, Some("q4_k_m")).unwrap(), "M-Q4_K_M.gguf");
        assert_eq!(chosen(&repo, Some("Q8_0")).unwrap(), "M.Q8_0.gguf");
        assert_eq!(
            chosen(&repo, Some("UD-Q4_K_XL")).unwrap(),
            "M-UD-Q4_K_XL.gguf"
        );
        // `Q4_K` is no prefix match of `Q4_K_M`; the projector is no model.
        assert!(matches!(
            chosen(&repo, Some("Q4_K")),
            Err(Error::HubQuantNotFound { .. })
        ));
        assert!(chosen(&repo, Some("f16")).is_err());
    }

    #[test]
    fn without_a_quant_llama_cpps_default_is_taken() {
        assert_eq!(
            chosen(&["M-Q2_K.gguf", "M-Q8_0.gguf", "M-Q4_K_M.gguf"], None).unwrap(),
            "M-Q4_K_M.gguf"
        );
        assert_eq!(
            chosen(&["M-Q2_K.gguf", "M-Q8_0.gguf"], None).unwrap(),
            "M-Q8_0.gguf"
        );
        assert_eq!(
            chosen(&["imatrix.gguf", "M-Q2_K.gguf", "M-Q3_K.gguf"], None).unwrap(),
            "M-Q2_K.gguf"
        );
    }

    #[test]
    fn a_missing_quant_lists_what_the_repository_has() {
        let err = chosen(&["M-Q2_K.gguf", "M-Q8_0.gguf", "README.md"], Some("Q5_K_M"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`Q5_K_M`"), "{err}");
        assert!(
            err.contains("Q2_K (M-Q2_K.gguf), Q8_0 (M-Q8_0.gguf)"),
            "{err}"
        );
    }

    #[test]
    fn split_files_are_refused_with_how_to_merge_them() {
        let repo = [
            "Q4_K_M/M-Q4_K_M-00001-of-00002.gguf",
            "Q4_K_M/M-Q4_K_M-00002-of-00002.gguf",
        ];
        let err = chosen(&repo, Some("Q4_K_M")).unwrap_err().to_string();
        assert!(err.contains("split into 2 files"), "{err}");
        assert_eq!(split(repo[1]), Some((2, 2)));
        assert_eq!(quant_tag(repo[0]).as_deref(), Some("Q4_K_M"));
    }

    #[test]
    fn a_repository_without_gguf_files_is_a_folder() {
        let repo = [
            ".gitattributes",
            "README.md",
            "config.json",
            "consolidated.safetensors",
            "generation_config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "pytorch_model.bin",
            "tokenizer.json",
            "tokenizer.model",
            "onnx/model.onnx",
        ];
        let files = files(&repo);
        let Choice::Folder(folder) = choose("o/r", &files, None).unwrap() else {
            panic!("not a folder");
        };
        let small: Vec<&str> = folder.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            small,
            [
                "config.json",
                "generation_config.json",
                "model.safetensors.index.json",
                "tokenizer.json",
                "tokenizer.model"
            ]
        );
        assert!(
            matches!(folder.weights, Weights::Index(f) if f.path == "model.safetensors.index.json")
        );
        let err = chosen(&repo, Some("Q4_K_M")).unwrap_err().to_string();
        assert!(err.contains("without a quantization"), "{err}");
        let err = chosen(&["README.md"], None).unwrap_err().to_string();
        assert!(err.contains("its files: README.md"), "{err}");
    }

    #[test]
    fn quant_files_mark_llama_cpps_default_and_sum_split_parts() {
        let mut repo = files(&[
            "README.md",
            "M-Q2_K.gguf",
            "M-Q4_K_M.gguf",
            "mmproj-M-f16.gguf",
            "Q8_0/M-Q8_0-00001-of-00002.gguf",
            "Q8_0/M-Q8_0-00002-of-00002.gguf",
        ]);
        repo[4].size = 5;
        repo[5].size = 7;
        let quants = quant_files(&repo);
        let rows: Vec<_> = quants
            .iter()
            .map(|q| {
                (
                    q.path.as_str(),
                    q.quant.as_deref(),
                    q.size,
                    q.parts,
                    q.default,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("M-Q2_K.gguf", Some("Q2_K"), 1, None, false),
                ("M-Q4_K_M.gguf", Some("Q4_K_M"), 1, None, true),
                (
                    "Q8_0/M-Q8_0-00001-of-00002.gguf",
                    Some("Q8_0"),
                    12,
                    Some(2),
                    false
                ),
            ]
        );
        assert!(choose_file("o/r", &repo, "M-Q2_K.gguf").is_ok());
        for refused in [
            "mmproj-M-f16.gguf",
            "README.md",
            "missing.gguf",
            &quants[2].path,
        ] {
            assert!(choose_file("o/r", &repo, refused).is_err(), "{refused}");
        }
        assert!(takes("o/r", &repo, None, "M-Q4_K_M.gguf"));
        assert!(takes("o/r", &repo, Some("q2_k"), "M-Q2_K.gguf"));
        assert!(!takes("o/r", &repo, Some("Q2_K"), "M-Q4_K_M.gguf"));
    }

    #[test]
    fn tags_come_from_the_last_part_of_the_name() {
        assert_eq!(quant_tag("M-Q4_K_M.gguf").as_deref(), Some("Q4_K_M"));
        assert_eq!(
            quant_tag("SmolLM2-135M-Instruct.q4_1.gguf").as_deref(),
            Some("Q4_1")
        );
        assert_eq!(quant_tag("model.bin"), None);
    }
}
