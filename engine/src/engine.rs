//! The public API every frontend uses: load a model file onto a device (or the CPU
//! reference) with progress, then tokenize, render chats and generate with streaming.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hearth_models::{
    resolve_with, ChatMessage, ChatOptions, ChatTemplate, GgufFile, ModelSpec, Tokenizer,
    ToolCallFormat,
};

use crate::sample::beam_scores::{BeamParams, Hypothesis};
use crate::sched::Scheduler;
use crate::session::{GenerateParams, Generation, Session};
use hearth_cpu::{Activations, CpuOptions, Isa, NativeModel};
use hearth_kernels::WeightFormat;
use hearth_model::kv::infinigen::evict::PoolCapacity;
use hearth_model::kv::infinigen::{self, IgParams, Skew};
use hearth_model::kv::policy::{KvPolicyChoice, KvPolicyStats};
use hearth_model::kv::KvBudget;
use hearth_model::kv::{KvPlacement, KvType, KvUsage};
use hearth_model::Result;
use hearth_model::{Backend, ModelConfig, ProgressFn};
use hearth_reference::CpuModel;
use hearth_vulkan::VkModelOptions;

use crate::split::plan::{CacheSizes, LayerPlan};
use crate::split::{self, GpuLayers, SplitMode};
use crate::tune::{self, TuneSetting};

/// Where the model runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendKind {
    /// A Vulkan device.
    #[default]
    Vulkan,
    /// The native CPU executor (`--device cpu`).
    Cpu,
    /// The plain f32 CPU reference (slow; for checking results).
    Reference,
}

#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub backend: BackendKind,
    /// Vulkan device index; `None` picks the best device.
    pub device: Option<usize>,
    /// The CPU executor's worker threads (`--threads`); `None`: one per core.
    pub threads: Option<usize>,
    /// How the CPU executor's products take activations (`--activations`).
    pub activations: Activations,
    /// The CPU executor's instruction set (`--isa`); `None`: the best the CPU has.
    pub isa: Option<Isa>,
    /// Khronos validation layer on.
    pub validate: bool,
    /// Context length; `None` uses the model's training context, capped at 4096.
    pub n_ctx: Option<usize>,
    /// Sequences the KV cache serves at once (the scheduler's batch).
    pub n_seq: usize,
    /// KV pool size; `None`: every sequence at full context, within what fits after the weights.
    pub kv_budget: Option<KvBudget>,
    /// Where the KV blocks live (`--kv-offload none|full`).
    pub kv_placement: KvPlacement,
    /// How K and V are stored (`--kv-type`), by either backend.
    pub kv_type: KvType,
    /// Most tokens per prefill submission.
    pub max_chunk: usize,
    /// Time every kernel (Vulkan), reported by `Backend::profile`.
    pub profile: bool,
    /// InfiniGen decode attention (`--kv-offload infinigen`).
    pub infinigen: Option<InfinigenOptions>,
    /// H2O heavy-hitter eviction (`--kv-offload h2o`); not together with `infinigen`.
    pub h2o: Option<H2oOptions>,
    /// A spec of the user's (`--spec FILE`) in place of the shipped one for the file's
    /// architecture.
    pub spec: Option<ModelSpec>,
    /// Quantize the weights to this format while loading (`--load-format`): a Hugging Face
    /// folder's f16 or bf16 weights, or a GGUF file's, re-encoded as `hearth quantize` would.
    pub load_format: Option<hearth_quant::Format>,
    /// Layers on the Vulkan devices, the first ones on the native CPU executor
    /// (`--gpu-layers`); `None`: the whole model where `backend` says.
    pub gpu_layers: Option<GpuLayers>,
    /// Vulkan devices sharing the GPU layers, in order (`--devices 0,1`); empty: `device`.
    pub devices: Vec<usize>,
    /// Each device's share of the GPU layers (`--tensor-split 3,1`); empty: by free memory.
    pub tensor_split: Vec<f64>,
    /// Whole layers on each device, or every layer divided by rows among them
    /// (`--split-mode`).
    pub split_mode: SplitMode,
    /// Device memory the model may take on each device (`--gpu-memory`); `None`: what the
    /// device has free, less some headroom.
    pub gpu_memory: Option<u64>,
    /// Where compiled Vulkan pipelines are kept between runs (one file per device and
    /// driver); `None`: compiled afresh each run, unless the driver keeps its own.
    pub pipeline_cache: Option<PathBuf>,
    /// A chat template (Jinja source) in place of the file's (`--chat-template-file`).
    pub chat_template: Option<String>,
    /// Where the devices' kernel tunings are kept, and whether an untuned device is tuned
    /// for the model before it loads; `None`: every kernel takes its default shape.
    pub tuning: Option<TuneSetting>,
}

/// InfiniGen's settings as the user gives them (`--ig-*`, `--calibration`).
#[derive(Clone, Debug, Default)]
pub struct InfinigenOptions {
    /// Fraction of head_dim kept as partial columns; `None`: the model's default
    /// ([`IgParams::defaults`]: 0.2, and at least 32 columns).
    pub partial_ratio: Option<f32>,
    /// `None`: the model's default (5 for RoPE models, 4 otherwise, raised on heads narrower
    /// than 128).
    pub alpha: Option<f32>,
    /// Most tokens fetched, as a fraction of the context so far; `None`: 0.2.
    pub budget: Option<f32>,
    /// The newest tokens always fetched besides; `None`: 32.
    pub recent: Option<usize>,
    /// A text file to calibrate skewing on; `None`: the text Hearth ships.
    pub calibration: Option<PathBuf>,
    /// Most tokens a sequence's pool holds (evicting past that); `None`: the whole context.
    pub pool_capacity: Option<PoolCapacity>,
    /// Each layer's fetch apart from the previous layer's kernels (for measuring the overlap).
    pub serial_fetch: bool,
}

impl InfinigenOptions {
    /// The settings for a model with (or without) RoPE, heads of `head_dim` and a context of
    /// `n_ctx`.
    pub fn params(&self, rope: bool, head_dim: usize, n_ctx: usize) -> IgParams {
        let d = IgParams::defaults(rope, head_dim);
        IgParams {
            partial_ratio: self.partial_ratio.unwrap_or(d.partial_ratio),
            alpha: self.alpha.unwrap_or(d.alpha),
            budget: self.budget.unwrap_or(d.budget),
            recent: self.recent.unwrap_or(d.recent),
            pool_capacity: self.pool_capacity.map(|c| c.tokens(n_ctx)),
            serial_fetch: self.serial_fetch,
            ..d
        }
    }
}

/// H2O's settings as the user gives them: InfiniGen's budget, so the two compare.
#[derive(Clone, Debug, Default)]
pub struct H2oOptions {
    /// Most tokens kept per KV head, as a fraction of the context so far; `None`: 0.2.
    pub budget: Option<f32>,
}

impl H2oOptions {
    /// InfiniGen's budget, floor and dense layers (alpha and partial ratio go unused).
    pub fn params(&self, rope: bool) -> IgParams {
        let d = IgParams::paper(rope);
        IgParams {
            budget: self.budget.unwrap_or(d.budget),
            ..d
        }
    }
}

impl EngineOptions {
    /// The native CPU executor's options for a model without a KV cache of its own (an
    /// encoder's, an encoder-decoder's): the threads, instruction set and activations.
    pub(crate) fn cpu_compute(&self) -> CpuOptions {
        CpuOptions {
            threads: self.threads,
            isa: self.isa,
            activations: self.activations,
            ..CpuOptions::default()
        }
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            backend: BackendKind::Vulkan,
            device: None,
            threads: None,
            activations: Activations::default(),
            isa: None,
            validate: false,
            n_ctx: None,
            n_seq: 1,
            kv_budget: None,
            kv_placement: KvPlacement::Device,
            kv_type: KvType::default(),
            max_chunk: 256,
            profile: false,
            infinigen: None,
            h2o: None,
            spec: None,
            load_format: None,
            gpu_layers: None,
            devices: Vec::new(),
            tensor_split: Vec::new(),
            split_mode: SplitMode::Layer,
            gpu_memory: None,
            pipeline_cache: None,
            chat_template: None,
            tuning: None,
        }
    }
}

/// Facts about the loaded model, for reports and benchmarks.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub path: PathBuf,
    /// `general.name`, or the file name.
    pub name: String,
    pub architecture: String,
    pub config: ModelConfig,
    pub n_params: u64,
    /// Bytes of the file's tensor data (what llama-bench calls model_size).
    pub file_bytes: u64,
    /// Bytes of weights as the backend holds them.
    pub loaded_bytes: u64,
    /// Bytes of weight matrices per format as the backend holds them, most first.
    pub weight_formats: Vec<(WeightFormat, u64)>,
    /// Where it runs ("llvmpipe (LLVM 15.0.6, 256 bits)", "CPU reference").
    pub device: String,
    /// How the KV cache stores K and V.
    pub kv_type: KvType,
    pub backend: BackendKind,
    /// Where the layers went (one part unless the model is split).
    pub layer_plan: Option<LayerPlan>,
    /// The tuned kernel shapes its devices use (empty: every kernel's default).
    pub kernel_variants: Vec<tune::KernelVariant>,
}

pub struct Engine {
    info: ModelInfo,
    /// Shared with whoever tokenizes for the engine on other threads (`hearth serve`).
    tokenizer: Arc<Tokenizer>,
    template: Arc<ChatTemplate>,
    session: Session,
    /// Tokens the session's KV pool holds, when it evicts (`--kv-pool-capacity`).
    pool_capacity: Option<usize>,
}

/// Token ids of a conversation rendered with `template`, ending with the opening of an
/// assistant turn. Only the template's markup becomes control tokens: `<|im_end|>` typed in
/// a message is spelled out as ordinary tokens ([`hearth_models::chat_text`]).
pub fn chat_prompt(
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    messages: &[ChatMessage],
) -> Result<Vec<u32>> {
    let options = ChatOptions::for_tokenizer(tokenizer, true);
    // The template writes BOS itself where the model wants one; control-token text in a
    // message stays text.
    Ok(hearth_models::chat_text::encode_chat(
        tokenizer, template, messages, &options,
    )?)
}

/// A chat's prompt with `tools` offered, and the format the reply's calls are to be read
/// in: the template's own where it teaches one (Hermes, Llama 3, Mistral); otherwise the
/// tools are described in the system message and calls are asked for in the Hermes format
/// ([`hearth_models::hermes_conversation`]), which any instruction-following model can write.
pub fn tool_chat_prompt(
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    messages: &[ChatMessage],
    tools: &serde_json::Value,
) -> Result<(Vec<u32>, ToolCallFormat)> {
    match ToolCallFormat::of_template(template.source()) {
        Some(format) => {
            let options = ChatOptions {
                tools: Some(tools.clone()),
                ..ChatOptions::for_tokenizer(tokenizer, true)
            };
            let ids =
                hearth_models::chat_text::encode_chat(tokenizer, template, messages, &options)?;
            Ok((ids, format))
        }
        None => {
            let written = hearth_models::hermes_conversation(messages, tools);
            Ok((
                chat_prompt(tokenizer, template, &written)?,
                ToolCallFormat::Hermes,
            ))
        }
    }
}

impl Engine {
    /// Opens `path` (a GGUF file or a Hugging Face folder), loads its weights to the backend
    /// and builds the tokenizer and chat template. `progress` sees the loading (and any
    /// quantizing at load) advance and may cancel it.
    pub fn load(path: &Path, options: &EngineOptions, progress: &mut ProgressFn) -> Result<Self> {
        let file = hearth_models::open_model(path)?;
        let file = match options.load_format {
            Some(format) => {
                let opts = hearth_model::quantize::QuantizeOptions::new(format);
                hearth_model::quantize::quantize_in_memory(&file, &opts, &mut |p| {
                    progress(hearth_model::LoadProgress {
                        tensor: p.tensor,
                        done_bytes: p.done_bytes,
                        total_bytes: p.total_bytes,
                    })
                })?
            }
            None => file,
        };
        Self::load_file(file, options, progress)
    }

    /// [`load`](Self::load) for a file already open, or built in memory (`synthetic`). The
    /// file is dropped when loading ends: afterwards only the backend holds the weights.
    pub fn load_file(
        file: GgufFile,
        options: &EngineOptions,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let path = &file.path().to_path_buf();
        let model = resolve_with(&file, options.spec.as_ref())?;
        let config = ModelConfig::from_resolved(&file, &model)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let template = match &options.chat_template {
            Some(source) => ChatTemplate::new(source).map_err(|e| match e {
                hearth_models::Error::Template { line, message } => {
                    hearth_models::Error::Template {
                        line,
                        message: format!("--chat-template-file: {message}"),
                    }
                }
                e => e,
            })?,
            None => ChatTemplate::from_gguf(&file)?,
        };
        let n_ctx = n_ctx_for(options, &config)?;
        if options.infinigen.is_some() && options.h2o.is_some() {
            return Err(hearth_model::Error::options(
                "kv-offload",
                "infinigen and h2o cannot run together",
            ));
        }
        if options.infinigen.is_some() && config.nope_period.is_some() {
            return Err(hearth_model::Error::options(
                "kv-offload",
                "infinigen speculates every layer's keys as rotated, and this model has layers \
                 without RoPE (use full or h2o)",
            ));
        }
        let policy = match (&options.infinigen, &options.h2o) {
            (Some(_), _) => Some("infinigen"),
            (_, Some(_)) => Some("h2o"),
            _ => None,
        };
        if let (Some(policy), Some(_)) = (policy, &config.latent) {
            return Err(hearth_model::Error::options(
                "kv-offload",
                format!(
                    "{policy} does not run multi-head latent attention: its cache holds one \
                     latent per position rather than keys and values per head, which \
                     InfiniGen's per-head speculation and H2O's per-head scores do not apply \
                     to (use none or full)"
                ),
            ));
        }
        let ig_params = options
            .infinigen
            .as_ref()
            .map(|ig| ig.params(config.rope.is_some(), config.head_dim, n_ctx));
        let pool_capacity = ig_params.and_then(|p| p.pool_capacity);
        let n_params = config.n_params(model.tensors.tied_embeddings);
        // A pool capacity sizes the pool unless the budget says otherwise.
        let kv_budget = options.kv_budget.or_else(|| {
            let tokens = pool_capacity? * options.n_seq;
            Some(KvBudget::Tokens(tokens))
        });
        type Loaded = (
            Box<dyn Backend + Send>,
            String,
            Vec<(WeightFormat, u64)>,
            Option<LayerPlan>,
        );
        let vk_options = VkModelOptions {
            n_ctx,
            n_seq: options.n_seq,
            kv_budget,
            kv_placement: options.kv_placement,
            kv_type: options.kv_type,
            max_chunk: options.max_chunk,
            profile: options.profile,
        };
        let cpu_options = CpuOptions {
            n_ctx,
            n_seq: options.n_seq,
            kv_budget,
            kv_type: options.kv_type,
            threads: options.threads,
            isa: options.isa,
            max_chunk: options.max_chunk,
            activations: options.activations,
        };
        let splits = options.gpu_layers.is_some() || options.devices.len() > 1;
        let mut kernel_variants = Vec::new();
        let (mut backend, device, weight_formats, layer_plan): Loaded = match options.backend {
            BackendKind::Vulkan => {
                // Every load onto a device is planned, so that a model too large for it is
                // refused before anything is read.
                let devices = split::load::open_devices(options)?;
                if let Some(setting) = &options.tuning {
                    let products = tune::products(&file, &model, &config);
                    for d in &devices {
                        tune::prepare(d, &products, setting);
                    }
                }
                kernel_variants = devices.iter().flat_map(|d| tune::in_use(d)).collect();
                let split_options = split::load::SplitOptions {
                    gpu_layers: options.gpu_layers.unwrap_or(GpuLayers::Count(usize::MAX)),
                    shares: &options.tensor_split,
                    mode: options.split_mode,
                    gpu_memory: options.gpu_memory,
                    sizes: cache_sizes(options, n_ctx, kv_budget),
                    cpu: cpu_options,
                    vulkan: vk_options,
                };
                let config = &config;
                let l =
                    split::load::load(&file, &model, config, &devices, &split_options, progress)?;
                (l.backend, l.device, l.weight_formats, Some(l.plan))
            }
            BackendKind::Cpu if splits => {
                return Err(hearth_model::Error::options(
                    "gpu-layers",
                    "--device cpu runs every layer on the CPU; name a Vulkan device (or none) \
                     to put layers on it",
                ))
            }
            BackendKind::Cpu => {
                let m = NativeModel::load(&file, &model, cpu_options, progress)?;
                let formats = m.weight_formats();
                let device = format!("CPU ({}, {} threads)", m.isa(), m.threads());
                (Box::new(m), device, formats, None)
            }
            BackendKind::Reference if splits => {
                return Err(hearth_model::Error::options(
                    "gpu-layers",
                    "the CPU reference runs every layer itself",
                ))
            }
            BackendKind::Reference => {
                hearth_model::kv::check_kv_type(options.kv_type, config.head_dim)?;
                let mut m = CpuModel::load(&file, &model, n_ctx, progress)?;
                m.set_kv_type(options.kv_type);
                let formats = vec![(WeightFormat::F32, n_params * 4)];
                (Box::new(m), "CPU reference".to_string(), formats, None)
            }
        };
        if let Some(h2o) = &options.h2o {
            backend.set_kv_policy(KvPolicyChoice::H2o(h2o.params(config.rope.is_some())))?;
        }
        if let (Some(ig), Some(params)) = (&options.infinigen, ig_params) {
            let text = match &ig.calibration {
                Some(p) => std::fs::read_to_string(p).map_err(|e| hearth_model::Error::io(p, e))?,
                None => infinigen::CALIBRATION_TEXT.to_string(),
            };
            let skew = skew_for(&file, &model, &tokenizer, &text, backend.as_mut())?;
            let skew = &skew;
            backend.set_kv_policy(KvPolicyChoice::Infinigen { skew, params })?;
        }
        let name = model_name(&file)?;
        let info = ModelInfo {
            path: path.to_path_buf(),
            name,
            architecture: model.architecture.clone(),
            n_params,
            config,
            file_bytes: file.tensors().iter().map(|t| t.n_bytes).sum(),
            loaded_bytes: weight_formats.iter().map(|(_, b)| b).sum(),
            weight_formats,
            device,
            kv_type: options.kv_type,
            backend: options.backend,
            layer_plan,
            kernel_variants,
        };
        Ok(Self {
            info,
            tokenizer: Arc::new(tokenizer),
            template: Arc::new(template),
            session: Session::new(backend),
            pool_capacity,
        })
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Where [`load`](Self::load) would put the model's layers with `options`, and what each
    /// device would hold, without loading it (`hearth inspect --placement`).
    pub fn plan(path: &Path, options: &EngineOptions) -> Result<LayerPlan> {
        let file = hearth_models::open_model(path)?;
        let model = resolve_with(&file, options.spec.as_ref())?;
        let config = ModelConfig::from_resolved(&file, &model)?;
        let n_ctx = n_ctx_for(options, &config)?;
        let sizer = split::plan::Sizer {
            file: &file,
            model: &model,
            config: &config,
            sizes: cache_sizes(options, n_ctx, options.kv_budget),
        };
        let splits = options.gpu_layers.is_some() || options.devices.len() > 1;
        match options.backend {
            BackendKind::Vulkan => {
                let devices = split::load::open_devices(options)?;
                let rooms = split::load::rooms(&devices, options.gpu_memory);
                let gpu = options.gpu_layers.unwrap_or(GpuLayers::Count(usize::MAX));
                sizer.plan(gpu, &rooms, &options.tensor_split, options.split_mode)
            }
            _ if splits => Err(hearth_model::Error::options(
                "gpu-layers",
                "--device cpu runs every layer on the CPU",
            )),
            _ => sizer.plan(GpuLayers::Count(0), &[], &[], SplitMode::Layer),
        }
    }

    /// What each executor holds and how long its steps took (one part unless the model is
    /// split).
    pub fn placement(&self) -> Vec<hearth_model::PlacedPart> {
        self.session.backend().placement()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn chat_template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The tokenizer and chat template, for threads that prepare requests while the engine
    /// runs (a server's handlers).
    pub fn text_tools(&self) -> (Arc<Tokenizer>, Arc<ChatTemplate>) {
        (self.tokenizer.clone(), self.template.clone())
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Token ids of a plain-text prompt (with BOS where the model asks for it).
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text)
    }

    /// Token ids of a conversation rendered with the model's chat template, ending with the
    /// opening of an assistant turn.
    pub fn tokenize_chat(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        chat_prompt(&self.tokenizer, &self.template, messages)
    }

    /// What the KV policy (InfiniGen, H2O) read so far, when a sparse one runs.
    pub fn kv_policy_stats(&self) -> Option<KvPolicyStats> {
        self.session.backend().kv_policy_stats()
    }

    /// Blocks of the paged KV cache in use and free (executors with batched steps).
    pub fn kv_usage(&self) -> Option<KvUsage> {
        self.session.backend().as_batched().map(|m| m.kv_usage())
    }

    /// Pool eviction moves one sequence's K/V within its row, which rows sharing blocks (the
    /// scheduler's prefix sharing, beams) cannot allow.
    fn one_sequence_only(&self, what: &str) -> Result<()> {
        match self.pool_capacity {
            Some(tokens) => Err(hearth_model::Error::options(
                "kv-pool-capacity",
                format!("{what} is not available with an evicting pool ({tokens} tokens)"),
            )),
            None => Ok(()),
        }
    }

    /// A continuous-batching scheduler over the model's KV cache (the session's cache is
    /// emptied). Needs the Vulkan backend.
    pub fn scheduler(&mut self) -> Result<Scheduler<'_>> {
        self.one_sequence_only("batching")?;
        let (backend, draft) = self.session.batching_parts();
        let model = backend.as_batched_mut().ok_or_else(|| {
            hearth_model::Error::options("backend", "batching needs a Vulkan device")
        })?;
        Ok(Scheduler::new(model, &self.tokenizer).with_draft_model(draft))
    }

    /// Beam search from `prompt` over the indirect KV cache (needs `n_seq` >= the beam
    /// width); on the CPU reference, the copying reference search.
    pub fn beam_search(&mut self, prompt: &[u32], params: &BeamParams) -> Result<Vec<Hypothesis>> {
        self.one_sequence_only("beam search")?;
        let tokenizer = &self.tokenizer;
        let eos = |t| tokenizer.is_end_of_generation(t);
        let backend = self.session.fresh_backend();
        match backend.as_batched_mut() {
            Some(model) => crate::beam_search::search(model, prompt, params, eos),
            None => Err(hearth_model::Error::options(
                "beams",
                "beam search needs a Vulkan device",
            )),
        }
    }

    /// Loads `path` as the draft model for speculative decoding
    /// ([`DraftSource::Model`](crate::speculative::DraftSource)), with `options` (its own
    /// device and `load_format`; the context is the target's, one sequence, no sparse KV
    /// policy).
    pub fn load_draft(
        &mut self,
        path: &Path,
        options: &EngineOptions,
        progress: &mut ProgressFn,
    ) -> Result<()> {
        let draft = Engine::load(path, &self.draft_options(options), progress)?;
        self.attach_draft(draft)
    }

    /// `options` narrowed to what a draft model takes: the target's context, one sequence,
    /// no sparse KV policy.
    pub fn draft_options(&self, options: &EngineOptions) -> EngineOptions {
        EngineOptions {
            n_ctx: Some(self.session.backend().n_ctx()),
            n_seq: 1,
            kv_budget: None,
            infinigen: None,
            h2o: None,
            ..options.clone()
        }
    }

    /// Makes `draft`'s model this engine's draft model. It must have the target's
    /// vocabulary, token for token, and hold the target's context.
    pub fn attach_draft(&mut self, draft: Engine) -> Result<()> {
        crate::speculative::check_same_vocabulary(&self.tokenizer, &draft.tokenizer)?;
        let n_vocab = self.info.config.n_vocab;
        let model = crate::speculative::DraftModel::new(draft.session.into_backend(), n_vocab)?;
        self.session.set_draft_model(Some(model));
        Ok(())
    }

    /// Generates a continuation of `prompt` (the whole token sequence; a cached prefix is
    /// reused), streaming text to `on_text` until it returns `false`.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        self.session
            .generate(&self.tokenizer, prompt, params, on_text)
    }
}

/// The context `options` ask for: theirs, or the model's training context capped at 4096.
fn n_ctx_for(options: &EngineOptions, config: &ModelConfig) -> Result<usize> {
    match options.n_ctx {
        Some(0) => Err(hearth_model::Error::options("n_ctx", "must be at least 1")),
        Some(n) => Ok(n),
        None => Ok(config.n_ctx_train.min(4096)),
    }
}

/// What sizes each part's cache and scratch: every part keeps the pool `kv_budget` asks for
/// (every sequence at full context without one), except that a whole model on one device
/// without a budget takes what the weights leave.
fn cache_sizes(options: &EngineOptions, n_ctx: usize, kv_budget: Option<KvBudget>) -> CacheSizes {
    let splits = options.gpu_layers.is_some() || options.devices.len() > 1;
    CacheSizes {
        n_ctx,
        n_seq: options.n_seq,
        kv_budget,
        kv_type: options.kv_type,
        kv_placement: options.kv_placement,
        chunk: options.max_chunk,
        kv_fills_room: !splits && kv_budget.is_none(),
    }
}

/// The skew matrices for `file`: from the cache beside the model when they were computed for
/// the same file and calibration text, otherwise computed (on `backend` when it is the CPU
/// reference, else on a CPU reference loaded for it) and cached.
fn skew_for(
    file: &GgufFile,
    model: &hearth_models::ResolvedModel,
    tokenizer: &Tokenizer,
    text: &str,
    backend: &mut (dyn Backend + Send),
) -> Result<Skew> {
    let config = backend.config().clone();
    let tokens = tokenizer.encode(text);
    if tokens.len() < 16 {
        return Err(hearth_model::Error::options(
            "calibration",
            format!("{} tokens; at least 16 are needed", tokens.len()),
        ));
    }
    let tokens = &tokens[..tokens.len().min(config.n_ctx_train.min(2048))];
    let key = infinigen::skew_key(file.bytes(), tokens);
    let path = infinigen::skew_cache_path(file.path());
    if let Some(p) = &path {
        if let Some(skew) = Skew::load(p, key, &config) {
            tracing::info!("skew matrices from {}", p.display());
            return Ok(skew);
        }
    }
    tracing::info!(
        "computing skew matrices from {} calibration tokens",
        tokens.len()
    );
    let calibration = match backend.as_any_mut().downcast_mut::<CpuModel>() {
        Some(cpu) if cpu.n_ctx() >= tokens.len() => cpu.calibrate(tokens)?,
        _ => CpuModel::load(file, model, tokens.len(), &mut |_| true)?.calibrate(tokens)?,
    };
    let skew = Skew::from_calibration(&config, &calibration)?;
    if let Some(Err(e)) = path.map(|p| skew.save(&p, key)) {
        tracing::warn!("could not cache the skew matrices: {e}");
    }
    Ok(skew)
}

/// The model's name: `general.name`, else the file's (or folder's) name without extension.
pub(crate) fn model_name(file: &GgufFile) -> Result<String> {
    Ok(match file.get::<&str>("general.name")? {
        Some(name) => name.to_string(),
        None => file
            .path()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    })
}
