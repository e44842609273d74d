//! RoPE as a file configures it: base, rotated dimensions, layout, and how the model extends
//! its context (linear, YaRN, LongRoPE).

use super::hparams::positive_count;
use super::{ModelSpec, PositionSpec, RopeLayout};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// RoPE parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Frequency base (theta).
    pub base: f32,
    /// Leading dimensions of each head that rotate; the rest pass through.
    pub dims: usize,
    pub layout: RopeLayout,
    /// Context extension from `{arch}.rope.scaling.type` and `.factor`.
    pub scaling: RopeScaling,
    /// The base local (windowed) layers rotate with, unscaled, where they have their own.
    pub local_base: Option<f32>,
    /// A factor on cos and sin (`{arch}.rope.scaling.attn_factor`: LongRoPE's).
    pub attn_factor: Option<f32>,
    /// The context before any extension (`{arch}.rope.scaling.original_context_length`, else
    /// the training context): where LongRoPE switches to its long factors.
    pub original_context: usize,
}

/// How a model stretches RoPE past the context it was trained with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (position interpolation).
    Linear {
        factor: f32,
    },
    /// YaRN: each pair's frequency blended between interpolated (divided by `factor`) and
    /// kept, by where its wavelength falls against the original context.
    Yarn(Yarn),
    /// Phi-3's LongRoPE (short and long factor tables).
    LongRope,
}

/// YaRN's parameters, as Hugging Face's `rope_scaling` of type `yarn` and llama.cpp's
/// `{arch}.rope.scaling.*` keys give them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    pub factor: f32,
    /// The context the model was trained with before the extension
    /// (`rope.scaling.original_context_length`; the training context without it).
    pub original_context: usize,
    /// Pairs turning more than `beta_fast` times over the original context keep their
    /// frequency; fewer than `beta_slow` times, are interpolated (32 and 1 by default).
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// How much of the kept frequencies the blend takes (1 by default: YaRN's ramp).
    pub ext_factor: f32,
    /// The factor on cos and sin, so on every score twice over (`yarn_attn_factor`; 0.1
    /// ln(factor) + 1 without it).
    pub attn_factor: f32,
    /// The correction range rounded outward to whole pairs (true but where the spec says
    /// otherwise: `position.yarn_truncate`, GPT-OSS).
    pub truncate: bool,
}

impl ModelSpec {
    /// RoPE's parameters from `{arch}.rope.*`, where the spec's position embedding is RoPE.
    pub(super) fn rope_params(
        &self,
        file: &GgufFile,
        key: &dyn Fn(&str) -> String,
        head_dim: usize,
        n_ctx_train: usize,
    ) -> Result<Option<RopeParams>> {
        let PositionSpec::Rope {
            layout,
            base_default,
            local_base_default,
            yarn_truncate,
            ..
        } = self.position
        else {
            return Ok(None);
        };
        let path = file.path();
        let usable_base = |k: &str, default: Option<f32>| -> Result<Option<f32>> {
            match file.get::<f32>(k)?.or(default) {
                Some(b) if !(b.is_finite() && b > 1.0) => Err(Error::metadata(
                    path,
                    k,
                    format!("{b} is not a usable RoPE base"),
                )),
                b => Ok(b),
            }
        };
        let base = usable_base(&key("rope.freq_base"), Some(base_default))?.unwrap_or(base_default);
        let local_base = usable_base(&key("rope.freq_base_swa"), local_base_default)?;
        let dims_key = key("rope.dimension_count");
        let dims = positive_count(file, &dims_key)?.unwrap_or(head_dim);
        if dims > head_dim || dims % 2 != 0 {
            return Err(Error::metadata(
                path,
                &dims_key,
                format!("{dims} is not an even number up to the head dimension {head_dim}"),
            ));
        }
        let scaling = match rope_scaling(file, key, n_ctx_train)? {
            RopeScaling::Yarn(y) => RopeScaling::Yarn(Yarn {
                truncate: yarn_truncate.unwrap_or(true),
                ..y
            }),
            other => other,
        };
        let original_key = key("rope.scaling.original_context_length");
        let original_context = positive_count(file, &original_key)?.unwrap_or(n_ctx_train);
        let attn_key = key("rope.scaling.attn_factor");
        let attn_factor = match file.get::<f32>(&attn_key)? {
            Some(f) if !(f.is_finite() && f > 0.0) => {
                return Err(Error::metadata(
                    path,
                    &attn_key,
                    format!("{f} is not a positive number"),
                ))
            }
            f => f,
        };
        Ok(Some(RopeParams {
            base,
            dims,
            layout,
            scaling,
            local_base,
            attn_factor,
            original_context,
        }))
    }
}

/// `{arch}.rope.scaling.type` and its factor (or the older `{arch}.rope.scale_linear`), as
/// llama.cpp's converter writes them; YaRN's other keys default as llama.cpp's do.
fn rope_scaling(
    file: &GgufFile,
    key: &dyn Fn(&str) -> String,
    n_ctx_train: usize,
) -> Result<RopeScaling> {
    let path = file.path();
    let (type_key, factor_key) = (key("rope.scaling.type"), key("rope.scaling.factor"));
    let factor = |k: &str| -> Result<f32> {
        let f: f32 = file
            .get(k)?
            .ok_or_else(|| Error::metadata(path, k, "missing"))?;
        if !(f.is_finite() && f > 0.0) {
            return Err(Error::metadata(
                path,
                k,
                format!("{f} is not a positive number"),
            ));
        }
        Ok(f)
    };
    let Some(kind) = file.get::<&str>(&type_key)? else {
        let legacy = key("rope.scale_linear");
        return Ok(match file.get::<f32>(&legacy)? {
            Some(_) => RopeScaling::Linear {
                factor: factor(&legacy)?,
            },
            None => RopeScaling::None,
        });
    };
    Ok(match kind {
        "none" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: factor(&factor_key)?,
        },
        "yarn" => {
            let factor = factor(&factor_key)?;
            let optional = |k: &str| -> Result<Option<f32>> {
                let k = key(k);
                match file.get::<f32>(&k)? {
                    Some(v) if !(v.is_finite() && v >= 0.0) => Err(Error::metadata(
                        path,
                        &k,
                        format!("{v} is not a usable number"),
                    )),
                    v => Ok(v),
                }
            };
            let original_key = key("rope.scaling.original_context_length");
            let original_context = match file.get::<u32>(&original_key)? {
                Some(0) => return Err(Error::metadata(path, &original_key, "must be positive")),
                Some(n) => n as usize,
                None => n_ctx_train,
            };
            RopeScaling::Yarn(Yarn {
                factor,
                original_context,
                beta_fast: optional("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
                beta_slow: optional("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
                ext_factor: optional("rope.scaling.yarn_ext_factor")?.unwrap_or(1.0),
                attn_factor: optional("rope.scaling.yarn_attn_factor")?
                    .unwrap_or(0.1 * factor.ln() + 1.0),
                truncate: true,
            })
        }
        "longrope" => RopeScaling::LongRope,
        other => {
            return Err(Error::metadata(
                path,
                &type_key,
                format!("unknown RoPE scaling `{other}` (none, linear, yarn, longrope)"),
            ))
        }
    })
}
