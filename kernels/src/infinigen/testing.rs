//! Fixtures the InfiniGen kernels' tests share: a model shape and a host pool of random K/V.

use std::sync::Arc;

use super::{IgShape, IgStep};
use crate::kv::stored::{encode_row, round_row};
use crate::kv::{blocks_for, KvCache, KvLayer, KvPlacement, KvShape, KvType, BLOCK_TOKENS};
use crate::testing::{device, random};
use crate::vk::{Buffer, Device};

pub(super) fn shape(n_head: u32, n_head_kv: u32, n_ctx: u32, cap: u32) -> IgShape {
    IgShape {
        n_head,
        n_head_kv,
        head_dim: 64,
        partial: 16,
        n_ctx,
        cap,
        scale: 0.125, // 1 / sqrt(head_dim)
        softcap: None,
    }
}

/// A host pool (InfiniGen's placement) whose rows take their blocks in turn, so no row's
/// block table is contiguous, holding random K/V at positions 0 .. lens[row] that `k` and
/// `v` mirror as [row][pos][kv_head][head_dim], rounded as the pool's type stores them.
pub(super) struct Pool {
    pub(super) cache: KvCache,
    pub(super) k: Vec<Vec<f32>>,
    pub(super) v: Vec<Vec<f32>>,
    pub(super) kv_dim: usize,
    pub(super) head_dim: usize,
}

impl Pool {
    pub(super) fn new(s: IgShape, lens: &[usize], kv_type: KvType) -> Self {
        let dev = device().unwrap();
        let n_ctx = s.n_ctx as usize;
        let kv_dim = (s.n_head_kv * s.head_dim) as usize;
        let rows = lens.len() + 1;
        let shape = KvShape {
            n_layer: 1,
            n_head_kv: s.n_head_kv as usize,
            head_dim: s.head_dim as usize,
            blocks: rows * blocks_for(n_ctx) + 1,
            rows,
            n_ctx,
            kv_type,
            values_in_keys: false,
        };
        let mut cache = KvCache::new(&dev, shape, KvPlacement::Host).unwrap();
        // A spare row takes a block every round and frees them all at the end, so rows
        // neither start at block 0 nor run contiguously once the others are done.
        let spare = rows - 1;
        let mut held = vec![0; lens.len()];
        while held.iter().zip(lens).any(|(h, l)| h < l) {
            if cache.len(spare) + BLOCK_TOKENS <= n_ctx {
                cache.append(spare, BLOCK_TOKENS).unwrap();
            }
            for (r, &len) in lens.iter().enumerate() {
                let more = (len - held[r]).min(BLOCK_TOKENS);
                cache.append(r, more).unwrap();
                held[r] += more;
            }
        }
        cache.clear(spare);
        cache.sync_tables().unwrap();
        let mut pool = Pool {
            cache,
            k: Vec::new(),
            v: Vec::new(),
            kv_dim,
            head_dim: s.head_dim as usize,
        };
        let layer = pool.cache.layer(0);
        let max_blocks = layer.max_blocks as usize;
        let tables: Vec<u32> = layer.tables.download(lens.len() * max_blocks).unwrap();
        for (r, &len) in lens.iter().enumerate() {
            let mut k = random(len * kv_dim, 100 + r as u64, 1.0);
            let mut v = random(len * kv_dim, 200 + r as u64, 1.0);
            round_row(kv_type, &mut k);
            round_row(kv_type, &mut v);
            for p in 0..len {
                let block = tables[r * max_blocks + p / BLOCK_TOKENS] as usize;
                let slot = (block * BLOCK_TOKENS + p % BLOCK_TOKENS) as u64;
                let bytes = slot * pool.cache.shape().entry_bytes();
                let words = |x: &[f32]| encode_row(kv_type, &x[p * kv_dim..][..kv_dim]);
                layer.k.upload(bytes, &words(&k)).unwrap();
                layer.v.upload(bytes, &words(&v)).unwrap();
            }
            pool.k.push(k);
            pool.v.push(v);
        }
        for (r, &len) in lens.iter().enumerate() {
            let blocks = &tables[r * max_blocks..][..blocks_for(len)];
            assert!(
                blocks.windows(2).all(|w| w[1] != w[0] + 1),
                "row {r}'s blocks {blocks:?} should be scattered"
            );
        }
        pool
    }

    pub(super) fn layer(&self) -> KvLayer<'_> {
        self.cache.layer(0)
    }

    pub(super) fn kv_type(&self) -> KvType {
        self.cache.shape().kv_type
    }

    /// K of KV head g at position p of `row`.
    pub(super) fn k(&self, row: usize, p: usize, g: usize) -> &[f32] {
        &self.k[row][p * self.kv_dim + g * self.head_dim..][..self.head_dim]
    }

    pub(super) fn v(&self, row: usize, p: usize, g: usize) -> &[f32] {
        &self.v[row][p * self.kv_dim + g * self.head_dim..][..self.head_dim]
    }
}

pub(super) fn u32_buffer(dev: &Arc<Device>, data: &[u32]) -> Buffer {
    Buffer::from_slice(dev, "test u32", data).unwrap()
}

pub(super) fn steps_buffer(dev: &Arc<Device>, steps: &[IgStep]) -> Buffer {
    Buffer::from_slice(dev, "test steps", steps).unwrap()
}
