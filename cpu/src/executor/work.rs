//! What a step computes into, kept between steps.

use super::attention::TokenAt;
use crate::act::{ActQ8, Activations};

/// A step's activation buffers, kept between steps so that the large ones (the residual
/// stream, q/k/v, the MLP's, the quantized activations) are allocated once, at the largest
/// step, not every step.
#[derive(Default)]
pub(super) struct Work {
    /// [n, n_embd] the residual stream.
    pub x: Vec<f32>,
    /// [n, qkv_dim]
    pub qkv: Vec<f32>,
    /// [n, n_head * head_dim]
    pub att: Vec<f32>,
    /// Latent attention's queries [n, n_head * (nope + rope)], absorbed queries
    /// [n, n_head * head_dim], each head's output latent [n, n_head * kv_lora], and one
    /// head's slice of a step's rows, gathered as a product's input.
    pub q: Vec<f32>,
    pub q_abs: Vec<f32>,
    pub latents: Vec<f32>,
    pub head_in: Vec<f32>,
    /// Attention's output by task, before it goes to `att`.
    pub staged: Vec<f32>,
    /// [n, n_embd] a block's output.
    pub out: Vec<f32>,
    /// [n, 2 n_ff]
    pub gate_up: Vec<f32>,
    /// [n, n_ff]
    pub hidden: Vec<f32>,
    /// How products take activations.
    pub mode: Activations,
    pub act: ActQ8,
    pub act2: ActQ8,
    pub transposed: Vec<f32>,
    pub tokens: Vec<TokenAt>,
    pub ids: Vec<u32>,
}
