//! The paged KV cache (PagedAttention): K and V of every layer in a pool of blocks of
//! [`BLOCK_TOKENS`] positions, and a block table per sequence slot ("row"). Blocks are
//! reference-counted, so rows can share a prefix and copy a block only when they write into
//! it; beam search reads history through a beam table instead of copying K/V on reorder.
//!
//! This module is the part every executor shares: the cache's shape and placement, its
//! block tables ([`KvTables`]), the KV policies (`policy`, `infinigen`, `h2o`) and how values
//! round when stored (`stored`). The values themselves live with an executor (the Vulkan
//! executor's `KvCache` keeps them in device-local memory, or in system memory the device
//! reads directly, [`KvPlacement::Host`], `--kv-offload full`). Values are stored as the
//! shape's [`KvType`] (`--kv-type`): f16 by default, f32, or q8 blocks.

pub mod blocks;
pub mod h2o;
pub mod infinigen;
pub mod policy;
pub mod stored;

use std::fmt;

pub use blocks::{
    blocks_for, BlockCopy, BlockId, BlockPool, BlockTable, OutOfBlocks, BLOCK_TOKENS,
};
pub use hearth_quant::{KvType, UnknownKvType};

/// Marks a step token whose sequence reads its own row only (no beam table).
pub const NO_BEAM: u32 = u32::MAX;

/// Where the K/V blocks live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvPlacement {
    /// Device-local memory (`--kv-offload none`).
    #[default]
    Device,
    /// System memory the device reads directly (`--kv-offload full`): every step reads the
    /// blocks it attends to over the bus.
    Host,
}

impl fmt::Display for KvPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Device => "device",
            Self::Host => "host",
        })
    }
}

/// How much memory the KV cache may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvBudget {
    Bytes(u64),
    Tokens(usize),
}

/// What sizes the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    pub n_layer: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Blocks in the pool.
    pub blocks: usize,
    /// Sequence slots, each with a block table.
    pub rows: usize,
    /// Most positions one sequence holds.
    pub n_ctx: usize,
    /// How K and V are stored.
    pub kv_type: KvType,
    /// V is the first values of K's row and is not stored (latent attention: the latent is
    /// both): the cache holds K alone.
    pub values_in_keys: bool,
}

impl KvShape {
    /// The cache of model `c` for `rows` sequences of up to `n_ctx` positions, stored as
    /// `kv_type`, before its pool is sized ([`with_blocks`](Self::with_blocks)).
    pub fn for_model(
        c: &crate::ModelConfig,
        rows: usize,
        n_ctx: usize,
        kv_type: KvType,
    ) -> crate::Result<Self> {
        if rows == 0 {
            return Err(crate::Error::options("n_seq", "must be at least 1"));
        }
        Ok(Self {
            n_layer: c.n_layer,
            n_head_kv: c.n_head_kv,
            head_dim: c.head_dim,
            blocks: 0,
            rows,
            n_ctx,
            kv_type,
            values_in_keys: c.latent.is_some(),
        })
    }

    /// This shape with a pool of `blocks`; an error naming the budget where that is none.
    pub fn with_blocks(self, blocks: usize) -> crate::Result<Self> {
        if blocks == 0 {
            return Err(crate::Error::options(
                "kv_budget",
                format!(
                    "leaves no room for one block of {BLOCK_TOKENS} tokens ({} bytes)",
                    self.block_bytes()
                ),
            ));
        }
        Ok(Self { blocks, ..self })
    }

    /// Bytes of K (or of V) of one position in one layer.
    pub fn entry_bytes(&self) -> u64 {
        (self.n_head_kv * self.kv_type.bytes(self.head_dim)) as u64
    }

    /// Arrays stored per layer: K and V, or K alone where V is part of it.
    pub fn stores(&self) -> u64 {
        if self.values_in_keys {
            1
        } else {
            2
        }
    }

    /// Bytes of K and V of one position in one layer (what `hearth bench` reports).
    pub fn token_layer_bytes(&self) -> u64 {
        self.stores() * self.entry_bytes()
    }

    /// Bytes of K (or of V) of one block in one layer.
    pub fn block_layer_bytes(&self) -> u64 {
        BLOCK_TOKENS as u64 * self.entry_bytes()
    }

    /// Bytes of one block across every layer, K and V.
    pub fn block_bytes(&self) -> u64 {
        self.stores() * self.n_layer as u64 * self.block_layer_bytes()
    }

    /// Bytes of K and V for one position across every layer.
    pub fn token_bytes(&self) -> u64 {
        self.block_bytes() / BLOCK_TOKENS as u64
    }

    /// Bytes of K (or of V) for one layer.
    pub fn layer_bytes(&self) -> u64 {
        self.blocks as u64 * self.block_layer_bytes()
    }

    /// Bytes of the whole pool.
    pub fn total_bytes(&self) -> u64 {
        self.blocks as u64 * self.block_bytes()
    }

    /// Block-table entries per row.
    pub fn max_blocks(&self) -> usize {
        blocks_for(self.n_ctx).max(1)
    }
}

/// Blocks used and free, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KvUsage {
    pub blocks_used: usize,
    pub blocks_free: usize,
    pub block_tokens: usize,
    pub bytes: u64,
    /// How K and V are stored, and the bytes of K and V of one position in one layer.
    #[serde(serialize_with = "serialize_kv_type")]
    pub kv_type: KvType,
    pub token_layer_bytes: u64,
}

/// A [`KvType`] as its name (`f16`).
pub fn serialize_kv_type<S: serde::Serializer>(
    kv_type: &KvType,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(kv_type.name())
}

/// The cache's bookkeeping, apart from where the K/V values live: the block pool and each
/// row's block table. An executor keeps the values (device buffers, host arrays) beside it and
/// writes the tables out where its kernels read them ([`take_dirty`](Self::take_dirty)).
pub struct KvTables {
    shape: KvShape,
    placement: KvPlacement,
    pool: BlockPool,
    rows: Vec<BlockTable>,
    /// Rows whose block table changed since the executor last wrote them out.
    dirty: Vec<bool>,
    /// Blocks copied on write so far.
    block_copies: std::cell::Cell<u64>,
}

impl KvTables {
    /// Empty tables for `shape` (at least one row and one position: the executor checks).
    pub fn new(shape: KvShape, placement: KvPlacement) -> Self {
        Self {
            shape,
            placement,
            pool: BlockPool::new(shape.blocks),
            rows: (0..shape.rows).map(|_| BlockTable::new()).collect(),
            dirty: vec![false; shape.rows],
            block_copies: std::cell::Cell::new(0),
        }
    }

    pub fn shape(&self) -> KvShape {
        self.shape
    }

    pub fn placement(&self) -> KvPlacement {
        self.placement
    }

    pub fn usage(&self) -> KvUsage {
        KvUsage {
            blocks_used: self.pool.used_blocks(),
            blocks_free: self.pool.free_blocks(),
            block_tokens: BLOCK_TOKENS,
            bytes: self.shape.total_bytes(),
            kv_type: self.shape.kv_type,
            token_layer_bytes: self.shape.token_layer_bytes(),
        }
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// `row`'s block table.
    pub fn table(&self, row: usize) -> &BlockTable {
        &self.rows[row]
    }

    /// Distinct blocks the rows `rows` hold between them (a block shared by several counts
    /// once).
    pub fn blocks_of(&self, rows: impl IntoIterator<Item = usize>) -> usize {
        let mut blocks: Vec<BlockId> = rows
            .into_iter()
            .flat_map(|r| self.rows[r].blocks().iter().copied())
            .collect();
        blocks.sort_unstable();
        blocks.dedup();
        blocks.len()
    }

    /// Positions `row` holds.
    pub fn len(&self, row: usize) -> usize {
        self.rows[row].len()
    }

    /// Blocks that appending `tokens` positions to `row` would take.
    pub fn blocks_needed(&self, row: usize, tokens: usize) -> usize {
        self.rows[row].blocks_needed(&self.pool, tokens)
    }

    /// Makes room for `tokens` more positions in `row` (the caller keeps a row within
    /// `n_ctx`) and returns the copies of shared blocks it will write into, for the executor
    /// to make before the step writes. On failure nothing changes.
    pub fn append(&mut self, row: usize, tokens: usize) -> Result<Vec<BlockCopy>, OutOfBlocks> {
        debug_assert!(self.rows[row].len() + tokens <= self.shape.n_ctx);
        let copies = self.rows[row].append(&mut self.pool, tokens)?;
        self.dirty[row] = true;
        Ok(copies)
    }

    /// Counts `n` blocks copied on write.
    pub fn count_copies(&self, n: usize) {
        self.block_copies.set(self.block_copies.get() + n as u64);
    }

    /// Blocks copied on write since the cache was made (beam reorders copy none).
    pub fn block_copies(&self) -> u64 {
        self.block_copies.get()
    }

    /// Forgets positions of `row` from `len` on; whole blocks go back to the pool.
    pub fn truncate(&mut self, row: usize, len: usize) {
        self.rows[row].truncate(&mut self.pool, len);
        self.dirty[row] = true;
    }

    /// Empties `row`.
    pub fn clear(&mut self, row: usize) {
        self.truncate(row, 0);
    }

    /// Makes `dst` share the first `len` positions of `src` (its old contents are released).
    pub fn fork(&mut self, src: usize, dst: usize, len: usize) {
        self.rows[dst].clear(&mut self.pool);
        self.rows[dst] = self.rows[src].fork(&mut self.pool, len);
        self.dirty[dst] = true;
    }

    /// Makes these tables equal to `leader`'s, a cache of the same pool and rows holding
    /// other layers of the model (a split model's stages). Rows that differ are written out
    /// again before the next step.
    pub fn follow(&mut self, leader: &KvTables) {
        debug_assert_eq!(self.rows.len(), leader.rows.len());
        debug_assert_eq!(self.pool.capacity(), leader.pool.capacity());
        if self.pool != leader.pool {
            self.pool.clone_from(&leader.pool);
        }
        for ((mine, theirs), dirty) in self.rows.iter_mut().zip(&leader.rows).zip(&mut self.dirty) {
            if mine != theirs {
                mine.clone_from(theirs);
                *dirty = true;
            }
        }
    }

    /// The rows whose block table changed since the last call, each with its blocks (at most
    /// `max_blocks()` of them), for the executor to write out before a step.
    pub fn take_dirty(&mut self) -> Vec<(usize, &[BlockId])> {
        let max = self.shape.max_blocks();
        let rows = &self.rows;
        self.dirty
            .iter_mut()
            .enumerate()
            .filter_map(|(row, dirty)| std::mem::take(dirty).then_some(row))
            .map(|row| {
                let blocks = rows[row].blocks();
                (row, &blocks[..blocks.len().min(max)])
            })
            .collect()
    }
}
/// An error unless a model's `head_dim` is a multiple of the values `kv_type` stores at once
/// (a q8 block), for a backend to check before it loads any weight.
pub fn check_kv_type(kv_type: KvType, head_dim: usize) -> crate::Result<()> {
    let group = kv_type.group();
    if head_dim % group != 0 {
        return Err(crate::Error::options(
            "kv-type",
            format!(
                "{kv_type} stores blocks of {group} values and the model's head_dim is \
                 {head_dim}; use f16 or f32"
            ),
        ));
    }
    Ok(())
}

/// Blocks a budget of `bytes` buys for this shape, capped so one layer's K fits a storage
/// buffer of `max_range` bytes.
pub fn blocks_in_budget(shape: &KvShape, bytes: u64, max_range: u64) -> usize {
    let by_budget = bytes / shape.block_bytes().max(1);
    let by_range = max_range / shape.block_layer_bytes().max(1);
    by_budget.min(by_range) as usize
}
