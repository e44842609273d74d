//! The KV cache of one sequence: K and V of every layer, [position, kv_head, head_dim] in f32,
//! sized once for the context the caller asks for. Kernels see a layer only through
//! [`KvLayer`] and `shaders/glsl/include/kv_cache.glsl`, so a paged layout can replace this
//! one without touching the model code.

pub mod blocks;

use std::sync::Arc;

use crate::vk::{Buffer, BufferDesc, Device, Result};

/// What sizes the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    pub n_layer: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Positions the cache holds.
    pub n_ctx: usize,
}

impl KvShape {
    /// Bytes of K (or of V) for one layer.
    pub fn layer_bytes(&self) -> u64 {
        (self.n_ctx * self.n_head_kv * self.head_dim * 4) as u64
    }

    /// Bytes of the whole cache.
    pub fn total_bytes(&self) -> u64 {
        2 * self.n_layer as u64 * self.layer_bytes()
    }
}

/// One layer's K and V, as the attention kernels bind them.
#[derive(Clone, Copy)]
pub struct KvLayer<'a> {
    pub k: &'a Buffer,
    pub v: &'a Buffer,
}

pub struct KvCache {
    shape: KvShape,
    k: Vec<Buffer>,
    v: Vec<Buffer>,
    /// Positions written so far.
    len: usize,
}

impl KvCache {
    pub fn new(device: &Arc<Device>, shape: KvShape) -> Result<Self> {
        let bytes = shape.layer_bytes().max(4);
        let make = |what: &str, layer: usize| {
            let name = format!("kv cache {what} layer {layer}");
            Buffer::new(device, BufferDesc::device_local(&name, bytes))
        };
        let k = (0..shape.n_layer)
            .map(|l| make("k", l))
            .collect::<Result<_>>()?;
        let v = (0..shape.n_layer)
            .map(|l| make("v", l))
            .collect::<Result<_>>()?;
        Ok(Self {
            shape,
            k,
            v,
            len: 0,
        })
    }

    pub fn shape(&self) -> KvShape {
        self.shape
    }

    pub fn layer(&self, layer: usize) -> KvLayer<'_> {
        KvLayer {
            k: &self.k[layer],
            v: &self.v[layer],
        }
    }

    /// Positions holding valid K/V.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.shape.n_ctx
    }

    /// Marks `len` positions as written (after a step stored them).
    pub(crate) fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.shape.n_ctx);
        self.len = len;
    }

    /// Forgets positions from `len` on; the next step overwrites them.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}
