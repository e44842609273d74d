//! What every command that runs a model shares: which model, where it runs, how it samples,
//! and loading it with a progress bar.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use hearth_cpu::Activations;
use hearth_engine::split::{GpuLayers, SplitMode};
use hearth_engine::tune::TuneSetting;
use hearth_engine::{BackendKind, Engine, EngineOptions, H2oOptions, InfinigenOptions};
use hearth_model::kv::infinigen::evict::PoolCapacity;
use hearth_model::kv::KvBudget;
use hearth_model::kv::{KvPlacement, KvType};
use hearth_model::ProgressFn;
use hearth_models::hub::ModelRef;
use hearth_models::ModelSpec;
use hearth_quant::Format;
use indicatif::{ProgressBar, ProgressStyle};

use crate::DeviceChoice;

#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// Model: a path, a name in the models directory (`smollm2-135m-instruct`), or a
    /// Hugging Face hub name that `hearth pull` fetched (`ORG/REPO[:QUANT]`; see --pull).
    #[arg(short = 'm', long)]
    pub model: String,
    #[command(flatten)]
    pub run: RunArgs,
}

impl ModelArgs {
    /// Loads the model for one sequence at a time.
    pub fn load(&self, device: &DeviceChoice, n_ctx: Option<usize>) -> Result<Engine> {
        self.run
            .load(&self.model, device, self.run.cache(n_ctx, 1)?)
    }
}

/// Where `-m NAME` looks for models; shared by every command that takes a model.
#[derive(clap::Args, Debug)]
pub struct ModelsDirArg {
    /// Directory of installed models [default: ~/.cache/hearth/models].
    #[arg(long, env = "HEARTH_MODELS", value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
    /// Pull a model named ORG/REPO[:QUANT] from the Hugging Face hub where it is not in the
    /// models directory yet (as `hearth pull` does).
    #[arg(long)]
    pub pull: bool,
}

impl ModelsDirArg {
    pub fn dir(&self) -> PathBuf {
        self.models_dir.clone().unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .or_else(|| std::env::var_os("USERPROFILE"))
                .unwrap_or_default();
            hearth_models::default_models_dir(Path::new(&home))
        })
    }

    /// Where compiled Vulkan pipelines are kept between runs: `~/.cache/hearth/pipelines`,
    /// or none where `HEARTH_PIPELINE_CACHE` is `0` or there is no home directory.
    pub fn pipeline_cache(&self) -> Option<PathBuf> {
        if std::env::var_os("HEARTH_PIPELINE_CACHE").is_some_and(|v| v == "0") {
            return None;
        }
        let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE"))?;
        Some(hearth_models::default_pipeline_cache_dir(Path::new(&home)))
    }

    /// A model path for `name`: a path as given, a model in the models directory, or a hub
    /// name (`ORG/REPO[:QUANT]`) pulled before, or now where `--pull` asks.
    pub fn resolve(&self, name: &str) -> Result<PathBuf> {
        let dir = self.dir();
        let hub_name = ModelRef::parse(name).filter(|_| !Path::new(name).exists());
        if let Some(model) = &hub_name {
            if let Some(path) = hearth_models::hub::find_pulled(model, &dir) {
                return Ok(path);
            }
            if self.pull {
                let pulled = crate::hub::pull(model, &dir)?;
                eprintln!("pulled {model} into {}", pulled.path.display());
                return Ok(pulled.path);
            }
        }
        let found = hearth_models::resolve_model(name, &dir);
        match hub_name {
            Some(model) if found.is_err() => found.with_context(|| {
                format!(
                    "`{model}` is not pulled yet: add --pull, or run `hearth pull {model}` first"
                )
            }),
            _ => found.with_context(|| format!("finding model `{name}`")),
        }
    }
}

/// How and where a model runs.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub dir: ModelsDirArg,
    /// Run on the plain f32 CPU reference (slow; for checking results).
    #[arg(long)]
    pub cpu: bool,
    /// Keep every kernel's default shape: no tune of an untuned device on the first load
    /// of a model, and no kept tuning used (`hearth tune` tunes on demand).
    #[arg(long)]
    pub no_tune: bool,
    /// The CPU executor's worker threads; default: one per core.
    #[arg(long, short = 't', value_name = "N")]
    pub threads: Option<usize>,
    /// How the CPU executor's products take activations: q8 rounds them to 8 bits per 32
    /// values, as llama.cpp's CPU backend does (fast); f32 keeps them exact (the Vulkan
    /// path's precision, a few times slower).
    #[arg(long, default_value = "q8", value_name = "q8|f32")]
    pub activations: Activations,
    /// Most tokens per prefill submission (llama.cpp's ubatch).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub ubatch: usize,
    /// Time every kernel and print where the GPU time went (on stderr, at the end).
    #[arg(long)]
    pub profile: bool,
    /// Memory for the paged KV cache: bytes (`512MiB`, `2G`) or tokens (`32768t`)
    /// [default: every sequence at full context, within what fits after the weights].
    #[arg(long, value_name = "SIZE", value_parser = parse_kv_budget)]
    pub kv_budget: Option<KvBudget>,
    /// Where the KV cache lives: `none` in device memory, `full` in system memory the device
    /// reads directly (a context larger than device memory still runs), `infinigen` in system
    /// memory with decode attention over the speculated tokens only, `h2o` keeping only recent
    /// tokens and heavy hitters within InfiniGen's budget (the baseline). `hearth bench`
    /// takes a comma-separated list and compares them in one run.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "none")]
    pub kv_offload: Vec<KvOffload>,
    /// How the KV cache stores K and V: `f16` (2 bytes a value), `f32` (4), or `q8` (blocks
    /// of 32 signed bytes with an f32 scale: 1.125 bytes a value; head_dim a multiple of 32).
    /// The same --kv-budget holds twice as many tokens in f16 as in f32, 3.6 times in q8.
    #[arg(long, default_value = "f16", value_name = "TYPE", value_parser = parse_kv_type)]
    pub kv_type: KvType,
    /// A model spec (TOML, as in models/specs/) to run the file with instead of the shipped
    /// one for its architecture: a family of known atoms without rebuilding Hearth.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// Quantize the weights to this format while loading (`Q4`, `Q4_K`, `Q8`, ...; see
    /// `hearth quantize --help`): a Hugging Face folder's f16/bf16 weights, or a GGUF file's.
    #[arg(long, value_name = "FMT", value_parser = parse_format)]
    pub load_format: Option<hearth_quant::Format>,
    /// A chat template (a Jinja file, as Hugging Face's `chat_template`) in place of the
    /// model's own: for files whose template is missing or wrong, or to give a model a
    /// template that teaches tool calls.
    #[arg(long, value_name = "FILE")]
    pub chat_template_file: Option<PathBuf>,
    #[command(flatten)]
    pub split: SplitArgs,
    #[command(flatten)]
    pub infinigen: InfinigenArgs,
}

/// A model split between the CPU and Vulkan devices, or across devices.
#[derive(clap::Args, Debug)]
pub struct SplitArgs {
    /// Layers on the Vulkan device, the first ones on the CPU executor (llama.cpp's -ngl): a
    /// count, `all`, or `auto` (as many as the device's free memory holds after their KV
    /// cache and scratch). The output head goes with the last layer, the token embedding
    /// with the first [default: the whole model where --device says].
    #[arg(long, visible_alias = "n-gpu-layers", value_name = "N|auto|all")]
    pub gpu_layers: Option<GpuLayers>,
    /// Vulkan devices sharing the GPU layers, in order (`0,1`): each holds a run of
    /// consecutive layers and their KV cache.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub devices: Vec<usize>,
    /// Each device's share of the GPU layers (`3,1`), or with --split-mode row of each
    /// layer's heads and MLP units [default: by each device's free memory].
    #[arg(long, value_delimiter = ',', value_name = "SHARES")]
    pub tensor_split: Vec<f64>,
    /// How the GPU layers divide among --devices: `layer` (each device a run of whole
    /// layers), `row` (every layer's KV heads and MLP units divided among all of them, the
    /// partial sums added on the host twice a layer), or `row:N` (rows within groups of N
    /// devices, runs of layers across the groups).
    #[arg(
        long,
        visible_alias = "sm",
        value_name = "layer|row|row:N",
        default_value = "layer"
    )]
    pub split_mode: SplitMode,
    /// Device memory the model may take on each device, in bytes (`6GiB`) [default: what
    /// the device has free, less 512 MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub gpu_memory: Option<u64>,
}

impl SplitArgs {
    /// Asks for layers on Vulkan devices.
    pub fn splits(&self) -> bool {
        self.gpu_layers.is_some() || !self.devices.is_empty()
    }
}

/// A size in bytes: a number with an optional K/M/G suffix (powers of two, `B`/`iB`
/// optional).
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    match parse_kv_budget(s) {
        Ok(KvBudget::Bytes(b)) => Ok(b),
        _ => Err(format!("`{s}`: expected bytes like 512MiB or 6G")),
    }
}

/// InfiniGen's settings (with `--kv-offload infinigen`; `--ig-budget` is H2O's budget too).
#[derive(clap::Args, Debug)]
pub struct InfinigenArgs {
    /// Fraction of each head's dimensions kept as partial query and key columns [default: 0.2,
    /// and at least 32 columns; the paper's setting is 0.2].
    #[arg(long, value_name = "R")]
    pub ig_partial_ratio: Option<f32>,
    /// Fetch tokens whose speculated score is within ALPHA of the best [default: 5 with RoPE,
    /// 4 without, times 128 / head width on heads narrower than 128; the paper's: 5 and 4].
    #[arg(long, value_name = "ALPHA")]
    pub ig_alpha: Option<f32>,
    /// Most tokens fetched (InfiniGen) or kept (H2O) per KV head, as a fraction of the
    /// context so far [default: 0.2].
    #[arg(long, value_name = "FRACTION")]
    pub ig_budget: Option<f32>,
    /// The newest tokens, fetched always besides the speculated ones (0: InfiniGen's own
    /// rule) [default: 32].
    #[arg(long, value_name = "N")]
    pub ig_recent: Option<usize>,
    /// Text to calibrate the skew matrices on [default: a text Hearth ships].
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<std::path::PathBuf>,
    /// Most tokens a sequence's KV pool holds, as a fraction of the context (`0.5`) or tokens
    /// (`1024`); past that, the least fetched tokens outside the `--ig-recent` window are
    /// evicted, so generation runs on [default: the whole context].
    #[arg(long, value_name = "SIZE")]
    pub kv_pool_capacity: Option<PoolCapacity>,
    /// Run each layer's fetch apart from the previous layer's kernels instead of beside them
    /// (a barrier on each side): the difference in speed is what the overlap saves.
    #[arg(long)]
    pub ig_serial_fetch: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvOffload {
    None,
    Full,
    Infinigen,
    #[value(name = "h2o")]
    H2o,
}

impl KvOffload {
    pub fn placement(self) -> KvPlacement {
        match self {
            Self::None | Self::H2o => KvPlacement::Device,
            Self::Full | Self::Infinigen => KvPlacement::Host,
        }
    }
}

/// A `--kv-type` name; an unknown one's error lists the accepted names.
pub fn parse_kv_type(s: &str) -> std::result::Result<KvType, String> {
    s.parse()
        .map_err(|e: hearth_model::kv::UnknownKvType| e.to_string())
}

/// `4096t` / `4096 tokens` is tokens; a number with an optional K/M/G suffix (powers of two,
/// `B`/`iB` optional) is bytes.
pub fn parse_kv_budget(s: &str) -> std::result::Result<KvBudget, String> {
    let t = s.trim().to_ascii_lowercase();
    let bad = || format!("`{s}`: expected bytes like 512MiB or 2G, or tokens like 32768t");
    if let Some(n) = t.strip_suffix("tokens").or_else(|| t.strip_suffix('t')) {
        return n.trim().parse().map(KvBudget::Tokens).map_err(|_| bad());
    }
    let t = t.trim_end_matches("ib").trim_end_matches('b');
    let (num, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: f64 = num.trim().parse().map_err(|_| bad())?;
    if !(n.is_finite() && n > 0.0) {
        return Err(bad());
    }
    Ok(KvBudget::Bytes((n * (1u64 << shift) as f64) as u64))
}

/// The KV cache a model is loaded with: where it lives, how many positions, how many
/// sequences.
#[derive(Clone, Copy, Debug)]
pub struct CacheSpec {
    pub offload: KvOffload,
    /// `None`: the model's training context, at most 4096.
    pub n_ctx: Option<usize>,
    pub n_seq: usize,
}

impl RunArgs {
    /// A cache for `n_seq` sequences of `n_ctx` positions, placed as `--kv-offload` asks.
    pub fn cache(&self, n_ctx: Option<usize>, n_seq: usize) -> hearth_engine::Result<CacheSpec> {
        Ok(CacheSpec {
            offload: self.offload()?,
            n_ctx,
            n_seq,
        })
    }

    /// Loads the model with the KV cache `cache`, with a progress bar on stderr (hidden when
    /// stderr is not a terminal).
    pub fn load(&self, model: &str, device: &DeviceChoice, cache: CacheSpec) -> Result<Engine> {
        let path = self.dir.resolve(model)?;
        self.load_placed(device, cache, |options, progress| {
            Engine::load(&path, options, progress)
        })
        .with_context(|| format!("loading {}", path.display()))
    }

    /// The one KV placement asked for: only `hearth bench`'s pp and tg tests compare several.
    pub fn offload(&self) -> hearth_engine::Result<KvOffload> {
        match self.kv_offload.as_slice() {
            [one] => Ok(*one),
            _ => Err(hearth_engine::Error::Options {
                field: "kv-offload".into(),
                reason: "one placement at a time here; only `hearth bench`'s pp and tg tests \
                         compare several"
                    .into(),
            }),
        }
    }

    /// Runs `load` (an `Engine` constructor) with the KV cache `cache`, the other options
    /// from these arguments, and a progress bar on stderr.
    pub fn load_placed(
        &self,
        device: &DeviceChoice,
        cache: CacheSpec,
        load: impl FnOnce(&EngineOptions, &mut ProgressFn) -> hearth_engine::Result<Engine>,
    ) -> hearth_engine::Result<Engine> {
        let CacheSpec {
            offload,
            n_ctx,
            n_seq,
        } = cache;
        if self.infinigen.kv_pool_capacity.is_some() && offload != KvOffload::Infinigen {
            return Err(hearth_engine::Error::Options {
                field: "kv-pool-capacity".into(),
                reason: "evicts by InfiniGen's fetch counts: it needs --kv-offload infinigen"
                    .into(),
            });
        }
        let mut options = EngineOptions {
            backend: BackendKind::Reference,
            device: None,
            threads: self.threads,
            activations: self.activations,
            isa: device.isa,
            validate: device.validate,
            n_ctx,
            n_seq: n_seq.max(1),
            kv_budget: self.kv_budget,
            kv_placement: offload.placement(),
            kv_type: self.kv_type,
            max_chunk: self.ubatch.max(1),
            profile: self.profile,
            infinigen: (offload == KvOffload::Infinigen).then(|| InfinigenOptions {
                partial_ratio: self.infinigen.ig_partial_ratio,
                alpha: self.infinigen.ig_alpha,
                budget: self.infinigen.ig_budget,
                recent: self.infinigen.ig_recent,
                calibration: self.infinigen.calibration.clone(),
                pool_capacity: self.infinigen.kv_pool_capacity,
                serial_fetch: self.infinigen.ig_serial_fetch,
            }),
            h2o: (offload == KvOffload::H2o).then_some(H2oOptions {
                budget: self.infinigen.ig_budget,
            }),
            spec: match &self.spec {
                Some(path) => Some(ModelSpec::from_file(path)?),
                None => None,
            },
            load_format: self.load_format,
            gpu_layers: self.split.gpu_layers,
            devices: self.split.devices.clone(),
            tensor_split: self.split.tensor_split.clone(),
            split_mode: self.split.split_mode,
            gpu_memory: self.split.gpu_memory,
            pipeline_cache: self.dir.pipeline_cache(),
            tuning: match self.no_tune {
                true => None,
                false => hearth_models::user_tuning_dir().map(|dir| TuneSetting {
                    dir,
                    tune_missing: true,
                    budget: hearth_engine::tune::QUICK_BUDGET,
                }),
            },
            chat_template: match &self.chat_template_file {
                Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                    hearth_engine::Error::options(
                        "chat-template-file",
                        format!("{}: {e}", path.display()),
                    )
                })?),
                None => None,
            },
        };
        if !self.cpu {
            // Layers asked onto a device go to the best one where --device names none, even
            // where the default would be the CPU executor alone.
            let placement = match (device.placement, self.split.splits()) {
                (None, true) => hearth_engine::Placement::Vulkan(None),
                _ => device.placement(),
            };
            placement.apply(&mut options);
        }
        let engine = with_load_bar(|progress| load(&options, progress));
        // Say what `auto` chose: the user asked Hearth to decide.
        if let (Ok(e), Some(GpuLayers::Auto)) = (&engine, self.split.gpu_layers) {
            if let Some(plan) = &e.info().layer_plan {
                eprintln!(
                    "--gpu-layers auto: {} of {} layers on the GPU ({})",
                    plan.gpu_layers(),
                    e.info().config.n_layer,
                    plan.describe()
                );
            }
        }
        engine
    }
}

/// A weight format by name (`--load-format`, `hearth quantize`), or an error listing them.
fn valid_formats() -> String {
    Format::ALL.map(Format::name).join(", ")
}

pub(crate) fn parse_format(s: &str) -> std::result::Result<Format, String> {
    Format::from_name(s)
        .ok_or_else(|| format!("unknown format `{s}`; valid formats: {}", valid_formats()))
}

/// Runs `load` with a progress bar of the bytes read on stderr (hidden when stderr is not a
/// terminal).
pub fn with_load_bar<T>(load: impl FnOnce(&mut ProgressFn) -> T) -> T {
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template(
            "loading {msg:24!} [{bar:30}] {bytes}/{total_bytes} ({elapsed})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let loaded = load(&mut |p| {
        bar.set_length(p.total_bytes);
        bar.set_position(p.done_bytes);
        bar.set_message(p.tensor.to_string());
        true
    });
    bar.finish_and_clear();
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_type_names_the_accepted_ones() {
        assert_eq!(parse_kv_type("q8"), Ok(KvType::Q8));
        assert_eq!(parse_kv_type("F16"), Ok(KvType::F16));
        let err = parse_kv_type("q4_0").unwrap_err();
        assert!(
            err.contains("q4_0") && err.contains("f32, f16, q8"),
            "{err}"
        );
    }

    #[test]
    fn kv_budget_is_bytes_or_tokens() {
        assert_eq!(parse_kv_budget("32768t"), Ok(KvBudget::Tokens(32768)));
        assert_eq!(parse_kv_budget("4096 tokens"), Ok(KvBudget::Tokens(4096)));
        assert_eq!(parse_kv_budget("512MiB"), Ok(KvBudget::Bytes(512 << 20)));
        assert_eq!(parse_kv_budget("2G"), Ok(KvBudget::Bytes(2 << 30)));
        assert_eq!(parse_kv_budget("1.5k"), Ok(KvBudget::Bytes(1536)));
        assert!(parse_kv_budget("lots").is_err());
        assert!(parse_kv_budget("0").is_err());
    }
}
