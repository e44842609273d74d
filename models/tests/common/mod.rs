//! Helpers shared by the integration tests: locating the installed test models.
#![allow(dead_code)]

use std::path::PathBuf;

/// The models directory: `$HEARTH_MODELS`, else `~/.cache/hearth/models`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HEARTH_MODELS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/hearth/models")
}

/// The path of an installed test model, or `None` (with a message) when it is missing on a
/// developer machine. In CI the models are always installed, so a missing one fails.
pub fn test_model(file: &str) -> Option<PathBuf> {
    let path = models_dir().join(file);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "{} is missing in CI (scripts/setup installs it)",
            path.display()
        );
    }
    eprintln!("skipping: {} not found (run scripts/setup)", path.display());
    None
}

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const MINILM: &str = "all-MiniLM-L6-v2";

/// A fresh, empty scratch directory under the system temp dir for one test.
pub fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hearth-models-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}
