//! A spec resolved against one model file: hyperparameters from the file's metadata and the
//! name of every weight tensor, each checked against the file's tensor index. The runtime
//! executes a [`ResolvedModel`] without looking at metadata or the spec text again.

use std::collections::HashSet;

use super::checker::Checker;
use super::{known_architectures, spec_for_architecture, HyperParams, ModelSpec, ModelTensors};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// A model ready to execute: its atoms (the spec), hyperparameters and tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedModel {
    /// `general.architecture`.
    pub architecture: String,
    pub spec: ModelSpec,
    pub hparams: HyperParams,
    pub tensors: ModelTensors,
    /// Tensors in the file the spec does not use (in file order); the runtime may refuse a
    /// model whose unused tensors change its meaning (such as `rope_freqs.weight`).
    pub unused_tensors: Vec<String>,
}

/// Resolves the shipped spec for the file's `general.architecture` against the file.
pub fn resolve_gguf(file: &GgufFile) -> Result<ResolvedModel> {
    let arch = file.architecture()?;
    let spec = spec_for_architecture(arch)?.ok_or_else(|| Error::UnknownArchitecture {
        path: file.path().to_path_buf(),
        arch: arch.to_string(),
        known: known_architectures(),
    })?;
    spec.resolve_gguf(file)
}

impl ModelSpec {
    /// Reads the hyperparameters from the file's `{arch}.*` metadata and checks every tensor
    /// this spec needs against the file's tensor index.
    pub fn resolve_gguf(&self, file: &GgufFile) -> Result<ResolvedModel> {
        let arch = file.architecture()?.to_string();
        let hparams = self.gguf_hparams(file, &arch)?;
        let mut checker = Checker {
            file,
            used: HashSet::new(),
        };
        let tensors = self.tensors_for(&hparams, &mut checker)?;
        let unused_tensors = file
            .tensors()
            .iter()
            .filter(|t| !checker.used.contains(&t.name))
            .map(|t| t.name.clone())
            .collect();
        // A query/key norm the file does not have (`attention.qk_norm_optional`) is none.
        let mut spec = self.clone();
        if tensors.layers.first().is_some_and(|l| l.q_norm.is_none()) {
            spec.attention.qk_norm = None;
        }
        Ok(ResolvedModel {
            architecture: arch,
            spec,
            hparams,
            tensors,
            unused_tensors,
        })
    }
}

/// Resolves `file` with `spec` where one is given (a user's), else with the shipped spec for
/// its architecture. A given spec must list the file's architecture.
pub fn resolve_with(file: &GgufFile, spec: Option<&ModelSpec>) -> Result<ResolvedModel> {
    let Some(spec) = spec else {
        return resolve_gguf(file);
    };
    let arch = file.architecture()?;
    if !spec.architectures.iter().any(|a| a == arch) {
        return Err(Error::spec(
            &spec.name,
            format!(
                "serves architectures {:?}, not `{arch}` of {}",
                spec.architectures,
                file.path().display()
            ),
        ));
    }
    spec.resolve_gguf(file)
}
