//! The paged KV cache's values on a Vulkan device (PagedAttention): K and V of every layer in
//! a pool of blocks of [`BLOCK_TOKENS`] positions, addressed through the block tables the
//! model crate keeps ([`KvTables`]; this module re-exports the model crate's `kv`, so the
//! executor names the cache's shape and its storage from one place). Kernels see a layer only through [`KvLayer`] and
//! `shaders/glsl/include/kv_cache.glsl`. The pool lives in device-local memory, or in system
//! memory the device reads directly ([`KvPlacement::Host`], `--kv-offload full`), so a
//! context larger than device memory runs. Every kernel that touches the cache is compiled
//! for each [`KvType`].

use std::sync::Arc;

pub use hearth_model::kv::*;

use hearth_model::kv::infinigen::evict::SlotMove;

use crate::vk::{Buffer, BufferDesc, Device, Recorder, Result, VkError};

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

/// The paged KV cache on a device: the shared block tables ([`KvTables`], which this derefs
/// to) and the values, one K and one V buffer per layer, with the tables copied where the
/// kernels read them.
pub struct KvCache {
    tables: KvTables,
    k: Vec<Buffer>,
    v: Vec<Buffer>,
    tables_buf: Buffer,
    beams_buf: Buffer,
}

impl std::ops::Deref for KvCache {
    type Target = KvTables;
    fn deref(&self) -> &KvTables {
        &self.tables
    }
}

impl std::ops::DerefMut for KvCache {
    fn deref_mut(&mut self) -> &mut KvTables {
        &mut self.tables
    }
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
            tables: KvTables::new(shape, placement),
            k,
            v,
            tables_buf,
            beams_buf,
        })
    }

    /// The block tables alone.
    pub fn tables(&self) -> &KvTables {
        &self.tables
    }

    pub fn tables_mut(&mut self) -> &mut KvTables {
        &mut self.tables
    }

    pub fn layer(&self, layer: usize) -> KvLayer<'_> {
        let shape = self.tables.shape();
        KvLayer {
            k: &self.k[layer],
            v: &self.v[layer],
            tables: &self.tables_buf,
            beams: &self.beams_buf,
            max_blocks: shape.max_blocks() as u32,
            kv_type: shape.kv_type,
        }
    }

    /// Records the device copies of shared blocks that [`KvTables::append`] asked for.
    pub fn record_copies<'a>(&'a self, rec: &mut Recorder<'a>, copies: &[BlockCopy]) -> Result<()> {
        let bytes = self.tables.shape().block_layer_bytes();
        for c in copies {
            for buffers in [&self.k, &self.v] {
                for b in buffers {
                    let (src, dst) = (c.src as u64 * bytes, c.dst as u64 * bytes);
                    rec.copy_as("kv_block_copy", b, src, b, dst, bytes)?;
                }
            }
        }
        self.tables.count_copies(copies.len());
        Ok(())
    }

    /// Records the moves of pool eviction in `row` (`infinigen::evict`): entry `from`'s K and
    /// V go to entry `to`, in every layer. Sources and destinations are distinct entries.
    pub fn record_entry_moves<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        row: usize,
        moves: &[SlotMove],
    ) -> Result<()> {
        let entry = self.tables.shape().entry_bytes();
        let table = self.tables.table(row);
        let at = |i: u32| {
            let (block, slot) = table.locate(i as usize).expect("moves stay inside the row");
            (block as u64 * BLOCK_TOKENS as u64 + slot as u64) * entry
        };
        if let Some(m) = moves.iter().find(|m| {
            let (block, _) = table
                .locate(m.to as usize)
                .expect("moves stay inside the row");
            self.tables.pool().refs(block) > 1
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

    /// Writes `row`'s beam table: position p of the sequence in `row` is read from row
    /// `beams[p]`. Returns the offset kernels take as the token's beam base.
    pub fn set_beams(&self, row: usize, beams: &[u32]) -> Result<u32> {
        let n_ctx = self.tables.shape().n_ctx;
        debug_assert!(beams.len() <= n_ctx);
        let base = row * n_ctx;
        self.beams_buf.upload((base * 4) as u64, beams)?;
        Ok(base as u32)
    }

    /// Writes the block tables that changed to the device; called before a step runs.
    pub fn sync_tables(&mut self) -> Result<()> {
        let max = self.tables.shape().max_blocks();
        for (row, blocks) in self.tables.take_dirty() {
            self.tables_buf.upload((row * max * 4) as u64, blocks)?;
        }
        Ok(())
    }
}
