//! An encoder (BERT) on the Vulkan executor. A batch of texts runs as one step, recorded into
//! one command buffer and one submission: the texts' tokens stacked into one matrix, so each
//! block's products read every weight row once for the whole batch, while attention keeps
//! each text to its own tokens (`attn_encoder`, from each token's text span).
//!
//! The block matrices stay packed in their formats on the device, every product running its
//! format's kernel as the decoder's do; biases, norms' gains and biases are f32 buffers. The
//! embedding tables stay on the host: a step uploads each token's embedding (token, position
//! and token type summed), and the device norms it. An encoder keeps no cache and no state
//! between steps, only scratch buffers that grow to the largest step seen.

use std::sync::Arc;

use hearth_kernels::vk::{Buffer, BufferDesc, Device, Recorder};
use hearth_kernels::{
    weight_buffer, AttnEncoder, BiasAct, EncoderAttnIo, LayerNorm, MatmulArgs, MatvecArgs,
    NormShape, OutputCols, TextSpan, WeightFormat,
};
use hearth_model::encoder::{
    check_batch, read_encoder, ClassifierHead, Encoder, EncoderConfig, EncoderInput, EncoderLayer,
    EncoderWeights, Norm,
};
use hearth_model::{Error, Matrix, ProgressFn, Projection, Result};
use hearth_models::{GgufFile, ResolvedModel};

use super::kernels::{FormatKernels, Products, DECODE_MAX_TOKENS};
use super::DeviceMatrix;

/// Most tokens one step takes; a larger batch runs as several steps of whole texts.
const MAX_STEP_TOKENS: usize = 8192;

/// One block on the device: each matrix as its runs of rows of one format.
type DeviceEncoderLayer = EncoderLayer<Vec<DeviceMatrix>, Buffer>;

/// The kernels that read no weights.
struct EncoderKernels {
    layernorm: LayerNorm,
    bias_act: BiasAct,
    attention: AttnEncoder,
}

/// A step's activations, for up to `tokens` stacked tokens.
struct Scratch {
    tokens: usize,
    /// [tokens, n_embd] each token's embedding before the norm, written by the host.
    input: Buffer,
    /// [tokens] each token's text rows (`TextSpan`), written by the host.
    spans: Buffer,
    /// [tokens, n_embd] the residual stream between blocks.
    x: Buffer,
    /// [tokens, n_embd] the residual stream between a block's attention and its MLP.
    mid: Buffer,
    /// [tokens, 3 attn_dim]
    qkv: Buffer,
    /// [tokens, attn_dim]
    att: Buffer,
    /// [tokens, n_ff]
    hidden: Buffer,
    /// [tokens, n_embd] the last block's output, read by the host.
    out: Buffer,
}

impl Scratch {
    fn new(device: &Arc<Device>, c: &EncoderConfig, tokens: usize) -> Result<Self> {
        let f32s = |name: &str, n: usize| {
            Buffer::new(
                device,
                BufferDesc::device_local(name, (tokens * n * 4) as u64),
            )
        };
        let e = c.n_embd;
        Ok(Self {
            tokens,
            input: Buffer::new(
                device,
                BufferDesc::host_visible("embedded tokens", (tokens * e * 4) as u64),
            )?,
            spans: Buffer::new(
                device,
                BufferDesc::host_visible("text spans", (tokens * 8) as u64),
            )?,
            x: f32s("x", e)?,
            mid: f32s("x after attention", e)?,
            qkv: f32s("qkv", c.qkv_dim())?,
            att: f32s("attention output", c.attn_dim())?,
            hidden: f32s("mlp hidden", c.n_ff)?,
            out: Buffer::new(
                device,
                BufferDesc::readback("hidden states", (tokens * e * 4) as u64),
            )?,
        })
    }
}

pub struct VkEncoder {
    device: Arc<Device>,
    config: EncoderConfig,
    /// The embedding tables on the host; the blocks are in `layers`.
    embeddings: EncoderWeights<Projection>,
    embd_norm: Norm<Buffer>,
    layers: Vec<DeviceEncoderLayer>,
    products: Products,
    kernels: EncoderKernels,
    scratch: Scratch,
    /// Most tokens a step takes: what every scratch buffer can hold on this device.
    max_step: usize,
    /// Bytes of packed weight matrices on the device.
    weight_bytes: u64,
}

impl VkEncoder {
    /// Loads an encoder onto `device`: its block matrices uploaded once, each format's
    /// kernels built on a thread of their own meanwhile.
    pub fn load(
        device: &Arc<Device>,
        file: &GgufFile,
        model: &ResolvedModel,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let config = EncoderConfig::from_resolved(file, model)?;
        let c = &config;
        let max_step = max_step_tokens(device, c)?;
        let mut embeddings = read_encoder(file, model, c, progress)?;
        let host_layers = std::mem::take(&mut embeddings.layers);
        let mut formats: Vec<WeightFormat> = Vec::new();
        for l in &host_layers {
            for p in [&l.wqkv, &l.wo, &l.up, &l.down] {
                for run in &p.runs {
                    if !formats.contains(&run.format) {
                        formats.push(run.format);
                    }
                }
            }
        }
        let vector = |name: &str, v: &[f32]| Buffer::from_slice(device, name, v);
        let norm = |name: &str, n: &Norm<Vec<f32>>| -> Result<Norm<Buffer>> {
            Ok(Norm {
                weight: vector(&format!("{name} gain"), &n.weight)?,
                bias: vector(&format!("{name} bias"), &n.bias)?,
            })
        };
        let mut weight_bytes = 0;
        let (layers, products, kernels) = std::thread::scope(|s| {
            let common = s.spawn(|| EncoderKernels::new(device, c));
            let building: Vec<_> = formats
                .iter()
                .map(|&f| (f, s.spawn(move || FormatKernels::new(device, f))))
                .collect();
            let mut matrix = |name: String, p: Projection| -> Result<Vec<DeviceMatrix>> {
                let runs = p.runs.len();
                let upload = |(i, run): (usize, Matrix)| -> Result<DeviceMatrix> {
                    weight_bytes += run.data.len() as u64;
                    let name = match runs {
                        1 => name.clone(),
                        _ => format!("{name} run {i}"),
                    };
                    Ok(DeviceMatrix {
                        buffer: weight_buffer(device, &name, &run.data)?,
                        format: run.format,
                        rows: run.rows as u32,
                    })
                };
                p.runs.into_iter().enumerate().map(upload).collect()
            };
            let mut layers = Vec::with_capacity(host_layers.len());
            for (i, l) in host_layers.into_iter().enumerate() {
                let name = |what: &str| format!("blk.{i}.{what}");
                layers.push(EncoderLayer {
                    wqkv: matrix(name("attn_qkv"), l.wqkv)?,
                    qkv_bias: vector(&name("attn_qkv bias"), &l.qkv_bias)?,
                    wo: matrix(name("attn_output"), l.wo)?,
                    wo_bias: vector(&name("attn_output bias"), &l.wo_bias)?,
                    attn_norm: norm(&name("attn_norm"), &l.attn_norm)?,
                    up: matrix(name("ffn_up"), l.up)?,
                    up_bias: vector(&name("ffn_up bias"), &l.up_bias)?,
                    down: matrix(name("ffn_down"), l.down)?,
                    down_bias: vector(&name("ffn_down bias"), &l.down_bias)?,
                    ffn_norm: norm(&name("ffn_norm"), &l.ffn_norm)?,
                });
            }
            let widest = c.n_embd.max(c.attn_dim()).max(c.n_ff);
            let mut products = Products::new(device, max_step, widest);
            for (format, handle) in building {
                let built = handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                products.formats.insert(format, built);
            }
            let kernels = common
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
            Ok::<_, Error>((layers, products, kernels))
        })?;
        let embd_norm = norm("token_embd_norm", &embeddings.embd_norm)?;
        // Sized for one text of the longest input; larger steps grow it.
        let scratch = Scratch::new(device, c, c.n_positions.min(max_step))?;
        Ok(Self {
            device: device.clone(),
            config,
            embeddings,
            embd_norm,
            layers,
            products,
            kernels,
            scratch,
            max_step,
            weight_bytes,
        })
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Bytes of packed weight matrices on the device.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// Most tokens one step takes.
    pub fn max_step_tokens(&self) -> usize {
        self.max_step
    }

    /// One step: the texts' hidden states ([tokens, n_embd] each, in order), `batch` holding
    /// at most `max_step` tokens.
    fn step(&mut self, batch: &[EncoderInput]) -> Result<Vec<Vec<f32>>> {
        let (c, e) = (&self.config, self.config.n_embd);
        let lengths = batch.iter().map(|b| b.tokens.len());
        let spans = TextSpan::per_token(lengths.clone());
        let tokens = spans.len();
        if self.scratch.tokens < tokens {
            // Doubled, so a run of growing batches reallocates a few times only.
            let grown = tokens.max(2 * self.scratch.tokens).min(self.max_step);
            self.scratch = Scratch::new(&self.device, c, grown)?;
        }
        let mut input = vec![0f32; tokens * e];
        let mut rows = input.chunks_exact_mut(e);
        for text in batch {
            for (pos, (&t, row)) in text.tokens.iter().zip(&mut rows).enumerate() {
                let ty = text.types.get(pos).copied().unwrap_or(0);
                self.embeddings.embed_into(c, t, pos, ty, row);
            }
        }
        self.scratch.input.upload(0, &input)?;
        self.scratch.spans.upload(0, &spans)?;
        let mut rec = Recorder::new(&self.device)?;
        self.record_step(&mut rec, tokens as u32)?;
        rec.submit()?;
        let states: Vec<f32> = self.scratch.out.download(tokens * e)?;
        let mut first = 0;
        Ok(lengths
            .map(|n| {
                let text = states[first * e..(first + n) * e].to_vec();
                first += n;
                text
            })
            .collect())
    }

    /// The step over `t` stacked tokens: the embedding norm, then per block the attention
    /// (QKV product and bias, attention within each text, output product and bias added to
    /// x, LayerNorm into `mid`) and the MLP (up product, bias and activation, down product
    /// and bias added to `mid`, LayerNorm back into x); the last x copied out for the host.
    fn record_step<'a>(&'a self, rec: &mut Recorder<'a>, t: u32) -> Result<()> {
        let (c, k, s) = (&self.config, &self.kernels, &self.scratch);
        let (e, n_ff) = (c.n_embd as u32, c.n_ff as u32);
        let (qkv_dim, attn_dim) = (c.qkv_dim() as u32, c.attn_dim() as u32);
        let rows = NormShape {
            rows: t,
            n: e,
            eps: c.norm_eps,
        };
        let layernorm =
            |rec: &mut Recorder<'a>, x: &'a Buffer, norm: &'a Norm<Buffer>, y: &'a Buffer| {
                k.layernorm
                    .record(rec, x, &norm.weight, &norm.bias, y, rows)
            };
        layernorm(rec, &s.input, &self.embd_norm, &s.x)?;
        for l in &self.layers {
            self.project(rec, &l.wqkv, (&s.x, &s.qkv), (qkv_dim, e), t, false)?;
            k.bias_act
                .record(rec, &s.qkv, &l.qkv_bias, (t, qkv_dim), None)?;
            let io = EncoderAttnIo {
                qkv: &s.qkv,
                spans: &s.spans,
                o: &s.att,
            };
            k.attention.record(rec, io, t, c.n_head as u32)?;
            self.project(rec, &l.wo, (&s.att, &s.x), (e, attn_dim), t, true)?;
            k.bias_act.record(rec, &s.x, &l.wo_bias, (t, e), None)?;
            layernorm(rec, &s.x, &l.attn_norm, &s.mid)?;

            self.project(rec, &l.up, (&s.mid, &s.hidden), (n_ff, e), t, false)?;
            k.bias_act
                .record(rec, &s.hidden, &l.up_bias, (t, n_ff), Some(c.act))?;
            self.project(rec, &l.down, (&s.hidden, &s.mid), (e, n_ff), t, true)?;
            k.bias_act.record(rec, &s.mid, &l.down_bias, (t, e), None)?;
            layernorm(rec, &s.mid, &l.ffn_norm, &s.x)?;
        }
        rec.copy(&s.x, 0, &s.out, 0, t as u64 * e as u64 * 4)?;
        Ok(())
    }

    /// y [t, m] (+)= x [t, k] W^T: weight-streaming products for a few tokens or on a CPU
    /// device, the tiled matmul otherwise (as the decoder's prefill chooses).
    fn project<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        w: &'a [DeviceMatrix],
        (x, y): (&'a Buffer, &'a Buffer),
        (m, k): (u32, u32),
        t: u32,
        accumulate: bool,
    ) -> Result<()> {
        let streaming = t as usize <= DECODE_MAX_TOKENS || self.products.matvec_prefill;
        if streaming {
            let args = MatvecArgs::plain(&w[0].buffer, x, y, m, k, t);
            self.products
                .matvec(rec, w, MatvecArgs { accumulate, ..args })
        } else {
            let args = MatmulArgs {
                x,
                c: y,
                n: t,
                m,
                k,
                accumulate,
                cols: OutputCols::default(),
            };
            self.products.matmul(rec, w, args)
        }
    }
}

impl Encoder for VkEncoder {
    fn config(&self) -> &EncoderConfig {
        &self.config
    }

    fn head(&self) -> Option<&ClassifierHead> {
        self.embeddings.head.as_ref()
    }

    /// The texts in steps of whole texts of at most `max_step` tokens.
    fn encode(&mut self, batch: &[EncoderInput]) -> Result<Vec<Vec<f32>>> {
        check_batch(&self.config, batch)?;
        let mut out = Vec::with_capacity(batch.len());
        let mut start = 0;
        while start < batch.len() {
            let mut end = start;
            let mut tokens = 0;
            // At least one text a step (none is longer than a step: see `max_step_tokens`).
            while end < batch.len()
                && (end == start || tokens + batch[end].tokens.len() <= self.max_step)
            {
                tokens += batch[end].tokens.len();
                end += 1;
            }
            out.extend(self.step(&batch[start..end])?);
            start = end;
        }
        Ok(out)
    }
}

impl EncoderKernels {
    fn new(device: &Arc<Device>, c: &EncoderConfig) -> Result<Self> {
        Ok(Self {
            layernorm: LayerNorm::new(device)?,
            bias_act: BiasAct::new(device)?,
            attention: AttnEncoder::new(device, c.head_dim as u32)?,
        })
    }
}

/// Most tokens a step takes on `device`: [`MAX_STEP_TOKENS`], fewer where the widest scratch
/// buffer would pass the device's storage buffer range; at least one text of the longest
/// input.
fn max_step_tokens(device: &Device, c: &EncoderConfig) -> Result<usize> {
    let widest = c.qkv_dim().max(c.n_ff).max(c.n_embd) as u64 * 4;
    let range = device.info().limits.max_storage_buffer_range;
    let fits = (range / widest.max(1)) as usize;
    let tokens = MAX_STEP_TOKENS.max(c.n_positions).min(fits);
    if tokens < c.n_positions {
        return Err(Error::options(
            "device",
            format!(
                "a text of {} tokens needs buffers past the device's storage range of {range} \
                 bytes",
                c.n_positions
            ),
        ));
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_kernels::testing::{device, finish};
    use hearth_reference::RefEncoder;

    fn input(n: usize, seed: usize) -> EncoderInput {
        let mut tokens = vec![101];
        tokens.extend((1..n.max(2) - 1).map(|j| (2000 + 7919 * (seed * 131 + j)) as u32 % 30000));
        tokens.push(102);
        tokens.truncate(n);
        EncoderInput {
            tokens,
            types: Vec::new(),
        }
    }

    /// Each path of the step against the reference on MiniLM, within 1e-4 of the largest
    /// state: weight-streaming products of one token and of a few, the tiled matmul (GPUs'
    /// path, forced here on a CPU device), and a batch split into several steps whose scratch
    /// grows.
    #[test]
    fn every_path_matches_the_reference() {
        let Some(dev) = device() else { return };
        let Some(dir) = hearth_testkit::model(hearth_testkit::MINILM) else {
            return;
        };
        let file = hearth_models::open_model(&dir).unwrap();
        let model = hearth_models::resolve_with(&file, None).unwrap();
        let mut vk = VkEncoder::load(&dev, &file, &model, &mut |_| true).unwrap();
        let mut reference = RefEncoder::load(&file, &model, &mut |_| true).unwrap();
        let mut check = |vk: &mut VkEncoder, batch: &[EncoderInput], what: &str| {
            let want = reference.encode(batch).unwrap();
            let got = vk.encode(batch).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let scale = w.iter().fold(1f32, |m, v| m.max(v.abs()));
                let diff = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                assert!(diff <= 1e-4 * scale, "{what}: text {i} off by {diff}");
            }
        };
        check(&mut vk, &[input(1, 0)], "one token");
        check(
            &mut vk,
            &[input(3, 1), input(1, 2), input(4, 3)],
            "a few tokens",
        );
        let long = [input(30, 4), input(1, 5), input(70, 6), input(12, 7)];
        let device_choice = vk.products.matvec_prefill;
        vk.products.matvec_prefill = false;
        check(&mut vk, &long, "tiled products");
        vk.products.matvec_prefill = device_choice;
        vk.max_step = 80;
        vk.scratch = Scratch::new(&dev, &vk.config, 8).unwrap();
        check(&mut vk, &long, "several steps");
        finish(&dev);
    }
}
