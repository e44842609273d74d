//! The families Hearth converts: every shipped spec with an `[hf]` table. A family lives in
//! its spec file; the table here is derived from the specs once, when a folder is first read.

use std::path::Path;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::spec::{shipped_specs, HfSpec, NetworkType};

/// A family as `config.json` names it (`[hf].classes`) and as GGUF files know it.
pub(crate) struct Family {
    /// The spec's name, for messages about it.
    pub spec: String,
    /// `general.architecture` of the converted file: the spec's first, which picks it again
    /// when the file is loaded.
    pub arch: String,
    /// How its folders convert.
    pub hf: HfSpec,
    /// Decoder or encoder: which tensor names its folders use.
    pub network: NetworkType,
}

/// The families, in the order the specs ship.
pub(crate) fn families() -> Result<&'static [Family]> {
    static FAMILIES: OnceLock<Vec<Family>> = OnceLock::new();
    if let Some(families) = FAMILIES.get() {
        return Ok(families);
    }
    let families = shipped_specs()?
        .into_iter()
        .filter_map(|spec| {
            let hf = spec.hf?;
            // Parsing checked that a spec serves at least one architecture.
            let arch = spec.architectures.into_iter().next()?;
            Some(Family {
                spec: spec.name,
                arch,
                hf,
                network: spec.network,
            })
        })
        .collect();
    Ok(FAMILIES.get_or_init(|| families))
}

impl Family {
    /// The family of the first of `classes` (`config.json`'s `architectures`, read from
    /// `path`) that one serves; none is an error listing every class Hearth converts.
    pub fn serving(path: &Path, classes: &[&str]) -> Result<&'static Family> {
        let families = families()?;
        let serves = |f: &&Family, c: &str| f.hf.classes.iter().any(|k| k == c);
        classes
            .iter()
            .find_map(|c| families.iter().find(|f| serves(f, c)))
            .ok_or_else(|| {
                let known: Vec<&str> = families
                    .iter()
                    .flat_map(|f| f.hf.classes.iter().map(String::as_str))
                    .collect();
                Error::metadata(
                    path,
                    "architectures",
                    format!(
                        "{classes:?} is no family Hearth converts (it converts {})",
                        known.join(", ")
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A class names one family, so which spec a folder gets does not hang on spec order.
    #[test]
    fn each_class_is_one_familys() {
        let mut classes: Vec<&str> = families()
            .unwrap()
            .iter()
            .flat_map(|f| f.hf.classes.iter().map(String::as_str))
            .collect();
        let n = classes.len();
        classes.sort_unstable();
        classes.dedup();
        assert_eq!(classes.len(), n, "{classes:?}");
        assert!(n > 0);
    }
}
