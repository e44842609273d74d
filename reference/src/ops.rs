//! Reference operations. Layouts match the kernels: row-major, rows of length `n`; weight
//! matrices are stored as GGUF stores them, [out, in]. The vocabulary every executor shares
//! (RoPE's layouts and tables, the gated activations, soft-capping) comes from the model
//! crate and is re-exported here.

pub use hearth_model::ops::*;

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

    fn assert_close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol, "[{i}]: {g} vs {w} (got {got:?})");
        }
    }

    // Hand-worked values: the rows' mean squares are 12.5 and 13 (eps 0.5), so the outputs
    // are v / sqrt(12.5) and v / sqrt(13), times the gains 1 and 2.
    #[test]
    fn rmsnorm_by_hand() {
        let x = [3.0, 4.0, 3.0, 4.0];
        let out = rmsnorm(&x, &[1.0, 2.0], 2, 0.0);
        assert_close(&out[..2], &[0.848_528_1, 2.262_741_7], 1e-6);
        let out = rmsnorm(&x[..2], &[1.0, 2.0], 2, 0.5);
        assert_close(&out, &[0.832_050_3, 2.218_800_8], 1e-6);
        // A zero row stays zero instead of dividing by zero, given eps.
        assert_eq!(rmsnorm(&[0.0, 0.0], &[1.0, 1.0], 2, 1e-5), [0.0, 0.0]);
    }

    // exp(0), exp(ln 2), exp(ln 4) are 1, 2, 4: the row normalises to 1/7, 2/7, 4/7.
    #[test]
    fn softmax_by_hand() {
        let ln2 = std::f32::consts::LN_2;
        let want = [1.0 / 7.0, 2.0 / 7.0, 4.0 / 7.0];
        assert_close(&softmax(&[0.0, ln2, 2.0 * ln2], 3, 1.0), &want, 1e-7);
        // The scale applies before the exponent.
        assert_close(&softmax(&[0.0, 2.0 * ln2, 4.0 * ln2], 3, 0.5), &want, 1e-7);
        // Large logits do not overflow, and a masked (-inf) entry gets nothing.
        assert_close(
            &softmax(&[1000.0, 1000.0, f32::NEG_INFINITY], 3, 1.0),
            &[0.5, 0.5, 0.0],
            0.0,
        );
    }

    // rot_dim 4, base 10000: pair 0 turns 1 radian per position, pair 1 10000^(-1/2) = 0.01.
    #[test]
    fn rope_table_by_hand() {
        let t = rope_table(3, 4, 10_000.0);
        let flat: Vec<f32> = t.iter().flatten().copied().collect();
        #[rustfmt::skip]
        let want = [
            1.0, 0.0, 1.0, 0.0,
            0.540_302_3, 0.841_470_96, 0.999_95, 0.009_999_833,
            -0.416_146_84, 0.909_297_4, 0.999_8, 0.019_998_667,
        ];
        assert_close(&flat, &want, 1e-7);
    }

    // A unit vector on dimension 0 at position 1 turns by 1 radian into its pair's partner:
    // dimension 2 for NeoX's split halves, dimension 1 for GPT-J's adjacent pairs.
    #[test]
    fn rope_pairs_by_hand() {
        let table = rope_table(2, 4, 10_000.0);
        let (c, s) = (1f32.cos(), 1f32.sin());
        let mut neox = [1.0, 0.0, 0.0, 0.0];
        rope(&mut neox, &[1], 1, 4, 4, RopeLayout::Neox, &table);
        assert_close(&neox, &[c, 0.0, s, 0.0], 1e-7);
        let mut gptj = [1.0, 0.0, 0.0, 0.0];
        rope(&mut gptj, &[1], 1, 4, 4, RopeLayout::Gptj, &table);
        assert_close(&gptj, &[c, s, 0.0, 0.0], 1e-7);
        // Position 0 leaves a vector as it is.
        let mut still = [0.3, -0.7, 1.5, 2.0];
        rope(&mut still, &[0], 1, 4, 4, RopeLayout::Gptj, &table);
        assert_eq!(still, [0.3, -0.7, 1.5, 2.0]);
    }

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
            rope_shift(
                &mut moved,
                &[50.0, -31.0],
                heads,
                hd,
                layout,
                &rope_freqs(rot, base, None),
            );
            let mut want = x.clone();
            rope(&mut want, &[55, 9], heads, hd, rot, layout, &table);
            for (a, b) in moved.iter().zip(&want) {
                assert!((a - b).abs() < 1e-5, "{layout:?}: {a} vs {b}");
            }
        }
    }
}
