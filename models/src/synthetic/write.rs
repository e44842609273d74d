//! Writing a synthetic file: metadata as llama.cpp's converter writes it for the family, then
//! every tensor, into one buffer sized exactly beforehand.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use hearth_quant::{Format, FORMAT_VERSION, VERSION_KEY};

use super::tensors::{TensorPlan, Values};
use super::vocab::vocabulary;
use super::Shape;
use crate::error::{Error, Result};
use crate::{GgmlType, GgufFile, GgufWriter, MetaArray, MetaValue};

impl Shape {
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

    pub(super) fn build_rows(
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
        let io_error = |source| Error::Io {
            path: path.clone(),
            source,
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
        GgufFile::from_bytes(path, bytes)
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
            if self.family.experts_have_own_width() {
                set_arch("expert_feed_forward_length", u32_of(x.n_ff));
            }
        }
        if let Some((scores, logits)) = self.family.softcaps() {
            set_arch("attn_logit_softcapping", MetaValue::F32(scores));
            set_arch("final_logit_softcapping", MetaValue::F32(logits));
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
