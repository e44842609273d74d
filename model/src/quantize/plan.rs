//! Deciding each tensor's output format before any work starts: the options, the patterns that
//! override them, and the fallback for rows that do not fit a format's blocks.

use hearth_models::{resolve_gguf, GgmlType, GgufFile, TensorInfo};
use hearth_quant::{BlockType, Format, Rounding};

use std::sync::Arc;

use super::imatrix::ImportanceMatrix;
use super::mix::{self, Mix, MixModel, TensorRole};
use super::tensor_error;
use crate::error::Result;

/// What to quantize to.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizeOptions {
    /// Format of the weight matrices.
    pub format: Format,
    /// Format of the output head; `None`: Q8 when `format` has fewer bits per weight than Q8,
    /// else `format`.
    pub output_format: Option<Format>,
    /// (glob pattern, format) overrides for matrices whose names match; `*` matches any run
    /// of characters. Later entries win, and every entry wins over `format` and
    /// `output_format`.
    pub tensor_formats: Vec<(String, Format)>,
    /// llama.cpp's mix of formats in place of `format` and `output_format`: its rules choose
    /// each matrix's format and its fallbacks the format of rows that do not fit.
    pub mix: Option<Mix>,
    /// Importance per input column of each matrix (`hearth imatrix`, llama.cpp's imatrix):
    /// the formats that can weigh their rounding error by it (`Format::uses_importance`) do.
    pub imatrix: Option<Arc<ImportanceMatrix>>,
}

impl QuantizeOptions {
    /// Every matrix in `format`, the head at its default.
    pub fn new(format: Format) -> Self {
        QuantizeOptions {
            format,
            output_format: None,
            tensor_formats: Vec::new(),
            mix: None,
            imatrix: None,
        }
    }

    /// llama.cpp's mix `mix`.
    pub fn mix(mix: Mix) -> Self {
        QuantizeOptions {
            mix: Some(mix),
            ..Self::new(mix.base())
        }
    }

    /// The head's format when no pattern names it.
    pub fn head_format(&self) -> Format {
        self.output_format.unwrap_or(
            if self.format.bits_per_weight() < Format::Q8.bits_per_weight() {
                Format::Q8
            } else {
                self.format
            },
        )
    }
}

/// True when `name` matches `pattern`, where `*` stands for any run of characters (dots
/// included) and every other character for itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    // `split` always yields at least one part.
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No `*`: the whole name must be the pattern.
        return rest.is_empty();
    };
    // Each middle part as early as possible leaves the most room for the rest.
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// One tensor's fate, decided before any work starts.
pub(super) struct Plan<'f> {
    pub(super) info: &'f TensorInfo,
    /// The input tensor's bytes.
    pub(super) data: &'f [u8],
    pub(super) to: Format,
    pub(super) note: Option<String>,
    /// The importance of each column, when the options carry an importance matrix that has
    /// this tensor.
    pub(super) importance: Option<Vec<f32>>,
    /// How the quantizer picks scales: ggml's rule (`MinMax`) for Q8_0 in llama.cpp's mixes,
    /// so their files hold the bytes llama-quantize writes; Hearth's search otherwise.
    pub(super) rounding: Rounding,
}

impl Plan<'_> {
    /// The input bytes go to the output as they are.
    pub(super) fn is_copy(&self) -> bool {
        self.info.ggml_type == GgmlType::from(self.to)
    }

    /// Values per row: the unit tensors are split at.
    pub(super) fn row_len(&self) -> u64 {
        match self.info.shape.as_slice() {
            [] | [_] => self.info.n_elements().max(1),
            [row, ..] => *row,
        }
    }
}

/// Decides every tensor's output format; also returns the patterns that matched nothing.
pub(super) fn plan<'f>(
    file: &'f GgufFile,
    opts: &QuantizeOptions,
) -> Result<(Vec<Plan<'f>>, Vec<String>)> {
    let head = head_tensor(file);
    let mix_model = MixModel {
        imatrix: opts.imatrix.is_some(),
        ..mix_model(file)
    };
    let mut matched = vec![false; opts.tensor_formats.len()];
    let mut plans = Vec::with_capacity(file.tensors().len());
    for info in file.tensors() {
        let data = file.tensor_data(info)?;
        let readable = info.ggml_type.hearth_format().is_some()
            || BlockType::from_ggml_id(info.ggml_type.id()).is_some();
        if !readable {
            return Err(tensor_error(
                file.path(),
                info,
                format!("type {} cannot be read for quantizing", info.ggml_type),
            ));
        }
        let is_matrix = info.shape.len() >= 2;
        if !is_matrix {
            plans.push(Plan {
                info,
                data,
                to: Format::F32,
                note: None,
                importance: None,
                rounding: Rounding::Search,
            });
            continue;
        }
        let row = info.shape[0];
        let cols = usize::try_from(row).unwrap_or(usize::MAX);
        let role = TensorRole::of(&info.name, cols);
        let mut wanted = if let Some(mix) = opts.mix {
            mix.format_for(&role, &mix_model)
        } else if head.as_deref() == Some(info.name.as_str()) {
            opts.head_format()
        } else {
            opts.format
        };
        for (i, (pattern, format)) in opts.tensor_formats.iter().enumerate() {
            if glob_match(pattern, &info.name) {
                wanted = *format;
                matched[i] = true;
            }
        }
        let to = match opts.mix {
            Some(_) => mix::fallback(wanted, cols),
            None => wanted.fitting(cols),
        };
        let mut note = (to != wanted).then(|| {
            format!(
                "rows of {row} values are not whole {wanted} blocks of {}; stored as {to}",
                wanted.block_size()
            )
        });
        let importance = opts
            .imatrix
            .as_ref()
            .and_then(|m| m.weights(&info.name))
            .filter(|w| w.len() == cols);
        // A mix refuses what llama-quantize refuses (its rule is per tensor and mix); ggml's
        // quantizers for some formats cannot do without the matrix at all.
        let mix_needs = opts.mix.filter(|m| m.requires_importance(to, &role));
        if importance.is_none() && (mix_needs.is_some() || to.requires_importance()) {
            // As llama-quantize: at about 2 bits, rounding without knowing which columns
            // matter ruins a model.
            let why = match opts.imatrix {
                Some(_) => "the importance matrix has no entry of its width",
                None => "no importance matrix was given (--imatrix)",
            };
            let what = match mix_needs {
                Some(mix) => format!("the {mix} mix stores it as {to}, which"),
                None => format!("{to}"),
            };
            return Err(tensor_error(
                file.path(),
                info,
                format!("{what} needs an importance matrix, and {why}"),
            ));
        }
        if opts.imatrix.is_some() && importance.is_none() && to.uses_importance() {
            note.get_or_insert_with(|| "the importance matrix has no entry of its width".into());
        }
        plans.push(Plan {
            info,
            data,
            to,
            note,
            importance,
            // In llama.cpp's mixes Q8_0 takes ggml's rule, as Q4_0, Q5_0, Q5_1 and the
            // k-quants always do; Q4 (Q4_1) keeps Hearth's search.
            rounding: if opts.mix.is_some() && to == Format::Q8 {
                Rounding::MinMax
            } else {
                Rounding::Search
            },
        });
    }
    let unmatched = opts
        .tensor_formats
        .iter()
        .zip(matched)
        .filter(|(_, m)| !m)
        .map(|((p, _), _)| p.clone())
        .collect();
    Ok((plans, unmatched))
}

/// What a mix's rules need to know of the model: from its spec where Hearth has one, else
/// from the tensor names (layers) alone.
fn mix_model(file: &GgufFile) -> MixModel {
    let tied = file.tensor("output.weight").is_none();
    if let Ok(model) = resolve_gguf(file) {
        let h = &model.hparams;
        return MixModel {
            n_layer: h.n_layer,
            n_gqa: h.n_head / h.n_head_kv.max(1),
            tied,
            imatrix: false,
        };
    }
    let n_layer = file
        .tensors()
        .iter()
        .filter_map(|t| TensorRole::of(&t.name, 0).layer.checked_add(1))
        .max()
        .unwrap_or(0);
    MixModel {
        n_layer,
        n_gqa: 1,
        tied,
        imatrix: false,
    }
}

/// The name of the output head: what the model spec resolves it to, or by ggml's naming
/// convention (`output.weight`, else the tied `token_embd.weight`) for an architecture
/// without a spec.
fn head_tensor(file: &GgufFile) -> Option<String> {
    if let Ok(model) = resolve_gguf(file) {
        return Some(model.tensors.output);
    }
    ["output.weight", "token_embd.weight"]
        .into_iter()
        .find(|name| file.tensor(name).is_some())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let yes = [
            ("output.weight", "output.weight"),
            ("*", "anything.at.all"),
            ("*", ""),
            ("blk.*.ffn_down.weight", "blk.12.ffn_down.weight"),
            ("*ffn*", "blk.0.ffn_up.weight"),
            ("blk.1*", "blk.1.attn_q.weight"),
            ("blk.1*", "blk.15.attn_q.weight"),
            ("*.weight", "token_embd.weight"),
            ("a*b*c", "abc"),
            ("a*b*c", "a_b_b_c_c"),
            ("**x", "x"),
        ];
        let no = [
            ("output.weight", "output.weight2"),
            ("output", "output.weight"),
            ("blk.*.ffn_down.weight", "blk.0.ffn_up.weight"),
            ("*.bias", "token_embd.weight"),
            ("a*b*c", "acb"),
            ("ab*ba", "aba"),
            ("x*", ""),
        ];
        for (p, n) in yes {
            assert!(glob_match(p, n), "{p} should match {n}");
        }
        for (p, n) in no {
            assert!(!glob_match(p, n), "{p} should not match {n}");
        }
    }

    #[test]
    fn head_defaults_to_q8_below_eight_bits() {
        assert_eq!(QuantizeOptions::new(Format::Q3H).head_format(), Format::Q8);
        assert_eq!(QuantizeOptions::new(Format::Q6).head_format(), Format::Q8);
        assert_eq!(QuantizeOptions::new(Format::Q8).head_format(), Format::Q8);
        assert_eq!(QuantizeOptions::new(Format::F16).head_format(), Format::F16);
        let mut o = QuantizeOptions::new(Format::Q3H);
        o.output_format = Some(Format::Q4);
        assert_eq!(o.head_format(), Format::Q4);
    }
}
