//! The operations every executor computes the same way, written once: RoPE's layouts, tables
//! of angles and rotation, the gated activations, soft-capping, RMSNorm, what adjusts q/k/v
//! before RoPE, and a mixture of experts' routing.
//! Executors implement them in their own kernels; these definitions (accumulating in f64
//! where it matters) are what their tests hold them to.

use hearth_models::spec::{Experts, Gating, GroupScore};

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
    pub fn pair(self, i: usize, half: usize) -> (usize, usize) {
        match self {
            RopeLayout::Neox => (i, i + half),
            RopeLayout::Gptj => (2 * i, 2 * i + 1),
        }
    }
}

/// Each rotated pair's angle per position: base^(-2i / rot_dim) for pair i, divided by the
/// pair's factor where the model has them (Llama 3's `rope_freqs`, one per pair).
pub fn rope_freqs(rot_dim: usize, base: f64, factors: Option<&[f32]>) -> Vec<f64> {
    (0..rot_dim / 2)
        .map(|i| {
            let f = base.powf(-2.0 * i as f64 / rot_dim as f64);
            factors.map_or(f, |d| f / d[i] as f64)
        })
        .collect()
}

/// YaRN's frequencies: each of `freqs` (base^(-2i / rot_dim), pair i) blended between itself
/// and itself divided by the factor. Pairs that turn more than `beta_fast` times over the
/// original context keep their frequency, fewer than `beta_slow` times are divided, and those
/// between blend along a linear ramp (Hugging Face's `_compute_yarn_parameters`, llama.cpp's
/// `rope_yarn`).
pub fn yarn_freqs(freqs: &[f64], base: f64, y: &hearth_models::spec::Yarn) -> Vec<f64> {
    let dims = 2.0 * freqs.len() as f64;
    // The pair index at which a frequency turns `rotations` times over the original context.
    let pair_at = |rotations: f64| {
        let turns = y.original_context as f64 / (rotations * 2.0 * std::f64::consts::PI);
        dims * turns.ln() / (2.0 * base.ln())
    };
    // Rounded outward to whole pairs unless the model says not to (GPT-OSS).
    let (low, high) = (pair_at(y.beta_fast as f64), pair_at(y.beta_slow as f64));
    let (low, high) = match y.truncate {
        true => (low.floor(), high.ceil()),
        false => (low, high),
    };
    let (low, high) = (low.max(0.0), high.min(dims - 1.0));
    let span = (high - low).max(0.001);
    freqs
        .iter()
        .enumerate()
        .map(|(i, &f)| {
            let ramp = ((i as f64 - low) / span).clamp(0.0, 1.0);
            let keep = (1.0 - ramp) * y.ext_factor as f64;
            f / y.factor as f64 * (1.0 - keep) + f * keep
        })
        .collect()
}

/// The (cos, sin) table RoPE reads: [max_pos, rot_dim / 2], angle pos * base^(-2i / rot_dim).
pub fn rope_table(max_pos: usize, rot_dim: usize, base: f64) -> Vec<[f32; 2]> {
    rope_table_of(max_pos, &rope_freqs(rot_dim, base, None))
}

/// The (cos, sin) table for pair frequencies `freqs`: [max_pos, freqs.len()].
pub fn rope_table_of(max_pos: usize, freqs: &[f64]) -> Vec<[f32; 2]> {
    let mut table = Vec::with_capacity(max_pos * freqs.len());
    for pos in 0..max_pos {
        for f in freqs {
            let angle = pos as f64 * f;
            table.push([angle.cos() as f32, angle.sin() as f32]);
        }
    }
    table
}

/// Moves `x` ([tokens, heads, head_dim], already rotated by RoPE with pair frequencies
/// `freqs`) by `shift[t]` positions: each pair turns by shift * its frequency, as if token t
/// had sat that much further on.
pub fn rope_shift(
    x: &mut [f32],
    shift: &[f64],
    heads: usize,
    head_dim: usize,
    layout: RopeLayout,
    freqs: &[f64],
) {
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

/// The activation of a gated MLP: down(act(gate) * up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatedAct {
    /// SwiGLU (Llama, Qwen).
    Silu,
    /// GeGLU with GELU's tanh approximation (Gemma).
    GeluTanh,
    /// GPT-OSS's clamped SwiGLU: (clamp(up, -7, 7) + 1) * g * sigmoid(1.702 g), g the gate
    /// clamped above at 7 ([`swiglu_oai`]).
    SwigluOai,
}

/// The clamped SwiGLU's gain inside the sigmoid and its clamp (GPT-OSS's `swiglu_alpha` and
/// `swiglu_limit`, fixed as llama.cpp fixes them).
pub const SWIGLU_OAI_ALPHA: f32 = 1.702;
pub const SWIGLU_OAI_LIMIT: f32 = 7.0;

/// GPT-OSS's clamped SwiGLU of one gate and up value.
pub fn swiglu_oai(gate: f32, up: f32) -> f32 {
    let g = gate.min(SWIGLU_OAI_LIMIT);
    let u = up.clamp(-SWIGLU_OAI_LIMIT, SWIGLU_OAI_LIMIT);
    let glu = g / (1.0 + (-g * SWIGLU_OAI_ALPHA).exp());
    (u + 1.0) * glu
}

/// A softmax's probabilities in place, with a sink: a logit that joins the denominator and
/// takes no share of the output (GPT-OSS's attention sinks; `None`: the plain softmax).
pub fn softmax_with_sink(x: &mut [f32], sink: Option<f32>) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let max = sink.map_or(max, |s| max.max(s));
    let mut sum = sink.map_or(0.0, |s| (s - max).exp());
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

impl GatedAct {
    /// act(gate) * up, element by element.
    pub fn apply(self, gate: &[f32], up: &[f32]) -> Vec<f32> {
        match self {
            Self::Silu => swiglu(gate, up),
            Self::GeluTanh => gelu(gate, false)
                .iter()
                .zip(up)
                .map(|(g, u)| g * u)
                .collect(),
            Self::SwigluOai => gate
                .iter()
                .zip(up)
                .map(|(&g, &u)| swiglu_oai(g, u))
                .collect(),
        }
    }
}

/// cap * tanh(x / cap) in place: a smooth clamp to (-cap, cap) (Gemma 2's soft-capping).
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x {
        *v = cap * (*v / cap).tanh();
    }
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

/// What happens to the q/k/v projection's output before RoPE, where a model has it: its
/// biases added (Qwen2), then an RMSNorm over each query head and each key head with gains of
/// one head's width (Qwen3), or with `whole` over all the queries and all the keys with gains
/// of those widths (OLMoE).
#[derive(Clone, Copy, Debug)]
pub struct QkvAdjust<'a> {
    /// [qkv_dim]
    pub bias: Option<&'a [f32]>,
    /// (query gains, key gains, epsilon)
    pub qk_norm: Option<(&'a [f32], &'a [f32], f32)>,
    pub whole: bool,
}

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

/// Adds `bias` ([n]) to every row of `x` ([rows, n]).
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_mut(bias.len().max(1)) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// Applies `adjust` in place to `qkv`, rows of [n_head query heads | n_head_kv key heads |
/// n_head_kv value heads] of `head_dim` values.
pub fn qkv_adjust(
    qkv: &mut [f32],
    adjust: QkvAdjust,
    n_head: usize,
    n_head_kv: usize,
    head_dim: usize,
) {
    let qkv_dim = (n_head + 2 * n_head_kv) * head_dim;
    for row in qkv.chunks_mut(qkv_dim) {
        if let Some(bias) = adjust.bias {
            row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
        }
        if let Some((q_gain, k_gain, eps)) = adjust.qk_norm {
            // Each head is normed, or all the queries at once and all the keys at once.
            let (q, rest) = row.split_at_mut(n_head * head_dim);
            let k = &mut rest[..n_head_kv * head_dim];
            for (part, gain) in [(q, q_gain), (k, k_gain)] {
                let width = if adjust.whole { part.len() } else { head_dim };
                for group in part.chunks_mut(width) {
                    let normed = rmsnorm(group, gain, width, eps);
                    group.copy_from_slice(&normed);
                }
            }
        }
    }
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

/// The experts one token runs and their weights, in the order chosen: the router's logits
/// through the gating (softmax over every expert, or each one's sigmoid), plus the selection
/// bias where the model has one, choose the `used` best (equal scores: the lower index first,
/// as `torch.topk` orders them), from the `groups_used` best groups where the experts are
/// grouped (a group scored by the sum of its two best, or by its best under softmax gating:
/// `Experts::group_score`); their weights, without the bias, are
/// renormalized to sum to one where the model does so, then scaled.
pub fn route(logits: &[f32], x: &Experts, select_bias: Option<&[f32]>) -> Vec<(usize, f32)> {
    let weights: Vec<f32> = match x.gating {
        Gating::Softmax => {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let exp: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
            let sum: f32 = exp.iter().sum();
            exp.iter().map(|v| v / sum).collect()
        }
        Gating::Sigmoid => logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect(),
    };
    let mut score: Vec<f32> = match select_bias {
        Some(b) => weights.iter().zip(b).map(|(w, b)| w + b).collect(),
        None => weights.clone(),
    };
    if x.groups > 1 && x.groups_used < x.groups {
        let per = weights.len() / x.groups;
        let group_score = |g: &[f32]| {
            let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
            for &v in g {
                if v > a {
                    (a, b) = (v, a);
                } else if v > b {
                    b = v;
                }
            }
            match x.group_score() {
                GroupScore::TopTwoSum => a + b,
                GroupScore::Best => a,
            }
        };
        let scores: Vec<f32> = score.chunks(per).map(group_score).collect();
        let mut groups: Vec<usize> = (0..x.groups).collect();
        groups.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        for &g in &groups[x.groups_used..] {
            score[g * per..][..per].fill(f32::NEG_INFINITY);
        }
    }
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // A stable sort keeps equal scores in index order.
    order.sort_by(|&a, &b| score[b].total_cmp(&score[a]));
    order.truncate(x.used);
    let sum: f32 = order.iter().map(|&i| weights[i]).sum();
    let sum = if x.normalize && sum > 0.0 { sum } else { 1.0 };
    order
        .into_iter()
        .map(|i| (i, weights[i] / sum * x.scale))
        .collect()
}
