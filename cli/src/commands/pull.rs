//! `hearth pull`: a model from the Hugging Face hub into the models directory, by name, as
//! `ollama pull` and llama.cpp's `-hf` fetch one.

use std::path::PathBuf;

use anyhow::{bail, Result};
use hearth_models::hub::ModelRef;

use crate::model_args::ModelsDirArg;
use crate::output::{emit, size};

#[derive(clap::Args, Debug)]
pub struct PullArgs {
    /// The model on the hub: ORG/REPO, with :QUANT to choose one GGUF file of several
    /// (`bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M`; without it, Q4_K_M, else Q8_0, else
    /// the first, as llama.cpp chooses). A repository without GGUF files is pulled as a
    /// Hugging Face folder.
    #[arg(value_name = "ORG/REPO[:QUANT]")]
    pub model: String,
    /// Directory of installed models [default: ~/.cache/hearth/models].
    #[arg(long, env = "HEARTH_MODELS", value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
}

pub fn run(args: &PullArgs) -> Result<()> {
    let Some(model) = ModelRef::parse(&args.model) else {
        bail!(
            "`{}` is not a hub name: ORG/REPO or ORG/REPO:QUANT, such as \
             bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M",
            args.model
        );
    };
    let dir = ModelsDirArg {
        models_dir: args.models_dir.clone(),
        pull: false,
    }
    .dir();
    let pulled = crate::hub::pull(&model, &dir)?;
    let how = if pulled.downloaded == 0 {
        "already there, and matches the hub".to_string()
    } else {
        format!("{} fetched", size(pulled.downloaded))
    };
    emit(&format!(
        "{model}: {} ({how})\nrun it with: hearth chat -m {model}\n",
        pulled.path.display()
    ))
}
