//! One vector per text from its tokens' hidden states, as sentence-transformers' Pooling
//! module computes it, and the L2 normalization its Normalize module (and OpenAI's API)
//! applies.

/// How token states become a text's vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over the text's tokens ([CLS] and [SEP] included, as sentence-transformers
    /// counts every token its attention mask keeps).
    Mean,
    /// The first token's state ([CLS]).
    Cls,
    /// The last token's state.
    Last,
}

impl Pooling {
    /// llama.cpp's numbering (`{arch}.pooling_type`).
    pub fn from_gguf(n: u32) -> Option<Self> {
        match n {
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
}

/// `states` ([tokens, n_embd]) pooled to one [n_embd] vector.
pub fn pool(states: &[f32], n_embd: usize, pooling: Pooling) -> Vec<f32> {
    let rows = states.len() / n_embd.max(1);
    if rows == 0 {
        return vec![0.0; n_embd];
    }
    match pooling {
        Pooling::Cls => states[..n_embd].to_vec(),
        Pooling::Last => states[(rows - 1) * n_embd..rows * n_embd].to_vec(),
        Pooling::Mean => {
            let mut sum = vec![0f64; n_embd];
            for row in states.chunks_exact(n_embd) {
                for (s, &v) in sum.iter_mut().zip(row) {
                    *s += v as f64;
                }
            }
            sum.into_iter().map(|s| (s / rows as f64) as f32).collect()
        }
    }
}

/// `v` scaled to unit length (left as it is when all zero).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poolings_pick_and_average_rows() {
        let states = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(pool(&states, 2, Pooling::Cls), vec![1.0, 2.0]);
        assert_eq!(pool(&states, 2, Pooling::Last), vec![5.0, 6.0]);
        assert_eq!(pool(&states, 2, Pooling::Mean), vec![3.0, 4.0]);
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
    }
}
