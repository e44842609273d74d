//! Synthetic models: a Llama-architecture GGUF file of a given shape, built in memory, so a
//! model's speed can be measured without downloading it (`hearth bench --synthetic llama-7b`).
//!
//! The file is an ordinary GGUF file as llama.cpp's converter writes one for architecture
//! `llama` (the metadata keys and tensor names `models/specs/llama.toml` resolves), with a
//! minimal SentencePiece vocabulary (`<unk>`, `<s>`, `</s>`, the 256 byte tokens, then
//! filler pieces) and weights that are ordinary numbers: each weight matrix repeats one
//! random row, quantized once, in every row. Speed does not depend on the values, and
//! repeating a row keeps building a 7B model down to a memory copy. Norm gains are ones.
//!
//! ```no_run
//! # fn main() -> hearth_runtime::Result<()> {
//! use hearth_quant::Format;
//! use hearth_runtime::engine::{Engine, EngineOptions};
//!
//! let file = hearth_runtime::synthetic::preset("llama-7b")?.build(Format::Q4)?;
//! let engine = Engine::load_file(file, &EngineOptions::default(), &mut |_| true)?;
//! # Ok(()) }
//! ```

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use hearth_models::{GgmlType, GgufFile, GgufWriter, MetaArray, MetaValue};
use hearth_quant::{Format, FORMAT_VERSION, VERSION_KEY};
use rand::{Rng, SeedableRng};

use crate::error::{Error, Result};

/// The architectures a synthetic file can have: each is the Llama block (pre-RMSNorm, RoPE,
/// grouped-query attention, SiLU-gated MLP) with its family's atoms, written with the
/// metadata keys and tensor names of llama.cpp's converter for that family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Llama,
    /// Biases on the q, k and v projections.
    Qwen2,
    /// An RMSNorm over each query and key head before RoPE.
    Qwen3,
    /// Gemma 2's block: norms after attention and MLP too, a GELU-gated MLP, scaled and tied
    /// embeddings, soft-capped scores (50) and logits (30), and every other layer local.
    Gemma2,
    /// Gemma 3's: Gemma 2's without the score soft-cap, with the query/key norm, five local
    /// layers to a global one, and local layers rotating with their own base (10000).
    Gemma3,
    /// Phi-3's: q/k/v in one matrix and gate/up in another.
    Phi3,
}

impl Family {
    /// `general.architecture`.
    pub fn architecture(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3",
            Family::Phi3 => "phi3",
        }
    }

    /// Norms after attention and after the MLP too.
    fn sandwich(self) -> bool {
        matches!(self, Family::Gemma2 | Family::Gemma3)
    }

    /// A norm over each query and key head.
    fn qk_norm(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Gemma3)
    }
}

/// The hyperparameters of a network of one [`Family`]. Head dimension is `key_length`, or
/// `n_embd / n_head` without one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub family: Family,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rope_base: f32,
    pub norm_eps: f32,
    /// The output head is the token embedding (no `output.weight`).
    pub tied_embeddings: bool,
    /// A head width other than `n_embd / n_head` (`{arch}.attention.key_length`; Qwen3).
    pub key_length: Option<usize>,
    /// The window of local layers (`{arch}.attention.sliding_window`), which layers the
    /// family's spec names.
    pub sliding_window: Option<usize>,
    /// A mixture of experts in place of every block's MLP (Llama: Mixtral; Qwen3: Qwen3-MoE).
    pub experts: Option<ShapeExperts>,
}

/// A mixture of experts' shape: `used` of `count` experts run each token, each a gated MLP
/// `n_ff` wide.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShapeExperts {
    pub count: usize,
    pub used: usize,
    pub n_ff: usize,
}

/// A named shape of a published model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preset {
    /// What `--synthetic` takes (`llama-7b`).
    pub name: &'static str,
    /// The size class the model is known by (`7B`).
    pub size: &'static str,
    /// The published model it has the shape of.
    pub model: &'static str,
    pub shape: Shape,
    /// Llama 3.1's RoPE frequency divisors (`rope_freqs.weight`), where the model has them.
    pub llama3_rope: Option<Llama3Rope>,
}

pub use hearth_models::hf::Llama3Rope;

/// The presets, smallest first (by weights).
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "smollm2-135m",
        size: "135M",
        model: "SmolLM2-135M",
        shape: Shape {
            family: Family::Llama,
            n_layer: 30,
            n_embd: 576,
            n_ff: 1536,
            n_head: 9,
            n_head_kv: 3,
            n_vocab: 49152,
            n_ctx_train: 8192,
            rope_base: 100_000.0,
            norm_eps: 1e-5,
            tied_embeddings: true,
            key_length: None,
            sliding_window: None,
            experts: None,
        },
        llama3_rope: None,
    },
    Preset {
        name: "llama-1b",
        size: "1B",
        model: "Llama 3.2 1B",
        shape: Shape {
            family: Family::Llama,
            n_layer: 16,
            n_embd: 2048,
            n_ff: 8192,
            n_head: 32,
            n_head_kv: 8,
            n_vocab: 128_256,
            n_ctx_train: 131_072,
            rope_base: 500_000.0,
            norm_eps: 1e-5,
            tied_embeddings: true,
            key_length: None,
            sliding_window: None,
            experts: None,
        },
        llama3_rope: None,
    },
    Preset {
        name: "llama-3b",
        size: "3B",
        model: "Llama 3.2 3B",
        shape: Shape {
            family: Family::Llama,
            n_layer: 28,
            n_embd: 3072,
            n_ff: 8192,
            n_head: 24,
            n_head_kv: 8,
            n_vocab: 128_256,
            n_ctx_train: 131_072,
            rope_base: 500_000.0,
            norm_eps: 1e-5,
            tied_embeddings: true,
            key_length: None,
            sliding_window: None,
            experts: None,
        },
        llama3_rope: None,
    },
    Preset {
        name: "llama-7b",
        size: "7B",
        model: "Llama 2 7B",
        shape: Shape {
            family: Family::Llama,
            n_layer: 32,
            n_embd: 4096,
            n_ff: 11008,
            n_head: 32,
            n_head_kv: 32,
            n_vocab: 32000,
            n_ctx_train: 4096,
            rope_base: 10_000.0,
            norm_eps: 1e-5,
            tied_embeddings: false,
            key_length: None,
            sliding_window: None,
            experts: None,
        },
        llama3_rope: None,
    },
    Preset {
        name: "qwen2.5-7b",
        size: "7B",
        model: "Qwen2.5 7B",
        shape: Shape {
            family: Family::Qwen2,
            n_layer: 28,
            n_embd: 3584,
            n_ff: 18944,
            n_head: 28,
            n_head_kv: 4,
            n_vocab: 152_064,
            n_ctx_train: 32_768,
            rope_base: 1_000_000.0,
            norm_eps: 1e-6,
            tied_embeddings: false,
            key_length: None,
            sliding_window: None,
            experts: None,
        },
        llama3_rope: None,
    },
    Preset {
        name: "llama-3-8b",
        size: "8B",
        model: "Llama 3 8B",
        shape: Shape {
            family: Family::Llama,
            n_layer: 32,
            n_embd: 4096,
            n_ff: 14336,
            n_head: 32,
            n_head_kv: 8,
            n_vocab: 128_256,
            n_ctx_train: 8192,
            rope_base: 500_000.0,
            norm_eps: 1e-5,
            tied_embeddings: false,
            key_length: None,
            sliding_window: None,
            experts: None,
        },
        llama3_rope: None,
    },
    Preset {
        name: "llama-3.1-8b",
        size: "8B",
        model: "Llama 3.1 8B",
        shape: Shape {
            family: Family::Llama,
            n_layer: 32,
            n_embd: 4096,
            n_ff: 14336,
            n_head: 32,
            n_head_kv: 8,
            n_vocab: 128_256,
            n_ctx_train: 131_072,
            rope_base: 500_000.0,
            norm_eps: 1e-5,
            tied_embeddings: false,
            key_length: None,
            sliding_window: None,
            experts: None,
        },
        llama3_rope: Some(Llama3Rope::LLAMA_3_1),
    },
    Preset {
        name: "qwen3-8b",
        size: "8B",
        model: "Qwen3 8B",
        shape: Shape {
            family: Family::Qwen3,
            n_layer: 36,
            n_embd: 4096,
            n_ff: 12288,
            n_head: 32,
            n_head_kv: 8,
            n_vocab: 151_936,
            n_ctx_train: 40_960,
            rope_base: 1_000_000.0,
            norm_eps: 1e-6,
            tied_embeddings: false,
            key_length: Some(128),
            sliding_window: None,
            experts: None,
        },
        llama3_rope: None,
    },
    Preset {
        name: "gemma-2-9b",
        size: "9B",
        model: "Gemma 2 9B",
        shape: Shape {
            family: Family::Gemma2,
            n_layer: 42,
            n_embd: 3584,
            n_ff: 14336,
            n_head: 16,
            n_head_kv: 8,
            n_vocab: 256_000,
            n_ctx_train: 8192,
            rope_base: 10_000.0,
            norm_eps: 1e-6,
            tied_embeddings: true,
            key_length: Some(256),
            sliding_window: Some(4096),
            experts: None,
        },
        llama3_rope: None,
    },
    Preset {
        name: "llama-13b",
        size: "13B",
        model: "Llama 2 13B",
        shape: Shape {
            family: Family::Llama,
            n_layer: 40,
            n_embd: 5120,
            n_ff: 13824,
            n_head: 40,
            n_head_kv: 40,
            n_vocab: 32000,
            n_ctx_train: 4096,
            rope_base: 10_000.0,
            norm_eps: 1e-5,
            tied_embeddings: false,
            key_length: None,
            sliding_window: None,
            experts: None,
        },
        llama3_rope: None,
    },
    Preset {
        name: "qwen3-30b-a3b",
        size: "30B-A3B",
        model: "Qwen3-30B-A3B",
        shape: Shape {
            family: Family::Qwen3,
            n_layer: 48,
            n_embd: 2048,
            n_ff: 6144,
            n_head: 32,
            n_head_kv: 4,
            n_vocab: 151_936,
            n_ctx_train: 40_960,
            rope_base: 1_000_000.0,
            norm_eps: 1e-6,
            tied_embeddings: false,
            key_length: Some(128),
            sliding_window: None,
            experts: Some(ShapeExperts {
                count: 128,
                used: 8,
                n_ff: 768,
            }),
        },
        llama3_rope: None,
    },
    Preset {
        name: "mixtral-8x7b",
        size: "8x7B",
        model: "Mixtral 8x7B",
        shape: Shape {
            family: Family::Llama,
            n_layer: 32,
            n_embd: 4096,
            n_ff: 14336,
            n_head: 32,
            n_head_kv: 8,
            n_vocab: 32000,
            n_ctx_train: 32768,
            rope_base: 1_000_000.0,
            norm_eps: 1e-5,
            tied_embeddings: false,
            key_length: None,
            sliding_window: None,
            experts: Some(ShapeExperts {
                count: 8,
                used: 2,
                n_ff: 14336,
            }),
        },
        llama3_rope: None,
    },
];

/// The preset called `name` (ignoring ASCII case); an unknown name is an error that lists
/// the presets.
pub fn preset(name: &str) -> Result<&'static Preset> {
    PRESETS
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
            Error::options(
                "synthetic",
                format!("no preset `{name}` (presets: {})", names.join(", ")),
            )
        })
}

impl Preset {
    /// The model in memory with its weight matrices in `format`, named `{name}-{format}`.
    pub fn build(&self, format: Format) -> Result<GgufFile> {
        let name = format!("{}-{format}", self.name);
        let factors = self
            .llama3_rope
            .map(|r| r.factors(self.shape.head_dim(), self.shape.rope_base));
        self.shape
            .build_rows(&name, format, None, factors.as_deref())
    }
}

impl Shape {
    /// A Llama-family model small enough for tests on lavapipe: 2 layers of width 64, 4 query
    /// heads sharing 2 key/value heads of 16 dimensions, 256 tokens of vocabulary and context.
    pub const TINY: Shape = Shape {
        family: Family::Llama,
        n_layer: 2,
        n_embd: 64,
        n_ff: 128,
        n_head: 4,
        n_head_kv: 2,
        n_vocab: 256,
        n_ctx_train: 256,
        rope_base: 10_000.0,
        norm_eps: 1e-5,
        tied_embeddings: false,
        key_length: None,
        sliding_window: None,
        experts: None,
    };

    pub fn head_dim(&self) -> usize {
        self.key_length.unwrap_or(self.n_embd / self.n_head)
    }

    /// `general.architecture`: the family's, or its mixture-of-experts sibling's where the
    /// converter names one (Qwen3-MoE; Mixtral is `llama`).
    pub fn architecture(&self) -> &'static str {
        match (self.family, self.experts) {
            (Family::Qwen3, Some(_)) => "qwen3moe",
            (family, _) => family.architecture(),
        }
    }

    /// Weights in the network, counted as `ModelConfig::n_params` counts them.
    pub fn n_params(&self) -> u64 {
        let tensors = self.tensors();
        tensors.iter().map(|t| (t.n_in * t.n_out) as u64).sum()
    }

    /// Bytes of tensor data with the weight matrices in `format` (norm gains stay F32);
    /// `None` when the rows do not fit the format's blocks.
    pub fn file_bytes(&self, format: Format) -> Option<u64> {
        self.tensors()
            .iter()
            .map(|t| {
                t.format(format)
                    .bytes_for(t.n_in * t.n_out)
                    .map(|b| b as u64)
            })
            .sum()
    }

    /// Checks the shape is one the runtime executes and `format` can hold.
    pub fn check(&self, format: Format) -> Result<()> {
        let bad = |reason: String| Err(Error::options("synthetic shape", reason));
        let counts = [
            ("n_layer", self.n_layer),
            ("n_embd", self.n_embd),
            ("n_ff", self.n_ff),
            ("n_head", self.n_head),
            ("n_head_kv", self.n_head_kv),
            ("n_ctx_train", self.n_ctx_train),
        ];
        for (what, n) in counts {
            if n == 0 || u32::try_from(n).is_err() {
                return bad(format!("{what} {n} is not a positive 32-bit count"));
            }
        }
        // `<unk>`, `<s>` and `</s>` at least; the byte tokens follow where there is room.
        if self.n_vocab < 3 || u32::try_from(self.n_vocab).is_err() {
            return bad(format!(
                "{} tokens is not a usable vocabulary",
                self.n_vocab
            ));
        }
        match self.key_length {
            Some(d) if d == 0 || d % 2 != 0 => {
                return bad(format!("head width {d} is not a positive even number"))
            }
            None if self.n_embd % self.n_head != 0 || self.head_dim() % 2 != 0 => {
                return bad(format!(
                    "{} heads do not split n_embd {} into even head dimensions",
                    self.n_head, self.n_embd
                ))
            }
            _ => {}
        }
        if let Some(x) = self.experts {
            if x.count == 0 || x.used == 0 || x.used > x.count || x.n_ff == 0 {
                return bad(format!(
                    "{} of {} experts {} wide is not a mixture of experts",
                    x.used, x.count, x.n_ff
                ));
            }
            if !matches!(self.family, Family::Llama | Family::Qwen3) {
                return bad(format!(
                    "{:?} has no mixture-of-experts sibling here (Llama and Qwen3 do)",
                    self.family
                ));
            }
            if self.family == Family::Llama && x.n_ff != self.n_ff {
                return bad(format!(
                    "Mixtral's experts are feed_forward_length wide: {} against n_ff {}",
                    x.n_ff, self.n_ff
                ));
            }
            if x.n_ff % format.block_size() != 0 {
                return bad(format!(
                    "{format} packs rows in blocks of {}: the experts' width {} must be a \
                     multiple",
                    format.block_size(),
                    x.n_ff
                ));
            }
        }
        if self.n_head % self.n_head_kv != 0 {
            return bad(format!(
                "{} key/value heads do not divide {} heads",
                self.n_head_kv, self.n_head
            ));
        }
        if let Some(w) = self
            .sliding_window
            .filter(|&w| w == 0 || w > self.n_ctx_train)
        {
            return bad(format!(
                "a window of {w} does not fit the context of {}",
                self.n_ctx_train
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return bad(format!("RoPE base {} is not above 1", self.rope_base));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0) {
            return bad(format!("norm epsilon {} is not positive", self.norm_eps));
        }
        let block = format.block_size();
        let q_dim = self.n_head * self.head_dim();
        if self.n_embd % block != 0 || self.n_ff % block != 0 || q_dim % block != 0 {
            return bad(format!(
                "{format} packs rows in blocks of {block} values: n_embd {}, n_ff {} and the \
                 query width {q_dim} must be multiples of {block}",
                self.n_embd, self.n_ff
            ));
        }
        Ok(())
    }

    /// Builds the GGUF file in memory: metadata, vocabulary and every weight tensor, matrices
    /// in `format`. `name` is `general.name`, and the file's path is `synthetic:{name}`.
    ///
    /// Besides the file itself (the size of [`file_bytes`](Self::file_bytes)) this holds one
    /// matrix of each distinct shape while it writes.
    pub fn build(&self, name: &str, format: Format) -> Result<GgufFile> {
        self.build_rows(name, format, None, None)
    }

    /// [`build`](Self::build) with every row of every matrix drawn afresh from `seed`: a
    /// model whose tokens differ (for correctness tests of small shapes; it holds every
    /// matrix while it writes).
    pub fn build_random(&self, name: &str, format: Format, seed: u64) -> Result<GgufFile> {
        self.build_rows(name, format, Some(seed), None)
    }

    /// [`build_random`](Self::build_random) with Llama 3's `rope_freqs.weight`: `factors`
    /// divide RoPE's per-pair frequencies (one per rotated pair).
    pub fn build_random_with_rope_factors(
        &self,
        name: &str,
        format: Format,
        seed: u64,
        factors: &[f32],
    ) -> Result<GgufFile> {
        self.build_rows(name, format, Some(seed), Some(factors))
    }

    fn build_rows(
        &self,
        name: &str,
        format: Format,
        seed: Option<u64>,
        rope_factors: Option<&[f32]>,
    ) -> Result<GgufFile> {
        self.check(format)?;
        let factor_bytes: Option<Vec<u8>> =
            rope_factors.map(|f| f.iter().flat_map(|v| v.to_le_bytes()).collect());
        let path = PathBuf::from(format!("synthetic:{name}"));
        let tensors = self.tensors();
        // The bytes of each distinct matrix shape (or, with a seed, of each tensor); the
        // tensors of every layer borrow them.
        let key = |i: usize, t: &TensorPlan| match (seed, t.kind) {
            (Some(_), _) => (t.n_in, t.n_out, i + 1),
            // Varied rows are not a repeated row of the same shape (the output head of a
            // model with experts is not its embedding table).
            (None, Values::VariedMatrix) => (t.n_in, t.n_out, usize::MAX),
            (None, _) => (t.n_in, t.n_out, 0),
        };
        let mut patterns: BTreeMap<(usize, usize, usize), Vec<u8>> = BTreeMap::new();
        for (i, t) in tensors.iter().enumerate() {
            if let Entry::Vacant(e) = patterns.entry(key(i, t)) {
                let data = t
                    .data(format, seed.map(|s| s.wrapping_add(i as u64)))
                    .map_err(|reason| Error::Tensor {
                        path: path.clone(),
                        tensor: t.name.clone(),
                        reason,
                    })?;
                e.insert(data);
            }
        }

        let mut writer = GgufWriter::new();
        self.write_metadata(&mut writer, name, format);
        for (i, t) in tensors.iter().enumerate() {
            let (n_in, rows, stack) = (t.n_in as u64, (t.n_out / t.stack) as u64, t.stack as u64);
            let shape = [n_in, rows, stack];
            let shape = match (t.n_out, t.stack) {
                (1, _) => &shape[..1],
                (_, 1) => &shape[..2],
                _ => &shape[..],
            };
            writer.add_tensor(
                &t.name,
                GgmlType::from(t.format(format)),
                shape,
                &patterns[&key(i, t)][..],
            )?;
        }
        if let Some(bytes) = &factor_bytes {
            let pairs = [bytes.len() as u64 / 4];
            writer.add_tensor("rope_freqs.weight", GgmlType::F32, &pairs, bytes)?;
        }

        // Size the buffer exactly first, so the file is never reallocated (nor held twice).
        let io_error = |source| {
            Error::Model(hearth_models::Error::Io {
                path: path.clone(),
                source,
            })
        };
        let mut count = ByteCount(0);
        writer.write_to(&mut count).map_err(io_error)?;
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(count.0).map_err(|e| {
            io_error(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("{} bytes for the model: {e}", count.0),
            ))
        })?;
        writer.write_to(&mut bytes).map_err(io_error)?;
        drop(writer);
        drop(patterns);
        Ok(GgufFile::from_bytes(path, bytes)?)
    }

    fn write_metadata(&self, w: &mut GgufWriter<'_>, name: &str, format: Format) {
        let u32_of = |n: usize| MetaValue::U32(n as u32); // check() bounded every count
        let arch = self.architecture();
        let mut set = |key: &str, value: MetaValue| w.set_metadata(key, value);
        set("general.architecture", MetaValue::String(arch.into()));
        set("general.name", MetaValue::String(name.into()));
        let mut set_arch = |key: &str, value: MetaValue| set(&format!("{arch}.{key}"), value);
        set_arch("block_count", u32_of(self.n_layer));
        set_arch("context_length", u32_of(self.n_ctx_train));
        set_arch("embedding_length", u32_of(self.n_embd));
        set_arch("feed_forward_length", u32_of(self.n_ff));
        set_arch("attention.head_count", u32_of(self.n_head));
        set_arch("attention.head_count_kv", u32_of(self.n_head_kv));
        if let Some(d) = self.key_length {
            set_arch("attention.key_length", u32_of(d));
            set_arch("attention.value_length", u32_of(d));
        }
        set_arch(
            "attention.layer_norm_rms_epsilon",
            MetaValue::F32(self.norm_eps),
        );
        if let Some(w) = self.sliding_window {
            set_arch("attention.sliding_window", u32_of(w));
        }
        if let Some(x) = self.experts {
            set_arch("expert_count", u32_of(x.count));
            set_arch("expert_used_count", u32_of(x.used));
            if arch != "llama" {
                set_arch("expert_feed_forward_length", u32_of(x.n_ff));
            }
        }
        if self.family == Family::Gemma2 {
            set_arch("attn_logit_softcapping", MetaValue::F32(50.0));
            set_arch("final_logit_softcapping", MetaValue::F32(30.0));
        }
        set_arch("rope.freq_base", MetaValue::F32(self.rope_base));
        set_arch("rope.dimension_count", u32_of(self.head_dim()));
        set_arch("vocab_size", u32_of(self.n_vocab));
        let mut set = |key: &str, value: MetaValue| w.set_metadata(key, value);
        if format.is_private() {
            set(VERSION_KEY, MetaValue::U32(FORMAT_VERSION));
        }
        let (tokens, types) = vocabulary(self.n_vocab);
        set("tokenizer.ggml.model", MetaValue::String("llama".into()));
        set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::String(tokens)),
        );
        set(
            "tokenizer.ggml.token_type",
            MetaValue::Array(MetaArray::I32(types)),
        );
        set("tokenizer.ggml.unknown_token_id", MetaValue::U32(0));
        set("tokenizer.ggml.bos_token_id", MetaValue::U32(1));
        set("tokenizer.ggml.eos_token_id", MetaValue::U32(2));
    }

    /// Every tensor of the file, in file order.
    fn tensors(&self) -> Vec<TensorPlan> {
        let (e, ff, v) = (self.n_embd, self.n_ff, self.n_vocab);
        let (q, kv) = (
            self.n_head * self.head_dim(),
            self.n_head_kv * self.head_dim(),
        );
        let hd = self.head_dim();
        let plan = |name: String, n_in, n_out| TensorPlan {
            name,
            n_in,
            n_out,
            stack: 1,
            kind: if n_out == 1 {
                Values::Gain
            } else {
                Values::Matrix
            },
        };
        let varied = |name: String, n_in, kind| TensorPlan {
            name,
            n_in,
            n_out: 1,
            stack: 1,
            kind,
        };
        // With experts the tokens' embeddings differ too, so that tokens pick different
        // experts as in a trained model (identical rows would send all to the same ones).
        let mut t = vec![TensorPlan {
            kind: match self.experts {
                Some(_) => Values::VariedMatrix,
                None => Values::Matrix,
            },
            ..plan("token_embd.weight".into(), e, v)
        }];
        for l in 0..self.n_layer {
            let blk = |what: &str| format!("blk.{l}.{what}.weight");
            let bias = |what: &str| format!("blk.{l}.{what}.bias");
            let fused = self.family == Family::Phi3;
            t.push(plan(blk("attn_norm"), e, 1));
            if fused {
                t.push(plan(blk("attn_qkv"), e, q + 2 * kv));
            } else {
                t.extend([
                    plan(blk("attn_q"), e, q),
                    plan(blk("attn_k"), e, kv),
                    plan(blk("attn_v"), e, kv),
                ]);
            }
            if self.family == Family::Qwen2 {
                t.extend([
                    varied(bias("attn_q"), q, Values::Bias),
                    varied(bias("attn_k"), kv, Values::Bias),
                    varied(bias("attn_v"), kv, Values::Bias),
                ]);
            }
            if self.family.qk_norm() {
                t.extend([
                    varied(blk("attn_q_norm"), hd, Values::VariedGain),
                    varied(blk("attn_k_norm"), hd, Values::VariedGain),
                ]);
            }
            t.push(plan(blk("attn_output"), q, e));
            if self.family.sandwich() {
                t.push(varied(blk("post_attention_norm"), e, Values::VariedGain));
            }
            t.push(plan(blk("ffn_norm"), e, 1));
            if let Some(x) = self.experts {
                // The router's rows differ (identical rows would tie every expert), and the
                // experts are stacked [count, rows, n_in].
                let stacked = |name: String, n_in, rows| TensorPlan {
                    stack: x.count,
                    ..plan(name, n_in, rows * x.count)
                };
                t.extend([
                    TensorPlan {
                        kind: Values::VariedMatrix,
                        ..plan(blk("ffn_gate_inp"), e, x.count)
                    },
                    stacked(blk("ffn_gate_exps"), e, x.n_ff),
                    stacked(blk("ffn_up_exps"), e, x.n_ff),
                    stacked(blk("ffn_down_exps"), x.n_ff, e),
                ]);
            } else if fused {
                t.push(plan(blk("ffn_up"), e, 2 * ff));
                t.push(plan(blk("ffn_down"), ff, e));
            } else {
                t.extend([plan(blk("ffn_gate"), e, ff), plan(blk("ffn_up"), e, ff)]);
                t.push(plan(blk("ffn_down"), ff, e));
            }
            if self.family.sandwich() {
                t.push(varied(blk("post_ffw_norm"), e, Values::VariedGain));
            }
        }
        t.push(plan("output_norm.weight".into(), e, 1));
        if !self.tied_embeddings {
            t.push(plan("output.weight".into(), e, v));
        }
        t
    }
}

/// One tensor to write: `n_out` rows of `n_in` values; a vector when `n_out` is 1.
struct TensorPlan {
    name: String,
    n_in: usize,
    n_out: usize,
    /// Matrices stacked in a 3-dimensional tensor [stack, n_out / stack, n_in] (experts).
    stack: usize,
    kind: Values,
}

/// What a tensor holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Values {
    Matrix,
    /// A matrix whose every row is drawn, from a seed of its own without one.
    VariedMatrix,
    /// A norm gain over the model's width: ones.
    Gain,
    /// A projection's bias: uniform in ±0.5 with a seed, else zeros.
    Bias,
    /// A norm gain that varies (per-head and post-norms): uniform in 0.5..1.5 with a seed,
    /// else ones.
    VariedGain,
}

impl TensorPlan {
    /// Vectors (norm gains) are F32, as converters write them; matrices are in `format`.
    fn format(&self, format: Format) -> Format {
        if self.n_out == 1 {
            Format::F32
        } else {
            format
        }
    }

    /// The tensor's bytes: ones for a norm gain; for a matrix, one row of values uniform in
    /// ±1/sqrt(n_in) (the scale of trained weights), quantized once and repeated, or with a
    /// seed every row drawn afresh.
    fn data(&self, format: Format, seed: Option<u64>) -> std::result::Result<Vec<u8>, String> {
        let uniform = |seed, range: std::ops::RangeInclusive<f32>| -> Vec<f32> {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            (0..self.n_in)
                .map(|_| rng.gen_range(range.clone()))
                .collect()
        };
        let vector: Option<Vec<f32>> = match (self.kind, seed) {
            (Values::Bias, Some(seed)) => Some(uniform(seed, -0.5..=0.5)),
            (Values::Bias, None) => Some(vec![0.0; self.n_in]),
            (Values::VariedGain, Some(seed)) => Some(uniform(seed, 0.5..=1.5)),
            _ => None,
        };
        if let Some(values) = vector {
            return Ok(values.iter().flat_map(|v| v.to_le_bytes()).collect());
        }
        let seed = match self.kind {
            Values::VariedMatrix => Some(seed.unwrap_or(self.n_in as u64 ^ self.n_out as u64)),
            _ => seed,
        };
        if let (Some(seed), true) = (seed, self.n_out > 1) {
            let scale = 1.0 / (self.n_in as f32).sqrt();
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let format = self.format(format);
            let values: Vec<f32> = (0..self.n_in * self.n_out)
                .map(|_| rng.gen_range(-scale..=scale))
                .collect();
            let bytes = format.bytes_for(values.len()).ok_or_else(|| {
                format!("rows of {} values do not fill {format} blocks", self.n_in)
            })?;
            let mut packed = vec![0u8; bytes];
            format
                .quantize(&values, &mut packed)
                .map_err(|e| e.to_string())?;
            return Ok(packed);
        }
        let row: Vec<f32> = if self.n_out == 1 {
            vec![1.0; self.n_in]
        } else {
            let scale = 1.0 / (self.n_in as f32).sqrt();
            let mut rng = rand::rngs::StdRng::seed_from_u64(self.n_in as u64);
            (0..self.n_in)
                .map(|_| rng.gen_range(-scale..=scale))
                .collect()
        };
        let format = self.format(format);
        let row_bytes = format
            .bytes_for(self.n_in)
            .ok_or_else(|| format!("rows of {} values do not fill {format} blocks", self.n_in))?;
        let mut packed = vec![0u8; row_bytes];
        format
            .quantize(&row, &mut packed)
            .map_err(|e| e.to_string())?;
        let total = row_bytes
            .checked_mul(self.n_out)
            .ok_or_else(|| format!("{} rows of {row_bytes} bytes overflow", self.n_out))?;
        let mut data = Vec::new();
        data.try_reserve_exact(total)
            .map_err(|e| format!("{total} bytes: {e}"))?;
        for _ in 0..self.n_out {
            data.extend_from_slice(&packed);
        }
        Ok(data)
    }
}

/// A SentencePiece vocabulary of `n` tokens and their GGUF token types: `<unk>` (unknown),
/// `<s>` and `</s>` (control), then `<0x00>`..`<0xFF>` (byte) as far as they fit, then
/// filler pieces `▁t259`, `▁t260`, ... (normal).
fn vocabulary(n: usize) -> (Vec<String>, Vec<i32>) {
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const BYTE: i32 = 6;
    const NORMAL: i32 = 1;
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![UNKNOWN, CONTROL, CONTROL];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(BYTE);
    }
    tokens.truncate(n);
    types.truncate(n);
    for i in tokens.len()..n {
        tokens.push(format!("\u{2581}t{i}"));
        types.push(NORMAL);
    }
    (tokens, types)
}

/// A writer that only counts what it is given.
struct ByteCount(usize);

impl Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_fits_any_size() {
        let (t, ty) = vocabulary(3);
        assert_eq!((t.len(), ty.len()), (3, 3));
        let (t, ty) = vocabulary(300);
        assert_eq!((t.len(), ty.len()), (300, 300));
        assert_eq!(t[3], "<0x00>");
        assert_eq!(t[258], "<0xFF>");
        assert_eq!(t[259], "\u{2581}t259");
        let unique: std::collections::HashSet<&String> = t.iter().collect();
        assert_eq!(unique.len(), 300);
    }

    #[test]
    fn presets_pass_their_checks_and_come_smallest_first() {
        for p in PRESETS {
            for f in Format::ALL {
                let checked = p.shape.check(f).map_err(|e| e.to_string());
                let block = f.block_size();
                if p.shape.n_embd % block != 0 || p.shape.n_ff % block != 0 {
                    // SmolLM2's 576-wide rows hold no 256-value k-quant block.
                    let err = checked.unwrap_err();
                    assert!(err.contains(&format!("blocks of {block}")), "{err}");
                    continue;
                }
                assert_eq!(checked, Ok(()), "{} in {f}", p.name);
                // Whole blocks in every row, so the file has a size.
                assert!(p.shape.file_bytes(f).is_some(), "{} in {f}", p.name);
            }
        }
        let sizes: Vec<u64> = PRESETS.iter().map(|p| p.shape.n_params()).collect();
        assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    }
}
