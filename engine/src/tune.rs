//! Tuning a device's kernels for a model before it loads (`hearth_kernels::tune`): the
//! products the model runs, the tuning kept for the device and driver, a quick tune of what
//! it does not cover yet, and the choices handed to the device for its kernels.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hearth_kernels::tune::{MatvecVariant, Product, TuneOptions, TuneProgress, Tuning};
use hearth_kernels::vk::Device;
use hearth_model::{load_format, ModelConfig};
use hearth_models::spec::{MlpTensors, QkvTensors};
use hearth_models::{GgufFile, ResolvedModel};
use serde::Serialize;

/// Where tunings are kept and whether a device without one for the model is tuned on load.
#[derive(Clone, Debug)]
pub struct TuneSetting {
    /// The directory of kept tunings (one file per device and driver).
    pub dir: PathBuf,
    /// Tune what the kept tuning does not cover, within `budget`, before loading.
    pub tune_missing: bool,
    pub budget: Duration,
}

/// A tuned kernel shape a device uses, for reports (`hearth bench`'s JSON).
#[derive(Clone, Debug, Serialize)]
pub struct KernelVariant {
    /// "vulkan:N".
    pub device: String,
    pub format: String,
    pub tokens: u32,
    pub variant: MatvecVariant,
}

/// The tuned shapes `device` uses (none where it is untuned).
pub fn in_use(device: &Device) -> Vec<KernelVariant> {
    device
        .tuning()
        .list()
        .into_iter()
        .map(|(format, tokens, variant)| KernelVariant {
            device: format!("vulkan:{}", device.info().index),
            format,
            tokens,
            variant,
        })
        .collect()
}

/// How long the tune on a first load may take: a few seconds, once per device, driver and
/// kernel build.
pub const QUICK_BUDGET: Duration = Duration::from_secs(3);

/// The matrix-vector products a decode step of `model` runs, by format: the attention's
/// QKV and output projections, the MLP's gate/up and down, and the output head, each in the
/// format it loads as.
pub fn products(file: &GgufFile, model: &ResolvedModel, c: &ModelConfig) -> Vec<Product> {
    let t = &model.tensors;
    let Some(l) = t.layers.first() else {
        return Vec::new();
    };
    let (e, ff) = (c.n_embd as u32, c.n_ff as u32);
    let mut roles: Vec<(&str, u32, u32)> = Vec::new();
    match &l.qkv {
        QkvTensors::Separate { q, .. } => roles.push((&q.weight, c.qkv_dim() as u32, e)),
        QkvTensors::Fused(qkv) => roles.push((&qkv.weight, c.qkv_dim() as u32, e)),
        QkvTensors::Latent(lt) => roles.push((&lt.kv_a, c.qkv_dim() as u32, e)),
    }
    roles.push((&l.attn_output.weight, e, c.attn_dim() as u32));
    if let MlpTensors::Dense { up, down, .. } = &l.mlp {
        roles.push((&up.weight, 2 * ff, e));
        roles.push((&down.weight, e, ff));
    }
    let head = match t.tied_embeddings {
        true => &t.token_embd,
        false => &t.output,
    };
    roles.push((head, c.n_vocab as u32, e));
    let mut out: Vec<Product> = Vec::new();
    for (name, m, k) in roles {
        let Some(info) = file.tensor(name) else {
            continue;
        };
        let Ok(format) = load_format(info.ggml_type.id(), k as usize) else {
            continue;
        };
        match out.iter_mut().find(|p| p.format == format) {
            Some(p) => p.shapes.push([m, k]),
            None => out.push(Product {
                format,
                tokens: 1,
                shapes: vec![[m, k]],
            }),
        }
    }
    out
}

/// Hands `device` the tuning kept for it where it covers `products`; where it does not and
/// `setting` says so, tunes the rest first (quickly) and keeps the result. A tune that fails
/// leaves the device on its defaults, with a warning: tuning never stops a load.
pub fn prepare(device: &Arc<Device>, products: &[Product], setting: &TuneSetting) {
    let info = device.info();
    let mut tuning = Tuning::load(&setting.dir, info).unwrap_or_else(|| Tuning::for_device(info));
    if !tuning.covers(products) && setting.tune_missing {
        tracing::warn!(
            "tuning {} for this model's kernels (once per device and driver, at most {} s; \
             --no-tune skips it)",
            info.name,
            setting.budget.as_secs()
        );
        let options = TuneOptions {
            full: false,
            budget: setting.budget,
        };
        let mut quiet = |_: TuneProgress| {};
        match tuning.tune(device, products, options, &mut quiet) {
            Ok(()) => {
                if let Err(e) = tuning.save(&setting.dir) {
                    tracing::warn!("keeping the tuning in {}: {e}", setting.dir.display());
                }
            }
            Err(e) => {
                tracing::warn!("tuning {}: {e}; its kernels keep their defaults", info.name);
                return;
            }
        }
    }
    device.use_tuning(tuning.choices());
}
