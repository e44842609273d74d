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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use hearth_models::{GgufFile, ResolvedModel};

use super::h2o::VkH2o;
use super::infinigen::{Fetch, VkInfinigen, FETCH_KERNELS};
use super::{Backend, Logits, Matrix, ModelConfig, Profile, ProgressFn, WeightReader};
use crate::cpu::forward::check_step;
use crate::cpu::ops;
use crate::error::Error;
use crate::error::Result;
use crate::kernels::infinigen::IgToken;
use crate::kernels::{
    weight_buffer, AttnDecode, AttnPrefill, AttnShape, Embed, Matmul, Matvec, MatvecArgs, RmsNorm,
    RopeKv, RopeSpec, StepToken, SwiGlu, WeightFormat,
};
use crate::kv::infinigen::{IgParams, IgStats, Skew};
use crate::kv::{
    blocks_for, blocks_in_budget, KvCache, KvPlacement, KvShape, KvUsage, OutOfBlocks, NO_BEAM,
};
use crate::vk::{Buffer, BufferDesc, Device, DeviceKind, Recorder};

/// Most tokens a step runs through the decode (matrix-vector) path.
const DECODE_MAX_TOKENS: usize = 8;

/// How much memory the KV cache may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvBudget {
    Bytes(u64),
    Tokens(usize),
}

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
            max_chunk: 256,
            profile: false,
        }
    }
}

/// One sequence's part of a batched step: `tokens` appended to cache row `row`.
#[derive(Clone, Copy, Debug)]
pub struct SeqStep<'a> {
    pub row: usize,
    pub tokens: &'a [u32],
    /// Which logits to return for this sequence.
    pub logits: Option<Logits>,
    /// The row's beam table offset (from `KvCache::set_beams`), when it reads its history
    /// through one.
    pub beam: Option<u32>,
}

/// Headroom left free on the device when the KV budget is chosen automatically.
const KV_HEADROOM: u64 = 512 << 20;

/// Tokens of a prompt chunk that share one pass over the weights in the matvec kernel on CPU
/// devices (GPUs run prompts through matmul). With its loops unrolled (see `matvec.comp`)
/// the kernel keeps 16 tokens' x in registers. On lavapipe with SmolLM2, pp512 against 8
/// tokens a pass: Q4 166 -> 179, Q3H 126 -> 138, F16 96 -> 125, Q5 93 -> 123 tokens/s; Q6,
/// whose unpacking takes the most registers, ran 90 -> 74 and keeps 8.
fn prompt_pass_tokens(format: WeightFormat) -> u32 {
    match format {
        WeightFormat::Q6 => 8,
        _ => 16,
    }
}

/// A packed weight matrix on the device.
struct DeviceMatrix {
    buffer: Buffer,
    format: WeightFormat,
}

/// One block's weights on the device; matrices packed, norm gains in f32.
struct DeviceLayer {
    attn_norm: Buffer,
    wqkv: DeviceMatrix,
    wo: DeviceMatrix,
    ffn_norm: Buffer,
    w_gate_up: DeviceMatrix,
    w_down: DeviceMatrix,
}

/// The kernels that read weights, for one format.
struct FormatKernels {
    embed: Embed,
    /// One token per pass (decode).
    matvec: Matvec,
    /// Decode batches: up to `DECODE_MAX_TOKENS` tokens per pass.
    matvec_batch: Matvec,
    /// Decode batches of two, then up to four tokens, built when first needed (each pipeline
    /// adds a tenth of a second or more to a CPU device's start). A pass costs its kernel's
    /// tokens whatever the batch (every token's sums are unrolled on CPU devices), so two
    /// sequences on the eight-token kernel ran slower together than one alone.
    matvec_small: [OnceLock<Matvec>; 2],
    /// Prompt chunks on CPU devices, where `prompt_pass_tokens` exceeds a decode batch.
    matvec_prompt: Option<Matvec>,
    matmul: Matmul,
}

impl FormatKernels {
    /// The decode-batch product with the fewest tokens per pass that holds `batch`.
    fn batch_kernel(&self, device: &Device, batch: u32) -> Result<&Matvec> {
        let (slot, tokens) = match batch {
            2 => (&self.matvec_small[0], 2),
            3 | 4 => (&self.matvec_small[1], 4),
            _ => return Ok(&self.matvec_batch),
        };
        if let Some(kernel) = slot.get() {
            return Ok(kernel);
        }
        let kernel = Matvec::new(device, self.matvec.format(), tokens)?;
        Ok(slot.get_or_init(|| kernel))
    }

    fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        let cpu = device.info().kind == DeviceKind::Cpu;
        let prompt_tokens = prompt_pass_tokens(format);
        Ok(Self {
            embed: Embed::new(device, format)?,
            matvec: Matvec::new(device, format, 1)?,
            matvec_batch: Matvec::new(device, format, DECODE_MAX_TOKENS as u32)?,
            matvec_small: Default::default(),
            matvec_prompt: match cpu && prompt_tokens > DECODE_MAX_TOKENS as u32 {
                true => Some(Matvec::new(device, format, prompt_tokens)?),
                false => None,
            },
            matmul: Matmul::new(device, format)?,
        })
    }
}

struct Kernels {
    formats: HashMap<WeightFormat, FormatKernels>,
    /// Prefill through matvec (CPU devices) rather than matmul (GPUs).
    matvec_prefill: bool,
    rmsnorm: RmsNorm,
    swiglu: SwiGlu,
    rope_kv: RopeKv,
    attn_decode: AttnDecode,
    attn_prefill: AttnPrefill,
}

impl Kernels {
    /// The kernels that read no weights; `formats` is filled as the weights load.
    fn new(device: &Arc<Device>, c: &ModelConfig) -> Result<Self> {
        // Query heads sharing each KV head.
        let group = (c.n_head / c.n_head_kv.max(1)) as u32;
        Ok(Self {
            formats: HashMap::new(),
            matvec_prefill: device.info().kind == DeviceKind::Cpu,
            rmsnorm: RmsNorm::new(device)?,
            swiglu: SwiGlu::new(device)?,
            rope_kv: RopeKv::new(device)?,
            attn_decode: AttnDecode::new(device, c.head_dim as u32, group)?,
            attn_prefill: AttnPrefill::new(device, c.head_dim as u32, group)?,
        })
    }

    fn of(&self, format: WeightFormat) -> &FormatKernels {
        // Every matrix's format got its kernels when the matrix was uploaded.
        &self.formats[&format]
    }

    /// A weight-streaming product with `w` in its format, with the kernel whose tokens per
    /// pass fit the step: one, a decode batch's, or a prompt chunk's.
    fn matvec<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &DeviceMatrix,
        args: MatvecArgs<'a>,
    ) -> Result<()> {
        let f = self.of(w.format);
        let kernel = match (args.batch, &f.matvec_prompt) {
            (1, _) => &f.matvec,
            (batch, Some(prompt)) if batch as usize > DECODE_MAX_TOKENS => prompt,
            (batch, _) => f.batch_kernel(rec.device(), batch)?,
        };
        Ok(kernel.record(rec, args)?)
    }

    /// C [n, m] (+)= X [n, k] W^T through the tiled matmul for `w`'s format.
    #[allow(clippy::too_many_arguments)]
    fn matmul<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &'a DeviceMatrix,
        x: &'a Buffer,
        c: &'a Buffer,
        n: u32,
        m: u32,
        k: u32,
        accumulate: bool,
    ) -> Result<()> {
        let kernel = &self.of(w.format).matmul;
        Ok(kernel.record(rec, &w.buffer, x, c, n, m, k, accumulate)?)
    }
}

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
    /// [chunk, n_vocab], read by the host
    logits: Buffer,
}

pub struct VkModel {
    device: Arc<Device>,
    config: ModelConfig,
    /// [n_vocab, n_embd]
    token_embd: DeviceMatrix,
    output_norm: Buffer,
    /// [n_vocab, n_embd]; `None` when tied to `token_embd`.
    output: Option<DeviceMatrix>,
    layers: Vec<DeviceLayer>,
    kv: KvCache,
    /// [n_ctx, rot_dim / 2] (cos, sin)
    rope_table: Buffer,
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
    /// `--kv-offload infinigen`, when on.
    ig: Option<VkInfinigen>,
    /// `--kv-offload h2o`, when on.
    h2o: Option<VkH2o>,
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
        let config = ModelConfig::from_resolved(file.path(), model)?;
        let c = &config;
        if options.n_ctx == 0 {
            return Err(crate::Error::options("n_ctx", "must be at least 1"));
        }
        // The logits of a whole chunk must fit one storage buffer.
        let max_range = device.info().limits.max_storage_buffer_range;
        let chunk = options
            .max_chunk
            .min((max_range / (c.n_vocab as u64 * 4)).max(1) as usize)
            .max(1);

        let mut reader = WeightReader::new(file, model, c, progress);
        let mut weight_bytes: Vec<(WeightFormat, u64)> = Vec::new();
        // Each format's kernels are built on a thread of their own while the weights load. A
        // CPU device translates and optimizes a pipeline's SPIR-V when it is created (lavapipe
        // takes a third of a second for the unrolled prompt product), which, one pipeline after
        // another, held up every start by over a second.
        let (token_embd, output, layers, output_norm, formats, kernels) =
            std::thread::scope(|s| {
                let common = s.spawn(|| Kernels::new(device, c));
                let mut building = Vec::new();
                let mut upload = |name: &str, w: Matrix| -> Result<DeviceMatrix> {
                    match weight_bytes.iter_mut().find(|(f, _)| *f == w.format) {
                        Some((_, bytes)) => *bytes += w.data.len() as u64,
                        None => weight_bytes.push((w.format, w.data.len() as u64)),
                    }
                    if building.iter().all(|(f, _)| *f != w.format) {
                        let format = w.format;
                        building
                            .push((format, s.spawn(move || FormatKernels::new(device, format))));
                    }
                    Ok(DeviceMatrix {
                        buffer: weight_buffer(device, name, &w.data)?,
                        format: w.format,
                    })
                };
                let token_embd = upload("token_embd", reader.token_embd()?)?;
                let output = match reader.output()? {
                    Some(w) => Some(upload("output", w)?),
                    None => None,
                };
                let mut layers = Vec::with_capacity(c.n_layer);
                for l in 0..c.n_layer {
                    let w = reader.layer(l)?;
                    layers.push(DeviceLayer {
                        attn_norm: Buffer::from_slice(
                            device,
                            &format!("blk.{l}.attn_norm"),
                            &w.attn_norm,
                        )?,
                        wqkv: upload(&format!("blk.{l}.attn_qkv"), w.wqkv)?,
                        wo: upload(&format!("blk.{l}.attn_output"), w.wo)?,
                        ffn_norm: Buffer::from_slice(
                            device,
                            &format!("blk.{l}.ffn_norm"),
                            &w.ffn_norm,
                        )?,
                        w_gate_up: upload(&format!("blk.{l}.ffn_gate_up"), w.w_gate_up)?,
                        w_down: upload(&format!("blk.{l}.ffn_down"), w.w_down)?,
                    });
                }
                let output_norm =
                    Buffer::from_slice(device, "output_norm", &reader.output_norm()?)?;
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
            kv_shape(device, c, &options, weights)?,
            options.kv_placement,
        )?;
        let table = match c.rope {
            Some(r) => ops::rope_table(options.n_ctx, r.dims, r.base as f64),
            None => vec![[0.0; 2]],
        };
        let rope_table = Buffer::from_slice(device, "rope table", &table)?;

        let mut kernels = kernels?;
        kernels.formats = formats;
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
            logits: Buffer::new(
                device,
                BufferDesc::readback("logits", (chunk * c.n_vocab * 4) as u64),
            )?,
        };
        Ok(Self {
            device: device.clone(),
            config,
            token_embd,
            output_norm,
            output,
            layers,
            kv,
            rope_table,
            kernels,
            scratch,
            chunk,
            weight_bytes,
            profile: options.profile.then(ProfileTotals::default),
            fetch_alongside: (0, 0),
            ig: None,
            h2o: None,
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
    /// are copied on write), InfiniGen's partial keys included.
    pub fn fork(&mut self, src: usize, dst: usize, len: usize) {
        self.kv.fork(src, dst, len);
        if let Some(ig) = &mut self.ig {
            ig.fork(src, dst, len);
        }
        if let Some(h2o) = &mut self.h2o {
            h2o.fork(src, dst, len);
        }
    }

    /// What H2O's KV head `g` of layer `l` keeps in row `row` (positions ascending, and the
    /// mass of every position), when H2O is on and the layer runs it.
    pub fn h2o_head(&self, row: usize, l: usize, g: usize) -> Result<Option<crate::kv::h2o::Head>> {
        match &self.h2o {
            Some(h2o) if h2o.applies(l) && l < self.config.n_layer && g < self.config.n_head_kv => {
                Ok(Some(h2o.head(row, l, g)?))
            }
            _ => Ok(None),
        }
    }

    /// Most tokens one [`step_batch`](Self::step_batch) takes.
    pub fn max_step_tokens(&self) -> usize {
        self.chunk
    }

    /// Runs one step over several sequences (at most `max_step_tokens` tokens in all) in one
    /// submission, and returns each sequence's requested logits ([rows, n_vocab], empty when
    /// none were asked for). Each sequence's tokens go to its row at the row's next positions.
    pub fn step_batch(&mut self, seqs: &[SeqStep]) -> Result<Vec<Vec<f32>>> {
        let n: usize = seqs.iter().map(|s| s.tokens.len()).sum();
        if n > self.chunk {
            return Err(Error::options(
                "tokens",
                format!("a step takes at most {} tokens, got {n}", self.chunk),
            ));
        }
        let n_ctx = self.kv.shape().n_ctx;
        let mut needed = 0;
        for s in seqs {
            if s.row >= self.kv.shape().rows {
                return Err(Error::options("row", format!("no cache row {}", s.row)));
            }
            check_step(&self.config, s.tokens, self.position(s.row), n_ctx)?;
            needed += self.kv.blocks_needed(s.row, s.tokens.len());
        }
        let free = self.kv.pool().free_blocks();
        if needed > free {
            return Err(OutOfBlocks { needed, free }.into());
        }
        if let Some(h2o) = &mut self.h2o {
            if seqs.iter().any(|s| s.beam.is_some()) {
                return Err(Error::options(
                    "kv-offload",
                    "h2o does not run with beam search",
                ));
            }
            for s in seqs {
                h2o.sync(s.row, self.kv.len(s.row))?;
            }
        }
        // Short sequences (decode) first, so one decode-attention dispatch covers them; each
        // longer run gets a prefill-attention dispatch of its own.
        let mut order: Vec<usize> = (0..seqs.len()).collect();
        order.sort_by_key(|&i| seqs[i].tokens.len() > DECODE_MAX_TOKENS);
        let mut ids = Vec::with_capacity(n);
        let mut steps = Vec::with_capacity(n);
        let mut runs = Vec::with_capacity(seqs.len()); // (seq, t0, tokens, old len)
        let mut copies = Vec::new();
        for &i in &order {
            let s = &seqs[i];
            let len = self.kv.len(s.row);
            let pos = self.position(s.row);
            runs.push((i, ids.len(), s.tokens.len(), len));
            for (j, &id) in s.tokens.iter().enumerate() {
                ids.push(id);
                steps.push(StepToken {
                    beam: s.beam.unwrap_or(NO_BEAM),
                    rope_pos: (pos + j) as u32,
                    ..StepToken::new(s.row as u32, (len + j) as u32)
                });
            }
            // Counted above, so this cannot run out.
            copies.extend(self.kv.append(s.row, s.tokens.len())?);
        }
        let result = self.record_step(&ids, &steps, &runs, seqs, &copies);
        if result.is_err() {
            // Nothing was written: the rows go back to their old lengths.
            for &(i, _, _, len) in &runs {
                self.kv.truncate(seqs[i].row, len);
            }
        }
        result
    }

    /// The next token's position in `row`'s sequence: its entries, and more once its pool has
    /// evicted tokens.
    fn position(&self, row: usize) -> usize {
        self.kv.len(row) + self.ig.as_ref().map_or(0, |ig| ig.evicted(row))
    }

    fn record_step(
        &mut self,
        ids: &[u32],
        steps: &[StepToken],
        runs: &[(usize, usize, usize, usize)],
        seqs: &[SeqStep],
        copies: &[crate::kv::BlockCopy],
    ) -> Result<Vec<Vec<f32>>> {
        self.kv.sync_tables()?;
        let c = &self.config;
        let n = ids.len();
        let (e, vocab) = (c.n_embd as u32, c.n_vocab as u32);
        let s = &self.scratch;
        let k = &self.kernels;
        s.ids.upload(0, ids)?;
        s.steps.upload(0, steps)?;

        let shape = |t0: usize, tokens: usize| AttnShape {
            tokens: tokens as u32,
            t0: t0 as u32,
            n_head: c.n_head as u32,
            n_head_kv: c.n_head_kv as u32,
            head_dim: c.head_dim as u32,
        };
        let all = shape(0, n);
        // Decode tokens come first: every run of at most DECODE_MAX_TOKENS.
        let decode_tokens: usize = runs
            .iter()
            .filter(|r| r.2 <= DECODE_MAX_TOKENS)
            .map(|r| r.2)
            .sum();
        // The most positions a decode token attends to (its own included).
        let longest = steps[..decode_tokens]
            .iter()
            .map(|st| st.pos + 1)
            .max()
            .unwrap_or(0);
        let fused = decode_tokens > 0
            && runs
                .iter()
                .filter(|r| r.2 <= DECODE_MAX_TOKENS)
                .all(|r| r.2 == 1);
        // InfiniGen's and H2O's sparse decode: every sequence brings one token (token t is
        // run t), has history and reads no beam table. For InfiniGen, a step where some
        // history is short enough for the floor and the recent window to cover attends
        // densely.
        let decodes: Vec<IgToken> = if (self.ig.is_some() || self.h2o.is_some())
            && runs
                .iter()
                .all(|r| r.2 == 1 && r.3 > 0 && seqs[r.0].beam.is_none())
        {
            runs.iter()
                .map(|&(i, t0, _, len)| IgToken {
                    row: seqs[i].row as u32,
                    index: len as u32,
                    pos: steps[t0].rope_pos,
                })
                .collect()
        } else {
            Vec::new()
        };
        let (sparse, fetches_all) = match &self.ig {
            Some(ig)
                if decodes
                    .iter()
                    .any(|d| ig.params.fetches_all(d.index as usize)) =>
            {
                (Vec::new(), decodes)
            }
            _ => (decodes, Vec::new()),
        };
        let prefill_runs: Vec<(usize, usize)> = runs
            .iter()
            .filter(|r| r.2 > DECODE_MAX_TOKENS)
            .map(|r| (r.1, r.2))
            .collect();
        let rope = RopeSpec {
            rot_dim: c.rope.map_or(0, |r| r.dims as u32),
            layout: c.rope.map_or(ops::RopeLayout::Neox, |r| r.layout),
        };
        let (qkv_dim, attn_dim, n_ff) = (c.qkv_dim() as u32, c.attn_dim() as u32, c.n_ff as u32);
        let eps = c.norm_eps;
        let head = self.output.as_ref().unwrap_or(&self.token_embd);

        // A few tokens run weight-streaming products; longer steps run tiled matmuls on GPUs
        // (CPU devices stream for prefill too).
        let streaming = n <= DECODE_MAX_TOKENS || k.matvec_prefill;
        let t = n as u32;
        // H2O's decode attends over kept positions: a prompt's held entries join them first.
        if let Some(h2o) = &mut self.h2o {
            for d in &sparse {
                h2o.settle(d.row as usize)?;
            }
        }
        // The sparse tokens, with their budgets, where the InfiniGen or H2O kernels read them.
        let ig_steps = match (&self.ig, &self.h2o) {
            _ if sparse.is_empty() => Vec::new(),
            (Some(ig), _) => ig.set_step(&sparse)?,
            (None, Some(h2o)) => h2o.set_step(&sparse)?,
            (None, None) => Vec::new(),
        };
        // A dense step under H2O adds each run's attention to its row's masses.
        let dense_runs: Vec<(usize, &[StepToken])> = match &self.h2o {
            Some(_) if sparse.is_empty() => runs
                .iter()
                .map(|&(_, t0, tokens, _)| (t0, &steps[t0..t0 + tokens]))
                .collect(),
            _ => Vec::new(),
        };
        let mut rec = if self.profile.is_some() {
            Recorder::timed(&self.device)?
        } else {
            Recorder::new(&self.device)?
        };
        self.kv.record_copies(&mut rec, copies)?;
        if let Some(ig) = &self.ig {
            ig.record_forks(&mut rec)?;
        }
        let ek = k.of(self.token_embd.format);
        ek.embed
            .record(&mut rec, &self.token_embd.buffer, &s.ids, &s.x, t, vocab, e)?;
        for (l, w) in self.layers.iter().enumerate() {
            let kv = self.kv.layer(l);
            let table = &self.rope_table;
            let sparse_here = !sparse.is_empty()
                && (self.ig.as_ref().is_some_and(|ig| ig.sparse_layer(l))
                    || self.h2o.as_ref().is_some_and(|h2o| h2o.applies(l)));
            // H2O's masses read the rotated queries, which only rope_kv leaves in qkv.
            let h2o_dense_here =
                sparse.is_empty() && self.h2o.as_ref().is_some_and(|h2o| h2o.applies(l));
            // The next layer's fetch, when it attends sparsely: its query from this layer's
            // input, then speculation, selection and gather, each step recorded after one of
            // this layer's kernels so that a GPU runs the two together (`Fetch`).
            let mut fetch_next = match (&self.ig, self.layers.get(l + 1)) {
                (Some(ig), Some(next)) if !sparse.is_empty() && ig.sparse_layer(l + 1) => {
                    k.matvec(
                        &mut rec,
                        &next.wqkv,
                        MatvecArgs {
                            // Its W_Q rows come first in the fused projection. The
                            // next layer's gain, as its own query will have.
                            norm: Some((&next.attn_norm, eps)),
                            ..MatvecArgs::plain(&next.wqkv.buffer, &s.x, &ig.q_spec, attn_dim, e, t)
                        },
                    )?;
                    let batch = ig.batch(&ig_steps);
                    Some(ig.fetch(l + 1, self.kv.layer(l + 1), table, rope, batch))
                }
                _ => None,
            };
            if streaming {
                let mv = |w, x, y, m, kk| MatvecArgs::plain(w, x, y, m, kk, t);
                k.matvec(
                    &mut rec,
                    &w.wqkv,
                    MatvecArgs {
                        norm: Some((&w.attn_norm, eps)),
                        ..mv(&w.wqkv.buffer, &s.x, &s.qkv, qkv_dim, e)
                    },
                )?;
            } else {
                k.rmsnorm
                    .record(&mut rec, &s.x, &w.attn_norm, &s.xn, t, e, eps)?;
                k.matmul(&mut rec, &w.wqkv, &s.xn, &s.qkv, t, qkv_dim, e, false)?;
            }
            // A pure decode step (one token per sequence) stores K/V from the attention
            // kernel itself; RoPE and the append run apart for the rest.
            let fused_here = fused && !sparse_here && !h2o_dense_here;
            let rest = if fused_here {
                shape(decode_tokens, n - decode_tokens)
            } else {
                all
            };
            let before = rec.len();
            k.rope_kv
                .record(&mut rec, &s.qkv, table, kv, &s.steps, rest, rope)?;
            if let Some(f) = fetch_next.as_mut().filter(|_| rec.len() > before) {
                f.step(&mut rec)?;
            }
            let decode = shape(0, decode_tokens);
            if let (true, Some(ig)) = (sparse_here, &self.ig) {
                let batch = ig.batch(&ig_steps);
                ig.record_attention(&mut rec, l, &s.qkv, qkv_dim, kv, &s.att, batch)?;
            } else if let (true, Some(h2o)) = (sparse_here, &self.h2o) {
                let batch = h2o.batch(&ig_steps);
                h2o.record_decode(&mut rec, l, &s.qkv, qkv_dim, kv, &s.att, batch)?;
            } else if fused_here {
                k.attn_decode.record_fused(
                    &mut rec, &s.qkv, table, kv, &s.steps, &s.att, decode, rope, longest,
                )?;
            } else if decode_tokens > 0 {
                k.attn_decode
                    .record(&mut rec, &s.qkv, kv, &s.steps, &s.att, decode, longest)?;
            }
            for &(t0, tokens) in &prefill_runs {
                k.attn_prefill
                    .record(&mut rec, &s.qkv, kv, &s.steps, &s.att, shape(t0, tokens))?;
            }
            if let (true, Some(h2o)) = (h2o_dense_here, &self.h2o) {
                h2o.record_dense(&mut rec, l, &s.qkv, qkv_dim, kv, &s.steps, &dense_runs)?;
            }
            Fetch::step_of(&mut fetch_next, &mut rec)?;
            if let Some(ig) = self.ig.as_ref().filter(|ig| ig.sparse_layer(l)) {
                ig.record_partial_keys(&mut rec, l, kv, &s.steps, steps)?;
            }
            if streaming {
                let mv = |w, x, y, m, kk| MatvecArgs::plain(w, x, y, m, kk, t);
                k.matvec(
                    &mut rec,
                    &w.wo,
                    MatvecArgs {
                        accumulate: true,
                        ..mv(&w.wo.buffer, &s.att, &s.x, e, attn_dim)
                    },
                )?;
                Fetch::step_of(&mut fetch_next, &mut rec)?;
                k.matvec(
                    &mut rec,
                    &w.w_gate_up,
                    MatvecArgs {
                        norm: Some((&w.ffn_norm, eps)),
                        gated: true,
                        ..mv(&w.w_gate_up.buffer, &s.x, &s.hidden, n_ff, e)
                    },
                )?;
                Fetch::step_of(&mut fetch_next, &mut rec)?;
                k.matvec(
                    &mut rec,
                    &w.w_down,
                    MatvecArgs {
                        accumulate: true,
                        ..mv(&w.w_down.buffer, &s.hidden, &s.x, e, n_ff)
                    },
                )?;
            } else {
                k.matmul(&mut rec, &w.wo, &s.att, &s.x, t, e, attn_dim, true)?;
                Fetch::step_of(&mut fetch_next, &mut rec)?;
                k.rmsnorm
                    .record(&mut rec, &s.x, &w.ffn_norm, &s.xn, t, e, eps)?;
                k.matmul(
                    &mut rec,
                    &w.w_gate_up,
                    &s.xn,
                    &s.gate_up,
                    t,
                    2 * n_ff,
                    e,
                    false,
                )?;
                Fetch::step_of(&mut fetch_next, &mut rec)?;
                k.swiglu
                    .record_fused(&mut rec, &s.gate_up, &s.hidden, t, n_ff)?;
                k.matmul(&mut rec, &w.w_down, &s.hidden, &s.x, t, e, n_ff, true)?;
            }
            if let Some(fetch) = fetch_next {
                fetch.finish(&mut rec)?;
            }
        }

        // The rows of x whose logits each sequence wants, in the order of `seqs`: (seq, first
        // row, count); `spans` says where they land among the logits rows.
        let mut wanted: Vec<(usize, usize, usize)> = runs
            .iter()
            .map(|&(i, t0, tokens, _)| match seqs[i].logits {
                None => (i, t0, 0),
                Some(Logits::Last) => (i, t0 + tokens - 1, 1),
                Some(Logits::All) => (i, t0, tokens),
            })
            .collect();
        wanted.sort_by_key(|w| w.0);
        let mut spans = vec![(0usize, 0usize); seqs.len()];
        let mut out_rows = 0;
        for &(i, _, count) in &wanted {
            spans[i] = (out_rows, count);
            out_rows += count;
        }
        // x itself when every wanted row already sits where its logits go; otherwise the
        // rows are gathered.
        let in_place = wanted
            .iter()
            .all(|&(i, first, count)| count == 0 || first == spans[i].0);
        let x_rows = if in_place {
            &s.x
        } else {
            let row_bytes = e as u64 * 4;
            for &(i, first, count) in wanted.iter().filter(|w| w.2 > 0) {
                rec.copy(
                    &s.x,
                    first as u64 * row_bytes,
                    &s.sel,
                    spans[i].0 as u64 * row_bytes,
                    count as u64 * row_bytes,
                )?;
            }
            &s.sel
        };
        if out_rows > 0 {
            let rows = out_rows as u32;
            if streaming || out_rows <= DECODE_MAX_TOKENS {
                k.matvec(
                    &mut rec,
                    head,
                    MatvecArgs {
                        norm: Some((&self.output_norm, eps)),
                        ..MatvecArgs::plain(&head.buffer, x_rows, &s.logits, vocab, e, rows)
                    },
                )?;
            } else {
                k.rmsnorm
                    .record(&mut rec, x_rows, &self.output_norm, &s.xn, rows, e, eps)?;
                k.matmul(&mut rec, head, &s.xn, &s.logits, rows, vocab, e, false)?;
            }
        }
        let done = rec.submit()?;
        if let Some(ig) = &mut self.ig {
            ig.forks_done();
            if !sparse.is_empty() {
                ig.count_step(c.n_layer, &sparse)?;
            }
            for d in &fetches_all {
                ig.count_dense_step(c.n_layer, d.index as usize);
            }
        }
        if let Some(h2o) = &mut self.h2o {
            if sparse.is_empty() {
                for &(i, _, tokens, len) in runs {
                    h2o.end_dense(seqs[i].row, len, len + tokens)?;
                }
            } else {
                h2o.end_decode(&sparse)?;
            }
        }
        let (n, shared) = done.alongside(&FETCH_KERNELS);
        self.fetch_alongside.0 += n;
        self.fetch_alongside.1 += shared;
        if let Some(profile) = &mut self.profile {
            profile.fetch_overlap_ns += done.overlap_ns(&FETCH_KERNELS);
            for k in done.kernels {
                let e = profile.kernels.entry(k.label).or_default();
                e.0 += k.ns;
                e.1 += 1;
            }
        }
        let logits: Vec<f32> = self.scratch.logits.download(out_rows * c.n_vocab)?;
        Ok(spans
            .iter()
            .map(|&(first, count)| logits[first * c.n_vocab..(first + count) * c.n_vocab].to_vec())
            .collect())
    }
}

/// The cache's shape: every sequence at full context, within the budget (or, without one,
/// within the device memory left after the weights with some headroom).
fn kv_shape(
    device: &Device,
    c: &ModelConfig,
    options: &VkModelOptions,
    weights: u64,
) -> Result<KvShape> {
    if options.n_seq == 0 {
        return Err(Error::options("n_seq", "must be at least 1"));
    }
    let mut shape = KvShape {
        n_layer: c.n_layer,
        n_head_kv: c.n_head_kv,
        head_dim: c.head_dim,
        blocks: 0,
        rows: options.n_seq,
        n_ctx: options.n_ctx,
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
    if blocks == 0 {
        return Err(Error::options(
            "kv_budget",
            format!(
                "leaves no room for one block of {} tokens ({} bytes)",
                crate::kv::BLOCK_TOKENS,
                shape.block_bytes()
            ),
        ));
    }
    shape.blocks = blocks;
    Ok(shape)
}

impl Backend for VkModel {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn as_vulkan_mut(&mut self) -> Option<&mut VkModel> {
        Some(self)
    }

    fn set_infinigen(&mut self, setup: Option<(&Skew, IgParams)>) -> Result<()> {
        self.ig = None;
        let Some((skew, params)) = setup else {
            return Ok(());
        };
        let c = &self.config;
        let shape = self.kv.shape();
        let ig = VkInfinigen::new(
            &self.device,
            skew,
            params,
            c.n_head,
            shape.n_ctx,
            shape.rows,
        )?;
        let mut ig = ig;
        ig.adopt(self.kv.len(0));
        // Partial keys of what the cache already holds: every entry of every row.
        let held: Vec<StepToken> = (0..shape.rows)
            .flat_map(|row| {
                (0..self.kv.len(row) as u32).map(move |pos| StepToken::new(row as u32, pos))
            })
            .collect();
        if !held.is_empty() {
            let held_b = Buffer::from_slice(&self.device, "cached tokens", &held)?;
            let mut rec = Recorder::new(&self.device)?;
            for l in (0..c.n_layer).filter(|&l| ig.sparse_layer(l)) {
                ig.record_partial_keys(&mut rec, l, self.kv.layer(l), &held_b, &held)?;
            }
            rec.submit()?;
        }
        self.ig = Some(ig);
        Ok(())
    }

    fn infinigen_stats(&self) -> Option<IgStats> {
        self.ig.as_ref().map(|ig| ig.stats)
    }

    fn set_h2o(&mut self, params: Option<IgParams>) -> Result<()> {
        self.h2o = None;
        let Some(params) = params else {
            return Ok(());
        };
        let c = &self.config;
        let shape = self.kv.shape();
        let mut h2o = VkH2o::new(
            &self.device,
            params,
            c.n_layer,
            c.n_head,
            c.n_head_kv,
            c.head_dim,
            shape.n_ctx,
            shape.rows,
            self.chunk,
        )?;
        // What the cache already holds joins with no mass (as `kv::h2o::H2o::new` does).
        for row in 0..shape.rows {
            h2o.sync(row, self.kv.len(row))?;
        }
        self.h2o = Some(h2o);
        Ok(())
    }

    fn h2o_stats(&self) -> Option<IgStats> {
        self.h2o.as_ref().map(|h2o| h2o.stats)
    }

    fn as_vulkan(&self) -> Option<&VkModel> {
        Some(self)
    }

    fn n_ctx(&self) -> usize {
        self.kv.shape().n_ctx
    }

    fn len(&self) -> usize {
        self.position(0)
    }

    fn truncate(&mut self, len: usize) {
        let entries = self.kv.len(0);
        let kept = match &mut self.ig {
            // Should resetting the counters or positions fail, the row starts over, its
            // entries forgotten as the map forgets them.
            Some(ig) => ig.truncate_row0(entries, len).unwrap_or_else(|_| {
                ig.adopt(0);
                0
            }),
            None => len,
        };
        self.kv.truncate(0, kept);
    }

    fn profile(&self) -> Profile {
        let Some(totals) = &self.profile else {
            return Profile::default();
        };
        Profile {
            kernels: totals
                .kernels
                .iter()
                .map(|(&k, &(ns, n))| (k, ns, n))
                .collect(),
            fetch_overlap_ns: totals.fetch_overlap_ns,
        }
    }

    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        check_step(&self.config, tokens, self.position(0), self.n_ctx())?;
        let chunks = tokens.len().div_ceil(self.chunk);
        // Chunks of equal size, so a prompt's last is never a lone token, which InfiniGen
        // and H2O would take for a decode step.
        let size = tokens.len().div_ceil(chunks.max(1)).max(1);
        let mut out = Vec::new();
        for (i, chunk) in tokens.chunks(size).enumerate() {
            let rows = match logits {
                Logits::All => Some(Logits::All),
                Logits::Last if i + 1 == chunks => Some(Logits::Last),
                Logits::Last => None,
            };
            let step = SeqStep {
                row: 0,
                tokens: chunk,
                logits: rows,
                beam: None,
            };
            let before = self.position(0);
            if let Some(ig) = &mut self.ig {
                ig.make_room(&mut self.kv, chunk.len())?;
            }
            // A prompt's chunks are one step to H2O: it evicts after the last.
            if let Some(h2o) = &mut self.h2o {
                h2o.hold_eviction(i + 1 < chunks);
            }
            let result = self.step_batch(&[step]);
            if let Some(h2o) = &mut self.h2o {
                h2o.hold_eviction(false);
                if result.is_err() {
                    // The chunks that ran evict as a step of their own.
                    h2o.settle(0)?;
                }
            }
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
