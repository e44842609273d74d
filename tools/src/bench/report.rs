//! What [`bench_model`](super::bench_model) returns: for each engine (one KV placement), one
//! row per test in llama-bench's JSON names, with Hearth's KV cache figures beside them.

use serde::{Serialize, Serializer};

use super::params::{Measured, ModelBenchParams, ModelSource, Test};
use super::stats::mean_sd;
use hearth_engine::{BackendKind, Engine, ModelInfo};
use hearth_model::kv::infinigen::{IgParams, IgStats};
use hearth_model::kv::policy::KvPolicyKind;
use hearth_model::kv::{serialize_kv_type, KvPlacement, KvShape, KvType, KvUsage};

/// One engine's results.
#[derive(Clone, Debug, Serialize)]
pub struct PlacementReport {
    /// Where the KV cache lives and how attention reads it: "none", "full", "infinigen" or
    /// "h2o" (the `--kv-offload` names).
    pub kv_offload: String,
    /// "Vulkan", "CPU" (the native executor) or "CPU reference".
    pub backend: String,
    /// "llama 135M Q4", "llama 7B Q4 (synthetic)".
    pub model_type: String,
    /// One per test, in the order they ran.
    pub rows: Vec<BenchRow>,
    /// The paged KV cache (Vulkan only).
    pub kv: Option<KvSummary>,
}

/// The paged KV cache an engine ran with.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct KvSummary {
    #[serde(serialize_with = "as_text")]
    pub placement: KvPlacement,
    #[serde(serialize_with = "serialize_kv_type")]
    pub kv_type: KvType,
    pub blocks: usize,
    pub block_tokens: usize,
    pub total_bytes: u64,
    /// Bytes of K and V of one position in one layer.
    pub bytes_per_token_layer: u64,
}

/// One test on one engine, with llama-bench's field names where it has them.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    pub build_commit: String,
    pub backends: String,
    pub gpu_info: String,
    pub model_filename: String,
    pub model_type: String,
    pub model_size: u64,
    pub model_n_params: u64,
    pub n_ubatch: usize,
    pub type_k: String,
    pub type_v: String,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub n_depth: usize,
    pub n_parallel: usize,
    pub avg_ns: u64,
    pub stddev_ns: u64,
    /// Tokens per second (every sequence's tokens).
    pub avg_ts: f64,
    pub stddev_ts: f64,
    pub samples_ns: Vec<u64>,
    pub samples_ts: Vec<f64>,
    pub kv_offload: String,
    /// Bytes of K and V of one position in one layer, as `type_k` / `type_v` store them.
    pub kv_bytes_per_token_layer: u64,
    /// KV blocks in use at the end of a repetition.
    pub kv_blocks_used: usize,
    pub kv_blocks_total: usize,
    /// KV cache bytes attention reads per generated token, on average over the test.
    pub kv_read_bytes_per_token: u64,
    pub kv_read_bytes_per_s: u64,
    /// Share of the tokens InfiniGen fetched in its sparse layers.
    pub ig_fetched_fraction: Option<f64>,
    pub ig_mean_fetched: Option<f64>,
    /// Share of the tokens H2O kept in its sparse layers.
    pub h2o_kept_fraction: Option<f64>,
    pub h2o_mean_kept: Option<f64>,
    /// With profiling: GPU time of InfiniGen's fetch per generated token, and the part of
    /// it alongside other kernels.
    pub ig_fetch_ms_per_token: Option<f64>,
    pub ig_fetch_overlap_ms_per_token: Option<f64>,
    /// Each executor of a split model (`--gpu-layers`, `--devices`): what it holds and its
    /// time per step; empty for a model on one executor.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartTime>,
    /// The tuned kernel shapes in use (`hearth tune`); empty where every kernel runs its
    /// default.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernel_variants: Vec<hearth_engine::tune::KernelVariant>,
}

/// One executor's share of a split model's test.
#[derive(Clone, Debug, Serialize)]
pub struct PartTime {
    /// "cpu" or "vulkan:N".
    pub executor: String,
    pub device: String,
    /// First layer and one past the last.
    pub layers: [usize; 2],
    pub weight_bytes: u64,
    pub kv_bytes: u64,
    /// Its time per step (per token generated in tg, per prompt in pp), milliseconds, the
    /// crossing of the hidden state to or from host memory included.
    pub ms_per_step: f64,
    /// Its share of the test's time (a row split's devices run at once, so theirs overlap).
    pub share: f64,
    /// Its share of the layers' heads and units, where they are divided by rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<hearth_model::Shard>,
}

impl BenchRow {
    /// The test this row measured.
    pub fn test(&self) -> Test {
        Test {
            n_prompt: self.n_prompt,
            n_gen: self.n_gen,
            depth: self.n_depth,
            parallel: self.n_parallel,
        }
    }

    /// Share of the tokens the sparse attention (InfiniGen or H2O) read in its layers.
    pub fn sparse_fraction(&self) -> Option<f64> {
        self.ig_fetched_fraction.or(self.h2o_kept_fraction)
    }
}

fn as_text<S: Serializer>(v: &impl std::fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// What every row of one engine shares.
struct Context<'a> {
    info: &'a ModelInfo,
    params: &'a ModelBenchParams,
    file_name: String,
    backend: &'static str,
    model_type: String,
    kv_offload: &'static str,
    kv: Option<(KvShape, KvUsage)>,
    ig_on: bool,
    h2o_on: bool,
    /// What each executor holds (one unless split).
    placed: Vec<hearth_model::PlacedPart>,
}

impl PlacementReport {
    pub(super) fn of(
        engine: &Engine,
        tests: &[Test],
        measured: &[Measured],
        params: &ModelBenchParams,
        source: ModelSource,
    ) -> Self {
        let info = engine.info();
        let placed = engine.placement();
        let on_cpu = placed.iter().any(|p| p.executor == "cpu");
        let backend = match info.backend {
            BackendKind::Vulkan if on_cpu => "CPU+Vulkan",
            BackendKind::Vulkan => "Vulkan",
            BackendKind::Cpu => "CPU",
            BackendKind::Reference => "CPU reference",
        };
        // The paged KV cache: where it lives, its blocks, and the bytes attention reads.
        let kv = engine.session().backend().as_batched().map(|m| {
            let kv = m.kv();
            (kv.placement(), kv.shape(), m.kv_usage())
        });
        let policy = engine.kv_policy_stats().map(|s| s.policy);
        let ig_on = policy == Some(KvPolicyKind::Infinigen);
        let h2o_on = policy == Some(KvPolicyKind::H2o);
        let kv_offload = match kv.map(|k| k.0) {
            Some(KvPlacement::Host) if ig_on => "infinigen",
            Some(KvPlacement::Host) => "full",
            _ if h2o_on => "h2o",
            _ => "none",
        };
        let cx = Context {
            info,
            params,
            file_name: info
                .path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            backend,
            model_type: model_type(info, source),
            kv_offload,
            kv: kv.map(|k| (k.1, k.2)),
            ig_on,
            h2o_on,
            placed,
        };
        Self {
            rows: tests
                .iter()
                .zip(measured)
                .map(|(t, m)| cx.row(t, m))
                .collect(),
            kv: kv.map(|(placement, shape, usage)| KvSummary {
                placement,
                kv_type: shape.kv_type,
                blocks: shape.blocks,
                block_tokens: hearth_model::kv::BLOCK_TOKENS,
                // Every part's, where the model is split.
                total_bytes: usage.bytes,
                bytes_per_token_layer: shape.token_layer_bytes(),
            }),
            kv_offload: kv_offload.into(),
            backend: backend.into(),
            model_type: cx.model_type,
        }
    }
}

/// The model as llama-bench names it, with the weight formats as the backend holds them,
/// most bytes first ("llama 135M Q4+Q8").
fn model_type(info: &ModelInfo, source: ModelSource) -> String {
    let weights: Vec<&str> = info.weight_formats.iter().map(|(f, _)| f.name()).collect();
    match source {
        ModelSource::File => format!(
            "{} {}M {}",
            info.architecture,
            (info.n_params as f64 / 1e6).round(),
            weights.join("+")
        ),
        ModelSource::Synthetic(preset) => format!(
            "{} {} {} (synthetic)",
            info.architecture,
            preset.size,
            weights.join("+")
        ),
    }
}

impl Context<'_> {
    fn row(&self, t: &Test, m: &Measured) -> BenchRow {
        let info = self.info;
        let kv_read = self.kv_read_per_token(t, m);
        let n = (t.n_prompt + t.n_gen * t.parallel) as f64;
        // Tokens generated over the timed repetitions.
        let generated = (t.n_gen * t.parallel * m.samples_ns.len()).max(1) as f64;
        let samples_ts: Vec<f64> = m.samples_ns.iter().map(|ns| n * 1e9 / ns).collect();
        let (avg_ns, stddev_ns) = mean_sd(&m.samples_ns);
        let (avg_ts, stddev_ts) = mean_sd(&samples_ts);
        let sparse = |on: bool, f: fn(&IgStats) -> f64| {
            m.sparse.filter(|s| on && s.selections > 0).map(|s| f(&s))
        };
        let fetch = |ns: f64| (m.fetch_ns > 0.0).then(|| ns / 1e6 / generated);
        BenchRow {
            build_commit: env!("CARGO_PKG_VERSION").into(),
            backends: self.backend.into(),
            gpu_info: info.device.clone(),
            model_filename: self.file_name.clone(),
            model_type: self.model_type.clone(),
            model_size: info.file_bytes,
            model_n_params: info.n_params,
            n_ubatch: self.params.n_ubatch,
            type_k: info.kv_type.name().into(),
            type_v: info.kv_type.name().into(),
            n_prompt: t.n_prompt,
            n_gen: t.n_gen,
            n_depth: t.depth,
            n_parallel: t.parallel,
            avg_ns: avg_ns.round() as u64,
            stddev_ns: stddev_ns.round() as u64,
            avg_ts,
            stddev_ts,
            samples_ns: m.samples_ns.iter().map(|&v| v.round() as u64).collect(),
            samples_ts,
            kv_offload: self.kv_offload.into(),
            kv_bytes_per_token_layer: (2 * info.config.n_head_kv) as u64
                * info.kv_type.bytes(info.config.head_dim) as u64,
            kv_blocks_used: m.kv_blocks_used,
            kv_blocks_total: self.kv.map_or(0, |k| k.1.blocks_used + k.1.blocks_free),
            kv_read_bytes_per_token: kv_read.round() as u64,
            kv_read_bytes_per_s: if avg_ns > 0.0 {
                (kv_read * (t.n_gen * t.parallel) as f64 * 1e9 / avg_ns).round() as u64
            } else {
                0
            },
            ig_fetched_fraction: sparse(self.ig_on, IgStats::fetched_fraction),
            ig_mean_fetched: sparse(self.ig_on, IgStats::mean_fetched),
            h2o_kept_fraction: sparse(self.h2o_on, IgStats::fetched_fraction),
            h2o_mean_kept: sparse(self.h2o_on, IgStats::mean_fetched),
            ig_fetch_ms_per_token: fetch(m.fetch_ns),
            ig_fetch_overlap_ms_per_token: fetch(m.fetch_overlap_ns),
            parts: self.parts(t, m),
            kernel_variants: info.kernel_variants.clone(),
        }
    }

    /// KV cache bytes a decode step of `t` reads on average. Decode step i (after the depth
    /// and the prompt) reads every cached position's K and V: depth + n_prompt + i + 1
    /// positions; under InfiniGen the sparse layers read only what they fetched, under H2O
    /// what they keep.
    /// Each executor's time per step, where the model is split.
    fn parts(&self, t: &Test, m: &Measured) -> Vec<PartTime> {
        if self.placed.len() < 2 || m.samples_ns.is_empty() {
            return Vec::new();
        }
        // Steps per repetition: one per generated token, or one per prompt.
        let steps = match t.n_gen {
            0 => 1,
            n => n,
        } * m.samples_ns.len();
        let total: f64 = m.samples_ns.iter().sum();
        self.placed
            .iter()
            .zip(&m.parts_ns)
            .map(|(p, &ns)| PartTime {
                executor: p.executor.clone(),
                device: p.device.clone(),
                layers: p.layers,
                weight_bytes: p.weight_bytes,
                kv_bytes: p.kv_bytes,
                ms_per_step: ns / 1e6 / steps as f64,
                share: if total > 0.0 { ns / total } else { 0.0 },
                shard: p.shard.clone(),
            })
            .collect()
    }

    fn kv_read_per_token(&self, t: &Test, m: &Measured) -> f64 {
        if t.n_gen == 0 {
            return 0.0;
        }
        let n_layer = self.info.config.n_layer as f64;
        let token_bytes = self.kv.map_or(0, |k| k.0.token_bytes()) as f64;
        let positions = (t.depth + t.n_prompt) as f64 + (t.n_gen as f64 + 1.0) / 2.0;
        let read_fraction = match &m.sparse {
            Some(s) if s.selections > 0 => {
                let dense = (IgParams::paper(true).dense_layers as f64).min(n_layer);
                (dense + (n_layer - dense) * s.fetched_fraction()) / n_layer
            }
            _ => 1.0,
        };
        token_bytes * positions * read_fraction
    }
}
