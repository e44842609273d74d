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
//! - the 1- to 3-bit i-quant mixes give the head Q5_K (IQ3_XS, IQ3_S and IQ3_M: Q6_K), an
//!   untied token embedding Q2_K or IQ3_S, and `attn_v`, the first eighth's `ffn_down`,
//!   `attn_output`, and in IQ3_XXS and IQ3_XS `attn_q`, `attn_k`, `ffn_gate` and `ffn_up` their
//!   own types ([`Mix::format_for`]);
//! - a matrix whose rows do not fit the chosen type's blocks falls back to a 32-value type of
//!   at least as many bits (the i-quants to IQ4_NL, Q2_K and Q3_K to Q4_0, Q4_K to Q5_0, Q5_K
//!   to Q5_1, Q6_K to Q8_0), else to F16;
//! - the mixes that write IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S or IQ3_XXS matrices (or Q2_K
//!   ones in Q2_K_S) need an importance matrix for them ([`Mix::requires_importance`]).

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
    IQ1_S,
    IQ1_M,
    IQ2_XXS,
    IQ2_XS,
    IQ2_S,
    IQ2_M,
    IQ3_XXS,
    IQ3_XS,
    IQ3_S,
    IQ3_M,
}

impl Mix {
    /// Every mix, smallest first.
    pub const ALL: [Mix; 27] = {
        use Mix::*;
        [
            IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, Q2_K_S, Q2_K, IQ3_XXS, IQ3_XS, Q3_K_S,
            IQ3_S, IQ3_M, Q3_K_M, Q3_K_L, IQ4_XS, Q4_0, IQ4_NL, Q4_1, Q4_K_S, Q4_K_M, Q5_0, Q5_1,
            Q5_K_S, Q5_K_M, Q6_K, Q8_0,
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
            IQ1_S => "IQ1_S",
            IQ1_M => "IQ1_M",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ2_S => "IQ2_S",
            IQ2_M => "IQ2_M",
            IQ3_XXS => "IQ3_XXS",
            IQ3_XS => "IQ3_XS",
            IQ3_S => "IQ3_S",
            IQ3_M => "IQ3_M",
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
            IQ2_XXS => 19,
            IQ2_XS => 20,
            Q2_K_S => 21,
            IQ3_XS => 22,
            IQ3_XXS => 23,
            IQ1_S => 24,
            IQ4_NL => 25,
            IQ3_S => 26,
            IQ3_M => 27,
            IQ2_S => 28,
            IQ2_M => 29,
            IQ4_XS => 30,
            IQ1_M => 31,
        }
    }

    /// The format of the matrices no rule names (llama.cpp's `llama_ftype_get_default_type`:
    /// IQ2_S is mostly IQ2_XS, IQ2_M mostly IQ2_S, IQ3_XS and IQ3_M mostly IQ3_S).
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
            IQ1_S => Format::IQ1_S,
            IQ1_M => Format::IQ1_M,
            IQ2_XXS => Format::IQ2_XXS,
            IQ2_XS | IQ2_S => Format::IQ2_XS,
            IQ2_M => Format::IQ2_S,
            IQ3_XXS => Format::IQ3_XXS,
            IQ3_XS | IQ3_S | IQ3_M => Format::IQ3_S,
        }
    }

    /// The mixes below 3 bits, which llama.cpp gives rules of their own for `attn_v`,
    /// `ffn_down` and `attn_output`.
    const fn is_two_bit_lattice(self) -> bool {
        use Mix::*;
        matches!(self, IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS | IQ2_S | IQ2_M)
    }

    /// The format the mix gives a tensor, before the fallback for rows that do not fit
    /// ([`fallback`]).
    pub fn format_for(self, tensor: &TensorRole, model: &MixModel) -> Format {
        use Mix::*;
        let base = self.base();
        let (layer, n) = (tensor.layer, model.n_layer);
        let more_bits = |layer: usize| use_more_bits(layer, n);
        let is_head =
            tensor.kind == Kind::Output || (tensor.kind == Kind::TokenEmbedding && model.tied);
        if is_head {
            return if self == Q8_0 || tensor.cols % 256 != 0 {
                Format::Q8
            } else if self.is_two_bit_lattice() || self == IQ3_XXS {
                Format::Q5_K
            } else {
                Format::Q6_K
            };
        }
        if tensor.kind == Kind::TokenEmbedding {
            return match self {
                IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS => Format::Q2_K,
                IQ2_S | IQ2_M | IQ3_XXS => Format::IQ3_S,
                _ => base,
            };
        }
        if self.is_two_bit_lattice() {
            // IQ2_S and IQ2_M raise their sensitive tensors to IQ3_S, the other mixes below 3
            // bits to Q2_K (attn_output: IQ1's to IQ2_XXS, IQ2_XXS and IQ2_XS keep the base).
            let two_bit_raise = if matches!(self, IQ2_S | IQ2_M) {
                Format::IQ3_S
            } else {
                Format::Q2_K
            };
            return match tensor.kind {
                Kind::AttnV if model.n_gqa >= 4 => Format::Q4_K,
                Kind::AttnV => two_bit_raise,
                Kind::FfnDown if layer < n / 8 => two_bit_raise,
                Kind::AttnOutput => match self {
                    IQ1_S | IQ1_M => Format::IQ2_XXS,
                    IQ2_S | IQ2_M => Format::IQ3_S,
                    _ => base,
                },
                _ => base,
            };
        }
        match tensor.kind {
            Kind::Output | Kind::TokenEmbedding => base,
            Kind::AttnV => match self {
                Q2_K if model.n_gqa >= 4 => Format::Q4_K,
                Q2_K => Format::Q3_K,
                Q2_K_S if model.n_gqa >= 4 => Format::Q4_K,
                IQ3_XXS if model.n_gqa >= 4 => Format::Q4_K,
                IQ3_XXS if !model.imatrix => Format::IQ3_S,
                IQ3_XS | IQ3_S if model.n_gqa >= 4 => Format::Q4_K,
                IQ3_M => Format::Q4_K,
                Q3_K_M if layer < 2 => Format::Q5_K,
                Q3_K_M => Format::Q4_K,
                Q3_K_L => Format::Q5_K,
                IQ4_NL | IQ4_XS if model.n_gqa >= 4 => Format::Q5_K,
                Q4_K_M | Q5_K_M if more_bits(layer) => Format::Q6_K,
                Q4_K_S if layer < 4 => Format::Q5_K,
                _ => base,
            },
            Kind::AttnK | Kind::AttnQ => match self {
                IQ3_XS => Format::IQ3_XXS,
                IQ3_XXS => Format::IQ2_S,
                _ => base,
            },
            Kind::FfnDown => match self {
                Q2_K => Format::Q3_K,
                Q2_K_S if layer < n / 8 => Format::Q4_K,
                IQ3_XXS if !model.imatrix && layer < n / 8 => Format::Q4_K,
                IQ3_XXS if !model.imatrix => Format::Q3_K,
                Q3_K_M if layer < n / 16 => Format::Q5_K,
                Q3_K_M => Format::Q4_K,
                IQ3_M if layer < n / 8 => Format::Q4_K,
                Q3_K_L => Format::Q5_K,
                Q4_K_M | Q5_K_M if more_bits(layer) => Format::Q6_K,
                Q4_K_S if layer < n / 8 => Format::Q5_K,
                IQ4_NL | IQ4_XS if !model.imatrix && layer < n / 8 => Format::Q5_K,
                // With an importance matrix, llama.cpp guards the first layers' ffn_down,
                // which Q4_0 and Q5_0 quantize badly, with a base.
                Q4_0 if model.imatrix && layer < n / 8 => Format::Q4,
                Q5_0 if model.imatrix && layer < n / 8 => Format::Q5_1,
                _ => base,
            },
            Kind::AttnOutput => match self {
                Q2_K => Format::Q3_K,
                IQ3_XXS => Format::IQ3_S,
                Q3_K_M | IQ3_M => Format::Q4_K,
                Q3_K_L => Format::Q5_K,
                _ => base,
            },
            // IQ3_XS takes IQ3_XXS for the middle layers' feed-forward input matrices.
            Kind::FfnGate | Kind::FfnUp
                if self == IQ3_XS && (n / 8..7 * n / 8).contains(&layer) =>
            {
                Format::IQ3_XXS
            }
            Kind::FfnGate | Kind::FfnUp | Kind::Other => base,
        }
    }

    /// Whether llama.cpp refuses to write `format` (after the fallback) for this tensor of a
    /// file of this mix without an importance matrix (`tensor_requires_imatrix`): the lattice
    /// i-quants below IQ3_S, and Q2_K in Q2_K_S files; never the token embedding or the head.
    pub fn requires_importance(self, format: Format, tensor: &TensorRole) -> bool {
        if matches!(tensor.kind, Kind::Output | Kind::TokenEmbedding) {
            return false;
        }
        match format {
            Format::IQ3_XXS
            | Format::IQ2_XXS
            | Format::IQ2_XS
            | Format::IQ2_S
            | Format::IQ1_M
            | Format::IQ1_S => true,
            Format::Q2_K => self == Mix::Q2_K_S,
            _ => false,
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
        Format::IQ1_S
        | Format::IQ1_M
        | Format::IQ2_XXS
        | Format::IQ2_XS
        | Format::IQ2_S
        | Format::IQ3_XXS
        | Format::IQ3_S
        | Format::IQ4_XS => Format::IQ4_NL,
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
        } else if ["attn_qkv.weight", "attn_kv_b.weight", "attn_v.weight"]
            .iter()
            .any(|v| name.contains(v))
        {
            Kind::AttnV
        } else if name.contains("attn_k.weight") {
            Kind::AttnK
        } else if name.contains("attn_q.weight") {
            Kind::AttnQ
        } else if name.contains("attn_output.weight") {
            Kind::AttnOutput
        } else if name.contains("ffn_up") {
            Kind::FfnUp
        } else if name.contains("ffn_gate") {
            Kind::FfnGate
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
    /// `attn_v`, and the matrices that hold it (`attn_qkv`, `attn_kv_b`).
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
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

    #[test]
    fn i_quant_file_types_are_llama_cpps() {
        use Mix::*;
        let types: Vec<u32> = [
            IQ2_XXS, IQ2_XS, IQ3_XS, IQ3_XXS, IQ1_S, IQ3_S, IQ3_M, IQ2_S, IQ2_M, IQ1_M,
        ]
        .iter()
        .map(|m| m.file_type())
        .collect();
        assert_eq!(types, [19, 20, 22, 23, 24, 26, 27, 28, 29, 31]);
        let mut all: Vec<u32> = Mix::ALL.iter().map(|m| m.file_type()).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), Mix::ALL.len());
        assert_eq!(IQ2_S.base(), Format::IQ2_XS);
        assert_eq!(IQ2_M.base(), Format::IQ2_S);
        assert_eq!(IQ3_XS.base(), Format::IQ3_S);
        assert_eq!(IQ3_M.base(), Format::IQ3_S);
    }

    /// 4096-wide rows, which every type's blocks fit: the rules alone.
    fn at(m: Mix, model: &MixModel, name: &str) -> Format {
        m.format_for(&TensorRole::of(name, 4096), model)
    }

    #[test]
    fn two_bit_i_quants_raise_attn_v_ffn_down_and_attn_output() {
        use Mix::*;
        let guided = MixModel {
            imatrix: true,
            ..SMOLLM2
        };
        let grouped = MixModel { n_gqa: 4, ..guided };
        let untied = MixModel {
            tied: false,
            ..guided
        };
        // (mix, attn_v, the first eighth's ffn_down, attn_output, untied token_embd)
        let cases = [
            (
                IQ1_S,
                Format::Q2_K,
                Format::Q2_K,
                Format::IQ2_XXS,
                Format::Q2_K,
            ),
            (
                IQ1_M,
                Format::Q2_K,
                Format::Q2_K,
                Format::IQ2_XXS,
                Format::Q2_K,
            ),
            (
                IQ2_XXS,
                Format::Q2_K,
                Format::Q2_K,
                Format::IQ2_XXS,
                Format::Q2_K,
            ),
            (
                IQ2_XS,
                Format::Q2_K,
                Format::Q2_K,
                Format::IQ2_XS,
                Format::Q2_K,
            ),
            (
                IQ2_S,
                Format::IQ3_S,
                Format::IQ3_S,
                Format::IQ3_S,
                Format::IQ3_S,
            ),
            (
                IQ2_M,
                Format::IQ3_S,
                Format::IQ3_S,
                Format::IQ3_S,
                Format::IQ3_S,
            ),
        ];
        for (m, v, down, out, embd) in cases {
            for l in [0, 9, 29] {
                assert_eq!(at(m, &guided, &format!("blk.{l}.attn_v.weight")), v, "{m}");
                // Grouped-query attention sharing a head among four or more: Q4_K.
                let v4 = at(m, &grouped, &format!("blk.{l}.attn_v.weight"));
                assert_eq!(v4, Format::Q4_K, "{m}");
                let o = at(m, &guided, &format!("blk.{l}.attn_output.weight"));
                assert_eq!(o, out, "{m}");
                for t in ["attn_q", "attn_k", "ffn_gate", "ffn_up"] {
                    let f = at(m, &guided, &format!("blk.{l}.{t}.weight"));
                    assert_eq!(f, m.base(), "{m} {t}");
                }
            }
            // n_layer / 8 = 3.
            assert_eq!(at(m, &guided, "blk.2.ffn_down.weight"), down, "{m}");
            assert_eq!(at(m, &guided, "blk.3.ffn_down.weight"), m.base(), "{m}");
            assert_eq!(at(m, &guided, "blk.29.ffn_down.weight"), m.base(), "{m}");
            assert_eq!(at(m, &untied, "token_embd.weight"), embd, "{m}");
            // The head Q5_K (Q8_0 where its rows are not whole super-blocks).
            assert_eq!(at(m, &untied, "output.weight"), Format::Q5_K, "{m}");
            assert_eq!(at(m, &guided, "token_embd.weight"), Format::Q5_K, "{m}");
            let narrow = TensorRole::of("output.weight", 576);
            assert_eq!(m.format_for(&narrow, &untied), Format::Q8, "{m}");
            // The importance matrix changes none of these rules.
            assert_eq!(
                at(m, &SMOLLM2, "blk.2.ffn_down.weight"),
                at(m, &guided, "blk.2.ffn_down.weight")
            );
        }
    }

    #[test]
    fn three_bit_i_quants_follow_llama_cpp() {
        use Mix::*;
        let guided = MixModel {
            imatrix: true,
            ..SMOLLM2
        };
        let grouped = MixModel { n_gqa: 8, ..guided };
        let untied = MixModel {
            tied: false,
            ..guided
        };

        // IQ3_XXS: attn_q and attn_k IQ2_S, attn_output IQ3_S; attn_v IQ3_S and ffn_down
        // Q4_K (first eighth) or Q3_K only without an importance matrix.
        let m = IQ3_XXS;
        assert_eq!(at(m, &guided, "blk.5.attn_q.weight"), Format::IQ2_S);
        assert_eq!(at(m, &guided, "blk.5.attn_k.weight"), Format::IQ2_S);
        assert_eq!(at(m, &guided, "blk.5.attn_output.weight"), Format::IQ3_S);
        assert_eq!(at(m, &guided, "blk.5.attn_v.weight"), Format::IQ3_XXS);
        assert_eq!(at(m, &SMOLLM2, "blk.5.attn_v.weight"), Format::IQ3_S);
        assert_eq!(at(m, &grouped, "blk.5.attn_v.weight"), Format::Q4_K);
        assert_eq!(at(m, &guided, "blk.0.ffn_down.weight"), Format::IQ3_XXS);
        assert_eq!(at(m, &SMOLLM2, "blk.2.ffn_down.weight"), Format::Q4_K);
        assert_eq!(at(m, &SMOLLM2, "blk.3.ffn_down.weight"), Format::Q3_K);
        assert_eq!(at(m, &guided, "blk.5.ffn_up.weight"), Format::IQ3_XXS);
        assert_eq!(at(m, &guided, "blk.5.ffn_gate.weight"), Format::IQ3_XXS);
        assert_eq!(at(m, &untied, "token_embd.weight"), Format::IQ3_S);
        assert_eq!(at(m, &untied, "output.weight"), Format::Q5_K);

        // IQ3_XS: IQ3_S, with IQ3_XXS for attn_q, attn_k, and ffn_gate and ffn_up between the
        // first and last eighth (layers 3 to 25 of 30).
        let m = IQ3_XS;
        assert_eq!(at(m, &guided, "blk.0.attn_q.weight"), Format::IQ3_XXS);
        assert_eq!(at(m, &guided, "blk.0.attn_k.weight"), Format::IQ3_XXS);
        assert_eq!(at(m, &guided, "blk.0.attn_v.weight"), Format::IQ3_S);
        assert_eq!(at(m, &grouped, "blk.0.attn_v.weight"), Format::Q4_K);
        assert_eq!(at(m, &guided, "blk.0.attn_output.weight"), Format::IQ3_S);
        assert_eq!(at(m, &guided, "blk.0.ffn_down.weight"), Format::IQ3_S);
        for (l, f) in [
            (2, Format::IQ3_S),
            (3, Format::IQ3_XXS),
            (25, Format::IQ3_XXS),
            (26, Format::IQ3_S),
        ] {
            assert_eq!(at(m, &guided, &format!("blk.{l}.ffn_up.weight")), f, "{l}");
            assert_eq!(
                at(m, &guided, &format!("blk.{l}.ffn_gate.weight")),
                f,
                "{l}"
            );
        }
        assert_eq!(at(m, &untied, "token_embd.weight"), Format::IQ3_S);
        assert_eq!(at(m, &untied, "output.weight"), Format::Q6_K);

        // IQ3_S: IQ3_S everywhere but attn_v with grouped-query attention.
        let m = IQ3_S;
        for t in [
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_up",
            "ffn_down",
        ] {
            assert_eq!(at(m, &guided, &format!("blk.0.{t}.weight")), Format::IQ3_S);
        }
        assert_eq!(at(m, &grouped, "blk.0.attn_v.weight"), Format::Q4_K);
        assert_eq!(at(m, &untied, "output.weight"), Format::Q6_K);

        // IQ3_M: attn_v and attn_output Q4_K, the first eighth's ffn_down Q4_K.
        let m = IQ3_M;
        assert_eq!(at(m, &guided, "blk.9.attn_v.weight"), Format::Q4_K);
        assert_eq!(at(m, &guided, "blk.9.attn_output.weight"), Format::Q4_K);
        assert_eq!(at(m, &guided, "blk.2.ffn_down.weight"), Format::Q4_K);
        assert_eq!(at(m, &guided, "blk.3.ffn_down.weight"), Format::IQ3_S);
        assert_eq!(at(m, &guided, "blk.9.attn_q.weight"), Format::IQ3_S);
        assert_eq!(at(m, &untied, "token_embd.weight"), Format::IQ3_S);
    }

    #[test]
    fn i_quants_fall_back_to_iq4_nl() {
        for f in [
            Format::IQ1_S,
            Format::IQ1_M,
            Format::IQ2_XXS,
            Format::IQ2_XS,
            Format::IQ2_S,
            Format::IQ3_XXS,
            Format::IQ3_S,
        ] {
            assert_eq!(fallback(f, 576), Format::IQ4_NL, "{f}");
            assert_eq!(fallback(f, 1536), f, "{f}");
            assert_eq!(fallback(f, 40), Format::F16, "{f}");
        }
    }

    #[test]
    fn iq2_xxs_and_iq3_xs_on_smollm2() {
        let guided = MixModel {
            imatrix: true,
            ..SMOLLM2
        };
        let of = |m: Mix, name: &str, cols| {
            fallback(m.format_for(&TensorRole::of(name, cols), &guided), cols)
        };
        // 576-wide rows fit no 256-value block: the tied head Q8_0, the i-quants IQ4_NL, Q2_K
        // Q4_0; the 1536-wide ffn_down keeps its type.
        let m = Mix::IQ2_XXS;
        assert_eq!(of(m, "token_embd.weight", 576), Format::Q8);
        assert_eq!(of(m, "blk.0.attn_v.weight", 576), Format::Q4_0);
        assert_eq!(of(m, "blk.0.attn_q.weight", 576), Format::IQ4_NL);
        assert_eq!(of(m, "blk.0.ffn_up.weight", 576), Format::IQ4_NL);
        assert_eq!(of(m, "blk.2.ffn_down.weight", 1536), Format::Q2_K);
        assert_eq!(of(m, "blk.3.ffn_down.weight", 1536), Format::IQ2_XXS);
        let m = Mix::IQ3_XS;
        assert_eq!(of(m, "blk.9.ffn_up.weight", 576), Format::IQ4_NL);
        assert_eq!(of(m, "blk.9.ffn_down.weight", 1536), Format::IQ3_S);
    }

    #[test]
    fn importance_is_required_as_llama_cpp_requires_it() {
        use Mix::*;
        let down = TensorRole::of("blk.3.ffn_down.weight", 1536);
        let embd = TensorRole::of("token_embd.weight", 1536);
        let head = TensorRole::of("output.weight", 1536);
        for f in [
            Format::IQ1_S,
            Format::IQ1_M,
            Format::IQ2_XXS,
            Format::IQ2_XS,
            Format::IQ2_S,
            Format::IQ3_XXS,
        ] {
            assert!(IQ2_M.requires_importance(f, &down), "{f}");
            assert!(!IQ2_M.requires_importance(f, &embd), "{f}");
            assert!(!IQ2_M.requires_importance(f, &head), "{f}");
        }
        for f in [Format::IQ3_S, Format::IQ4_NL, Format::Q4_K, Format::Q8] {
            assert!(!IQ3_XXS.requires_importance(f, &down), "{f}");
        }
        // Q2_K only in Q2_K_S files.
        assert!(Q2_K_S.requires_importance(Format::Q2_K, &down));
        assert!(!Q2_K.requires_importance(Format::Q2_K, &down));
        assert!(!IQ2_XXS.requires_importance(Format::Q2_K, &down));
    }
}
