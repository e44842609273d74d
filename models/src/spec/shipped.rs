//! The specs shipped with Hearth, embedded in the binary, and finding the one that serves an
//! architecture.

use super::ModelSpec;
use crate::error::Result;

/// The specs shipped with Hearth: (file name, TOML text).
pub(super) const SHIPPED: &[(&str, &str)] = &[
    ("llama.toml", include_str!("../../specs/llama.toml")),
    ("qwen2.toml", include_str!("../../specs/qwen2.toml")),
    ("qwen3.toml", include_str!("../../specs/qwen3.toml")),
    ("qwen2moe.toml", include_str!("../../specs/qwen2moe.toml")),
    ("qwen3moe.toml", include_str!("../../specs/qwen3moe.toml")),
    ("gemma2.toml", include_str!("../../specs/gemma2.toml")),
    ("gemma3.toml", include_str!("../../specs/gemma3.toml")),
    ("phi3.toml", include_str!("../../specs/phi3.toml")),
    ("olmoe.toml", include_str!("../../specs/olmoe.toml")),
    ("bert.toml", include_str!("../../specs/bert.toml")),
    ("t5.toml", include_str!("../../specs/t5.toml")),
    ("granite.toml", include_str!("../../specs/granite.toml")),
    ("smollm3.toml", include_str!("../../specs/smollm3.toml")),
    ("glm4.toml", include_str!("../../specs/glm4.toml")),
    ("gptoss.toml", include_str!("../../specs/gptoss.toml")),
    ("glm4moe.toml", include_str!("../../specs/glm4moe.toml")),
    ("deepseek2.toml", include_str!("../../specs/deepseek2.toml")),
];

/// Every shipped spec, parsed.
pub fn shipped_specs() -> Result<Vec<ModelSpec>> {
    SHIPPED
        .iter()
        .map(|(file, text)| ModelSpec::from_toml(file, text))
        .collect()
}

/// The shipped spec serving `general.architecture = arch`, or `None`.
pub fn spec_for_architecture(arch: &str) -> Result<Option<ModelSpec>> {
    Ok(shipped_specs()?
        .into_iter()
        .find(|s| s.architectures.iter().any(|a| a == arch)))
}

/// Architectures the shipped specs serve, for messages.
pub fn known_architectures() -> Vec<String> {
    shipped_specs()
        .map(|specs| specs.into_iter().flat_map(|s| s.architectures).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{MlpKind, NetworkType, NormKind, PositionSpec, RopeLayout, TiedEmbeddings};

    #[test]
    fn shipped_specs_parse() {
        let specs = shipped_specs().unwrap();
        let llama = &specs[0];
        assert_eq!(llama.architectures, vec!["llama".to_string()]);
        assert_eq!(llama.network, NetworkType::DecoderOnly);
        assert_eq!(llama.norm.kind, NormKind::Rms);
        assert_eq!(
            llama.position,
            PositionSpec::Rope {
                layout: RopeLayout::Gptj,
                base_default: 10_000.0,
                local_base_default: None,
                nope_period: None,
                yarn_truncate: None,
            }
        );
        assert_eq!(llama.mlp.kind, MlpKind::Gated);
        assert_eq!(llama.tied_embeddings, TiedEmbeddings::WhenOutputAbsent);
    }
}
