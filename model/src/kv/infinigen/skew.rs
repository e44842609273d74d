//! Offline skewing (InfiniGen): per layer and KV head, an orthogonal matrix A that turns the
//! query space into the basis of the query matrix's right singular vectors, largest first.
//!
//! For queries Q = U S V^T, Q A with A = V is U S: its energy sits in the first columns. Keys
//! go through the same A, so (Q A)(K A)^T = Q K^T and attention is unchanged; but the first r
//! columns of Q A and K A alone already give a good estimate of the scores. For RoPE models A
//! applies to queries and keys after RoPE, so it cannot be folded into W_Q and W_K; Hearth
//! applies it after RoPE for every model, which is the same product.
//!
//! A KV head serves `group` query heads; their queries are stacked into one matrix, since one
//! A must serve the keys they share.
//!
//! A calibration text covers only its own few hundred positions, where RoPE's slow pairs have
//! hardly turned. A basis fitted there mixes those pairs in ways that stop concentrating the
//! product once they have turned, far into a long context. So for RoPE models each calibration
//! query and key is first moved to random positions spread over the model's context
//! ([`spread_positions`]).
//!
//! Which columns form the partial query and key: a column's share of the products q.k is
//! about (sum of |q_c|) * (sum of |k_c|) over the calibration tokens, so the columns are
//! ordered by that product (InfiniGen picks its partial columns by column sums), not by the
//! query's singular values alone: RoPE leaves keys spread differently from queries.

use std::path::Path;

use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::error::{Error, Result};
use crate::ops;
use crate::ModelConfig;

/// What a calibration run gives skewing: per layer, the queries [n_tokens][n_head * head_dim]
/// and keys [n_tokens][n_head_kv * head_dim], both after RoPE.
#[derive(Clone, Debug, Default)]
pub struct Calibration {
    pub queries: Vec<Vec<f32>>,
    pub keys: Vec<Vec<f32>>,
}

/// The skew matrices of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct Skew {
    pub n_layer: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Per layer: [n_head_kv][head_dim][head_dim], row-major; the columns are the right
    /// singular vectors of the queries, the most useful for q.k first.
    pub matrices: Vec<Vec<f32>>,
}

impl Skew {
    /// Skew matrices from a calibration run's queries and keys.
    pub fn from_calibration(config: &ModelConfig, calibration: &Calibration) -> Result<Self> {
        let (hd, n_kv) = (config.head_dim, config.n_head_kv);
        let group = config.n_head / n_kv;
        let q_dim = config.n_head * hd;
        let (queries, keys) = (&calibration.queries, &calibration.keys);
        if queries.len() != config.n_layer || keys.len() != config.n_layer {
            return Err(Error::options(
                "calibration",
                format!(
                    "{} layers of queries and {} of keys for {} layers",
                    queries.len(),
                    keys.len(),
                    config.n_layer
                ),
            ));
        }
        let kv_dim = n_kv * hd;
        let whole = |q: &Vec<f32>, k: &Vec<f32>| {
            !q.is_empty() && q.len() % q_dim == 0 && k.len() == q.len() / q_dim * kv_dim
        };
        if !queries.iter().zip(keys).all(|(q, k)| whole(q, k)) {
            return Err(Error::options(
                "calibration",
                "no calibration tokens, or queries and keys of different tokens",
            ));
        }
        let spread = spread_positions(config, calibration);
        let mut matrices = Vec::with_capacity(config.n_layer);
        for (q, k) in spread.queries.iter().zip(&spread.keys) {
            let n_tokens = q.len() / q_dim;
            let mut layer = Vec::with_capacity(n_kv * hd * hd);
            for g in 0..n_kv {
                // Rows: every token of every query head in the group.
                let rows = n_tokens * group;
                let m = DMatrix::<f64>::from_fn(rows, hd, |row, i| {
                    let (t, h) = (row / group, g * group + row % group);
                    q[t * q_dim + h * hd + i] as f64
                });
                let keys =
                    DMatrix::<f64>::from_fn(n_tokens, hd, |t, i| k[(t * n_kv + g) * hd + i] as f64);
                let a = right_singular_vectors(m.clone());
                layer.extend(order_by_product(&a, &m, &keys));
            }
            matrices.push(layer);
        }
        Ok(Self {
            n_layer: config.n_layer,
            n_head_kv: n_kv,
            head_dim: hd,
            matrices,
        })
    }

    /// The first `r` columns of each KV head's matrix, as kernels read them:
    /// [n_head_kv][head_dim][r] for `layer`.
    pub fn partial(&self, layer: usize, r: usize) -> Vec<f32> {
        self.partial_padded(layer, r, r)
    }

    /// [`partial`](Self::partial) with each row zero-filled to `width` >= r columns: the
    /// device reads partial keys four columns at a time, and zero columns change no score.
    pub fn partial_padded(&self, layer: usize, r: usize, width: usize) -> Vec<f32> {
        let hd = self.head_dim;
        let m = &self.matrices[layer];
        let mut out = Vec::with_capacity(self.n_head_kv * hd * width);
        for g in 0..self.n_head_kv {
            for i in 0..hd {
                let row = &m[(g * hd + i) * hd..][..hd];
                out.extend_from_slice(&row[..r]);
                out.resize(out.len() + width - r, 0.0);
            }
        }
        out
    }

    /// The number of partial columns for a ratio of the head dimension (at least one).
    pub fn partial_dims(&self, ratio: f32) -> usize {
        partial_dims(self.head_dim, ratio)
    }
}

/// Places each calibration token is copied to by [`spread_positions`].
const SPREAD_COPIES: usize = 4;
/// The farthest position [`spread_positions`] moves a token to, for models trained on longer
/// contexts: a wider spread fits the first few thousand positions, where most use is, worse.
const SPREAD_MAX: usize = 32768;

/// The calibration's queries and keys (token t at position t), each copied to
/// [`SPREAD_COPIES`] positions drawn uniformly from the model's context (a fixed seed, so the
/// matrices are reproducible). Unchanged for models without RoPE.
pub fn spread_positions(config: &ModelConfig, calibration: &Calibration) -> Calibration {
    let (Some(rope), Some(freqs)) = (config.rope, config.rope_freqs()) else {
        return calibration.clone();
    };
    let span = config.n_ctx_train.clamp(1, SPREAD_MAX);
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut spread = |rows: &[f32], heads: usize| -> Vec<f32> {
        let width = heads * config.head_dim;
        let n = rows.len() / width;
        let mut out = Vec::with_capacity(rows.len() * SPREAD_COPIES);
        let mut shifts = Vec::with_capacity(n * SPREAD_COPIES);
        for t in 0..n {
            for _ in 0..SPREAD_COPIES {
                out.extend_from_slice(&rows[t * width..][..width]);
                shifts.push(rng.gen_range(0..span) as f64 - t as f64);
            }
        }
        ops::rope_shift(
            &mut out,
            &shifts,
            heads,
            config.head_dim,
            rope.layout,
            &freqs,
        );
        out
    };
    let mut moved = Calibration::default();
    for (q, k) in calibration.queries.iter().zip(&calibration.keys) {
        moved.queries.push(spread(q, config.n_head));
        moved.keys.push(spread(k, config.n_head_kv));
    }
    moved
}

pub fn partial_dims(head_dim: usize, ratio: f32) -> usize {
    ((head_dim as f32 * ratio).round() as usize).clamp(1, head_dim)
}

/// V of the SVD of `m` (rows x d), as a row-major d x d matrix with columns ordered by
/// singular value, largest first.
fn right_singular_vectors(m: DMatrix<f64>) -> Vec<f32> {
    let d = m.ncols();
    let svd = m.svd(false, true);
    let v_t = svd.v_t.expect("asked for V^T");
    let mut order: Vec<usize> = (0..svd.singular_values.len()).collect();
    order.sort_by(|&a, &b| svd.singular_values[b].total_cmp(&svd.singular_values[a]));
    // With fewer rows than d, V^T has fewer rows: complete the basis so A stays square.
    let mut basis: Vec<Vec<f64>> = order
        .iter()
        .map(|&k| (0..d).map(|i| v_t[(k, i)]).collect())
        .collect();
    complete_basis(&mut basis, d);
    let mut out = vec![0f32; d * d];
    for (c, v) in basis.iter().enumerate() {
        for (i, &x) in v.iter().enumerate() {
            out[i * d + c] = x as f32;
        }
    }
    out
}

/// `a` (d x d, row-major) with its columns reordered by (sum |Q a_c|) * (sum |K a_c|), largest
/// first; a permutation, so still orthogonal.
fn order_by_product(a: &[f32], q: &DMatrix<f64>, k: &DMatrix<f64>) -> Vec<f32> {
    let d = q.ncols();
    let a_m = DMatrix::<f64>::from_fn(d, d, |i, c| a[i * d + c] as f64);
    let abs_sums = |x: DMatrix<f64>| -> Vec<f64> {
        (0..d)
            .map(|c| x.column(c).iter().map(|v| v.abs()).sum())
            .collect()
    };
    let (sq, sk) = (abs_sums(q * &a_m), abs_sums(k * &a_m));
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&x, &y| (sq[y] * sk[y]).total_cmp(&(sq[x] * sk[x])));
    let mut out = vec![0f32; d * d];
    for (to, &from) in order.iter().enumerate() {
        for i in 0..d {
            out[i * d + to] = a[i * d + from];
        }
    }
    out
}

/// Extends orthonormal `basis` to d vectors with Gram-Schmidt over the unit vectors.
fn complete_basis(basis: &mut Vec<Vec<f64>>, d: usize) {
    for e in 0..d {
        if basis.len() == d {
            return;
        }
        let mut v = vec![0f64; d];
        v[e] = 1.0;
        for b in basis.iter() {
            let dot: f64 = v.iter().zip(b).map(|(x, y)| x * y).sum();
            v.iter_mut().zip(b).for_each(|(x, y)| *x -= dot * y);
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 1e-6 {
            v.iter_mut().for_each(|x| *x /= norm);
            basis.push(v);
        }
    }
}

const MAGIC: &[u8; 8] = b"HRTHSKEW";
const VERSION: u32 = 3;

impl Skew {
    /// Writes the matrices with a header naming their shape and `key` (what they were
    /// computed from), through a temporary file.
    pub fn save(&self, path: &Path, key: u64) -> Result<()> {
        let mut bytes = Vec::with_capacity(40 + self.matrices.len() * self.matrices[0].len() * 4);
        bytes.extend_from_slice(MAGIC);
        for v in [
            VERSION,
            self.n_layer as u32,
            self.n_head_kv as u32,
            self.head_dim as u32,
        ] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&key.to_le_bytes());
        for m in &self.matrices {
            for x in m {
                bytes.extend_from_slice(&x.to_le_bytes());
            }
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &bytes).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
    }

    /// Reads matrices saved for `key` and `config`'s shape; `None` when the file is missing or
    /// was made for something else (it is then recomputed).
    pub fn load(path: &Path, key: u64, config: &ModelConfig) -> Option<Self> {
        let bytes = std::fs::read(path).ok()?;
        let (header, body) = bytes.split_at_checked(32)?;
        let word = |i: usize| u32::from_le_bytes(header[8 + 4 * i..12 + 4 * i].try_into().unwrap());
        let stored_key = u64::from_le_bytes(header[24..32].try_into().unwrap());
        let shape = [config.n_layer, config.n_head_kv, config.head_dim].map(|v| v as u32);
        if &header[..8] != MAGIC
            || word(0) != VERSION
            || [word(1), word(2), word(3)] != shape
            || stored_key != key
        {
            return None;
        }
        let per_layer = config.n_head_kv * config.head_dim * config.head_dim;
        if body.len() != config.n_layer * per_layer * 4 {
            return None;
        }
        let all: Vec<f32> = body
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let skew = Self {
            n_layer: config.n_layer,
            n_head_kv: config.n_head_kv,
            head_dim: config.head_dim,
            matrices: all.chunks(per_layer).map(<[f32]>::to_vec).collect(),
        };
        // The key says what the matrices were made from, not that the bytes survived.
        if let Err(why) = skew.check_orthogonal() {
            tracing::warn!(
                "{}: {why}, so the file is damaged; computing the skew matrices again",
                path.display()
            );
            return None;
        }
        Some(skew)
    }

    /// Every matrix is orthogonal (A^T A = I within 1e-3), as skewing makes them: otherwise
    /// speculation would score against a distorted product.
    fn check_orthogonal(&self) -> std::result::Result<(), String> {
        let hd = self.head_dim;
        for (l, layer) in self.matrices.iter().enumerate() {
            for (g, a) in layer.chunks_exact(hd * hd).enumerate() {
                let a = DMatrix::from_row_slice(hd, hd, a);
                let gram = a.transpose() * &a;
                let off = gram - DMatrix::<f32>::identity(hd, hd);
                // amax passes over NaN, so NaN is looked for apart.
                let error = off.amax();
                if off.iter().any(|x| x.is_nan()) || error > 1e-3 {
                    return Err(format!(
                        "the skew matrix of layer {l}, KV head {g} is not orthogonal \
                         (A^T A - I up to {error})"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ModelConfig {
        ModelConfig::plain_for_tests(2, 32, (4, 2), 8, 16)
    }

    /// Orthogonal matrices from the QR factorization of random ones.
    fn skew(config: &ModelConfig) -> Skew {
        let hd = config.head_dim;
        let mut rng = StdRng::seed_from_u64(3);
        let matrices = (0..config.n_layer)
            .map(|_| {
                (0..config.n_head_kv)
                    .flat_map(|_| {
                        let m = DMatrix::<f32>::from_fn(hd, hd, |_, _| rng.gen_range(-1.0..1.0));
                        let q = m.qr().q();
                        (0..hd * hd).map(move |i| q[(i / hd, i % hd)])
                    })
                    .collect()
            })
            .collect();
        Skew {
            n_layer: config.n_layer,
            n_head_kv: config.n_head_kv,
            head_dim: hd,
            matrices,
        }
    }

    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("hearth-skew-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("model.gguf.skew")
    }

    #[test]
    fn saved_matrices_load_back() {
        let config = config();
        let skew = skew(&config);
        let path = scratch("round-trip");
        skew.save(&path, 7).unwrap();
        assert_eq!(Skew::load(&path, 7, &config), Some(skew));
        // Made for other weights or another calibration text, or another shape.
        assert_eq!(Skew::load(&path, 8, &config), None);
        let wider = ModelConfig {
            head_dim: 16,
            ..config.clone()
        };
        assert_eq!(Skew::load(&path, 7, &wider), None);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    /// A cache file cut short, or with bytes changed, is not used (the matrices are computed
    /// again) and nothing panics.
    #[test]
    fn damaged_cache_files_are_not_used() {
        let config = config();
        let path = scratch("damaged");
        skew(&config).save(&path, 7).unwrap();
        let good = std::fs::read(&path).unwrap();
        let mut damaged: Vec<Vec<u8>> = (0..good.len())
            .step_by(5)
            .map(|n| good[..n].to_vec())
            .collect();
        damaged.push([good.as_slice(), &[0]].concat());
        for (at, value) in [(0, b'X'), (8, 9), (43, 0x7f), (good.len() - 2, 0xff)] {
            let mut bytes = good.clone();
            bytes[at] = value;
            damaged.push(bytes);
        }
        // One entry NaN; one entry off by 0.01 (the check allows 1e-3).
        let entry = 32 + 4 * 70;
        let mut nan = good.clone();
        nan[entry..entry + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        damaged.push(nan);
        let mut off = good.clone();
        let x = f32::from_le_bytes(good[entry..entry + 4].try_into().unwrap());
        off[entry..entry + 4].copy_from_slice(&(x + 0.01).to_le_bytes());
        damaged.push(off);
        for bytes in damaged {
            std::fs::write(&path, &bytes).unwrap();
            let changed = bytes.iter().zip(&good).position(|(a, b)| a != b);
            assert_eq!(
                Skew::load(&path, 7, &config),
                None,
                "{} bytes, first change at {changed:?}",
                bytes.len()
            );
        }
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
