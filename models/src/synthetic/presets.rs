//! The shapes of published models, one row each, for `--synthetic NAME`.

use hearth_quant::Format;

use super::{Family, Llama3Rope, Shape, ShapeExperts};
use crate::error::{Error, Result};
use crate::GgufFile;

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

/// `PRESETS` from one row per preset: its names, family and [`Shape::plain`]'s numbers, then
/// the atoms it has beyond those (methods of [`Preset`] below).
macro_rules! presets {
    ($(
        $name:literal $size:literal $model:literal $family:ident [$($count:expr),*]
        $rope_base:literal $norm_eps:literal $($atom:ident $(($($arg:expr),*))?)*;
    )*) => {
        /// The presets, smallest first (by weights).
        pub const PRESETS: &[Preset] = &[$(
            Preset {
                name: $name,
                size: $size,
                model: $model,
                shape: Shape::plain(Family::$family, [$($count),*], $rope_base, $norm_eps),
                llama3_rope: None,
            }
            $(.$atom($($($arg),*)?))*
        ),*];
    };
}

presets! {
    // name, size, model, family, [n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx_train],
    // RoPE base, norm epsilon, then the atoms beyond the family's own
    "smollm2-135m"   "135M"     "SmolLM2-135M"   Llama   [30,  576,  1536,  9,  3,  49_152,   8_192]    100_000.0  1e-5  tied;
    "llama-1b"       "1B"       "Llama 3.2 1B"   Llama   [16, 2048,  8192, 32,  8, 128_256, 131_072]    500_000.0  1e-5  tied;
    "llama-3b"       "3B"       "Llama 3.2 3B"   Llama   [28, 3072,  8192, 24,  8, 128_256, 131_072]    500_000.0  1e-5  tied;
    "llama-7b"       "7B"       "Llama 2 7B"     Llama   [32, 4096, 11008, 32, 32,  32_000,   4_096]     10_000.0  1e-5;
    "qwen2.5-7b"     "7B"       "Qwen2.5 7B"     Qwen2   [28, 3584, 18944, 28,  4, 152_064,  32_768]  1_000_000.0  1e-6;
    "llama-3-8b"     "8B"       "Llama 3 8B"     Llama   [32, 4096, 14336, 32,  8, 128_256,   8_192]    500_000.0  1e-5;
    "llama-3.1-8b"   "8B"       "Llama 3.1 8B"   Llama   [32, 4096, 14336, 32,  8, 128_256, 131_072]    500_000.0  1e-5  llama3_rope;
    "qwen3-8b"       "8B"       "Qwen3 8B"       Qwen3   [36, 4096, 12288, 32,  8, 151_936,  40_960]  1_000_000.0  1e-6  key_length(128);
    "gemma-2-9b"     "9B"       "Gemma 2 9B"     Gemma2  [42, 3584, 14336, 16,  8, 256_000,   8_192]     10_000.0  1e-6  tied key_length(256) window(4096);
    "llama-13b"      "13B"      "Llama 2 13B"    Llama   [40, 5120, 13824, 40, 40,  32_000,   4_096]     10_000.0  1e-5;
    "qwen3-30b-a3b"  "30B-A3B"  "Qwen3-30B-A3B"  Qwen3   [48, 2048,  6144, 32,  4, 151_936,  40_960]  1_000_000.0  1e-6  key_length(128) experts(128, 8, 768);
    "mixtral-8x7b"   "8x7B"     "Mixtral 8x7B"   Llama   [32, 4096, 14336, 32,  8,  32_000,  32_768]  1_000_000.0  1e-5  experts(8, 2, 14336);
}

/// The atoms a row of the table may add.
impl Preset {
    const fn tied(self) -> Preset {
        let shape = Shape {
            tied_embeddings: true,
            ..self.shape
        };
        Preset { shape, ..self }
    }

    const fn key_length(self, d: usize) -> Preset {
        let shape = Shape {
            key_length: Some(d),
            ..self.shape
        };
        Preset { shape, ..self }
    }

    const fn window(self, w: usize) -> Preset {
        let shape = Shape {
            sliding_window: Some(w),
            ..self.shape
        };
        Preset { shape, ..self }
    }

    const fn experts(self, count: usize, used: usize, n_ff: usize) -> Preset {
        let experts = Some(ShapeExperts { count, used, n_ff });
        let shape = Shape {
            experts,
            ..self.shape
        };
        Preset { shape, ..self }
    }

    const fn llama3_rope(self) -> Preset {
        Preset {
            llama3_rope: Some(Llama3Rope::LLAMA_3_1),
            ..self
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn names_are_unique_and_found_in_any_case() {
        for p in PRESETS {
            assert_eq!(preset(&p.name.to_uppercase()).unwrap(), p);
        }
        let err = preset("llama-70b").unwrap_err().to_string();
        assert!(err.starts_with("synthetic: no preset `llama-70b`"), "{err}");
    }
}
