//! How the paged KV cache stores K and V: the element type every kernel that reads or writes
//! the cache is compiled for (`shaders/glsl/include/kv_cache.glsl`), and the bytes it takes.

use std::fmt;
use std::str::FromStr;

/// The KV cache's element type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    /// 4 bytes a value.
    F32,
    /// IEEE half precision, round to nearest even: 2 bytes a value.
    #[default]
    F16,
    /// Blocks of [`Q8_BLOCK`] values of one (position, KV head) row: 32 signed bytes and an
    /// f32 scale, 36 bytes (ggml's q8_0 rounding: scale = max|x| / 127, values rounded to the
    /// nearest step, ties to even).
    Q8,
}

/// Values per q8 block, each with its own scale; head_dim must be a multiple of it.
pub const Q8_BLOCK: usize = 32;

impl KvType {
    pub const ALL: [KvType; 3] = [KvType::F32, KvType::F16, KvType::Q8];

    /// The name `--kv-type` takes and the variant suffix of its kernels (`rope_kv_q8`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Q8 => "q8",
        }
    }

    /// Values a kernel stores at once: a q8 block, or one vec4. Every row length (head_dim)
    /// must be a multiple of it.
    pub const fn group(self) -> usize {
        match self {
            Self::Q8 => Q8_BLOCK,
            _ => 4,
        }
    }

    /// Bytes of `values` values, a multiple of [`group`](Self::group).
    pub const fn bytes(self, values: usize) -> usize {
        match self {
            Self::F32 => 4 * values,
            Self::F16 => 2 * values,
            Self::Q8 => values / Q8_BLOCK * (Q8_BLOCK + 4),
        }
    }
}

impl fmt::Display for KvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown KV type name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown KV cache type `{0}`; expected one of f32, f16, q8")]
pub struct UnknownKvType(pub String);

impl FromStr for KvType {
    type Err = UnknownKvType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownKvType(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_accepted_ones() {
        for t in KvType::ALL {
            assert_eq!(t.name().parse::<KvType>(), Ok(t));
        }
        let err = "q4".parse::<KvType>().unwrap_err().to_string();
        assert!(
            err.contains("`q4`") && err.contains("f32, f16, q8"),
            "{err}"
        );
    }

    #[test]
    fn bytes_per_row() {
        assert_eq!(KvType::F32.bytes(64), 256);
        assert_eq!(KvType::F16.bytes(64), 128);
        assert_eq!(KvType::Q8.bytes(64), 72);
    }
}
