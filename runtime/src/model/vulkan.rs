//! The Vulkan executor: weights in device buffers, one KV cache, and a step recorded into a
//! single command buffer and submission (embedding to logits, no CPU round trip between
//! kernels).
//!
//! Weights stay packed in their formats (each matrix may have its own), and every product
//! runs the kernel variant for its matrix's format. Decode (up to a few tokens) runs the
//! weight-streaming matvec kernel with the block's RMSNorm, residual adds and SwiGLU folded
//! into it: six dispatches per layer. Prefill (more tokens) uses flash-style attention and, on
//! GPUs, tiled matrix-matrix kernels; CPU devices keep the matvec kernel for prefill too, with
//! several tokens sharing each pass over the weights, in chunks of at most `chunk` tokens.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use hearth_models::{GgufFile, ResolvedModel};

use super::{Backend, Logits, Matrix, ModelConfig, ProgressFn, WeightReader};
use crate::cpu::forward::check_step;
use crate::cpu::ops;
use crate::error::Result;
use crate::kernels::{
    weight_buffer, AttnDecode, AttnPrefill, AttnShape, Embed, Matmul, Matvec, MatvecArgs, RmsNorm,
    RopeKv, RopeSpec, SwiGlu, WeightFormat,
};
use crate::kv::{KvCache, KvShape};
use crate::vk::{Buffer, BufferDesc, Device, DeviceKind, Recorder};

/// Most tokens a step runs through the decode (matrix-vector) path.
const DECODE_MAX_TOKENS: usize = 8;

#[derive(Clone, Copy, Debug)]
pub struct VkModelOptions {
    /// Positions the KV cache holds.
    pub n_ctx: usize,
    /// Most tokens one prefill submission processes (scratch buffers are sized by it).
    pub max_chunk: usize,
    /// Time every kernel with timestamp queries (see [`VkModel::profile`]).
    pub profile: bool,
}

impl Default for VkModelOptions {
    fn default() -> Self {
        Self {
            n_ctx: 4096,
            max_chunk: 256,
            profile: false,
        }
    }
}

/// Tokens that share one pass over the weights in the matvec kernel when a step has more
/// than one.
const MATVEC_TOKENS: u32 = 8;

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
    /// MATVEC_TOKENS tokens per pass.
    matvec_tokens: Matvec,
    matmul: Matmul,
}

impl FormatKernels {
    fn new(device: &Device, format: WeightFormat) -> Result<Self> {
        Ok(Self {
            embed: Embed::new(device, format)?,
            matvec: Matvec::new(device, format, 1)?,
            matvec_tokens: Matvec::new(device, format, MATVEC_TOKENS)?,
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
    fn of(&self, format: WeightFormat) -> &FormatKernels {
        // Every matrix's format got its kernels when the matrix was uploaded.
        &self.formats[&format]
    }

    /// A weight-streaming product with `w` in its format: one token per pass for a single
    /// token, MATVEC_TOKENS otherwise.
    fn matvec<'a>(
        &self,
        rec: &mut Recorder<'a>,
        w: &DeviceMatrix,
        args: MatvecArgs<'a>,
    ) -> Result<()> {
        let f = self.of(w.format);
        let kernel = if args.batch == 1 {
            &f.matvec
        } else {
            &f.matvec_tokens
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
    /// [1, n_embd] the last token's x
    last: Buffer,
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
    /// Per kernel: (GPU nanoseconds, dispatches), when profiling.
    profile: Option<BTreeMap<&'static str, (f64, u64)>>,
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
        let mut formats = HashMap::new();
        let mut upload = |name: &str, w: Matrix| -> Result<DeviceMatrix> {
            match weight_bytes.iter_mut().find(|(f, _)| *f == w.format) {
                Some((_, bytes)) => *bytes += w.data.len() as u64,
                None => weight_bytes.push((w.format, w.data.len() as u64)),
            }
            if let Entry::Vacant(slot) = formats.entry(w.format) {
                slot.insert(FormatKernels::new(device, w.format)?);
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
                attn_norm: Buffer::from_slice(device, &format!("blk.{l}.attn_norm"), &w.attn_norm)?,
                wqkv: upload(&format!("blk.{l}.attn_qkv"), w.wqkv)?,
                wo: upload(&format!("blk.{l}.attn_output"), w.wo)?,
                ffn_norm: Buffer::from_slice(device, &format!("blk.{l}.ffn_norm"), &w.ffn_norm)?,
                w_gate_up: upload(&format!("blk.{l}.ffn_gate_up"), w.w_gate_up)?,
                w_down: upload(&format!("blk.{l}.ffn_down"), w.w_down)?,
            });
        }
        let output_norm = Buffer::from_slice(device, "output_norm", &reader.output_norm()?)?;
        reader.finish()?;

        let kv = KvCache::new(
            device,
            KvShape {
                n_layer: c.n_layer,
                n_head_kv: c.n_head_kv,
                head_dim: c.head_dim,
                n_ctx: options.n_ctx,
            },
        )?;
        let table = match c.rope {
            Some(r) => ops::rope_table(options.n_ctx, r.dims, r.base as f64),
            None => vec![[0.0; 2]],
        };
        let rope_table = Buffer::from_slice(device, "rope table", &table)?;

        let kernels = Kernels {
            formats,
            matvec_prefill: device.info().kind == DeviceKind::Cpu,
            rmsnorm: RmsNorm::new(device)?,
            swiglu: SwiGlu::new(device)?,
            rope_kv: RopeKv::new(device)?,
            attn_decode: AttnDecode::new(device, c.head_dim as u32)?,
            attn_prefill: AttnPrefill::new(device, c.head_dim as u32)?,
        };
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
            last: f32s("last x", c.n_embd)?,
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
            profile: options.profile.then(BTreeMap::new),
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

    /// Runs one chunk (at most `self.chunk` tokens) and returns the requested logits.
    fn step(&mut self, tokens: &[u32], rows: Option<Logits>) -> Result<Vec<f32>> {
        let c = &self.config;
        let n = tokens.len();
        let (e, vocab) = (c.n_embd as u32, c.n_vocab as u32);
        let s = &self.scratch;
        let k = &self.kernels;
        s.ids.upload(0, tokens)?;

        let shape = AttnShape {
            tokens: n as u32,
            n_head: c.n_head as u32,
            n_head_kv: c.n_head_kv as u32,
            head_dim: c.head_dim as u32,
            pos0: self.kv.len() as u32,
            n_ctx: self.kv.capacity() as u32,
        };
        let rope = RopeSpec {
            rot_dim: c.rope.map_or(0, |r| r.dims as u32),
            layout: c.rope.map_or(ops::RopeLayout::Neox, |r| r.layout),
        };
        let (qkv_dim, attn_dim, n_ff) = (c.qkv_dim() as u32, c.attn_dim() as u32, c.n_ff as u32);
        let eps = c.norm_eps;
        let head = self.output.as_ref().unwrap_or(&self.token_embd);

        // A few tokens run as decode: attention per query token, and weight-streaming
        // products. Longer chunks run flash-style attention and, on GPUs, tiled matmuls.
        let decode = n <= DECODE_MAX_TOKENS;
        let streaming = decode || k.matvec_prefill;
        let t = n as u32;
        let mut rec = if self.profile.is_some() {
            Recorder::timed(&self.device)?
        } else {
            Recorder::new(&self.device)?
        };
        let ek = k.of(self.token_embd.format);
        ek.embed
            .record(&mut rec, &self.token_embd.buffer, &s.ids, &s.x, t, vocab, e)?;
        for (l, w) in self.layers.iter().enumerate() {
            let kv = self.kv.layer(l);
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
                k.rope_kv
                    .record(&mut rec, &s.qkv, &self.rope_table, kv, shape, rope)?;
                if decode {
                    k.attn_decode.record(&mut rec, &s.qkv, kv, &s.att, shape)?;
                } else {
                    k.attn_prefill.record(&mut rec, &s.qkv, kv, &s.att, shape)?;
                }
                k.matvec(
                    &mut rec,
                    &w.wo,
                    MatvecArgs {
                        accumulate: true,
                        ..mv(&w.wo.buffer, &s.att, &s.x, e, attn_dim)
                    },
                )?;
                k.matvec(
                    &mut rec,
                    &w.w_gate_up,
                    MatvecArgs {
                        norm: Some((&w.ffn_norm, eps)),
                        gated: true,
                        ..mv(&w.w_gate_up.buffer, &s.x, &s.hidden, n_ff, e)
                    },
                )?;
                k.matvec(
                    &mut rec,
                    &w.w_down,
                    MatvecArgs {
                        accumulate: true,
                        ..mv(&w.w_down.buffer, &s.hidden, &s.x, e, n_ff)
                    },
                )?;
            } else {
                k.rmsnorm
                    .record(&mut rec, &s.x, &w.attn_norm, &s.xn, t, e, eps)?;
                k.matmul(&mut rec, &w.wqkv, &s.xn, &s.qkv, t, qkv_dim, e, false)?;
                k.rope_kv
                    .record(&mut rec, &s.qkv, &self.rope_table, kv, shape, rope)?;
                k.attn_prefill.record(&mut rec, &s.qkv, kv, &s.att, shape)?;
                k.matmul(&mut rec, &w.wo, &s.att, &s.x, t, e, attn_dim, true)?;
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
                k.swiglu
                    .record_fused(&mut rec, &s.gate_up, &s.hidden, t, n_ff)?;
                k.matmul(&mut rec, &w.w_down, &s.hidden, &s.x, t, e, n_ff, true)?;
            }
        }
        let out_rows = match rows {
            None => 0,
            Some(Logits::Last) => {
                let row_bytes = e as u64 * 4;
                let x = if n == 1 {
                    &s.x
                } else {
                    rec.copy(&s.x, (n as u64 - 1) * row_bytes, &s.last, 0, row_bytes)?;
                    &s.last
                };
                k.matvec(
                    &mut rec,
                    head,
                    MatvecArgs {
                        norm: Some((&self.output_norm, eps)),
                        ..MatvecArgs::plain(&head.buffer, x, &s.logits, vocab, e, 1)
                    },
                )?;
                1
            }
            Some(Logits::All) if streaming => {
                k.matvec(
                    &mut rec,
                    head,
                    MatvecArgs {
                        norm: Some((&self.output_norm, eps)),
                        ..MatvecArgs::plain(&head.buffer, &s.x, &s.logits, vocab, e, t)
                    },
                )?;
                n
            }
            Some(Logits::All) => {
                k.rmsnorm
                    .record(&mut rec, &s.x, &self.output_norm, &s.xn, t, e, eps)?;
                k.matmul(&mut rec, head, &s.xn, &s.logits, t, vocab, e, false)?;
                n
            }
        };
        let done = rec.submit()?;
        if let Some(profile) = &mut self.profile {
            for k in done.kernels {
                let e = profile.entry(k.label).or_default();
                e.0 += k.ns;
                e.1 += 1;
            }
        }
        self.kv.set_len(self.kv.len() + n);
        Ok(self.scratch.logits.download(out_rows * c.n_vocab)?)
    }
}

impl Backend for VkModel {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn n_ctx(&self) -> usize {
        self.kv.capacity()
    }

    fn len(&self) -> usize {
        self.kv.len()
    }

    fn truncate(&mut self, len: usize) {
        self.kv.truncate(len);
    }

    fn profile(&self) -> Vec<(&'static str, f64, u64)> {
        self.profile
            .iter()
            .flatten()
            .map(|(&k, &(ns, n))| (k, ns, n))
            .collect()
    }

    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        check_step(&self.config, tokens, self.kv.len(), self.kv.capacity())?;
        let chunks = tokens.len().div_ceil(self.chunk);
        let mut out = Vec::new();
        for (i, chunk) in tokens.chunks(self.chunk).enumerate() {
            let rows = match logits {
                Logits::All => Some(Logits::All),
                Logits::Last if i + 1 == chunks => Some(Logits::Last),
                Logits::Last => None,
            };
            out.extend(self.step(chunk, rows)?);
        }
        Ok(out)
    }
}
