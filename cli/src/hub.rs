//! Pulling a model from the Hugging Face hub for `hearth pull` and `-m ORG/REPO --pull`: the
//! hub's address and token from the environment, a progress bar per file.

use std::path::Path;

use anyhow::{Context, Result};
use hearth_models::hub::{self, HubOptions, ModelRef, PullEvent, Pulled};
use indicatif::ProgressBar;

use crate::output;

/// The hub's address (`HF_ENDPOINT`) and a token: `HF_TOKEN`, else the file `HF_TOKEN_PATH`
/// names, else `$HF_HOME/token` or `~/.cache/huggingface/token` (where `huggingface-cli
/// login` keeps it).
pub fn options() -> HubOptions {
    let home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .unwrap_or_default();
    HubOptions::from_vars(|name| std::env::var(name).ok(), Path::new(&home))
}

/// Pulls `model` into `models_dir`, a progress bar per file on stderr (hidden when stderr is
/// not a terminal).
pub fn pull(model: &ModelRef, models_dir: &Path) -> Result<Pulled> {
    let mut bar: Option<ProgressBar> = None;
    let pulled = hub::pull(&options(), model, models_dir, &mut |event| match event {
        PullEvent::Start { file, size, done } => {
            let b = output::bytes_bar(size, file);
            b.set_position(done);
            bar = Some(b);
        }
        PullEvent::Progress { done } => {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        }
        PullEvent::Finish => {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
        }
    });
    // A pull that failed halfway says how far it came in its error.
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
    pulled.with_context(|| format!("pulling {model} into {}", models_dir.display()))
}
