//! The native CPU executor: weights kept packed in their formats as the file holds them, the
//! paged KV cache in host memory, and a step computed layer by layer with the products of
//! `product` on a persistent thread pool. A step may carry several sequences, each appending
//! to its own cache row (`step_batch`); the single-sequence `Backend` uses row 0.

mod attention;
mod kv_store;
mod mlp;
mod step;
mod work;

use std::cell::RefCell;
use std::sync::Arc;

use hearth_models::{GgufFile, ResolvedModel};

use self::kv_store::KvStore;
use crate::act::Activations;
use crate::dot::Kernels;
use crate::isa::Isa;
use hearth_model::kv::policy::KvPolicyChoice;
use hearth_model::kv::{
    blocks_for, blocks_in_budget, KvBudget, KvPlacement, KvShape, KvTables, KvType,
};
use hearth_model::{
    check_step, forward_steps, Backend, BatchedBackend, Error, Layer, Logits, Matrix, ModelConfig,
    ProgressFn, Projection, Result, SeqStep, WeightReader,
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

/// Worker threads by default: one per core the process may run on.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One block's weights: matrices packed as the file holds them, norm gains in f32.
type CpuLayer = Layer<Projection, Vec<f32>>;

pub struct NativeModel {
    config: ModelConfig,
    kernels: Kernels,
    pool: Arc<rayon::ThreadPool>,
    token_embd: Matrix,
    output_norm: Vec<f32>,
    /// `None` when tied to `token_embd`.
    output: Option<Matrix>,
    layers: Vec<CpuLayer>,
    tables: KvTables,
    /// Per layer: K and V of every pool slot.
    k: Vec<KvStore>,
    v: Vec<KvStore>,
    /// Beam tables by row ([`BatchedBackend::set_beams`] takes `&self`).
    beams: RefCell<Vec<Vec<u32>>>,
    rope_table: Vec<[f32; 2]>,
    local_rope_table: Option<Vec<[f32; 2]>>,
    chunk: usize,
    weight_bytes: Vec<(Format, u64)>,
    work: work::Work,
}

impl NativeModel {
    pub fn load(
        file: &GgufFile,
        model: &ResolvedModel,
        options: CpuOptions,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let config = ModelConfig::from_resolved(file, model)?;
        let c = &config;
        if options.n_ctx == 0 {
            return Err(Error::options("n_ctx", "must be at least 1"));
        }
        hearth_model::kv::check_kv_type(options.kv_type, c.head_dim)?;
        let isa = match options.isa {
            Some(isa) => isa,
            None => Isa::best(),
        };
        let kernels = Kernels::new(isa)?;
        let threads = options.threads.unwrap_or_else(default_threads);
        if threads == 0 {
            return Err(Error::options("threads", "must be at least 1"));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("hearth-cpu-{i}"))
            .build()
            .map_err(|e| Error::options("threads", e.to_string()))?;

        let mut reader = WeightReader::new(file, model, c, progress);
        let mut weight_bytes: Vec<(Format, u64)> = Vec::new();
        let mut count = |w: &Matrix| w.tally_into(&mut weight_bytes);
        let token_embd = reader.token_embd()?;
        count(&token_embd);
        let output = reader.output()?;
        if let Some(w) = &output {
            count(w);
        }
        let mut layers = Vec::with_capacity(c.n_layer);
        for l in 0..c.n_layer {
            let layer = reader.layer(l)?;
            let layer = layer.try_map::<_, _, Error>(
                |_, w: Projection| {
                    w.runs.iter().for_each(&mut count);
                    Ok(w)
                },
                |_, v| Ok(v),
            )?;
            layers.push(layer);
        }
        let output_norm = reader.output_norm()?;
        reader.finish()?;

        let shape = kv_shape(c, &options)?;
        let kv_dim = c.n_head_kv * c.head_dim;
        let slots = shape.blocks * hearth_model::kv::BLOCK_TOKENS;
        let store = || KvStore::new(options.kv_type, slots, kv_dim);
        let chunk = options.max_chunk.max(1);
        Ok(Self {
            kernels,
            pool: Arc::new(pool),
            token_embd,
            output_norm,
            output,
            layers,
            // The executor's own memory, as device-local memory is a GPU's (`--kv-offload
            // none`): there is nothing to offload it to.
            tables: KvTables::new(shape, KvPlacement::Device),
            k: (0..c.n_layer).map(|_| store()).collect(),
            v: (0..c.n_layer).map(|_| store()).collect(),
            beams: RefCell::new(vec![Vec::new(); options.n_seq]),
            rope_table: c.rope_table(options.n_ctx).unwrap_or_default(),
            local_rope_table: c.local_rope_table(options.n_ctx),
            chunk,
            weight_bytes,
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

/// The cache's shape: every sequence at full context, or what the budget holds.
fn kv_shape(c: &ModelConfig, options: &CpuOptions) -> Result<KvShape> {
    let shape = KvShape::for_model(c, options.n_seq, options.n_ctx, options.kv_type)?;
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
        NativeModel::step_batch(self, seqs)
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
