//! Speculative decoding's options, shared by the commands that generate.

use anyhow::{Context, Result};
use hearth_engine::speculative::{Acceptance, DraftSource, Speculative};
use hearth_engine::Engine;

use crate::model_args::{parse_format, CacheSpec, KvOffload, RunArgs};
use crate::DeviceChoice;

/// Draft tokens and let the model verify them in one step: the output is the same, faster
/// where drafts are accepted.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct DraftArgs {
    /// Speculative decoding: `lookup` drafts from n-grams of the prompt and the text so far
    /// (no second model); a model (path or name) drafts with that model, which must share
    /// the target's tokenizer; `self:FMT` drafts with this model's own weights quantized to
    /// FMT while loading (`self:Q3H`).
    #[arg(
        long,
        visible_alias = "model-draft",
        value_name = "lookup|MODEL|self:FMT"
    )]
    pub draft: Option<String>,
    /// Most tokens drafted per step [default: 16 from a model, 10 by lookup].
    #[arg(long, visible_alias = "draft-n", value_name = "N")]
    pub draft_max: Option<usize>,
    /// A draft model stops drafting at a token it gives less than this probability.
    #[arg(
        long,
        visible_alias = "draft-min-p",
        default_value_t = 0.8,
        value_name = "P"
    )]
    pub draft_p_min: f32,
    /// How drafts are accepted: `exact` keeps the model's output distribution; `pool`
    /// (the Inferflow report's top-k/top-p acceptance) keeps any drafted token the sampling
    /// filters leave, which accepts more and is no longer exact when sampling.
    #[arg(long, value_enum, default_value = "exact")]
    pub draft_accept: AcceptArg,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AcceptArg {
    #[default]
    Exact,
    Pool,
}

impl DraftArgs {
    /// The settings a generation takes, when drafting was asked for.
    pub fn speculative(&self) -> Result<Option<Speculative>> {
        let Some(draft) = &self.draft else {
            return Ok(None);
        };
        let base = if draft == "lookup" {
            Speculative::lookup()
        } else {
            Speculative::model()
        };
        if !(0.0..=1.0).contains(&self.draft_p_min) {
            anyhow::bail!(
                "--draft-p-min is {}; it must be in [0, 1]",
                self.draft_p_min
            );
        }
        let max = self.draft_max.unwrap_or(base.max);
        if max == 0 {
            anyhow::bail!("--draft-max must be at least 1");
        }
        Ok(Some(Speculative {
            max,
            p_min: if base.source == DraftSource::Model {
                self.draft_p_min
            } else {
                0.0
            },
            acceptance: match self.draft_accept {
                AcceptArg::Exact => Acceptance::Exact,
                AcceptArg::Pool => Acceptance::TopPool,
            },
            ..base
        }))
    }

    /// Loads the draft model into `engine`, where `--draft` names one, on the same device
    /// and with the same run options as the target.
    pub fn load(&self, engine: &mut Engine, run: &RunArgs, device: &DeviceChoice) -> Result<()> {
        let Some(draft) = self.draft.as_deref().filter(|d| *d != "lookup") else {
            return Ok(());
        };
        let (path, format) = match draft.strip_prefix("self:") {
            Some(fmt) => {
                let format = parse_format(fmt).map_err(anyhow::Error::msg)?;
                (engine.info().path.clone(), Some(format))
            }
            None => (run.dir.resolve(draft)?, None),
        };
        let cache = CacheSpec {
            offload: KvOffload::None,
            n_ctx: Some(engine.session().backend().n_ctx()),
            n_seq: 1,
        };
        let loaded = run
            .load_placed(device, cache, |options, progress| {
                let options = hearth_engine::EngineOptions {
                    load_format: format,
                    ..engine.draft_options(options)
                };
                Engine::load(&path, &options, progress)
            })
            .with_context(|| format!("loading the draft model {}", path.display()))?;
        engine
            .attach_draft(loaded)
            .with_context(|| format!("using {} as the draft model", path.display()))
    }
}
