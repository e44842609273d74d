//! A row (tensor) split (`--split row`): every layer of a run divided among devices, each
//! holding some of the KV heads (with the query heads that read them) and some of the MLP's
//! hidden units. A device's attention output and MLP output are then partial sums of the
//! layer's: the output projection reads only its heads' columns and the down projection only
//! its units' columns. The partial sums are added on the host, twice per layer per step,
//! before the next norm, which needs the whole residual stream.
//!
//! Heads and units are cut where the output and down projections' blocks allow, so that each
//! device keeps the file's packed bytes; a cut inside a block re-encodes those columns as F16.

use std::ops::Range;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::{LayerWeights, Mlp, ModelConfig};

/// One device's share of every layer of a row split.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Shard {
    /// Its place among the devices sharing the layers; the first also embeds tokens and
    /// computes the logits where the layers start or end the model.
    pub index: usize,
    pub count: usize,
    /// KV heads held; query heads `kv_heads * n_head / n_head_kv` go with them.
    pub kv_heads: Range<usize>,
    /// The MLP's hidden units held (rows of gate and up, columns of down).
    pub ff: Range<usize>,
}

/// The blocks a cut must respect: values per block of the output projection's and the down
/// projection's formats (the largest over the layers).
#[derive(Clone, Copy, Debug)]
pub struct CutBlocks {
    pub attn_output: usize,
    pub down: usize,
}

impl Shard {
    /// Why `c` cannot be split by rows, if it cannot: parts of a layer that need the whole
    /// of a sum before they apply.
    pub fn refusal(c: &ModelConfig) -> Option<&'static str> {
        if c.latent.is_some() {
            Some("multi-head latent attention (every head reads one latent per position)")
        } else if c.experts.is_some() {
            Some("a mixture of experts (its router needs every expert's rows)")
        } else if c.attn_sinks || c.attn_out_bias {
            Some("attention sinks or an output bias (per head, or once over the whole sum)")
        } else if c.post_norms {
            Some("post-norms (a norm of the whole attention or MLP output)")
        } else if c.qk_norm_whole {
            Some("a query/key norm over all heads together")
        } else if c.n_head_kv == 0 || c.n_head % c.n_head_kv != 0 {
            Some("query heads that do not group evenly over the KV heads")
        } else {
            None
        }
    }

    /// `c`'s heads and hidden units divided by `shares` (one per device, not all zero), each
    /// device holding at least one KV head and one unit; cut on whole blocks of `blocks`
    /// where the model's widths allow.
    pub fn divide(c: &ModelConfig, shares: &[f64], blocks: CutBlocks) -> Result<Vec<Shard>> {
        if let Some(why) = Self::refusal(c) {
            return Err(Error::options(
                "split",
                format!("a row split cannot divide {why}; use --split-mode layer"),
            ));
        }
        let count = shares.len();
        if count < 2
            || shares.iter().any(|&s| s.is_nan() || s < 0.0)
            || shares.iter().sum::<f64>() <= 0.0
        {
            return Err(Error::options(
                "tensor-split",
                "a row split needs two or more devices, with shares not all zero",
            ));
        }
        let group = c.n_head / c.n_head_kv;
        // KV heads per unit: the fewest whose query columns are whole output blocks.
        let per_head = group * c.head_dim;
        let head_unit = (1..=c.n_head_kv)
            .find(|u| c.n_head_kv % u == 0 && (u * per_head) % blocks.attn_output.max(1) == 0)
            .filter(|u| c.n_head_kv / u >= count)
            .unwrap_or(1);
        let ff_unit = [blocks.down.max(32), 32]
            .into_iter()
            .find(|&u| c.n_ff % u == 0 && c.n_ff / u >= count)
            .unwrap_or(1);
        if c.n_head_kv < count || c.n_ff / ff_unit < count {
            return Err(Error::options(
                "devices",
                format!(
                    "{count} devices for {} KV heads and {} MLP units: each needs at least one",
                    c.n_head_kv, c.n_ff
                ),
            ));
        }
        let heads = cut(c.n_head_kv / head_unit, shares);
        let ff = cut(c.n_ff / ff_unit, shares);
        Ok(heads
            .into_iter()
            .zip(ff)
            .enumerate()
            .map(|(index, (h, f))| Shard {
                index,
                count,
                kv_heads: h.start * head_unit..h.end * head_unit,
                ff: f.start * ff_unit..f.end * ff_unit,
            })
            .collect())
    }

    /// The model as this device sees it: its heads and units only.
    pub fn config(&self, c: &ModelConfig) -> ModelConfig {
        let group = c.n_head / c.n_head_kv.max(1);
        ModelConfig {
            n_head: self.kv_heads.len() * group,
            n_head_kv: self.kv_heads.len(),
            n_ff: self.ff.len(),
            ..c.clone()
        }
    }

    /// Its fraction of a layer's attention (heads) and MLP (units).
    pub fn fractions(&self, c: &ModelConfig) -> (f64, f64) {
        (
            self.kv_heads.len() as f64 / c.n_head_kv as f64,
            self.ff.len() as f64 / c.n_ff as f64,
        )
    }

    /// This device's rows and columns of layer `l`'s weights `w` (read for the whole model
    /// `c`).
    pub fn layer(&self, c: &ModelConfig, l: usize, w: LayerWeights) -> Result<LayerWeights> {
        let hd = c.head_dim;
        let group = c.n_head / c.n_head_kv;
        let (h0, h1) = (self.kv_heads.start, self.kv_heads.end);
        let (q_dim, kv_dim) = (c.attn_dim(), c.n_head_kv * hd);
        let q = h0 * group * hd..h1 * group * hd;
        let qkv_rows = [
            q.clone(),
            q_dim + h0 * hd..q_dim + h1 * hd,
            q_dim + kv_dim + h0 * hd..q_dim + kv_dim + h1 * hd,
        ];
        let refused = |what: &str| {
            Error::options(
                "split",
                format!(
                    "layer {l}: columns {what} of this device's share are not a multiple of \
                     32 values"
                ),
            )
        };
        let wo =
            w.wo.columns(q.clone())
                .ok_or_else(|| refused("of attn_output"))?;
        let mlp = match w.mlp {
            Mlp::Dense { gate_up, down } => {
                let n_ff = c.n_ff;
                let f = self.ff.clone();
                Mlp::Dense {
                    gate_up: gate_up.take_rows(&[f.clone(), n_ff + f.start..n_ff + f.end]),
                    down: down.columns(f).ok_or_else(|| refused("of ffn_down"))?,
                }
            }
            Mlp::Experts { .. } => {
                return Err(Error::options(
                    "split",
                    format!("layer {l}: a mixture of experts cannot be divided by rows"),
                ))
            }
        };
        Ok(LayerWeights {
            wqkv: w.wqkv.take_rows(&qkv_rows),
            qkv_bias: w.qkv_bias.map(|b| {
                qkv_rows
                    .iter()
                    .flat_map(|r| b[r.clone()].to_vec())
                    .collect()
            }),
            wo,
            mlp,
            ..w
        })
    }
}

/// "KV heads 0..2, MLP units 0..768", for plans and reports.
impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KV heads {}..{}, MLP units {}..{}",
            self.kv_heads.start, self.kv_heads.end, self.ff.start, self.ff.end
        )
    }
}

/// `units` divided into consecutive ranges by `shares`, each at least one unit.
fn cut(units: usize, shares: &[f64]) -> Vec<Range<usize>> {
    let total: f64 = shares.iter().sum();
    let count = shares.len();
    let mut out = Vec::with_capacity(count);
    let (mut start, mut cumulative) = (0, 0.0);
    for (i, share) in shares.iter().enumerate() {
        cumulative += share;
        let end = match i + 1 == count {
            true => units,
            false => ((units as f64 * cumulative / total).round() as usize)
                .max(start + 1)
                .min(units - (count - 1 - i)),
        };
        out.push(start..end);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_follow_shares_and_leave_none_empty() {
        assert_eq!(cut(4, &[1.0, 1.0]), [0..2, 2..4]);
        assert_eq!(cut(4, &[3.0, 1.0]), [0..3, 3..4]);
        assert_eq!(cut(3, &[1.0, 0.0, 0.0]), [0..1, 1..2, 2..3]);
        assert_eq!(cut(48, &[1.0, 2.0]), [0..16, 16..48]);
    }
}
