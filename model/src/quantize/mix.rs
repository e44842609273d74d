//! llama.cpp's quantization mixes (`Q4_K_M`, `Q3_K_S`, ...): a base format for the weight
//! matrices and rules that give the tensors quantization hurts most more bits. Files made with
//! a mix hold only ggml types, so llama.cpp and every GGUF reader load them.
//!
//! The rules are llama.cpp's (`llama_tensor_get_type` in `src/llama-quant.cpp`) for dense
//! decoders:
//! - the output head (and the token embedding when the model ties them) takes Q6_K, or Q8_0
//!   where its rows are not whole 256-value super-blocks; Q8_0 mixes keep it at Q8_0;
//! - `attn_v`, which grouped-query attention makes small and sensitive, and `ffn_down` take
//!   more bits in the mixes that name it, in some layers only: the first and last eighth and
//!   every third one between ([`use_more_bits`]), or the first eighth (the 4-bit i-quants'
//!   `ffn_down` when no importance matrix guides it);
//! - a matrix whose rows do not fit the chosen type's blocks falls back to a 32-value type of
//!   at least as many bits (IQ4_XS to IQ4_NL, Q2_K and Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to
//!   Q5_1, Q6_K to Q8_0), else to F16.

use std::fmt;
use std::str::FromStr;

use hearth_quant::Format;

/// A llama.cpp file type made of a mix of formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum Mix {
    Q2_K,
    Q2_K_S,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    IQ4_NL,
    IQ4_XS,
}

impl Mix {
    /// Every mix, smallest first.
    pub const ALL: [Mix; 17] = {
        use Mix::*;
        [
            Q2_K_S, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, IQ4_XS, Q4_0, IQ4_NL, Q4_1, Q4_K_S, Q4_K_M, Q5_0,
            Q5_1, Q5_K_S, Q5_K_M, Q6_K, Q8_0,
        ]
    };

    /// The mix's name, as llama.cpp spells it.
    pub const fn name(self) -> &'static str {
        use Mix::*;
        match self {
            Q2_K => "Q2_K",
            Q2_K_S => "Q2_K_S",
            Q3_K_S => "Q3_K_S",
            Q3_K_M => "Q3_K_M",
            Q3_K_L => "Q3_K_L",
            Q4_K_S => "Q4_K_S",
            Q4_K_M => "Q4_K_M",
            Q5_K_S => "Q5_K_S",
            Q5_K_M => "Q5_K_M",
            Q6_K => "Q6_K",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            IQ4_NL => "IQ4_NL",
            IQ4_XS => "IQ4_XS",
        }
    }

    /// The mix with this name (llama.cpp's spelling, any case).
    pub fn from_name(name: &str) -> Option<Mix> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
    }

    /// llama.cpp's `general.file_type` number (`llama_ftype`).
    pub const fn file_type(self) -> u32 {
        use Mix::*;
        match self {
            Q4_0 => 2,
            Q4_1 => 3,
            Q8_0 => 7,
            Q5_0 => 8,
            Q5_1 => 9,
            Q2_K => 10,
            Q3_K_S => 11,
            Q3_K_M => 12,
            Q3_K_L => 13,
            Q4_K_S => 14,
            Q4_K_M => 15,
            Q5_K_S => 16,
            Q5_K_M => 17,
            Q6_K => 18,
            Q2_K_S => 21,
            IQ4_NL => 25,
            IQ4_XS => 30,
        }
    }

    /// The format of the matrices no rule names.
    pub const fn base(self) -> Format {
        use Mix::*;
        match self {
            Q2_K | Q2_K_S => Format::Q2_K,
            Q3_K_S | Q3_K_M | Q3_K_L => Format::Q3_K,
            Q4_K_S | Q4_K_M => Format::Q4_K,
            Q5_K_S | Q5_K_M => Format::Q5_K,
            Q6_K => Format::Q6_K,
            Q4_0 => Format::Q4_0,
            Q4_1 => Format::Q4,
            Q5_0 => Format::Q5_0,
            Q5_1 => Format::Q5_1,
            Q8_0 => Format::Q8,
            IQ4_NL => Format::IQ4_NL,
            IQ4_XS => Format::IQ4_XS,
        }
    }

    /// The format the mix gives a tensor, before the fallback for rows that do not fit
    /// ([`fallback`]).
    pub fn format_for(self, tensor: &TensorRole, model: &MixModel) -> Format {
        use Mix::*;
        let base = self.base();
        let more_bits = |layer: usize| use_more_bits(layer, model.n_layer);
        let is_head =
            tensor.kind == Kind::Output || (tensor.kind == Kind::TokenEmbedding && model.tied);
        if is_head {
            return if self == Q8_0 || tensor.cols % 256 != 0 {
                Format::Q8
            } else {
                Format::Q6_K
            };
        }
        match tensor.kind {
            Kind::Output | Kind::TokenEmbedding => base,
            Kind::AttnV => {
                let layer = tensor.layer;
                match self {
                    Q2_K if model.n_gqa >= 4 => Format::Q4_K,
                    Q2_K => Format::Q3_K,
                    Q2_K_S if model.n_gqa >= 4 => Format::Q4_K,
                    Q3_K_M if layer < 2 => Format::Q5_K,
                    Q3_K_M => Format::Q4_K,
                    Q3_K_L => Format::Q5_K,
                    Q4_K_M | Q5_K_M if more_bits(layer) => Format::Q6_K,
                    Q4_K_S if layer < 4 => Format::Q5_K,
                    IQ4_NL | IQ4_XS if model.n_gqa >= 4 => Format::Q5_K,
                    _ => base,
                }
            }
            Kind::FfnDown => {
                let (layer, n) = (tensor.layer, model.n_layer);
                match self {
                    Q2_K => Format::Q3_K,
                    Q2_K_S if layer < n / 8 => Format::Q4_K,
                    Q3_K_M if layer < n / 16 => Format::Q5_K,
                    Q3_K_M => Format::Q4_K,
                    Q3_K_L => Format::Q5_K,
                    Q4_K_M | Q5_K_M if more_bits(layer) => Format::Q6_K,
                    Q4_K_S if layer < n / 8 => Format::Q5_K,
                    IQ4_NL | IQ4_XS if !model.imatrix && layer < n / 8 => Format::Q5_K,
                    // With an importance matrix, llama.cpp guards the first layers' ffn_down,
                    // which Q4_0 and Q5_0 quantize badly, with a base.
                    Q4_0 if model.imatrix && layer < n / 8 => Format::Q4,
                    Q5_0 if model.imatrix && layer < n / 8 => Format::Q5_1,
                    _ => base,
                }
            }
            Kind::AttnOutput => match self {
                Q2_K => Format::Q3_K,
                Q3_K_M => Format::Q4_K,
                Q3_K_L => Format::Q5_K,
                _ => base,
            },
            Kind::Other => base,
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mix::from_name(s).ok_or_else(|| {
            let names: Vec<_> = Mix::ALL.iter().map(|m| m.name()).collect();
            format!("unknown mix `{s}`; known: {}", names.join(", "))
        })
    }
}

/// llama.cpp's choice of the layers that get more bits: the first and last eighth, and every
/// third layer between.
pub fn use_more_bits(layer: usize, n_layer: usize) -> bool {
    let eighth = n_layer / 8;
    // Past the first clause, layer >= eighth.
    layer < eighth || layer >= 7 * n_layer / 8 || (layer - eighth) % 3 == 2
}

/// The 32-value type that takes a tensor whose rows are not whole blocks of `format`, and F16
/// when even those do not fit; `format` itself when its blocks fit.
pub fn fallback(format: Format, cols: usize) -> Format {
    if cols % format.block_size() == 0 {
        return format;
    }
    let smaller = match format {
        Format::IQ4_XS => Format::IQ4_NL,
        Format::Q2_K | Format::Q3_K => Format::Q4_0,
        Format::Q4_K => Format::Q5_0,
        Format::Q5_K => Format::Q5_1,
        Format::Q6_K => Format::Q8,
        other => other,
    };
    if cols % smaller.block_size() == 0 {
        smaller
    } else {
        Format::F16
    }
}

/// What a mix's rules look at in a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRole {
    pub kind: Kind,
    /// The layer (`blk.N.`); 0 for tensors outside the layers.
    pub layer: usize,
    /// Values per row.
    pub cols: usize,
}

impl TensorRole {
    /// The role of the matrix `name` (ggml's tensor naming) with rows of `cols` values.
    pub fn of(name: &str, cols: usize) -> Self {
        let layer = name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let kind = if name == "output.weight" {
            Kind::Output
        } else if name == "token_embd.weight" {
            Kind::TokenEmbedding
        } else if name.contains("attn_v.weight") || name.contains("attn_qkv.weight") {
            Kind::AttnV
        } else if name.contains("attn_output.weight") {
            Kind::AttnOutput
        } else if name.contains("ffn_down") {
            Kind::FfnDown
        } else {
            Kind::Other
        };
        TensorRole { kind, layer, cols }
    }
}

/// The tensor kinds the rules tell apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Output,
    TokenEmbedding,
    AttnV,
    AttnOutput,
    FfnDown,
    Other,
}

/// What the rules need to know about the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MixModel {
    pub n_layer: usize,
    /// Query heads per KV head.
    pub n_gqa: usize,
    /// The token embedding is also the output head (the file has no `output.weight`).
    pub tied: bool,
    /// An importance matrix guides the quantizers.
    pub imatrix: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: MixModel = MixModel {
        n_layer: 30,
        n_gqa: 3,
        tied: true,
        imatrix: false,
    };

    #[test]
    fn names_round_trip() {
        for m in Mix::ALL {
            assert_eq!(Mix::from_name(m.name()), Some(m));
            assert_eq!(m.name().to_lowercase().parse::<Mix>(), Ok(m));
        }
        let err = "Q4_K_X".parse::<Mix>().unwrap_err();
        assert!(err.contains("Q4_K_M") && err.contains("Q4_K_X"), "{err}");
    }

    #[test]
    fn more_bits_layers_match_llama_cpp() {
        // 30 layers: eighth = 3, last eighth from 26 (7 * 30 / 8).
        let layers: Vec<usize> = (0..30).filter(|&l| use_more_bits(l, 30)).collect();
        assert_eq!(layers, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]);
    }

    #[test]
    fn fallbacks_keep_at_least_the_bits() {
        assert_eq!(fallback(Format::Q4_K, 576), Format::Q5_0);
        assert_eq!(fallback(Format::Q5_K, 576), Format::Q5_1);
        assert_eq!(fallback(Format::Q6_K, 576), Format::Q8);
        assert_eq!(fallback(Format::Q2_K, 576), Format::Q4_0);
        assert_eq!(fallback(Format::Q3_K, 576), Format::Q4_0);
        assert_eq!(fallback(Format::Q4_K, 1536), Format::Q4_K);
        assert_eq!(fallback(Format::Q4_K, 40), Format::F16);
        assert_eq!(fallback(Format::Q4_0, 40), Format::F16);
    }

    #[test]
    fn q4_k_m_on_smollm2() {
        let m = Mix::Q4_K_M;
        let of =
            |name: &str, cols| fallback(m.format_for(&TensorRole::of(name, cols), &SMOLLM2), cols);
        // The tied embedding is the head: Q6_K, but 576-wide rows take Q8_0.
        assert_eq!(of("token_embd.weight", 576), Format::Q8);
        assert_eq!(of("blk.0.attn_q.weight", 576), Format::Q5_0);
        assert_eq!(of("blk.0.attn_v.weight", 576), Format::Q8);
        assert_eq!(of("blk.3.attn_v.weight", 576), Format::Q5_0);
        assert_eq!(of("blk.5.attn_v.weight", 576), Format::Q8);
        assert_eq!(of("blk.0.ffn_down.weight", 1536), Format::Q6_K);
        assert_eq!(of("blk.4.ffn_down.weight", 1536), Format::Q4_K);
        assert_eq!(of("blk.4.ffn_up.weight", 576), Format::Q5_0);
        assert_eq!(of("blk.4.attn_output.weight", 576), Format::Q5_0);
    }

    #[test]
    fn untied_embedding_takes_the_base() {
        let model = MixModel {
            tied: false,
            ..SMOLLM2
        };
        let role = TensorRole::of("token_embd.weight", 4096);
        assert_eq!(Mix::Q4_K_M.format_for(&role, &model), Format::Q4_K);
        let head = TensorRole::of("output.weight", 4096);
        assert_eq!(Mix::Q4_K_M.format_for(&head, &model), Format::Q6_K);
        assert_eq!(Mix::Q8_0.format_for(&head, &model), Format::Q8);
    }

    #[test]
    fn low_bit_mixes_raise_the_sensitive_tensors() {
        let at = |m: Mix, name: &str| m.format_for(&TensorRole::of(name, 4096), &SMOLLM2);
        assert_eq!(at(Mix::Q2_K, "blk.7.attn_v.weight"), Format::Q3_K);
        assert_eq!(at(Mix::Q2_K, "blk.7.ffn_down.weight"), Format::Q3_K);
        assert_eq!(at(Mix::Q2_K, "blk.7.attn_output.weight"), Format::Q3_K);
        assert_eq!(at(Mix::Q2_K, "blk.7.ffn_up.weight"), Format::Q2_K);
        assert_eq!(at(Mix::Q3_K_M, "blk.1.attn_v.weight"), Format::Q5_K);
        assert_eq!(at(Mix::Q3_K_M, "blk.2.attn_v.weight"), Format::Q4_K);
        // n_layer / 16 = 1: only layer 0's ffn_down gets Q5_K.
        assert_eq!(at(Mix::Q3_K_M, "blk.0.ffn_down.weight"), Format::Q5_K);
        assert_eq!(at(Mix::Q3_K_M, "blk.1.ffn_down.weight"), Format::Q4_K);
        assert_eq!(at(Mix::Q3_K_M, "blk.9.ffn_down.weight"), Format::Q4_K);
        assert_eq!(at(Mix::Q3_K_S, "blk.9.ffn_down.weight"), Format::Q3_K);
        assert_eq!(at(Mix::Q3_K_L, "blk.9.attn_output.weight"), Format::Q5_K);
        let guided = MixModel {
            imatrix: true,
            ..SMOLLM2
        };
        let down = TensorRole::of("blk.1.ffn_down.weight", 4096);
        assert_eq!(Mix::Q4_0.format_for(&down, &SMOLLM2), Format::Q4_0);
        assert_eq!(Mix::Q4_0.format_for(&down, &guided), Format::Q4);
        assert_eq!(Mix::Q5_0.format_for(&down, &guided), Format::Q5_1);
        // IQ4_NL guards the first eighth's ffn_down with Q5_K only without a matrix, and
        // attn_v where the grouped-query attention shares a head among four or more.
        assert_eq!(Mix::IQ4_NL.format_for(&down, &SMOLLM2), Format::Q5_K);
        assert_eq!(Mix::IQ4_NL.format_for(&down, &guided), Format::IQ4_NL);
        assert_eq!(at(Mix::IQ4_NL, "blk.9.ffn_down.weight"), Format::IQ4_NL);
        assert_eq!(at(Mix::IQ4_NL, "blk.9.attn_v.weight"), Format::IQ4_NL);
        let grouped = MixModel {
            n_gqa: 4,
            ..SMOLLM2
        };
        let v = TensorRole::of("blk.9.attn_v.weight", 4096);
        assert_eq!(Mix::IQ4_NL.format_for(&v, &grouped), Format::Q5_K);
        assert_eq!(Mix::IQ4_XS.format_for(&down, &SMOLLM2), Format::Q5_K);
        assert_eq!(at(Mix::IQ4_XS, "blk.9.ffn_up.weight"), Format::IQ4_XS);
        assert_eq!(fallback(Format::IQ4_XS, 576), Format::IQ4_NL);
    }
}
