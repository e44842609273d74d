//! The decoder's self-attention cache, paged: each block's keys and values of every layer in
//! blocks of [`BLOCK_TOKENS`] positions, a block table per decoder row ([`KvTables`], the
//! paged cache's bookkeeping the decoders share). A beam search's fork shares its parent's
//! blocks and copies one only when it writes into it. The values are f32, on the host.

use hearth_quant::KvType;

use crate::error::{Error, Result};
use crate::kv::{blocks_for, KvPlacement, KvShape, KvTables, BLOCK_TOKENS};

pub(super) struct PagedCache {
    tables: KvTables,
    /// Per layer, [block * BLOCK_TOKENS + slot, width], grown as blocks are first used.
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    width: usize,
}

impl PagedCache {
    /// A cache of `rows` sequences of up to `n_ctx` positions for `layers` layers of
    /// `n_head` x `head_dim` keys.
    pub fn new(layers: usize, n_head: usize, head_dim: usize, rows: usize, n_ctx: usize) -> Self {
        let shape = KvShape {
            n_layer: layers,
            n_head_kv: n_head,
            head_dim,
            blocks: rows * blocks_for(n_ctx),
            rows,
            n_ctx,
            kv_type: KvType::F32,
            values_in_keys: false,
        };
        Self {
            tables: KvTables::new(shape, KvPlacement::Device),
            keys: vec![Vec::new(); layers],
            values: vec![Vec::new(); layers],
            width: n_head * head_dim,
        }
    }

    pub fn rows(&self) -> usize {
        self.tables.shape().rows
    }

    pub fn len(&self, row: usize) -> usize {
        self.tables.len(row)
    }

    /// Makes room for `tokens` more positions in `row`, copying the shared blocks it will
    /// write into.
    pub fn append(&mut self, row: usize, tokens: usize) -> Result<()> {
        let n_ctx = self.tables.shape().n_ctx;
        let len = self.tables.len(row);
        if len + tokens > n_ctx {
            return Err(Error::ContextFull {
                needed: tokens,
                used: len,
                n_ctx,
            });
        }
        let copies = self
            .tables
            .append(row, tokens)
            .map_err(|e| Error::options("kv_budget", e.to_string()))?;
        let block = BLOCK_TOKENS * self.width;
        for c in copies {
            let (src, dst) = (c.src as usize * block, c.dst as usize * block);
            for store in self.keys.iter_mut().chain(&mut self.values) {
                grow(store, dst + block);
                store.copy_within(src..src + block, dst);
            }
        }
        Ok(())
    }

    /// Where position `pos` of `row` lives in a layer's store.
    fn offset(&self, row: usize, pos: usize) -> usize {
        let block = self.tables.table(row).blocks()[pos / BLOCK_TOKENS] as usize;
        (block * BLOCK_TOKENS + pos % BLOCK_TOKENS) * self.width
    }

    /// Writes layer `layer`'s key and value of position `pos` of `row` (room made first).
    pub fn write(&mut self, layer: usize, row: usize, pos: usize, key: &[f32], value: &[f32]) {
        let at = self.offset(row, pos);
        for (store, v) in [
            (&mut self.keys[layer], key),
            (&mut self.values[layer], value),
        ] {
            grow(store, at + self.width);
            store[at..at + self.width].copy_from_slice(v);
        }
    }

    /// Layer `layer`'s keys and values of `row`'s positions, in order, [len, width] each.
    pub fn gather(&self, layer: usize, row: usize) -> (Vec<f32>, Vec<f32>) {
        let len = self.tables.len(row);
        let mut k = Vec::with_capacity(len * self.width);
        let mut v = Vec::with_capacity(len * self.width);
        for pos in 0..len {
            let at = self.offset(row, pos);
            k.extend_from_slice(&self.keys[layer][at..at + self.width]);
            v.extend_from_slice(&self.values[layer][at..at + self.width]);
        }
        (k, v)
    }

    /// Makes `dst` share `src`'s positions.
    pub fn fork(&mut self, src: usize, dst: usize) {
        let len = self.tables.len(src);
        self.tables.fork(src, dst, len);
    }

    pub fn clear(&mut self, row: usize) {
        self.tables.clear(row);
    }

    /// Blocks in use (a block shared by several rows counts once).
    pub fn blocks_used(&self) -> usize {
        self.tables.usage().blocks_used
    }
}

fn grow(store: &mut Vec<f32>, len: usize) {
    if store.len() < len {
        store.resize(len, 0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(c: &mut PagedCache, row: usize, from: usize, n: usize, base: f32) {
        c.append(row, n).unwrap();
        for p in from..from + n {
            let v = [base + p as f32; 4];
            c.write(0, row, p, &v, &v);
        }
    }

    /// A fork shares its parent's blocks; writing into the shared last block copies it,
    /// and the parent's values stay as they were.
    #[test]
    fn forks_share_blocks_and_copy_on_write() {
        let mut c = PagedCache::new(1, 2, 2, 4, 64);
        fill(&mut c, 0, 0, 20, 0.0);
        assert_eq!(c.blocks_used(), 2);
        c.fork(0, 1);
        assert_eq!(c.blocks_used(), 2);
        fill(&mut c, 1, 20, 1, 100.0);
        assert_eq!(c.blocks_used(), 3, "the shared second block copied");
        let (k0, _) = c.gather(0, 0);
        let (k1, v1) = c.gather(0, 1);
        assert_eq!(k0.len(), 20 * 4);
        assert_eq!(&k1[..20 * 4], &k0[..]);
        assert_eq!(&v1[20 * 4..], &[120.0; 4]);
        c.clear(0);
        c.clear(1);
        assert_eq!(c.blocks_used(), 0);
        let err = c.append(2, 65).unwrap_err();
        assert!(err.to_string().contains("64"), "{err}");
    }
}
