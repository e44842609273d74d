//! The paged KV cache (PagedAttention): K and V of every layer in a pool of blocks of
//! [`BLOCK_TOKENS`] positions, and a block table per sequence slot ("row"). Blocks are
//! reference-counted, so rows can share a prefix and copy a block only when they write into
//! it; beam search reads history through a beam table instead of copying K/V on reorder.
//!
//! Kernels see a layer only through [`KvLayer`] and `shaders/glsl/include/kv_cache.glsl`.
//! The pool lives in device-local memory, or in system memory the device reads directly
//! ([`KvPlacement::Host`], `--kv-offload full`), so a context larger than device memory runs.
//! Values are stored as the shape's [`KvType`] (`--kv-type`): f16 by default, f32, or q8
//! blocks; every kernel that touches the cache is compiled for each type.

pub mod blocks;
pub mod h2o;
pub mod infinigen;
pub mod policy;
pub mod stored;

use std::fmt;
use std::sync::Arc;

pub use blocks::{
    blocks_for, BlockCopy, BlockId, BlockPool, BlockTable, OutOfBlocks, BLOCK_TOKENS,
};
pub use hearth_shaders::{KvType, UnknownKvType};

use crate::vk::{Buffer, BufferDesc, Device, Recorder, Result, VkError};

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
}

impl KvShape {
    /// Bytes of K (or of V) of one position in one layer.
    pub fn entry_bytes(&self) -> u64 {
        (self.n_head_kv * self.kv_type.bytes(self.head_dim)) as u64
    }

    /// Bytes of K and V of one position in one layer (what `hearth bench` reports).
    pub fn token_layer_bytes(&self) -> u64 {
        2 * self.entry_bytes()
    }

    /// Bytes of K (or of V) of one block in one layer.
    pub fn block_layer_bytes(&self) -> u64 {
        BLOCK_TOKENS as u64 * self.entry_bytes()
    }

    /// Bytes of one block across every layer, K and V.
    pub fn block_bytes(&self) -> u64 {
        2 * self.n_layer as u64 * self.block_layer_bytes()
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

/// One layer's view of the cache, as the attention kernels bind it.
#[derive(Clone, Copy)]
pub struct KvLayer<'a> {
    pub k: &'a Buffer,
    pub v: &'a Buffer,
    /// [rows, max_blocks] block ids.
    pub tables: &'a Buffer,
    /// [rows, n_ctx] beam tables: the row holding each position.
    pub beams: &'a Buffer,
    pub max_blocks: u32,
    /// How K and V are stored: a kernel runs only on a cache of the type it was built for.
    pub kv_type: KvType,
}

impl KvLayer<'_> {
    /// An error unless the cache holds `kv_type`, the type `kernel` was built for.
    pub fn check_type(&self, kernel: &'static str, kv_type: KvType) -> Result<()> {
        if self.kv_type != kv_type {
            return Err(VkError::Kernel {
                kernel,
                message: format!(
                    "built for a {kv_type} KV cache, called with a {} one",
                    self.kv_type
                ),
            });
        }
        Ok(())
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

pub struct KvCache {
    shape: KvShape,
    placement: KvPlacement,
    k: Vec<Buffer>,
    v: Vec<Buffer>,
    tables_buf: Buffer,
    beams_buf: Buffer,
    pool: BlockPool,
    rows: Vec<BlockTable>,
    /// Rows whose block table changed since the last [`sync_tables`](KvCache::sync_tables).
    dirty: Vec<bool>,
    /// Blocks copied on write so far.
    block_copies: std::cell::Cell<u64>,
}

impl KvCache {
    pub fn new(device: &Arc<Device>, shape: KvShape, placement: KvPlacement) -> Result<Self> {
        if shape.rows == 0 || shape.n_ctx == 0 {
            return Err(VkError::Kernel {
                kernel: "kv cache",
                message: "needs at least one row and one position".into(),
            });
        }
        let group = shape.kv_type.group();
        if shape.head_dim % group != 0 {
            return Err(VkError::Kernel {
                kernel: "kv cache",
                message: format!(
                    "head_dim {} is not a multiple of {group}, which a {} cache stores at \
                     once; use --kv-type f16 or f32",
                    shape.head_dim, shape.kv_type
                ),
            });
        }
        let bytes = shape.layer_bytes().max(4);
        let make = |what: &str, layer: usize| {
            let name = format!("kv cache {what} layer {layer}");
            let desc = match placement {
                KvPlacement::Device => BufferDesc::device_local(&name, bytes),
                KvPlacement::Host => BufferDesc::host_pool(&name, bytes),
            };
            Buffer::new(device, desc)
        };
        let k = (0..shape.n_layer)
            .map(|l| make("k", l))
            .collect::<Result<_>>()?;
        let v = (0..shape.n_layer)
            .map(|l| make("v", l))
            .collect::<Result<_>>()?;
        let table_bytes = (shape.rows * shape.max_blocks() * 4) as u64;
        let tables_buf = Buffer::new(
            device,
            BufferDesc::host_visible("kv block tables", table_bytes),
        )?;
        // Unused entries point at block 0, so a stray read stays inside the pool.
        tables_buf.upload(0, &vec![0u32; shape.rows * shape.max_blocks()])?;
        let beams_buf = Buffer::new(
            device,
            BufferDesc::host_visible("kv beam tables", (shape.rows * shape.n_ctx * 4) as u64),
        )?;
        Ok(Self {
            shape,
            placement,
            k,
            v,
            tables_buf,
            beams_buf,
            pool: BlockPool::new(shape.blocks),
            rows: (0..shape.rows).map(|_| BlockTable::new()).collect(),
            dirty: vec![false; shape.rows],
            block_copies: std::cell::Cell::new(0),
        })
    }

    pub fn shape(&self) -> KvShape {
        self.shape
    }

    pub fn placement(&self) -> KvPlacement {
        self.placement
    }

    pub fn layer(&self, layer: usize) -> KvLayer<'_> {
        KvLayer {
            k: &self.k[layer],
            v: &self.v[layer],
            tables: &self.tables_buf,
            beams: &self.beams_buf,
            max_blocks: self.shape.max_blocks() as u32,
            kv_type: self.shape.kv_type,
        }
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
    /// `n_ctx`) and returns the copies of shared blocks it will write into, for
    /// [`record_copies`](Self::record_copies). On failure nothing changes.
    pub fn append(
        &mut self,
        row: usize,
        tokens: usize,
    ) -> std::result::Result<Vec<BlockCopy>, OutOfBlocks> {
        debug_assert!(self.rows[row].len() + tokens <= self.shape.n_ctx);
        let copies = self.rows[row].append(&mut self.pool, tokens)?;
        self.dirty[row] = true;
        Ok(copies)
    }

    /// Records the device copies of shared blocks that [`append`](Self::append) asked for.
    pub fn record_copies<'a>(&'a self, rec: &mut Recorder<'a>, copies: &[BlockCopy]) -> Result<()> {
        let bytes = self.shape.block_layer_bytes();
        for c in copies {
            for buffers in [&self.k, &self.v] {
                for b in buffers {
                    let (src, dst) = (c.src as u64 * bytes, c.dst as u64 * bytes);
                    rec.copy_as("kv_block_copy", b, src, b, dst, bytes)?;
                }
            }
        }
        self.block_copies
            .set(self.block_copies.get() + copies.len() as u64);
        Ok(())
    }

    /// Records the moves of pool eviction in `row` (`infinigen::evict`): entry `from`'s K and
    /// V go to entry `to`, in every layer. Sources and destinations are distinct entries.
    pub fn record_entry_moves<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        row: usize,
        moves: &[infinigen::evict::SlotMove],
    ) -> Result<()> {
        let entry = self.shape.entry_bytes();
        let table = &self.rows[row];
        let at = |i: u32| {
            let (block, slot) = table.locate(i as usize).expect("moves stay inside the row");
            (block as u64 * BLOCK_TOKENS as u64 + slot as u64) * entry
        };
        if let Some(m) = moves.iter().find(|m| {
            let (block, _) = table
                .locate(m.to as usize)
                .expect("moves stay inside the row");
            self.pool.refs(block) > 1
        }) {
            return Err(VkError::Kernel {
                kernel: "kv_evict_move",
                message: format!("entry {} of row {row} is shared with another row", m.to),
            });
        }
        let offsets: Vec<(u64, u64)> = moves.iter().map(|m| (at(m.from), at(m.to))).collect();
        for buffers in [&self.k, &self.v] {
            for b in buffers {
                rec.copy_regions("kv_evict_move", b, b, &offsets, entry)?;
            }
        }
        Ok(())
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

    /// Writes `row`'s beam table: position p of the sequence in `row` is read from row
    /// `beams[p]`. Returns the offset kernels take as the token's beam base.
    pub fn set_beams(&self, row: usize, beams: &[u32]) -> Result<u32> {
        debug_assert!(beams.len() <= self.shape.n_ctx);
        let base = row * self.shape.n_ctx;
        self.beams_buf.upload((base * 4) as u64, beams)?;
        Ok(base as u32)
    }

    /// Writes the block tables that changed to the device; called before a step runs.
    pub fn sync_tables(&mut self) -> Result<()> {
        let max = self.shape.max_blocks();
        for (row, dirty) in self.dirty.iter_mut().enumerate() {
            if std::mem::take(dirty) {
                let blocks = self.rows[row].blocks();
                let blocks = &blocks[..blocks.len().min(max)];
                self.tables_buf.upload((row * max * 4) as u64, blocks)?;
            }
        }
        Ok(())
    }
}

/// An error unless a model's `head_dim` is a multiple of the values `kv_type` stores at once
/// (a q8 block), for a backend to check before it loads any weight.
pub fn check_kv_type(kv_type: KvType, head_dim: usize) -> crate::error::Result<()> {
    let group = kv_type.group();
    if head_dim % group != 0 {
        return Err(crate::error::Error::options(
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
