//! Reading weights out of a model file in the layout the executors use: q/k/v fused into one
//! [qkv_dim, n_embd] matrix and gate/up into one [2 n_ff, n_embd] matrix, so each becomes a
//! single projection (a product per run of one format, see [`Projection`]). Matrices stay
//! packed in their `hearth-quant` format ([`Matrix`]); norm
//! gains are read as f32. The CPU reference dequantizes the same packed matrices, so it
//! computes with exactly the values the Vulkan kernels see.

use hearth_models::spec::{
    GateUpLayout, LatentExpansion, LatentQuery, LatentTensors, LayerTensors, MlpTensors,
    NormTensors, QkvTensors,
};
use hearth_models::{GgufFile, ResolvedModel};
use hearth_quant::{BlockType, Format};

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::layer::{ExpertBias, LatentWeights, LayerWeights, Mlp, SharedMlp};
use crate::matrix::{fitting_format, import_format, Matrix, Projection};
use crate::stage::Part;

/// Where loading stands, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct LoadProgress<'a> {
    /// Tensor being read.
    pub tensor: &'a str,
    /// Bytes of the file's tensor data read so far, out of `total_bytes`.
    pub done_bytes: u64,
    pub total_bytes: u64,
}

/// Called as loading advances; returning `false` cancels the load.
pub type ProgressFn<'a> = dyn FnMut(LoadProgress) -> bool + 'a;

/// Reads tensors of one file by name, checking shapes and reporting progress.
pub struct TensorReader<'a> {
    file: &'a GgufFile,
    done: u64,
    total: u64,
    progress: &'a mut ProgressFn<'a>,
}

impl<'a> TensorReader<'a> {
    /// A reader whose progress counts `names` (those the file has) as the whole load.
    pub fn new(file: &'a GgufFile, names: &[&str], progress: &'a mut ProgressFn<'a>) -> Self {
        let total = names
            .iter()
            .filter_map(|n| file.tensor(n))
            .map(|i| i.n_bytes)
            .sum();
        Self {
            file,
            done: 0,
            total,
            progress,
        }
    }

    pub fn file(&self) -> &'a GgufFile {
        self.file
    }

    /// An error about tensor `name`.
    pub fn fail(&self, name: &str, reason: String) -> Error {
        Error::Tensor {
            path: self.file.path().to_path_buf(),
            tensor: name.to_string(),
            reason,
        }
    }

    /// The tensor's bytes and type after checking its shape, with progress reported.
    fn view(&mut self, name: &str, rows: usize, cols: usize) -> Result<(u32, &'a [u8])> {
        let file = self.file;
        let view = file.tensor_view(name)?;
        let n = view.info.n_elements();
        if n != (rows * cols) as u64 || view.info.shape.first() != Some(&(cols as u64)) {
            return Err(self.fail(
                name,
                format!(
                    "shape {:?} where the model needs [{cols}, {rows}]",
                    view.info.shape
                ),
            ));
        }
        if !(self.progress)(LoadProgress {
            tensor: name,
            done_bytes: self.done,
            total_bytes: self.total,
        }) {
            return Err(Error::Cancelled);
        }
        self.done += view.info.n_bytes;
        Ok((view.info.ggml_type.id(), view.data))
    }

    /// A tensor of `rows` x `cols` values as f32 (norm gains and other small vectors).
    pub fn vector(&mut self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
        let (id, data) = self.view(name, rows, cols)?;
        let mut out = vec![0f32; rows * cols];
        dequantize_any(id, data, &mut out).map_err(|e| self.fail(name, e.to_string()))?;
        Ok(out)
    }

    /// A [rows, cols] weight matrix, packed as the device will hold it: as stored when the
    /// file's type is a Hearth format whose blocks fit the rows, else converted once.
    pub fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Matrix> {
        let (id, data) = self.view(name, rows, cols)?;
        let stored = Format::from_gguf_id(id);
        let format = load_format(id, cols).map_err(|why| self.fail(name, why))?;
        if stored == Some(format) {
            return Ok(Matrix {
                format,
                rows,
                cols,
                data: data.to_vec(),
            });
        }
        let mut values = vec![0f32; rows * cols];
        dequantize_any(id, data, &mut values).map_err(|e| self.fail(name, e.to_string()))?;
        Matrix::quantize(format, rows, cols, &values).map_err(|e| self.fail(name, e.to_string()))
    }

    /// Reports the end of loading.
    pub fn finish(&mut self) -> Result<()> {
        let done = (self.progress)(LoadProgress {
            tensor: "",
            done_bytes: self.total,
            total_bytes: self.total,
        });
        if done {
            Ok(())
        } else {
            Err(Error::Cancelled)
        }
    }
}

/// Reads a decoder's weights, block by block, in the executors' layout.
pub struct WeightReader<'a> {
    tensors: TensorReader<'a>,
    model: &'a ResolvedModel,
    config: &'a ModelConfig,
}

impl<'a> WeightReader<'a> {
    pub fn new(
        file: &'a GgufFile,
        model: &'a ResolvedModel,
        config: &'a ModelConfig,
        progress: &'a mut ProgressFn<'a>,
    ) -> Self {
        Self::for_part(file, model, config, &Part::whole(config.n_layer), progress)
    }

    /// A reader of `part`'s tensors only: progress counts what that part reads.
    pub fn for_part(
        file: &'a GgufFile,
        model: &'a ResolvedModel,
        config: &'a ModelConfig,
        part: &Part,
        progress: &'a mut ProgressFn<'a>,
    ) -> Self {
        let names = part_tensor_names(model, part);
        Self {
            tensors: TensorReader::new(file, &names, progress),
            model,
            config,
        }
    }

    fn fail(&self, name: &str, reason: String) -> Error {
        self.tensors.fail(name, reason)
    }

    /// A tensor of `rows` x `cols` values as f32 (norm gains and other small vectors).
    pub fn vector(&mut self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
        self.tensors.vector(name, rows, cols)
    }

    /// A [rows, cols] weight matrix, packed as the device will hold it.
    pub fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Matrix> {
        self.tensors.matrix(name, rows, cols)
    }

    pub fn token_embd(&mut self) -> Result<Matrix> {
        // Copying the `&'a` references out of `self` lets tensor names borrow from the model
        // while `self` is borrowed mutably.
        let (c, t) = (self.config, &self.model.tensors);
        self.matrix(&t.token_embd, c.n_vocab, c.n_embd)
    }

    pub fn output_norm(&mut self) -> Result<Vec<f32>> {
        let (c, t) = (self.config, &self.model.tensors);
        let norm = t.output_norm.as_ref().ok_or_else(|| Error::Unsupported {
            path: self.tensors.file().path().to_path_buf(),
            what: "a decoder without a final norm".into(),
        })?;
        let mut gain = self.vector(&norm.weight, 1, c.n_embd)?;
        // Logits divided by Granite's scale: the head is linear in the norm's output.
        if let Some(s) = c.logit_scale {
            gain.iter_mut().for_each(|g| *g /= s);
        }
        Ok(gain)
    }

    /// The output head, or `None` when it is the token embedding (tied).
    pub fn output(&mut self) -> Result<Option<Matrix>> {
        let (c, t) = (self.config, &self.model.tensors);
        if t.tied_embeddings {
            return Ok(None);
        }
        self.matrix(&t.output, c.n_vocab, c.n_embd).map(Some)
    }

    pub fn layer(&mut self, layer: usize) -> Result<LayerWeights> {
        let c = self.config;
        let t = &self.model.tensors.layers[layer];
        let (e, kv) = (c.n_embd, c.n_head_kv * c.head_dim);
        let mut latent = None;
        let wqkv = match &t.qkv {
            QkvTensors::Separate { q, k, v } => Projection::fuse(vec![
                self.matrix(&q.weight, c.attn_dim(), e)?,
                self.matrix(&k.weight, kv, e)?,
                self.matrix(&v.weight, kv, e)?,
            ]),
            QkvTensors::Fused(qkv) => self.matrix(&qkv.weight, c.qkv_dim(), e)?.into(),
            QkvTensors::Latent(lt) => {
                let (wqkv, weights) = self.latent(lt)?;
                latent = Some(weights);
                wqkv
            }
        };
        // q, k and v biases as one [qkv_dim] vector, in the rows' order.
        let qkv_bias = match &t.qkv {
            QkvTensors::Separate { q, k, v } => match (&q.bias, &k.bias, &v.bias) {
                (Some(qb), Some(kb), Some(vb)) => {
                    let mut bias = self.vector(qb, 1, c.attn_dim())?;
                    bias.extend(self.vector(kb, 1, kv)?);
                    bias.extend(self.vector(vb, 1, kv)?);
                    Some(bias)
                }
                _ => None,
            },
            QkvTensors::Fused(qkv) => match &qkv.bias {
                Some(b) => Some(self.vector(b, 1, c.qkv_dim())?),
                None => None,
            },
            QkvTensors::Latent(_) => None,
        };
        // One head wide, or as wide as the projection for a norm over all of it.
        let mut head_norm = |n: &Option<NormTensors>, heads: usize| {
            let width = if c.qk_norm_whole { heads } else { 1 } * c.head_dim;
            match n {
                Some(n) => self.vector(&n.weight, 1, width).map(Some),
                None => Ok(None),
            }
        };
        let q_norm = head_norm(&t.q_norm, c.n_head)?;
        let k_norm = head_norm(&t.k_norm, c.n_head_kv)?;
        let mut post_norm = |n: &Option<NormTensors>| match n {
            Some(n) => self.vector(&n.weight, 1, e).map(Some),
            None => Ok(None),
        };
        let attn_post_norm = post_norm(&t.attn_post_norm)?;
        let ffn_post_norm = post_norm(&t.ffn_post_norm)?;
        let mlp = match &t.mlp {
            // Gate rows then up rows: two matrices, or one that holds both (Phi-3).
            MlpTensors::Dense { gate, up, down } => Mlp::Dense {
                gate_up: match (gate, self.model.spec.mlp.gate_up) {
                    (Some(gate), _) => Projection::fuse(vec![
                        self.matrix(&gate.weight, c.n_ff, e)?,
                        self.matrix(&up.weight, c.n_ff, e)?,
                    ]),
                    (None, GateUpLayout::Fused) => self.matrix(&up.weight, 2 * c.n_ff, e)?.into(),
                    (None, GateUpLayout::Separate) => {
                        return Err(Error::Unsupported {
                            path: self.tensors.file().path().to_path_buf(),
                            what: format!("layer {layer} without a gate projection"),
                        })
                    }
                },
                down: self.matrix(&down.weight, e, c.n_ff)?.into(),
            },
            MlpTensors::Experts {
                router,
                gate,
                up,
                down,
                shared,
                ..
            } => {
                let x = c
                    .experts
                    .ok_or_else(|| self.fail(router, "experts without a count".into()))?;
                let gate = self.matrix(gate, x.count * x.n_ff, e)?;
                let up = self.matrix(up, x.count * x.n_ff, e)?;
                let mut router = vec![self.matrix(router, x.count, e)?];
                let shared = match (shared, x.shared) {
                    (Some(t), Some(sh)) => {
                        // The shared expert's gate is one more row of the router.
                        if let Some(gate_inp) = &t.gate_inp {
                            router.push(self.matrix(gate_inp, 1, e)?);
                        }
                        Some(SharedMlp {
                            gate_up: Projection::fuse(vec![
                                self.matrix(&t.gate, sh.n_ff, e)?,
                                self.matrix(&t.up, sh.n_ff, e)?,
                            ]),
                            down: self.matrix(&t.down, e, sh.n_ff)?.into(),
                        })
                    }
                    _ => None,
                };
                Mlp::Experts {
                    router: Projection::fuse(router),
                    gate_up: Projection::interleave_experts(&gate, &up, x.count),
                    down: self.matrix(down, x.count * e, x.n_ff)?.into(),
                    shared,
                }
            }
        };
        let expert_bias = match (&t.mlp, c.experts) {
            (
                MlpTensors::Experts {
                    biases: Some(b), ..
                },
                Some(x),
            ) => {
                let gate = self.vector(&b.gate, x.count, x.n_ff)?;
                let up = self.vector(&b.up, x.count, x.n_ff)?;
                // Each expert's gate biases, then its up biases, as its rows are stacked.
                let gate_up = gate
                    .chunks(x.n_ff)
                    .zip(up.chunks(x.n_ff))
                    .flat_map(|(g, u)| g.iter().chain(u))
                    .copied()
                    .collect();
                Some(ExpertBias {
                    router: self.vector(&b.router, 1, x.count)?,
                    gate_up,
                    down: self.vector(&b.down, x.count, e)?,
                })
            }
            _ => None,
        };
        let attn_sinks = match &t.attn_sinks {
            Some(name) => Some(self.vector(name, 1, c.n_head)?),
            None => None,
        };
        let wo_bias = match &t.attn_output.bias {
            Some(name) => Some(self.vector(name, 1, e)?),
            None => None,
        };
        Ok(LayerWeights {
            attn_norm: self.vector(&t.attn_norm.weight, 1, e)?,
            wqkv,
            qkv_bias,
            q_norm,
            k_norm,
            wo: self.matrix(&t.attn_output.weight, e, c.attn_dim())?.into(),
            wo_bias,
            attn_sinks,
            attn_post_norm,
            ffn_post_norm,
            ffn_norm: self.vector(&t.ffn_norm.weight, 1, e)?,
            mlp,
            expert_bias,
            expert_select_bias: match (&t.mlp, c.experts) {
                (
                    MlpTensors::Experts {
                        select_bias: Some(b),
                        ..
                    },
                    Some(x),
                ) => Some(self.vector(b, 1, x.count)?),
                _ => None,
            },
            latent,
        })
    }

    /// Latent attention's input projection (the queries or their low-rank part, then the
    /// latent and the rotated key, fused) and its other weights. The older files' `kv_b`
    /// (each head's key rows, then its value rows, [n_head * (nope + v_dim), kv_lora]) is
    /// split as llama.cpp's converter splits it, each head's key rows transposed to
    /// [kv_lora, nope]; its values are read as f32 and packed again in the format rows of
    /// their new width load as.
    fn latent(
        &mut self,
        lt: &LatentTensors,
    ) -> Result<(Projection, LatentWeights<Projection, Vec<f32>>)> {
        let c = self.config;
        let Some(l) = c.latent else {
            return Err(self.fail(&lt.kv_a, "latent attention without its sizes".into()));
        };
        let (e, h) = (c.n_embd, c.n_head);
        let q_rows = h * l.qk_dim();
        let (q, q_a_norm, wq_b) = match &lt.q {
            LatentQuery::Direct(q) => (self.matrix(q, q_rows, e)?, None, None),
            LatentQuery::LowRank { a, norm, b } => {
                let r = l.q_lora.unwrap_or(0);
                let a = self.matrix(a, r, e)?;
                let norm = self.vector(&norm.weight, 1, r)?;
                (a, Some(norm), Some(self.matrix(b, q_rows, r)?.into()))
            }
        };
        let kv_a = self.matrix(&lt.kv_a, l.kv_lora + l.rope, e)?;
        let kv_a_norm = self.vector(&lt.kv_a_norm.weight, 1, l.kv_lora)?;
        let (wk_b, wv_b) = match &lt.kv_b {
            LatentExpansion::Split { k_b, v_b } => (
                self.matrix(k_b, h * l.kv_lora, l.nope)?,
                self.matrix(v_b, h * l.v_dim, l.kv_lora)?,
            ),
            LatentExpansion::Fused(kv_b) => {
                let rows = h * (l.nope + l.v_dim);
                let id = self.tensors.file().tensor_view(kv_b)?.info.ggml_type.id();
                let values = self.vector(kv_b, rows, l.kv_lora)?;
                let (mut k_b, mut v_b) = (Vec::new(), Vec::new());
                for head in values.chunks(l.kv_lora * (l.nope + l.v_dim)) {
                    let (k, v) = head.split_at(l.nope * l.kv_lora);
                    for i in 0..l.kv_lora {
                        k_b.extend((0..l.nope).map(|c| k[c * l.kv_lora + i]));
                    }
                    v_b.extend_from_slice(v);
                }
                let pack = |rows: usize, cols: usize, values: &[f32]| {
                    let format = load_format(id, cols).map_err(|why| self.fail(kv_b, why))?;
                    Matrix::quantize(format, rows, cols, values)
                        .map_err(|e| self.fail(kv_b, e.to_string()))
                };
                (
                    pack(h * l.kv_lora, l.nope, &k_b)?,
                    pack(h * l.v_dim, l.kv_lora, &v_b)?,
                )
            }
        };
        Ok((
            Projection::fuse(vec![q, kv_a]),
            LatentWeights {
                q_a_norm,
                wq_b,
                kv_a_norm,
                wk_b: wk_b.into(),
                wv_b: wv_b.into(),
            },
        ))
    }

    /// Reports the end of loading.
    pub fn finish(&mut self) -> Result<()> {
        self.tensors.finish()
    }
}

/// Bytes of `file`'s tensors that `part` holds, as the file stores them: what loading it
/// takes, before any executor's own layout.
/// A row split's share counts its fraction of the heads' and units' matrices.
pub fn part_file_bytes(file: &GgufFile, model: &ResolvedModel, part: &Part) -> u64 {
    let bytes = |n: &str| file.tensor(n).map_or(0, |i| i.n_bytes);
    let whole: u64 = part_tensor_names(model, part)
        .iter()
        .map(|n| bytes(n))
        .sum();
    let Some(shard) = &part.shard else {
        return whole;
    };
    let Ok(config) = ModelConfig::from_resolved(file, model) else {
        return whole;
    };
    let (heads, units) = shard.fractions(&config);
    // What the share does not hold of each layer's divided matrices.
    let mut left_out = 0.0;
    for l in &model.tensors.layers[part.layers.clone()] {
        let attention: u64 = qkv_tensor_names(l).iter().map(|n| bytes(n)).sum::<u64>()
            + bytes(&l.attn_output.weight);
        let mlp: u64 = match &l.mlp {
            MlpTensors::Dense { gate, up, down } => {
                gate.as_ref().map_or(0, |g| bytes(&g.weight))
                    + bytes(&up.weight)
                    + bytes(&down.weight)
            }
            MlpTensors::Experts { .. } => 0,
        };
        left_out += attention as f64 * (1.0 - heads) + mlp as f64 * (1.0 - units);
    }
    whole.saturating_sub(left_out.round() as u64)
}

/// The tensors `part` reads: its layers', the token embedding where it embeds, the final
/// norm and output head where it ends the model (the embedding again when tied to the head).
fn part_tensor_names<'m>(model: &'m ResolvedModel, part: &Part) -> Vec<&'m str> {
    let t = &model.tensors;
    let mut names: Vec<&str> = Vec::new();
    if part.embeds() || (part.heads() && t.tied_embeddings) {
        names.push(&t.token_embd);
    }
    if part.heads() {
        names.extend(t.output_norm.as_ref().map(|n| n.weight.as_str()));
        if !t.tied_embeddings {
            names.push(&t.output);
        }
    }
    for l in &t.layers[part.layers.clone()] {
        names.extend(layer_tensor_names(l));
    }
    names
}

fn layer_tensor_names(l: &LayerTensors) -> Vec<&str> {
    let mut names = vec![
        l.attn_norm.weight.as_str(),
        &l.attn_output.weight,
        &l.ffn_norm.weight,
    ];
    names.extend(l.attn_output.bias.as_deref());
    names.extend(l.attn_sinks.as_deref());
    match &l.mlp {
        MlpTensors::Dense { gate, up, down } => {
            names.extend(gate.as_ref().map(|g| g.weight.as_str()));
            names.extend([up.weight.as_str(), &down.weight]);
        }
        MlpTensors::Experts {
            router,
            gate,
            up,
            down,
            shared,
            biases,
            select_bias,
        } => {
            names.extend([router.as_str(), gate, up, down]);
            names.extend(select_bias.as_deref());
            if let Some(b) = biases {
                names.extend([b.router.as_str(), &b.gate, &b.up, &b.down]);
            }
            if let Some(sh) = shared {
                names.extend([sh.gate.as_str(), &sh.up, &sh.down]);
                names.extend(sh.gate_inp.as_deref());
            }
        }
    }
    names.extend(qkv_tensor_names(l));
    let norms = [&l.q_norm, &l.k_norm, &l.attn_post_norm, &l.ffn_post_norm];
    for n in norms.into_iter().flatten() {
        names.push(&n.weight);
    }
    names
}

/// The q, k and v projections' weights and biases.
fn qkv_tensor_names(l: &LayerTensors) -> Vec<&str> {
    let mut names = Vec::new();
    match &l.qkv {
        QkvTensors::Separate { q, k, v } => {
            for p in [q, k, v] {
                names.push(p.weight.as_str());
                names.extend(p.bias.as_deref());
            }
        }
        QkvTensors::Fused(qkv) => {
            names.push(&qkv.weight);
            names.extend(qkv.bias.as_deref());
        }
        QkvTensors::Latent(lt) => {
            match &lt.q {
                LatentQuery::Direct(q) => names.push(q.as_str()),
                LatentQuery::LowRank { a, norm, b } => names.extend([a.as_str(), &norm.weight, b]),
            }
            names.extend([lt.kv_a.as_str(), &lt.kv_a_norm.weight]);
            match &lt.kv_b {
                LatentExpansion::Split { k_b, v_b } => names.extend([k_b.as_str(), v_b]),
                LatentExpansion::Fused(kv_b) => names.push(kv_b),
            }
        }
    }
    names
}

/// The format a tensor of GGUF type `id` with rows of `cols` values loads as: its own where
/// Hearth has it and its blocks fit the rows, else the one that keeps it best.
pub fn load_format(id: u32, cols: usize) -> std::result::Result<Format, String> {
    let preferred = match (Format::from_gguf_id(id), BlockType::from_ggml_id(id)) {
        (Some(f), _) => f,
        (None, Some(ty)) => import_format(ty),
        (None, None) => {
            let name = hearth_models::GgmlType::from_id(id).map_or("unknown", |t| t.name());
            return Err(format!(
                "tensors of type {name} (id {id}) cannot be loaded; the float types, the \
                 legacy types, the k-quants, the i-quants, TQ1_0, TQ2_0 and MXFP4 can"
            ));
        }
    };
    fitting_format(preferred, cols)
        .ok_or_else(|| format!("rows of {cols} values: the kernels need a multiple of 32"))
}

/// Dequantizes a tensor of any type the file may hold: a Hearth format or a GGUF type.
fn dequantize_any(id: u32, data: &[u8], out: &mut [f32]) -> hearth_quant::Result<()> {
    match Format::from_gguf_id(id) {
        Some(format) => format.dequantize(data, out),
        None => hearth_quant::dequantize_ggml(id, data, out),
    }
}
