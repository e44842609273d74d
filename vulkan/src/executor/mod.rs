//! The Vulkan executor: weights in device buffers, the paged KV cache, and a step recorded
//! into a single command buffer and submission (embedding to logits, no CPU round trip
//! between kernels). A step may carry several sequences, each appending to its own cache row
//! (`step_batch`); the single-sequence `Backend` uses row 0.
//!
//! Weights stay packed in their formats (each matrix may have its own), and every product
//! runs the kernel variant for its matrix's format. Decode (up to a few tokens per sequence)
//! runs the weight-streaming matvec kernel with the block's RMSNorm, residual adds and SwiGLU
//! folded into it, and attention with RoPE and the K/V append folded in: five dispatches per
//! layer. Prefill (more tokens) uses flash-style attention and, on GPUs, tiled matrix-matrix
//! kernels; CPU devices keep the matvec kernel for prefill too, with several tokens sharing
//! each pass over the weights, in chunks of at most `chunk` tokens.

mod encoder;
mod kernels;
mod mlp;
mod plan;
mod policy;
mod rows;
mod step;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use hearth_models::{GgufFile, ResolvedModel};

use hearth_model::kv::KvBudget;
use hearth_model::{
    check_step, forward_steps, Backend, BatchedBackend, Error, Layer, Logits, Matrix, ModelConfig,
    Part, PlacedPart, Profile, ProgressFn, Projection, Result, SeqStep, Stage, StageOutput,
    Sublayer, WeightReader,
};

pub use self::encoder::VkEncoder;
pub use self::policy::FETCH_KERNELS;

use self::kernels::{FormatKernels, Kernels};
use self::policy::{Dense, KvPolicy, VkH2o};
use hearth_kernels::kv::policy::{KvPolicyChoice, KvPolicyStats};
use hearth_kernels::kv::{
    blocks_for, blocks_in_budget, KvCache, KvPlacement, KvShape, KvTables, KvType, KvUsage,
};
use hearth_kernels::vk::{Buffer, BufferDesc, Device, DeviceKind};
use hearth_kernels::{weight_buffer, WeightFormat};

#[derive(Clone, Copy, Debug)]
pub struct VkModelOptions {
    /// Most positions one sequence holds.
    pub n_ctx: usize,
    /// Sequences the cache can hold at once (rows of block tables).
    pub n_seq: usize,
    /// The KV pool's size; `None`: every sequence at full context, within what fits after
    /// the weights.
    pub kv_budget: Option<KvBudget>,
    pub kv_placement: KvPlacement,
    /// How K and V are stored.
    pub kv_type: KvType,
    /// Most tokens one prefill submission processes (scratch buffers are sized by it).
    pub max_chunk: usize,
    /// Time every kernel with timestamp queries (see [`VkModel::profile`]).
    pub profile: bool,
}

impl Default for VkModelOptions {
    fn default() -> Self {
        Self {
            n_ctx: 4096,
            n_seq: 1,
            kv_budget: None,
            kv_placement: KvPlacement::Device,
            kv_type: KvType::default(),
            max_chunk: 256,
            profile: false,
        }
    }
}

/// Headroom left free on the device when the KV budget is chosen automatically.
const KV_HEADROOM: u64 = 512 << 20;

/// A packed weight matrix on the device: [rows, k] in one format.
struct DeviceMatrix {
    buffer: Buffer,
    format: WeightFormat,
    rows: u32,
}

/// One block's weights on the device; norm gains in f32, and each matrix as its runs of rows
/// of one format (`Projection`): one run unless a fused projection joins parts of several
/// formats, each run a product of its own.
type DeviceLayer = Layer<Vec<DeviceMatrix>, Buffer>;

/// Activations for one chunk of `chunk` tokens.
struct Scratch {
    /// [chunk] token ids, written by the host each step.
    ids: Buffer,
    /// [chunk, n_embd] the residual stream.
    x: Buffer,
    /// [chunk, n_embd] normalised x (prefill).
    xn: Buffer,
    /// [chunk, qkv_dim]
    qkv: Buffer,
    /// [chunk, n_head * head_dim]
    att: Buffer,
    /// [chunk, 2 n_ff] (prefill)
    gate_up: Buffer,
    /// [chunk, n_ff]
    hidden: Buffer,
    /// [chunk] where each token belongs in the KV cache, written by the host each step.
    steps: Buffer,
    /// [chunk, n_embd] x of the tokens whose logits are wanted, gathered.
    sel: Buffer,
    /// [chunk, n_vocab], read by the host; [chunk, n_embd] where the model's last layers are
    /// another executor's (the residual stream they take).
    logits: Buffer,
    /// [chunk, n_embd] the residual stream from the executor holding the layers before,
    /// where this one does not start the model.
    hidden_in: Option<Buffer>,
    /// A mixture of experts' activations.
    moe: Option<MoeScratch>,
}

/// Activations of a mixture of experts for one chunk; a slot is one token's use of one
/// expert, `slots_per_token` per token (the routed experts', and the shared expert's).
struct MoeScratch {
    /// [chunk, n_expert (+ 1 for the shared expert's gate)]
    router: Buffer,
    /// [chunk * slots_per_token] each: the router's weight and the expert of each slot.
    weights: Buffer,
    experts: Buffer,
    /// The routed slots, expert by expert.
    order: Buffer,
    /// (expert, first index into order, slots, 0) for `max_tiles` tiles.
    tiles: Buffer,
    /// [chunk * slots_per_token, 2 n_ff_exp]: the grouped gate/up product's output (prefill on
    /// GPUs; CPU devices take the gated matvec).
    gate_up: Option<Buffer>,
    /// [chunk * slots_per_token, n_ff_exp]
    hidden: Buffer,
    /// [chunk * slots_per_token, n_embd]
    out: Buffer,
    /// The shared expert's [chunk, 2 n_ff_shexp] gate/up outputs (prefill) and [chunk,
    /// n_ff_shexp] hidden activations.
    shared: Option<(Buffer, Buffer)>,
}

pub struct VkModel {
    device: Arc<Device>,
    /// The model as the kernels run it: a row split's share of the heads and units.
    config: ModelConfig,
    /// The whole model's (what callers see).
    whole_config: ModelConfig,
    /// The layers held, with the embedding and head where they start and end the model.
    part: Part,
    /// [n_vocab, n_embd], where the part embeds tokens or ends the model with a head tied
    /// to the embedding.
    token_embd: Option<DeviceMatrix>,
    /// Where the part ends the model.
    output_norm: Option<Buffer>,
    /// [n_vocab, n_embd]; `None` when tied to `token_embd`, or where the part does not end
    /// the model.
    output: Option<DeviceMatrix>,
    /// The part's layers, the first being model layer `part.layers.start`.
    layers: Vec<DeviceLayer>,
    kv: KvCache,
    /// [n_ctx, rot_dim / 2] (cos, sin)
    rope_table: Buffer,
    /// The same for local layers that rotate with a base of their own.
    local_rope_table: Option<Buffer>,
    kernels: Kernels,
    scratch: Scratch,
    chunk: usize,
    /// Bytes of packed weight matrices per format.
    weight_bytes: Vec<(WeightFormat, u64)>,
    /// Running totals, when profiling.
    profile: Option<ProfileTotals>,
    /// InfiniGen fetch commands recorded since load, and how many of them shared a group
    /// (no barrier between) with the previous layer's kernels.
    fetch_alongside: (usize, usize),
    /// Which cached positions attention reads (`--kv-offload infinigen|h2o`).
    policy: Box<dyn KvPolicy>,
    /// Time spent in stage steps since load (a split model's report).
    busy_ns: u64,
    /// A row split's step under way.
    rows_step: Option<rows::RowsStep>,
}

/// What `--profile` has timed since load.
#[derive(Default)]
struct ProfileTotals {
    /// Per kernel: (GPU nanoseconds, dispatches).
    kernels: BTreeMap<&'static str, (f64, u64)>,
    /// See `Profile::fetch_overlap_ns`.
    fetch_overlap_ns: f64,
}

impl VkModel {
    pub fn load(
        device: &Arc<Device>,
        file: &GgufFile,
        model: &ResolvedModel,
        options: VkModelOptions,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        Self::load_part(device, file, model, options, None, progress)
    }

    /// Loads the layers `layers` only (`None`: the whole model), as one stage of a split
    /// model, with the embedding where they start the model and the head where they end it.
    pub fn load_part(
        device: &Arc<Device>,
        file: &GgufFile,
        model: &ResolvedModel,
        options: VkModelOptions,
        layers: Option<std::ops::Range<usize>>,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let n_layer = ModelConfig::from_resolved(file, model)?.n_layer;
        let part = Part::of(layers, n_layer)?;
        Self::load_stage(device, file, model, options, part, progress)
    }

    /// Loads `part`: its layers, or where it holds a row split's share, the share's heads and
    /// units of each.
    pub fn load_stage(
        device: &Arc<Device>,
        file: &GgufFile,
        model: &ResolvedModel,
        options: VkModelOptions,
        part: Part,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let whole_config = ModelConfig::from_resolved(file, model)?;
        if part.n_layer != whole_config.n_layer {
            return Err(Error::options(
                "layers",
                format!(
                    "a part of {} layers for a model of {}",
                    part.n_layer, whole_config.n_layer
                ),
            ));
        }
        // A row split's share runs as a model of its heads and units.
        let config = match &part.shard {
            Some(shard) => shard.config(&whole_config),
            None => whole_config.clone(),
        };
        let c = &config;
        if let Some(x) = &c.experts {
            hearth_kernels::check_experts(x).map_err(|what| hearth_model::Error::Unsupported {
                path: file.path().to_path_buf(),
                what: format!("a mixture of {what} on the Vulkan executor"),
            })?;
        }
        if let Some(l) = &c.latent {
            return Err(hearth_model::Error::Unsupported {
                path: file.path().to_path_buf(),
                what: format!(
                    "multi-head latent attention on the Vulkan executor yet (it needs \
                     per-head products of the queries with attn_k_b and of the attention's \
                     latents with attn_v_b, RoPE on the rotated parts alone, and attention \
                     kernels whose keys are {} values wide and whose values are the keys' first \
                     {}, read from the keys' cache); run it on the CPU executor (--device cpu)",
                    l.cache_dim(),
                    l.kv_lora
                ),
            });
        }
        if options.n_ctx == 0 {
            return Err(hearth_model::Error::options("n_ctx", "must be at least 1"));
        }
        hearth_kernels::kv::check_kv_type(options.kv_type, c.head_dim)?;
        // The logits of a whole chunk must fit one storage buffer.
        let max_range = device.info().limits.max_storage_buffer_range;
        let chunk = options
            .max_chunk
            .min((max_range / (c.n_vocab as u64 * 4)).max(1) as usize)
            .max(1);

        let mut reader = WeightReader::for_part(file, model, &whole_config, &part, progress);
        let mut weight_bytes: Vec<(WeightFormat, u64)> = Vec::new();
        // Each format's kernels are built on a thread of their own while the weights load. A
        // CPU device translates and optimizes a pipeline's SPIR-V when it is created (lavapipe
        // takes a third of a second for the unrolled prompt product), which, one pipeline after
        // another, held up every start by over a second.
        let (token_embd, output, layers, output_norm, formats, kernels) =
            std::thread::scope(|s| {
                let common = s.spawn(|| Kernels::new(device, c, options.kv_type, chunk));
                let mut building = Vec::new();
                let mut upload = |name: &str, w: Matrix| -> Result<DeviceMatrix> {
                    w.tally_into(&mut weight_bytes);
                    if building.iter().all(|(f, _)| *f != w.format) {
                        let format = w.format;
                        building
                            .push((format, s.spawn(move || FormatKernels::new(device, format))));
                    }
                    Ok(DeviceMatrix {
                        buffer: weight_buffer(device, name, &w.data)?,
                        format: w.format,
                        rows: w.rows as u32,
                    })
                };
                let tied = model.tensors.tied_embeddings;
                let token_embd = match part.embeds() || (part.heads() && tied) {
                    true => Some(upload("token_embd", reader.token_embd()?)?),
                    false => None,
                };
                let output = match (part.heads(), reader.output()?) {
                    (true, Some(w)) => Some(upload("output", w)?),
                    _ => None,
                };
                let mut layers = Vec::with_capacity(part.len());
                for l in part.layers.clone() {
                    let vector = |name: &str, gain: Vec<f32>| {
                        Buffer::from_slice(device, &format!("blk.{l}.{name}"), &gain)
                            .map_err(Error::from)
                    };
                    let matrix = |name: &str, w: Projection| {
                        let runs = w.runs.len();
                        let name = |i| match runs {
                            1 => format!("blk.{l}.{name}"),
                            _ => format!("blk.{l}.{name} run {i}"),
                        };
                        let uploads = w.runs.into_iter().enumerate();
                        uploads.map(|(i, run)| upload(&name(i), run)).collect()
                    };
                    let w = match &part.shard {
                        Some(shard) => shard.layer(&whole_config, l, reader.layer(l)?)?,
                        None => reader.layer(l)?,
                    };
                    layers.push(w.try_map(matrix, vector)?);
                }
                let output_norm = match part.heads() {
                    true => Some(Buffer::from_slice(
                        device,
                        "output_norm",
                        &reader.output_norm()?,
                    )?),
                    false => None,
                };
                reader.finish()?;
                let mut formats = HashMap::new();
                for (format, handle) in building {
                    let built = handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                    formats.insert(format, built);
                }
                let kernels = common
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                Ok::<_, Error>((token_embd, output, layers, output_norm, formats, kernels))
            })?;

        let weights: u64 = weight_bytes.iter().map(|(_, b)| b).sum();
        let kv = KvCache::new(
            device,
            kv_shape(device, c, &options, part.len(), weights)?,
            options.kv_placement,
        )?;
        let table = c.rope_table(options.n_ctx).unwrap_or(vec![[0.0; 2]]);
        let rope_table = Buffer::from_slice(device, "rope table", &table)?;
        let local_rope_table = match c.local_rope_table(options.n_ctx) {
            Some(t) => Some(Buffer::from_slice(device, "local rope table", &t)?),
            None => None,
        };

        let mut kernels = kernels?;
        kernels.products.formats = formats;
        let separate_act = c.mlp_act == hearth_model::ops::GatedAct::SwigluOai
            || layers.iter().any(|l| l.expert_bias.is_some());
        let f32s = |name: &str, n: usize| {
            Buffer::new(device, BufferDesc::device_local(name, (n * 4) as u64))
        };
        let scratch = Scratch {
            ids: Buffer::new(
                device,
                BufferDesc::host_visible("token ids", chunk as u64 * 4),
            )?,
            x: f32s("x", chunk * c.n_embd)?,
            xn: f32s("x normalised", chunk * c.n_embd)?,
            qkv: f32s("qkv", chunk * c.qkv_dim())?,
            att: f32s("attention output", chunk * c.attn_dim())?,
            gate_up: f32s("gate/up", chunk * 2 * c.n_ff)?,
            hidden: f32s("mlp hidden", chunk * c.n_ff)?,
            steps: Buffer::new(
                device,
                BufferDesc::host_visible("step tokens", chunk as u64 * 16),
            )?,
            sel: f32s("selected x", chunk * c.n_embd)?,
            logits: match part.heads() {
                true => Buffer::new(
                    device,
                    BufferDesc::readback("logits", (chunk * c.n_vocab.max(c.n_embd) * 4) as u64),
                )?,
                false => Buffer::new(
                    device,
                    BufferDesc::readback("hidden out", (chunk * c.n_embd * 4) as u64),
                )?,
            },
            // A row split's share takes the residual stream for every piece of a step.
            hidden_in: match part.embeds() && part.shard.is_none() {
                true => None,
                false => Some(Buffer::new(
                    device,
                    BufferDesc::host_visible("hidden in", (chunk * c.n_embd * 4) as u64),
                )?),
            },
            moe: match c.experts {
                Some(x) => {
                    let slots = chunk * hearth_kernels::slots_per_token(&x) as usize;
                    let routed = chunk * x.used;
                    // The most tiles: one slot a pass.
                    let tiles = hearth_kernels::max_tiles(routed as u32, x.count as u32, 1);
                    Some(MoeScratch {
                        router: f32s("router logits", chunk * x.router_rows())?,
                        weights: f32s("expert weights", slots)?,
                        experts: f32s("token experts", slots)?,
                        order: f32s("expert slots", routed)?,
                        tiles: f32s("expert tiles", 4 * tiles as usize)?,
                        // The grouped products' (GPUs), and the streaming products' where
                        // the experts' activation runs apart from them (biases, the clamped
                        // SwiGLU).
                        gate_up: match device.info().kind == DeviceKind::Cpu && !separate_act {
                            true => None,
                            false => Some(f32s("expert gate/up", slots * 2 * x.n_ff)?),
                        },
                        hidden: f32s("expert hidden", slots * x.n_ff)?,
                        out: f32s("expert outputs", slots * c.n_embd)?,
                        shared: match x.shared {
                            Some(sh) => Some((
                                f32s("shared expert gate/up", chunk * 2 * sh.n_ff)?,
                                f32s("shared expert hidden", chunk * sh.n_ff)?,
                            )),
                            None => None,
                        },
                    })
                }
                None => None,
            },
        };
        Ok(Self {
            device: device.clone(),
            config,
            whole_config,
            part,
            token_embd,
            output_norm,
            output,
            layers,
            kv,
            rope_table,
            local_rope_table,
            kernels,
            scratch,
            chunk,
            weight_bytes,
            profile: options.profile.then(ProfileTotals::default),
            fetch_alongside: (0, 0),
            policy: Box::new(Dense),
            busy_ns: 0,
            rows_step: None,
        })
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Bytes of weights on the device.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes.iter().map(|(_, b)| b).sum()
    }

    /// Bytes of weight matrices per format on the device, most first.
    pub fn weight_formats(&self) -> Vec<(WeightFormat, u64)> {
        let mut formats = self.weight_bytes.clone();
        formats.sort_by_key(|&(_, bytes)| std::cmp::Reverse(bytes));
        formats
    }

    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> u64 {
        self.kv.shape().total_bytes()
    }

    /// InfiniGen fetch commands recorded since load, and how many of them were recorded to
    /// run alongside the previous layer's kernels (see `Completed::alongside`).
    pub fn fetch_alongside(&self) -> (usize, usize) {
        self.fetch_alongside
    }

    pub fn kv(&self) -> &KvCache {
        &self.kv
    }

    pub fn kv_mut(&mut self) -> &mut KvCache {
        &mut self.kv
    }

    pub fn kv_usage(&self) -> KvUsage {
        self.kv.usage()
    }

    /// Makes row `dst` share the first `len` positions of row `src` (prefix sharing; blocks
    /// are copied on write), with the KV policy's state for them.
    pub fn fork(&mut self, src: usize, dst: usize, len: usize) {
        self.kv.fork(src, dst, len);
        self.policy.fork(src, dst, len);
    }

    /// What H2O's KV head `g` of layer `l` keeps in row `row` (positions ascending, and the
    /// mass of every position), when H2O is on and the layer runs it.
    pub fn h2o_head(
        &self,
        row: usize,
        l: usize,
        g: usize,
    ) -> Result<Option<hearth_kernels::kv::h2o::Head>> {
        let h2o = self.policy.as_any().downcast_ref::<VkH2o>();
        match h2o {
            Some(h2o) if h2o.applies(l) && l < self.config.n_layer && g < self.config.n_head_kv => {
                Ok(Some(h2o.head(row, l, g)?))
            }
            _ => Ok(None),
        }
    }

    /// `f` on this executor, its time added to the time its steps took (a split's report).
    fn timed<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let start = std::time::Instant::now();
        let out = f(self);
        self.busy_ns += start.elapsed().as_nanos() as u64;
        out
    }

    /// Most tokens one [`step_batch`](Self::step_batch) takes.
    pub fn max_step_tokens(&self) -> usize {
        self.chunk
    }
}

/// The cache's shape: every sequence at full context, within the budget (or, without one,
/// within the device memory left after the weights with some headroom).
fn kv_shape(
    device: &Device,
    c: &ModelConfig,
    options: &VkModelOptions,
    n_layer: usize,
    weights: u64,
) -> Result<KvShape> {
    let shape = KvShape {
        n_layer,
        ..KvShape::for_model(c, options.n_seq, options.n_ctx, options.kv_type)?
    };
    let full = options.n_seq * blocks_for(options.n_ctx);
    let info = device.info();
    let max_range = info.limits.max_storage_buffer_range;
    let blocks = match options.kv_budget {
        Some(KvBudget::Bytes(b)) => blocks_in_budget(&shape, b, max_range),
        Some(KvBudget::Tokens(t)) => {
            blocks_for(t).min(blocks_in_budget(&shape, u64::MAX, max_range))
        }
        None => {
            let heap = match options.kv_placement {
                KvPlacement::Device => info.device_local_bytes(),
                KvPlacement::Host => info.host_bytes(),
            };
            let room = heap.saturating_sub(weights).saturating_sub(KV_HEADROOM);
            full.min(blocks_in_budget(&shape, room, max_range))
        }
    };
    shape.with_blocks(blocks)
}

impl Backend for VkModel {
    // Callers see the whole model; `config` is what the kernels run (a row split's share).
    #[allow(clippy::misnamed_getters)]
    fn config(&self) -> &ModelConfig {
        &self.whole_config
    }

    fn as_batched_mut(&mut self) -> Option<&mut dyn BatchedBackend> {
        Some(self)
    }

    fn as_batched(&self) -> Option<&dyn BatchedBackend> {
        Some(self)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn set_kv_policy(&mut self, choice: KvPolicyChoice) -> Result<()> {
        choice.check_model(&self.config)?;
        if !self.part.is_whole() && !matches!(choice, KvPolicyChoice::Dense) {
            return Err(Error::options(
                "kv-offload",
                format!(
                    "{} needs every layer on one executor; this one holds layers {}..{}",
                    choice.kind(),
                    self.part.layers.start,
                    self.part.layers.end
                ),
            ));
        }
        // The old policy's buffers go before the new one's are made.
        self.policy = Box::new(Dense);
        self.policy = policy::start(&self.device, &self.config, &self.kv, self.chunk, choice)?;
        Ok(())
    }

    fn placement(&self) -> Vec<PlacedPart> {
        vec![self.placed()]
    }

    fn kv_policy_stats(&self) -> Option<KvPolicyStats> {
        self.policy.stats()
    }

    fn n_ctx(&self) -> usize {
        self.kv.shape().n_ctx
    }

    fn len(&self) -> usize {
        self.position(0)
    }

    fn truncate(&mut self, len: usize) {
        let kept = self.policy.truncate(self.kv.len(0), len);
        self.kv.truncate(0, kept);
    }

    fn profile(&self) -> Profile {
        let Some(totals) = &self.profile else {
            return Profile::default();
        };
        let kernels: Vec<(&'static str, f64, u64)> = totals
            .kernels
            .iter()
            .map(|(&k, &(ns, n))| (k, ns, n))
            .collect();
        let fetch_ns = kernels
            .iter()
            .filter(|k| FETCH_KERNELS.contains(&k.0))
            .map(|k| k.1)
            .sum();
        Profile {
            kernels,
            fetch_ns,
            fetch_overlap_ns: totals.fetch_overlap_ns,
        }
    }

    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        if !self.part.is_whole() {
            return Err(self.part.not_whole());
        }
        check_step(&self.config, tokens, self.position(0), self.n_ctx())?;
        let mut out = Vec::new();
        for (step, more) in forward_steps(tokens, self.chunk, logits) {
            let before = self.position(0);
            self.policy
                .begin_chunk(&mut self.kv, step.tokens.len(), more)?;
            let result = self.step_batch(&[step]);
            self.policy.end_chunk(result.is_ok())?;
            match result {
                Ok(mut logits) => out.extend(logits.remove(0)),
                Err(e) => {
                    self.truncate(before);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }
}

impl BatchedBackend for VkModel {
    fn kv(&self) -> &KvTables {
        self.kv.tables()
    }

    fn kv_mut(&mut self) -> &mut KvTables {
        self.kv.tables_mut()
    }

    fn fork(&mut self, src: usize, dst: usize, len: usize) {
        VkModel::fork(self, src, dst, len)
    }

    fn max_step_tokens(&self) -> usize {
        self.chunk
    }

    fn step_batch(&mut self, seqs: &[SeqStep]) -> Result<Vec<Vec<f32>>> {
        VkModel::step_batch(self, seqs)
    }

    fn set_beams(&self, row: usize, beams: &[u32]) -> Result<u32> {
        Ok(self.kv.set_beams(row, beams)?)
    }
}

impl Stage for VkModel {
    fn part(&self) -> &Part {
        &self.part
    }

    fn step_stage(&mut self, seqs: &[SeqStep], hidden: Option<&[f32]>) -> Result<StageOutput> {
        self.timed(|m| VkModel::step_stage(m, seqs, hidden))
    }

    fn begin_rows(&mut self, seqs: &[SeqStep]) -> Result<()> {
        self.timed(|m| VkModel::begin_rows(m, seqs))
    }

    fn step_rows(
        &mut self,
        seqs: &[SeqStep],
        sub: Sublayer,
        hidden: Option<&[f32]>,
    ) -> Result<StageOutput> {
        self.timed(|m| VkModel::step_rows(m, seqs, sub, hidden))
    }

    fn end_rows(&mut self, ok: bool) {
        VkModel::end_rows(self, ok)
    }

    fn into_backend(self: Box<Self>) -> Box<dyn Backend + Send> {
        self
    }

    fn placed(&self) -> PlacedPart {
        PlacedPart {
            executor: format!("vulkan:{}", self.device.info().index),
            device: self.device.info().name.clone(),
            layers: [self.part.layers.start, self.part.layers.end],
            embedding: self.token_embd.is_some() && self.part.embeds(),
            head: self.part.heads(),
            weight_bytes: self.weight_bytes(),
            kv_bytes: self.kv_bytes(),
            busy_ns: self.busy_ns,
            shard: self.part.shard.clone(),
        }
    }
}
