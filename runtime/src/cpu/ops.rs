//! Reference operations. Layouts match the kernels: row-major, rows of length `n`; weight
//! matrices are stored as GGUF stores them, [out, in].

/// RMSNorm of each row of `x` ([rows, n]) scaled by `w` ([n]).
pub fn rmsnorm(x: &[f32], w: &[f32], n: usize, eps: f32) -> Vec<f32> {
    x.chunks(n)
        .flat_map(|row| {
            let ms = row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / n as f64;
            let scale = 1.0 / (ms + eps as f64).sqrt();
            row.iter()
                .zip(w)
                .map(move |(&v, &g)| (v as f64 * scale * g as f64) as f32)
        })
        .collect()
}

/// LayerNorm of each row of `x` ([rows, n]) with gain `w` and bias `b` ([n]).
pub fn layernorm(x: &[f32], w: &[f32], b: &[f32], n: usize, eps: f32) -> Vec<f32> {
    x.chunks(n)
        .flat_map(|row| {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
            let inv = 1.0 / (var + eps as f64).sqrt();
            row.iter()
                .zip(w.iter().zip(b))
                .map(move |(&v, (&g, &bias))| {
                    ((v as f64 - mean) * inv * g as f64 + bias as f64) as f32
                })
        })
        .collect()
}

/// Softmax of `scale * x` over each row ([rows, n]).
pub fn softmax(x: &[f32], n: usize, scale: f32) -> Vec<f32> {
    x.chunks(n)
        .flat_map(|row| {
            let m = row
                .iter()
                .map(|&v| scale as f64 * v as f64)
                .fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = row
                .iter()
                .map(|&v| (scale as f64 * v as f64 - m).exp())
                .collect();
            let sum: f64 = exps.iter().sum();
            exps.into_iter().map(move |e| (e / sum) as f32)
        })
        .collect()
}

/// How RoPE pairs up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs (i, i + rot_dim/2): GPT-NeoX, and Hugging Face Llama checkpoints.
    Neox,
    /// Adjacent pairs (2i, 2i + 1): GPT-J, and Llama weights as GGUF stores them.
    Gptj,
}

impl RopeLayout {
    /// The two dimensions of pair `i` when `half` pairs rotate.
    fn pair(self, i: usize, half: usize) -> (usize, usize) {
        match self {
            RopeLayout::Neox => (i, i + half),
            RopeLayout::Gptj => (2 * i, 2 * i + 1),
        }
    }
}

/// Each rotated pair's angle per position: base^(-2i / rot_dim) for pair i.
fn rope_freqs(rot_dim: usize, base: f64) -> Vec<f64> {
    (0..rot_dim / 2)
        .map(|i| base.powf(-2.0 * i as f64 / rot_dim as f64))
        .collect()
}

/// The (cos, sin) table RoPE reads: [max_pos, rot_dim / 2], angle pos * base^(-2i / rot_dim).
pub fn rope_table(max_pos: usize, rot_dim: usize, base: f64) -> Vec<[f32; 2]> {
    let freqs = rope_freqs(rot_dim, base);
    let mut table = Vec::with_capacity(max_pos * freqs.len());
    for pos in 0..max_pos {
        for f in &freqs {
            let angle = pos as f64 * f;
            table.push([angle.cos() as f32, angle.sin() as f32]);
        }
    }
    table
}

/// Rotates `x` ([tokens, heads, head_dim]) in place; token t sits at position `pos[t]`.
pub fn rope(
    x: &mut [f32],
    pos: &[u32],
    heads: usize,
    head_dim: usize,
    rot_dim: usize,
    layout: RopeLayout,
    table: &[[f32; 2]],
) {
    let half = rot_dim / 2;
    for (t, token) in x.chunks_mut(heads * head_dim).enumerate() {
        for head in token.chunks_mut(head_dim) {
            for i in 0..half {
                let (a, b) = layout.pair(i, half);
                let [c, s] = table[pos[t] as usize * half + i];
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * c - x1 * s;
                head[b] = x0 * s + x1 * c;
            }
        }
    }
}

/// Moves `x` ([tokens, heads, head_dim], already rotated by RoPE) by `shift[t]` positions:
/// each pair turns by shift * its frequency, as if token t had sat that much further on.
pub fn rope_shift(
    x: &mut [f32],
    shift: &[f64],
    heads: usize,
    head_dim: usize,
    rot_dim: usize,
    layout: RopeLayout,
    base: f64,
) {
    let freqs = rope_freqs(rot_dim, base);
    let half = freqs.len();
    for (t, token) in x.chunks_mut(heads * head_dim).enumerate() {
        let turns: Vec<(f64, f64)> = freqs.iter().map(|f| (shift[t] * f).sin_cos()).collect();
        for head in token.chunks_mut(head_dim) {
            for (i, &(s, c)) in turns.iter().enumerate() {
                let (a, b) = layout.pair(i, half);
                let (x0, x1) = (head[a] as f64, head[b] as f64);
                head[a] = (x0 * c - x1 * s) as f32;
                head[b] = (x0 * s + x1 * c) as f32;
            }
        }
    }
}

pub fn silu(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}

/// SwiGLU: silu(gate) * up.
pub fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter().zip(up).map(|(&g, &u)| silu(g) * u).collect()
}

/// GELU: exact (erf) or the tanh approximation.
pub fn gelu(x: &[f32], exact: bool) -> Vec<f32> {
    x.iter()
        .map(|&v| {
            let v = v as f64;
            let y = if exact {
                0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2))
            } else {
                let u = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
                0.5 * v * (1.0 + u.tanh())
            };
            y as f32
        })
        .collect()
}

/// y[b, r] = sum_k w[r, k] * x[b, k], with w [m, k] and x [batch, k].
pub fn matvec(w: &[f32], x: &[f32], m: usize, k: usize) -> Vec<f32> {
    x.chunks(k)
        .flat_map(|xb| {
            w.chunks(k).take(m).map(move |row| {
                row.iter()
                    .zip(xb)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>() as f32
            })
        })
        .collect()
}

/// For each output of `matvec`, sum_k |w[r, k] * x[b, k]|: the scale rounding error grows with.
pub fn matvec_magnitude(w: &[f32], x: &[f32], m: usize, k: usize) -> Vec<f32> {
    x.chunks(k)
        .flat_map(|xb| {
            w.chunks(k).take(m).map(move |row| {
                row.iter()
                    .zip(xb)
                    .map(|(&a, &b)| (a as f64 * b as f64).abs())
                    .sum::<f64>() as f32
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_shift_moves_a_rotated_token_to_another_position() {
        let (heads, hd, rot, base) = (2, 8, 6, 500.0);
        let table = rope_table(64, rot, base);
        let x: Vec<f32> = (0..2 * heads * hd)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        for layout in [RopeLayout::Neox, RopeLayout::Gptj] {
            let mut moved = x.clone();
            rope(&mut moved, &[5, 40], heads, hd, rot, layout, &table);
            rope_shift(&mut moved, &[50.0, -31.0], heads, hd, rot, layout, base);
            let mut want = x.clone();
            rope(&mut want, &[55, 9], heads, hd, rot, layout, &table);
            for (a, b) in moved.iter().zip(&want) {
                assert!((a - b).abs() < 1e-5, "{layout:?}: {a} vs {b}");
            }
        }
    }
}
