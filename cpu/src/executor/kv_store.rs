//! The paged KV cache's values on the host: one layer's K (or V) for every slot of the block
//! pool (block `b`'s position `i` is slot `b * BLOCK_TOKENS + i`), stored as the cache's
//! [`KvType`] rounds them, exactly as `hearth_model::kv::stored::round_row` defines: f32 as
//! they are, f16 to nearest even, q8 per 32 values to a step of max|x| / 127, ties to even.

use half::f16;
use half::slice::HalfFloatSliceExt;

use hearth_model::kv::{BlockId, KvType, BLOCK_TOKENS};
use hearth_quant::Q8_BLOCK;

pub(super) enum KvStore {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// Levels, and one scale per 32 values.
    Q8 {
        q: Vec<i8>,
        d: Vec<f32>,
    },
}

impl KvStore {
    /// `slots` positions of `width` values (`width` a multiple of `kv_type.group()`).
    pub fn new(kv_type: KvType, slots: usize, width: usize) -> Self {
        let n = slots * width;
        match kv_type {
            KvType::F32 => Self::F32(vec![0.0; n]),
            KvType::F16 => Self::F16(vec![f16::ZERO; n]),
            KvType::Q8 => Self::Q8 {
                q: vec![0; n],
                d: vec![0.0; n / Q8_BLOCK],
            },
        }
    }

    /// Writes `values` (one position's whole width) at `slot`.
    pub fn write(&mut self, slot: usize, values: &[f32]) {
        let at = slot * values.len();
        match self {
            Self::F32(v) => v[at..at + values.len()].copy_from_slice(values),
            Self::F16(v) => {
                for (o, &x) in v[at..at + values.len()].iter_mut().zip(values) {
                    *o = f16::from_f32(x);
                }
            }
            Self::Q8 { q, d } => {
                let blocks = q[at..at + values.len()].chunks_exact_mut(Q8_BLOCK);
                let scales = d[at / Q8_BLOCK..].iter_mut();
                for ((q, d), x) in blocks.zip(scales).zip(values.chunks_exact(Q8_BLOCK)) {
                    *d = x.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
                    for (q, &v) in q.iter_mut().zip(x) {
                        // As `round_row`: through an integer, so a rounded -0 reads as +0.
                        *q = match *d == 0.0 {
                            true => 0,
                            false => (v / *d).round_ties_even().clamp(-127.0, 127.0) as i8,
                        };
                    }
                }
            }
        }
    }

    /// The `out.len()` values at `slot` of a store `width` wide, from value `first`.
    pub fn read(&self, slot: usize, width: usize, first: usize, out: &mut [f32]) {
        let at = slot * width + first;
        match self {
            Self::F32(v) => out.copy_from_slice(&v[at..at + out.len()]),
            Self::F16(v) => {
                let n = out.len();
                // F16C where the CPU has it.
                v[at..at + n].convert_to_f32_slice(out);
            }
            Self::Q8 { q, d } => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = f32::from(q[at + i]) * d[(at + i) / Q8_BLOCK];
                }
            }
        }
    }

    /// Copies block `src`'s slots over block `dst`'s (copy on write of a shared block).
    pub fn copy_block(&mut self, src: BlockId, dst: BlockId, width: usize) {
        let n = BLOCK_TOKENS * width;
        let (s, d) = (src as usize * n, dst as usize * n);
        match self {
            Self::F32(v) => v.copy_within(s..s + n, d),
            Self::F16(v) => v.copy_within(s..s + n, d),
            Self::Q8 { q, d: scales } => {
                q.copy_within(s..s + n, d);
                let b = Q8_BLOCK;
                scales.copy_within(s / b..(s + n) / b, d / b);
            }
        }
    }

    /// Bytes the store takes.
    pub fn bytes(&self) -> usize {
        match self {
            Self::F32(v) => v.len() * 4,
            Self::F16(v) => v.len() * 2,
            Self::Q8 { q, d } => q.len() + d.len() * 4,
        }
    }
}
