//! Fetching a model by name from the Hugging Face hub: `ORG/REPO[:QUANT]` becomes a GGUF file
//! or a Hugging Face folder in the models directory, where [`crate::resolve_model`] finds it.
//!
//! What a pull does, through the hub's HTTP API:
//!
//! 1. Lists the repository's files with their sizes and checksums
//!    (`GET {endpoint}/api/models/{repo}/tree/main?recursive=true`, [`listing`]).
//! 2. Chooses what to fetch ([`select`]): the GGUF file of the quantization asked for, matched
//!    against the file names as llama.cpp's `-hf` matches them (`Q4_K_M` finds
//!    `Model-Q4_K_M.gguf`), or without one the file llama.cpp would take (Q4_K_M, else Q8_0,
//!    else the first); a repository without GGUF files is pulled as a folder (`config.json`,
//!    the tokenizer's files, the weights the index lists).
//! 3. Downloads each file (`GET {endpoint}/{repo}/resolve/main/{path}`, redirects followed,
//!    [`fetch`]) into a hidden `.part` file, which a later pull continues with a `Range`
//!    request; the bytes are checked against the listing's checksum (an LFS file's SHA-256,
//!    git's SHA-1 of any other) before the rename that makes the file visible. A mismatch
//!    removes the part: its bytes are wrong somewhere, and resuming it would fail forever.
//! 4. Records which file or folder the name became ([`record`]), so that `-m ORG/REPO:QUANT`
//!    finds it again without the network.
//!
//! Besides pulls by name: [`search`] finds repositories holding GGUF files, [`quants`] lists
//! a repository's GGUF files with their sizes and the one a pull without a quantization
//! takes, and [`pull_file`] pulls one of them by its path, as the desktop app's library
//! does.
//!
//! The crate reads no environment: the endpoint (`HF_ENDPOINT`) and the token (`HF_TOKEN`,
//! `~/.cache/huggingface/token`) arrive in [`HubOptions`], progress through a callback, and a
//! pull stops where the caller sets its cancel flag ([`Error::PullCancelled`]: the file cut
//! off keeps its `.part`, which the next pull continues).

mod client;
mod fetch;
mod listing;
mod record;
mod search;
mod select;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::error::{Error, Result};
use crate::resolve::ModelFormat;

pub use listing::{Checksum, RepoFile};
pub use search::{search, SearchHit, MAX_RESULTS};
pub use select::{quant_files, quant_tag, QuantFile};

/// The public hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The branch every pull reads.
pub const REVISION: &str = "main";

/// Where and how to reach the hub.
#[derive(Clone, Debug)]
pub struct HubOptions {
    /// The hub's address, without a trailing `/`: [`DEFAULT_ENDPOINT`] or a mirror
    /// (`HF_ENDPOINT`).
    pub endpoint: String,
    /// Sent as `Authorization: Bearer` to the endpoint's host (never to a redirect's other
    /// host): private and gated repositories need one.
    pub token: Option<String>,
    /// How many times a file whose connection dropped is resumed within one pull before the
    /// pull fails (its `.part` stays for the next one).
    pub retries: u32,
}

impl Default for HubOptions {
    fn default() -> Self {
        HubOptions {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token: None,
            retries: 3,
        }
    }
}

impl HubOptions {
    /// The options the environment gives, through `var` (which reads a variable, `None`
    /// where unset): the hub's address `HF_ENDPOINT`, and a token: `HF_TOKEN`, else the
    /// file `HF_TOKEN_PATH` names, else [`token_path`] under `home` (where
    /// `huggingface-cli login` keeps it). Empty values count as unset.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>, home: &Path) -> HubOptions {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let token = var("HF_TOKEN").or_else(|| {
            let path = match var("HF_TOKEN_PATH") {
                Some(path) => PathBuf::from(path),
                None => token_path(home, var("HF_HOME").map(PathBuf::from).as_deref()),
            };
            std::fs::read_to_string(path).ok()
        });
        HubOptions {
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            token: token
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
            ..HubOptions::default()
        }
    }
}

/// The token file under a home directory: `$HF_HOME/token` where the caller knows `HF_HOME`,
/// else `~/.cache/huggingface/token` (where `huggingface-cli login` writes it).
pub fn token_path(home: &Path, hf_home: Option<&Path>) -> PathBuf {
    match hf_home {
        Some(dir) => dir.join("token"),
        None => home.join(".cache").join("huggingface").join("token"),
    }
}

/// A model on the hub: `ORG/REPO`, with the quantization to pull (`:Q4_K_M`) where the
/// repository holds several GGUF files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRef {
    /// `ORG/REPO`.
    pub repo: String,
    /// The quantization tag as written (`Q4_K_M`, `q8_0`, `UD-Q4_K_XL`); matched
    /// case-insensitively.
    pub quant: Option<String>,
}

impl ModelRef {
    /// `ORG/REPO[:QUANT]` (also with `hf.co/`, `huggingface.co/` or
    /// `https://huggingface.co/` in front, as Ollama and the hub's pages write it), or `None`
    /// where `name` is not shaped so: a plain model name, a path.
    pub fn parse(name: &str) -> Option<ModelRef> {
        let mut rest = name;
        for prefix in ["https://", "http://"] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        for prefix in ["hf.co/", "huggingface.co/"] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        let (repo, quant) = match rest.split_once(':') {
            Some((repo, quant)) => (repo, Some(quant)),
            None => (rest, None),
        };
        let (org, name) = repo.split_once('/')?;
        if !is_repo_part(org) || !is_repo_part(name) {
            return None;
        }
        if let Some(q) = quant {
            let ok = !q.is_empty()
                && q.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !ok {
                return None;
            }
        }
        Some(ModelRef {
            repo: repo.to_string(),
            quant: quant.map(str::to_string),
        })
    }

    /// The repository's own name, without its owner: `SmolLM2-135M-Instruct`.
    pub fn name(&self) -> &str {
        self.repo.split_once('/').map_or(&self.repo, |(_, n)| n)
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.quant {
            Some(q) => write!(f, "{}:{q}", self.repo),
            None => f.write_str(&self.repo),
        }
    }
}

/// An owner's or repository's name as the hub allows them: letters, digits, `-`, `_`, `.`,
/// not starting with `.` or `-` (so never `..`).
fn is_repo_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && !s.starts_with(['.', '-'])
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// What a pull reports while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullEvent<'a> {
    /// A file starts downloading: `size` bytes, of which `done` are already on disk (a
    /// resumed `.part`).
    Start { file: &'a str, size: u64, done: u64 },
    /// `done` bytes of the current file are on disk. Goes back to 0 where the server
    /// ignored a resumed request's range and the file starts over.
    Progress { done: u64 },
    /// The current file is complete and matches the hub's checksum.
    Finish,
}

/// What a pull left in the models directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulled {
    /// The GGUF file or the folder.
    pub path: PathBuf,
    pub format: ModelFormat,
    /// The repository's file, for a GGUF file (`Model-Q4_K_M.gguf`).
    pub file: Option<String>,
    /// Bytes fetched by this pull (0: it was there already, and matches the hub's checksum).
    pub downloaded: u64,
}

/// The model `model` became in `models_dir` on an earlier pull, if it is still there.
pub fn find_pulled(model: &ModelRef, models_dir: &Path) -> Option<PathBuf> {
    record::read(models_dir, model)
}

/// Every file of `repo` on the main branch, with its size and checksum. A repository the
/// hub does not know (or will not show without a token) is [`Error::HubRepoNotFound`].
pub fn list_files(options: &HubOptions, repo: &str) -> Result<Vec<RepoFile>> {
    listing::list(&client::Client::new(options), repo)
}

/// The GGUF model files of `repo`, to choose a quantization from: [`quant_files`] of its
/// listing. Empty for a repository of none (a Hugging Face folder, say).
pub fn quants(options: &HubOptions, repo: &str) -> Result<Vec<QuantFile>> {
    Ok(quant_files(&list_files(options, repo)?))
}

/// Pulls `model` into `models_dir` (created where missing): see the module's doc. A file
/// that is there already is checked against the hub's checksum rather than fetched again; a
/// file or folder of the same name that is not the hub's is an error, never overwritten.
pub fn pull(
    options: &HubOptions,
    model: &ModelRef,
    models_dir: &Path,
    progress: &mut dyn FnMut(PullEvent),
) -> Result<Pulled> {
    pull_cancellable(
        options,
        model,
        models_dir,
        &AtomicBool::new(false),
        progress,
    )
}

/// [`pull`], stopped between two reads once `cancel` is set: [`Error::PullCancelled`], the
/// file cut off kept in its `.part` (a folder's complete files in its staging folder), so
/// that the next pull continues where this one stopped.
pub fn pull_cancellable(
    options: &HubOptions,
    model: &ModelRef,
    models_dir: &Path,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(PullEvent),
) -> Result<Pulled> {
    std::fs::create_dir_all(models_dir).map_err(|e| Error::io(models_dir, e))?;
    let client = client::Client::new(options);
    let files = listing::list(&client, &model.repo)?;
    let pull = Pull {
        client: &client,
        options,
        cancel,
        models_dir,
    };
    let pulled = match select::choose(&model.repo, &files, model.quant.as_deref())? {
        select::Choice::Gguf(file) => pull.gguf(&model.repo, file, progress)?,
        select::Choice::Folder(folder) => pull.folder(model, &files, &folder, progress)?,
    };
    record::write(models_dir, model, &pulled.path)?;
    Ok(pulled)
}

/// Pulls the GGUF file at `path` of `repo` (one of its [`quants`]) into `models_dir`, as
/// [`pull_cancellable`] pulls the file a name chooses. The names that choose this file (its
/// quantization, and the bare repository where it is the default) are recorded, so that
/// `-m ORG/REPO:QUANT` finds it again without the network.
pub fn pull_file(
    options: &HubOptions,
    repo: &str,
    path: &str,
    models_dir: &Path,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(PullEvent),
) -> Result<Pulled> {
    std::fs::create_dir_all(models_dir).map_err(|e| Error::io(models_dir, e))?;
    let client = client::Client::new(options);
    let files = listing::list(&client, repo)?;
    let file = select::choose_file(repo, &files, path)?;
    let pull = Pull {
        client: &client,
        options,
        cancel,
        models_dir,
    };
    let pulled = pull.gguf(repo, file, progress)?;
    for quant in [quant_tag(path), None] {
        if select::takes(repo, &files, quant.as_deref(), path) {
            let model = ModelRef {
                repo: repo.to_string(),
                quant,
            };
            record::write(models_dir, &model, &pulled.path)?;
        }
    }
    Ok(pulled)
}

/// What every file of one pull shares.
struct Pull<'a> {
    client: &'a client::Client,
    options: &'a HubOptions,
    cancel: &'a AtomicBool,
    models_dir: &'a Path,
}

impl Pull<'_> {
    /// Downloads `file` of `repo` to `dest`: the bytes fetched.
    fn fetch(
        &self,
        repo: &str,
        file: &RepoFile,
        dest: &Path,
        progress: &mut dyn FnMut(PullEvent),
    ) -> Result<u64> {
        fetch::fetch(
            self.client,
            repo,
            file,
            dest,
            self.options.retries,
            self.cancel,
            progress,
        )
    }

    /// One GGUF file, under its own name at the top of the models directory.
    fn gguf(
        &self,
        repo: &str,
        file: &RepoFile,
        progress: &mut dyn FnMut(PullEvent),
    ) -> Result<Pulled> {
        let models_dir = self.models_dir;
        let name = file.path.rsplit('/').next().unwrap_or(&file.path);
        let dest = models_dir.join(local_name(repo, name)?);
        let downloaded = if dest.exists() {
            if !fetch::matches(&dest, file)? {
                return Err(Error::hub(
                    repo,
                    format!(
                        "{} exists and is not the hub's {} (its size or checksum differs); \
                         move it away to pull",
                        dest.display(),
                        file.path
                    ),
                ));
            }
            0
        } else {
            self.fetch(repo, file, &dest, progress)?
        };
        Ok(Pulled {
            path: dest,
            format: ModelFormat::Gguf,
            file: Some(file.path.clone()),
            downloaded,
        })
    }

    /// A Hugging Face folder, named as the repository: its files arrive in a hidden
    /// `.NAME.part` folder, renamed once every file is complete, so that no half folder is
    /// ever listed as a model.
    fn folder(
        &self,
        model: &ModelRef,
        files: &[RepoFile],
        folder: &select::Folder,
        progress: &mut dyn FnMut(PullEvent),
    ) -> Result<Pulled> {
        let models_dir = self.models_dir;
        let name = local_name(&model.repo, model.name())?;
        let dest = models_dir.join(name);
        let pulled = |downloaded| Pulled {
            path: dest.clone(),
            format: ModelFormat::SafetensorsDir,
            file: None,
            downloaded,
        };
        if dest.exists() {
            if record::read(models_dir, model).as_deref() == Some(dest.as_path()) {
                return Ok(pulled(0));
            }
            return Err(Error::hub(
                &model.repo,
                format!(
                    "{} exists and was not pulled from {}; move it away to pull",
                    dest.display(),
                    model.repo
                ),
            ));
        }
        let staging = models_dir.join(format!(".{name}.part"));
        std::fs::create_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
        let mut downloaded = 0;
        let mut get = |file: &RepoFile, progress: &mut dyn FnMut(PullEvent)| -> Result<()> {
            let path = staging.join(&file.path);
            // A file in the staging folder was checked before its rename.
            if !path.exists() {
                downloaded += self.fetch(&model.repo, file, &path, progress)?;
            }
            Ok(())
        };
        for file in &folder.files {
            get(file, progress)?;
        }
        for file in select::weights(&model.repo, files, folder, &staging)? {
            get(file, progress)?;
        }
        std::fs::rename(&staging, &dest).map_err(|e| Error::io(&dest, e))?;
        Ok(pulled(downloaded))
    }
}

/// `name` as a file name in the models directory, refused where it could name another place
/// or a hidden file.
fn local_name<'a>(repo: &str, name: &'a str) -> Result<&'a str> {
    let bad = name.is_empty()
        || name.starts_with('.')
        || name
            .chars()
            .any(|c| c.is_control() || matches!(c, '/' | '\\' | ':'));
    if bad {
        return Err(Error::hub(
            repo,
            format!("`{name}` is not a file name to keep"),
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_llama_cpp_and_ollama_write_them() {
        let m = ModelRef::parse("bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M").unwrap();
        assert_eq!(m.repo, "bartowski/SmolLM2-135M-Instruct-GGUF");
        assert_eq!(m.quant.as_deref(), Some("Q4_K_M"));
        assert_eq!(m.name(), "SmolLM2-135M-Instruct-GGUF");
        assert_eq!(m.to_string(), "bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M");
        let m = ModelRef::parse("hf.co/unsloth/Qwen3-8B-GGUF:UD-Q4_K_XL").unwrap();
        assert_eq!(m.repo, "unsloth/Qwen3-8B-GGUF");
        assert_eq!(m.quant.as_deref(), Some("UD-Q4_K_XL"));
        let m = ModelRef::parse("https://huggingface.co/HuggingFaceTB/SmolLM2-135M").unwrap();
        assert_eq!(
            (m.repo.as_str(), m.quant),
            ("HuggingFaceTB/SmolLM2-135M", None)
        );
    }

    #[test]
    fn paths_and_plain_names_are_not_hub_names() {
        for name in [
            "smollm2-135m-instruct",
            "./models/x.gguf",
            "/abs/x.gguf",
            "a/b/c",
            "../x",
            "a/..",
            "a/b:",
            "a/b:Q4 K",
            "C:/models/x",
            "org/",
        ] {
            assert_eq!(ModelRef::parse(name), None, "{name}");
        }
    }

    #[test]
    fn the_token_file_follows_hf_home() {
        let home = Path::new("/home/u");
        assert_eq!(
            token_path(home, None),
            Path::new("/home/u/.cache/huggingface/token")
        );
        assert_eq!(
            token_path(home, Some(Path::new("/hf"))),
            Path::new("/hf/token")
        );
    }

    #[test]
    fn options_come_from_the_variables_given() {
        let dir = std::env::temp_dir().join(format!("hearth-hub-vars-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".cache/huggingface")).unwrap();
        std::fs::write(dir.join(".cache/huggingface/token"), "hf_file\n").unwrap();
        let none = |_: &str| None;
        let options = HubOptions::from_vars(none, &dir);
        assert_eq!(options.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(options.token.as_deref(), Some("hf_file"));
        let vars = |name: &str| match name {
            "HF_ENDPOINT" => Some("http://mirror".to_string()),
            "HF_TOKEN" => Some(" hf_var ".to_string()),
            _ => None,
        };
        let options = HubOptions::from_vars(vars, &dir);
        assert_eq!(options.endpoint, "http://mirror");
        assert_eq!(options.token.as_deref(), Some("hf_var"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn local_names_stay_in_the_models_directory() {
        assert!(local_name("o/r", "m-Q4_K_M.gguf").is_ok());
        for bad in ["", ".hidden", "a/b", "a\\b", "c:d"] {
            assert!(local_name("o/r", bad).is_err(), "{bad}");
        }
    }
}
