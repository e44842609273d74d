//! The native CPU executor: weights kept packed in their formats as the file holds them, the
//! paged KV cache in host memory, and a step computed layer by layer with the products of
//! `product` on a persistent thread pool. A step may carry several sequences, each appending
//! to its own cache row (`step_batch`); the single-sequence `Backend` uses row 0.

mod attention;
mod kv_store;
mod latent;
mod mlp;
mod step;
mod work;

use std::cell::RefCell;
use std::sync::Arc;

use hearth_models::{GgufFile, ResolvedModel};

use self::kv_store::KvStore;
use crate::act::Activations;
use crate::dot::Kernels;
use crate::interleave::ROWS;
use crate::isa::Isa;
use crate::weights::{CpuMatrix, CpuProjection};
use hearth_model::kv::policy::KvPolicyChoice;
use hearth_model::kv::{
    blocks_for, blocks_in_budget, KvBudget, KvPlacement, KvShape, KvTables, KvType,
};
use hearth_model::{
    check_step, forward_steps, Backend, BatchedBackend, Error, Layer, Logits, Matrix, ModelConfig,
    Part, PlacedPart, ProgressFn, Projection, Result, SeqStep, Stage, StageOutput, WeightReader,
};
use hearth_quant::Format;

/// How to load a model on the native executor.
#[derive(Clone, Copy, Debug)]
pub struct CpuOptions {
    /// Most positions one sequence holds.
    pub n_ctx: usize,
    /// Sequences the cache can hold at once (rows of block tables).
    pub n_seq: usize,
    /// The KV pool's size; `None`: every sequence at full context.
    pub kv_budget: Option<KvBudget>,
    /// How K and V are stored.
    pub kv_type: KvType,
    /// Worker threads; `None`: one per core.
    pub threads: Option<usize>,
    /// The instruction set; `None`: [`Isa::best`].
    pub isa: Option<Isa>,
    /// Most tokens one step takes (activation scratch is sized by it).
    pub max_chunk: usize,
    /// How products take activations: 8-bit blocks (fast) or f32 (exact).
    pub activations: Activations,
}

impl Default for CpuOptions {
    fn default() -> Self {
        Self {
            n_ctx: 4096,
            n_seq: 1,
            kv_budget: None,
            kv_type: KvType::default(),
            threads: None,
            isa: None,
            max_chunk: 512,
            activations: Activations::default(),
        }
    }
}

/// The kernels of the instruction set `options` names (else the best) and a pool of its
/// worker threads (else one per core).
pub(crate) fn kernels_and_pool(options: &CpuOptions) -> Result<(Kernels, rayon::ThreadPool)> {
    let kernels = Kernels::new(options.isa.unwrap_or_else(Isa::best))?;
    let threads = options.threads.unwrap_or_else(default_threads);
    if threads == 0 {
        return Err(Error::options("threads", "must be at least 1"));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("hearth-cpu-{i}"))
        .build()
        .map_err(|e| Error::options("threads", e.to_string()))?;
    Ok((kernels, pool))
}

/// Worker threads by default: one per core the process may run on.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One block's weights: matrices packed as the file holds them, norm gains in f32.
type CpuLayer = Layer<CpuProjection, Vec<f32>>;

pub struct NativeModel {
    config: ModelConfig,
    kernels: Kernels,
    pool: Arc<rayon::ThreadPool>,
    /// The layers held, with the embedding and head where they start and end the model.
    part: Part,
    /// Where the part embeds tokens, or ends the model with a head tied to the embedding.
    token_embd: Option<CpuMatrix>,
    /// Where the part ends the model.
    output_norm: Option<Vec<f32>>,
    /// `None` when tied to `token_embd`, or where the part does not end the model.
    output: Option<CpuMatrix>,
    /// The part's layers, the first being model layer `part.layers.start`.
    layers: Vec<CpuLayer>,
    tables: KvTables,
    /// Per layer held: K and V of every pool slot.
    k: Vec<KvStore>,
    v: Vec<KvStore>,
    /// Beam tables by row ([`BatchedBackend::set_beams`] takes `&self`).
    beams: RefCell<Vec<Vec<u32>>>,
    rope_table: Vec<[f32; 2]>,
    local_rope_table: Option<Vec<[f32; 2]>>,
    chunk: usize,
    weight_bytes: Vec<(Format, u64)>,
    work: work::Work,
    /// Time spent in stage steps since load (a split model's report).
    busy_ns: u64,
}

impl NativeModel {
    pub fn load(
        file: &GgufFile,
        model: &ResolvedModel,
        options: CpuOptions,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        Self::load_part(file, model, options, None, progress)
    }

    /// Loads the layers `layers` only (`None`: the whole model), as one stage of a split
    /// model, with the embedding where they start the model and the head where they end it.
    pub fn load_part(
        file: &GgufFile,
        model: &ResolvedModel,
        options: CpuOptions,
        layers: Option<std::ops::Range<usize>>,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let config = ModelConfig::from_resolved(file, model)?;
        let c = &config;
        let part = Part::of(layers, c.n_layer)?;
        if options.n_ctx == 0 {
            return Err(Error::options("n_ctx", "must be at least 1"));
        }
        hearth_model::kv::check_kv_type(options.kv_type, c.head_dim)?;
        let (kernels, pool) = kernels_and_pool(&options)?;

        let mut reader = WeightReader::for_part(file, model, c, &part, progress);
        let mut weight_bytes: Vec<(Format, u64)> = Vec::new();
        let mut count = |w: &Matrix| w.tally_into(&mut weight_bytes);
        let tied = model.tensors.tied_embeddings;
        let token_embd = match part.embeds() || (part.heads() && tied) {
            true => Some(reader.token_embd()?),
            false => None,
        };
        token_embd.iter().for_each(&mut count);
        // The embedding's rows are read one by one: it stays as the file packs it.
        let token_embd = token_embd.map(CpuMatrix::rows);
        let output = match part.heads() {
            true => reader.output()?,
            false => None,
        };
        output.iter().for_each(&mut count);
        let mode = options.activations;
        let output =
            output.map(|m| pool.install(|| CpuMatrix::for_kernels(&kernels, mode, m, ROWS)));
        let mut layers = Vec::with_capacity(part.len());
        for l in part.layers.clone() {
            let layer = reader.layer(l)?;
            let layer = layer.try_map::<_, _, Error>(
                |name, w: Projection| {
                    w.runs.iter().for_each(&mut count);
                    // A mixture's products read one expert's rows: those must stay whole
                    // interleaved groups.
                    let unit = match (name, &c.experts, &c.latent) {
                        ("ffn_gate_up_exps", Some(x), _) => 2 * x.n_ff,
                        ("ffn_down_exps", _, _) => c.n_embd,
                        // Latent attention's per-head products read one head's rows.
                        ("attn_k_b", _, Some(lt)) => lt.kv_lora,
                        ("attn_v_b", _, Some(lt)) => lt.v_dim,
                        _ => ROWS,
                    };
                    Ok(pool.install(|| CpuProjection::for_kernels(&kernels, mode, w, unit)))
                },
                |_, v| Ok(v),
            )?;
            layers.push(layer);
        }
        let output_norm = match part.heads() {
            true => Some(reader.output_norm()?),
            false => None,
        };
        reader.finish()?;

        let shape = kv_shape(c, &options, part.len())?;
        let kv_dim = c.n_head_kv * c.head_dim;
        // Latent attention's values are its keys' first values: no V is stored.
        let v_dim = if shape.values_in_keys { 0 } else { kv_dim };
        let slots = shape.blocks * hearth_model::kv::BLOCK_TOKENS;
        let store = |width: usize| KvStore::new(options.kv_type, slots, width);
        let chunk = options.max_chunk.max(1);
        Ok(Self {
            kernels,
            pool: Arc::new(pool),
            token_embd,
            output_norm,
            output,
            layers,
            part,
            // The executor's own memory, as device-local memory is a GPU's (`--kv-offload
            // none`): there is nothing to offload it to.
            tables: KvTables::new(shape, KvPlacement::Device),
            k: (0..shape.n_layer).map(|_| store(kv_dim)).collect(),
            v: (0..shape.n_layer).map(|_| store(v_dim)).collect(),
            beams: RefCell::new(vec![Vec::new(); options.n_seq]),
            rope_table: c.rope_table(options.n_ctx).unwrap_or_default(),
            local_rope_table: c.local_rope_table(options.n_ctx),
            chunk,
            weight_bytes,
            busy_ns: 0,
            work: work::Work {
                mode: options.activations,
                ..work::Work::default()
            },
            config,
        })
    }

    /// Bytes of weights held, by format.
    pub fn weight_formats(&self) -> Vec<(Format, u64)> {
        self.weight_bytes.clone()
    }

    /// How products take activations.
    pub fn activations(&self) -> Activations {
        self.work.mode
    }

    /// The instruction set the kernels use.
    pub fn isa(&self) -> Isa {
        self.kernels.isa()
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Bytes the KV cache's values take.
    pub fn kv_bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(KvStore::bytes).sum()
    }

    /// Makes row `dst` share the first `len` positions of row `src`.
    pub fn fork(&mut self, src: usize, dst: usize, len: usize) {
        self.tables.fork(src, dst, len);
    }
}

/// The cache's shape for `n_layer` layers: every sequence at full context, or what the
/// budget holds.
fn kv_shape(c: &ModelConfig, options: &CpuOptions, n_layer: usize) -> Result<KvShape> {
    let shape = KvShape {
        n_layer,
        ..KvShape::for_model(c, options.n_seq, options.n_ctx, options.kv_type)?
    };
    shape.with_blocks(match options.kv_budget {
        Some(KvBudget::Bytes(b)) => blocks_in_budget(&shape, b, u64::MAX),
        Some(KvBudget::Tokens(t)) => blocks_for(t),
        None => options.n_seq * blocks_for(options.n_ctx),
    })
}

impl Backend for NativeModel {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn n_ctx(&self) -> usize {
        self.tables.shape().n_ctx
    }

    fn len(&self) -> usize {
        self.tables.len(0)
    }

    fn truncate(&mut self, len: usize) {
        self.tables.truncate(0, len);
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

    fn placement(&self) -> Vec<PlacedPart> {
        vec![self.placed()]
    }

    fn set_kv_policy(&mut self, choice: KvPolicyChoice) -> Result<()> {
        match choice {
            KvPolicyChoice::Dense => Ok(()),
            other => Err(Error::options(
                "kv-offload",
                format!(
                    "{} is not available on the CPU executor, whose cache is in system memory \
                     already",
                    other.kind()
                ),
            )),
        }
    }

    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        if !self.part.is_whole() {
            return Err(self.part.not_whole());
        }
        check_step(&self.config, tokens, self.len(), self.n_ctx())?;
        let mut out = Vec::new();
        for (step, _) in forward_steps(tokens, self.chunk, logits) {
            out.extend(self.step_batch(&[step])?.remove(0));
        }
        Ok(out)
    }
}

impl BatchedBackend for NativeModel {
    fn kv(&self) -> &KvTables {
        &self.tables
    }

    fn kv_mut(&mut self) -> &mut KvTables {
        &mut self.tables
    }

    fn fork(&mut self, src: usize, dst: usize, len: usize) {
        NativeModel::fork(self, src, dst, len)
    }

    fn max_step_tokens(&self) -> usize {
        self.chunk
    }

    fn step_batch(&mut self, seqs: &[SeqStep]) -> Result<Vec<Vec<f32>>> {
        match self.step_stage(seqs, None)? {
            StageOutput::Logits(logits) => Ok(logits),
            StageOutput::Hidden(_) => Err(self.part.not_whole()),
        }
    }

    fn set_beams(&self, row: usize, beams: &[u32]) -> Result<u32> {
        let n_ctx = self.tables.shape().n_ctx;
        let mut tables = self.beams.borrow_mut();
        let Some(table) = tables.get_mut(row) else {
            return Err(Error::options("row", format!("no cache row {row}")));
        };
        if beams.len() > n_ctx {
            return Err(Error::options(
                "beams",
                format!("{} positions exceed the context of {n_ctx}", beams.len()),
            ));
        }
        table.clear();
        table.extend_from_slice(beams);
        Ok((row * n_ctx) as u32)
    }
}

impl Stage for NativeModel {
    fn part(&self) -> &Part {
        &self.part
    }

    fn step_stage(&mut self, seqs: &[SeqStep], hidden: Option<&[f32]>) -> Result<StageOutput> {
        let start = std::time::Instant::now();
        let out = NativeModel::step_stage(self, seqs, hidden);
        self.busy_ns += start.elapsed().as_nanos() as u64;
        out
    }

    fn into_backend(self: Box<Self>) -> Box<dyn Backend + Send> {
        self
    }

    fn placed(&self) -> PlacedPart {
        PlacedPart {
            executor: "cpu".to_string(),
            device: format!("CPU ({}, {} threads)", self.isa(), self.threads()),
            layers: [self.part.layers.start, self.part.layers.end],
            embedding: self.part.embeds(),
            head: self.part.heads(),
            weight_bytes: self.weight_bytes.iter().map(|(_, b)| b).sum(),
            kv_bytes: self.kv_bytes() as u64,
            busy_ns: self.busy_ns,
            shard: None,
        }
    }
}
