//! Activations rounded to 8-bit blocks once per input (`quantize_q8.comp`), for the products
//! with integer dot products (a `Matvec` whose variant is `idot`): each 32 values share a
//! scale `d = max |x| / 127`, their levels `q = round(x / d)` lie in -127..=127, and the
//! block keeps `s = d * sum(q)` for the weights' bases. Every product that reads the same
//! input reads one rounding of it.

use bytemuck::{Pod, Zeroable};
use hearth_shaders::QUANTIZE_Q8;

use super::{check_sizes, Pipe};
use crate::vk::{Buffer, Device, Recorder, Result, VkError};

/// Values that share a scale.
pub const Q8_ACT_BLOCK: u32 = 32;

/// Bytes `tokens` vectors of `k` values take rounded: a byte per level ([tokens, k]), then
/// each block's (d, s) as two f32 ([tokens, k / 32]).
pub fn q8_act_bytes(tokens: u32, k: u32) -> u64 {
    let values = tokens as u64 * k as u64;
    values + values / Q8_ACT_BLOCK as u64 * 8
}

/// Where the blocks' (d, s) start in a buffer of `tokens` rounded vectors of `k` values, in
/// 8-byte pairs.
pub(crate) fn q8_act_ds_at(tokens: u32, k: u32) -> u32 {
    (tokens as u64 * k as u64 / 8) as u32
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct QuantizePush {
    k: u32,
    flags: u32,
    eps: f32,
    ds_at: u32,
}

const NORM: u32 = 1;

/// One rounding of `tokens` vectors.
#[derive(Clone, Copy)]
pub struct QuantizeArgs<'a> {
    /// [tokens, k]
    pub x: &'a Buffer,
    /// RMSNorm of x with this gain ([k]) and epsilon first, as `MatvecArgs::norm`.
    pub norm: Option<(&'a Buffer, f32)>,
    /// [`q8_act_bytes`]`(tokens, k)` bytes, from its start.
    pub out: &'a Buffer,
    /// Values per vector, a multiple of [`Q8_ACT_BLOCK`].
    pub k: u32,
    pub tokens: u32,
}

/// Rounds activations to 8-bit blocks: one workgroup per token.
pub struct QuantizeQ8(Pipe);

impl QuantizeQ8 {
    pub fn new(device: &Device) -> Result<Self> {
        Pipe::new(device, QUANTIZE_Q8).map(Self)
    }

    pub fn record<'a>(&self, rec: &mut Recorder<'a>, a: QuantizeArgs<'a>) -> Result<()> {
        let name = self.0.name;
        if a.k % Q8_ACT_BLOCK != 0 {
            return Err(VkError::Kernel {
                kernel: name,
                message: format!("rows of {} values are not whole 32-value blocks", a.k),
            });
        }
        if a.tokens as u64 * a.k as u64 > u32::MAX as u64 {
            return Err(VkError::Kernel {
                kernel: name,
                message: format!("{}x{} inputs exceed 2^32 values", a.tokens, a.k),
            });
        }
        let (k, tokens) = (a.k as u64, a.tokens as u64);
        let mut needs = vec![
            ("x", a.x, tokens * k * 4),
            ("out", a.out, q8_act_bytes(a.tokens, a.k)),
        ];
        if let Some((g, _)) = a.norm {
            needs.push(("norm gain", g, k * 4));
        }
        check_sizes(name, &needs)?;
        if a.tokens == 0 || a.k == 0 {
            return Ok(());
        }
        let (gain, eps) = a.norm.unwrap_or((a.x, 0.0));
        let push = QuantizePush {
            k: a.k,
            flags: if a.norm.is_some() { NORM } else { 0 },
            eps,
            ds_at: q8_act_ds_at(a.tokens, a.k),
        };
        rec.dispatch(&self.0, &[a.x, a.out, a.out, gain], &push, [a.tokens, 1, 1])
    }
}

/// The host's reading of a buffer [`QuantizeQ8`] wrote: each token's levels, and each block's
/// scale and sum, for tests and references.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActQ8Host {
    /// [tokens, k]
    pub q: Vec<i8>,
    /// [tokens, k / 32]
    pub d: Vec<f32>,
    /// [tokens, k / 32]: d * sum(q)
    pub s: Vec<f32>,
}

impl ActQ8Host {
    /// Reads `tokens` rounded vectors of `k` values from the bytes of a buffer.
    pub fn from_bytes(bytes: &[u8], tokens: u32, k: u32) -> Self {
        let values = tokens as usize * k as usize;
        let q = bytes[..values].iter().map(|&b| b as i8).collect();
        let pairs: Vec<f32> = bytes[values..values + values / 4]
            .chunks_exact(4)
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let d = pairs.iter().step_by(2).copied().collect();
        let s = pairs.iter().skip(1).step_by(2).copied().collect();
        Self { q, d, s }
    }

    /// The values the levels stand for: q * d, [tokens, k].
    pub fn values(&self) -> Vec<f32> {
        let block = Q8_ACT_BLOCK as usize;
        self.q
            .iter()
            .enumerate()
            .map(|(i, &q)| q as f32 * self.d[i / block])
            .collect()
    }
}
