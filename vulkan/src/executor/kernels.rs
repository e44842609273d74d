//! The kernels a model runs: per weight format, the products that read its matrices (one
//! token, decode batches, prompt chunks, and tiled matmul), and the ones that read no weights;
//! and, where a tuner chose integer-dot products, the one rounding of each product's input to
//! 8-bit blocks that they read.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::DeviceMatrix;
use hearth_kernels::kv::KvType;
use hearth_kernels::vk::{Buffer, BufferDesc, Device, DeviceKind, Recorder, VkError};
use hearth_kernels::{
    q8_act_bytes, AttnDecode, AttnPrefill, BiasAct, Embed, Matmul, MatmulArgs, Matvec, MatvecArgs,
    MoeCombine, MoeRoute, OutputCols, QkvAdjust, QuantizeArgs, QuantizeQ8, RmsNorm, RopeKv, SwiGlu,
    WeightFormat,
};
use hearth_model::ModelConfig;
use hearth_model::Result;

/// Most tokens a step runs through the decode (matrix-vector) path.
pub(super) const DECODE_MAX_TOKENS: usize = 8;

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

/// The kernels that read weights, for one format.
pub(super) struct FormatKernels {
    pub(super) embed: Embed,
    /// One token per pass (decode).
    pub(super) matvec: Matvec,
    /// Decode batches: up to `DECODE_MAX_TOKENS` tokens per pass.
    pub(super) matvec_batch: Matvec,
    /// Decode batches of two, then up to four tokens, built when first needed (each pipeline
    /// adds a tenth of a second or more to a CPU device's start). A pass costs its kernel's
    /// tokens whatever the batch (every token's sums are unrolled on CPU devices), so two
    /// sequences on the eight-token kernel ran slower together than one alone.
    pub(super) matvec_small: [OnceLock<Matvec>; 2],
    /// Prompt chunks on CPU devices, where `prompt_pass_tokens` exceeds a decode batch.
    pub(super) matvec_prompt: Option<Matvec>,
    /// A mixture of experts' products, one slot and `EXPERT_TILE` slots of an expert per
    /// pass, built when first needed.
    pub(super) matvec_experts: [OnceLock<Matvec>; 2],
    pub(super) matmul: Matmul,
    /// A mixture of experts' prefill on GPUs, built when first needed.
    pub(super) matmul_experts: OnceLock<Matmul>,
}

/// Most slots of one expert an experts' product takes per pass over its rows.
pub(super) const EXPERT_TILE: u32 = DECODE_MAX_TOKENS as u32;

impl FormatKernels {
    /// The decode-batch product with the fewest tokens per pass that holds `batch`.
    pub(super) fn batch_kernel(&self, device: &Device, batch: u32) -> Result<&Matvec> {
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

    /// The experts' product for a step of `slots` slots over `experts` experts: one slot a
    /// pass where an expert gets about one (decode), else `EXPERT_TILE`.
    pub(super) fn experts_kernel(
        &self,
        device: &Device,
        slots: u32,
        experts: u32,
    ) -> Result<&Matvec> {
        let (slot, tokens) = match slots >= 2 * experts {
            true => (&self.matvec_experts[1], EXPERT_TILE),
            false => (&self.matvec_experts[0], 1),
        };
        if let Some(kernel) = slot.get() {
            return Ok(kernel);
        }
        let kernel = Matvec::experts(device, self.matvec.format(), tokens)?;
        Ok(slot.get_or_init(|| kernel))
    }

    /// The grouped product over each expert's slots (prefill on GPUs).
    pub(super) fn grouped_experts_kernel(&self, device: &Device) -> Result<&Matmul> {
        if let Some(kernel) = self.matmul_experts.get() {
            return Ok(kernel);
        }
        let kernel = Matmul::experts(device, self.matvec.format())?;
        Ok(self.matmul_experts.get_or_init(|| kernel))
    }

    pub(super) fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        let cpu = device.info().kind == DeviceKind::Cpu;
        let prompt_tokens = prompt_pass_tokens(format);
        Ok(Self {
            embed: Embed::new(device, format)?,
            matvec: Matvec::new(device, format, 1)?,
            matvec_batch: Matvec::new(device, format, DECODE_MAX_TOKENS as u32)?,
            matvec_small: Default::default(),
            matvec_experts: Default::default(),
            matvec_prompt: match cpu && prompt_tokens > DECODE_MAX_TOKENS as u32 {
                true => Some(Matvec::new(device, format, prompt_tokens)?),
                false => None,
            },
            matmul: Matmul::new(device, format)?,
            matmul_experts: OnceLock::new(),
        })
    }
}

/// The products over weight matrices: each format's kernels, and the choice between them.
pub(super) struct Products {
    pub(super) formats: HashMap<WeightFormat, FormatKernels>,
    /// Prefill through matvec (CPU devices) rather than matmul (GPUs).
    pub(super) matvec_prefill: bool,
    /// Where the tuner chose integer-dot products (`Matvec::reads_q8`): the rounding of x to
    /// 8-bit blocks and the buffer it rounds into, built when a product first needs them.
    q8: OnceLock<(QuantizeQ8, Buffer)>,
    /// Bytes that buffer holds: the most tokens a product takes, of the widest input.
    q8_bytes: u64,
    device: Arc<Device>,
}

pub(super) struct Kernels {
    pub(super) products: Products,
    pub(super) rmsnorm: RmsNorm,
    /// For models with q/k/v biases or a query/key norm.
    pub(super) qkv_adjust: Option<QkvAdjust>,
    pub(super) swiglu: SwiGlu,
    pub(super) rope_kv: RopeKv,
    pub(super) attn_decode: AttnDecode,
    pub(super) attn_prefill: AttnPrefill,
    /// For a mixture of experts: the router's choice and the weighted sum of the experts.
    pub(super) moe: Option<(MoeRoute, MoeCombine)>,
    /// A bias added to a product's output (GPT-OSS's output projection and router), built
    /// when first needed.
    bias: OnceLock<BiasAct>,
}

impl Kernels {
    /// The kernels that read no weights; `formats` is filled as the weights load.
    /// `tokens`: the most a step takes.
    pub(super) fn new(
        device: &Arc<Device>,
        c: &ModelConfig,
        kv_type: KvType,
        tokens: usize,
    ) -> Result<Self> {
        // Query heads sharing each KV head.
        let group = (c.n_head / c.n_head_kv.max(1)) as u32;
        let hd = c.head_dim as u32;
        // The widest input a product reads: x, attention's output, or an MLP's hidden values.
        let experts = c
            .experts
            .map_or(0, |x| x.n_ff.max(x.shared.map_or(0, |sh| sh.n_ff)));
        let widest = c.n_embd.max(c.attn_dim()).max(c.n_ff).max(experts);
        Ok(Self {
            products: Products::new(device, tokens, widest),
            rmsnorm: RmsNorm::new(device)?,
            qkv_adjust: match c.qkv_bias || c.qk_norm {
                true => Some(QkvAdjust::new(device)?),
                false => None,
            },
            swiglu: SwiGlu::new(device)?,
            rope_kv: RopeKv::new(device, kv_type)?,
            attn_decode: AttnDecode::new(device, hd, group, kv_type)?,
            attn_prefill: AttnPrefill::new(device, hd, group, kv_type)?,
            moe: match c.experts {
                Some(_) => Some((MoeRoute::new(device)?, MoeCombine::new(device)?)),
                None => None,
            },
            bias: OnceLock::new(),
        })
    }

    /// The kernel that adds a bias to a product's output.
    pub(super) fn bias(&self, device: &Device) -> Result<&BiasAct> {
        if let Some(kernel) = self.bias.get() {
            return Ok(kernel);
        }
        let kernel = BiasAct::new(device)?;
        Ok(self.bias.get_or_init(|| kernel))
    }

    pub(super) fn of(&self, format: WeightFormat) -> &FormatKernels {
        self.products.of(format)
    }

    /// See [`Products::matvec`].
    pub(super) fn matvec<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        w: &'a [DeviceMatrix],
        args: MatvecArgs<'a>,
    ) -> Result<()> {
        self.products.matvec(rec, w, args)
    }

    /// See [`Products::matmul`].
    pub(super) fn matmul<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &'a [DeviceMatrix],
        args: MatmulArgs<'a>,
    ) -> Result<()> {
        self.products.matmul(rec, w, args)
    }
}

impl Products {
    /// No formats yet: they are filled as the weights load. Products take at most `tokens`
    /// vectors of at most `widest` values.
    pub(super) fn new(device: &Arc<Device>, tokens: usize, widest: usize) -> Self {
        Self {
            formats: HashMap::new(),
            matvec_prefill: device.info().kind == DeviceKind::Cpu,
            q8: OnceLock::new(),
            q8_bytes: q8_act_bytes(tokens as u32, widest as u32),
            device: device.clone(),
        }
    }

    /// Rounds the product's input (normed as `args.norm` says) to 8-bit blocks, once for
    /// every run that reads it so.
    fn round_input<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        args: &MatvecArgs<'a>,
    ) -> Result<&'a Buffer> {
        let (quantize, out) = match self.q8.get() {
            Some(built) => built,
            None => {
                let device = &self.device;
                let bytes = self.q8_bytes.max(4);
                let built = (
                    QuantizeQ8::new(device)?,
                    Buffer::new(
                        device,
                        BufferDesc::device_local("x rounded to 8 bits", bytes),
                    )?,
                );
                // Should two recordings race here, the first one's is kept.
                self.q8.get_or_init(|| built)
            }
        };
        let rounding = QuantizeArgs {
            x: args.x,
            norm: args.norm,
            out,
            k: args.k,
            tokens: args.batch,
        };
        quantize.record(rec, rounding)?;
        Ok(out)
    }

    pub(super) fn of(&self, format: WeightFormat) -> &FormatKernels {
        // Every matrix's format got its kernels when the matrix was uploaded.
        &self.formats[&format]
    }

    /// A weight-streaming product with the first `args.m` rows of the matrix whose runs of
    /// rows are `w`: one product per run in its format, each into its part of y (`args.w` is
    /// the first run's weights; each run binds its own). Each uses the kernel whose tokens
    /// per pass fit the step: one, a decode batch's, or a prompt chunk's. A gated product
    /// reads gate and up rows together, so its matrix must be one run of 2 `args.m` rows.
    pub(super) fn matvec<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        w: &'a [DeviceMatrix],
        args: MatvecArgs<'a>,
    ) -> Result<()> {
        check_runs("matvec", w, args.m, args.gated.is_some())?;
        let width = args.cols.width_for("matvec", args.m)?;
        let mut kernels = Vec::with_capacity(w.len());
        let mut left = args.m;
        for run in w {
            if left == 0 {
                break;
            }
            let f = self.of(run.format);
            kernels.push(match (args.batch, &f.matvec_prompt) {
                (1, _) => &f.matvec,
                (batch, Some(prompt)) if batch as usize > DECODE_MAX_TOKENS => prompt,
                (batch, _) => f.batch_kernel(rec.device(), batch)?,
            });
            left = left.saturating_sub(run.rows);
        }
        // Runs whose tuned kernel reads x rounded to 8-bit blocks share one rounding.
        let x_q8 = match kernels.iter().any(|k| k.reads_q8()) {
            true => Some(self.round_input(rec, &args)?),
            false => None,
        };
        let mut first = args.cols.first;
        let mut left = args.m;
        for (run, kernel) in w.iter().zip(kernels) {
            let m = if args.gated.is_some() {
                args.m
            } else {
                run.rows.min(left)
            };
            let cols = OutputCols { first, width };
            let run_args = MatvecArgs {
                w: &run.buffer,
                m,
                cols,
                x_q8,
                ..args
            };
            kernel.record(rec, run_args)?;
            first += m;
            left -= m;
        }
        Ok(())
    }

    /// C [n, m] (+)= X [n, k] W^T with the first m rows of the matrix whose runs of rows are
    /// `w`, through the tiled matmul: one product per run in its format, each into its part
    /// of C.
    pub(super) fn matmul<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &'a [DeviceMatrix],
        args: MatmulArgs<'a>,
    ) -> Result<()> {
        check_runs("matmul", w, args.m, false)?;
        let width = args.cols.width_for("matmul", args.m)?;
        let mut first = args.cols.first;
        let mut left = args.m;
        for run in w {
            if left == 0 {
                break;
            }
            let m = run.rows.min(left);
            let cols = OutputCols { first, width };
            let run_args = MatmulArgs { m, cols, ..args };
            self.of(run.format)
                .matmul
                .record(rec, &run.buffer, run_args)?;
            first += m;
            left -= m;
        }
        Ok(())
    }
}

/// Checks that runs `w` hold the `m` rows a product reads, or where `gated` exactly 2 `m` in
/// one run.
fn check_runs(kernel: &'static str, w: &[DeviceMatrix], m: u32, gated: bool) -> Result<()> {
    let held: u64 = w.iter().map(|r| r.rows as u64).sum();
    let fits = match gated {
        true => w.len() == 1 && held == 2 * m as u64,
        false => held >= m as u64,
    };
    if !fits {
        let message = match gated {
            true => format!("a gated product of {m} rows needs 2 x {m} rows in one run"),
            false => format!("a product of {m} rows"),
        };
        let message = format!("{message}; the matrix holds {held} in {} runs", w.len());
        return Err(VkError::Kernel { kernel, message }.into());
    }
    Ok(())
}
