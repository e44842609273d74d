//! Block bookkeeping of the paged KV cache: a pool of fixed-size blocks with a free list and
//! reference counts, and per-sequence block tables mapping positions to blocks.
//!
//! Blocks are shared by reference (prefix sharing, n samples of one prompt): forking a table
//! bumps the counts, and a sequence about to write into a shared block first gets a private
//! copy (copy on write), reported to the caller as a (source, destination) pair to copy on
//! the device. Nothing here touches the device.

use std::fmt;

/// Tokens per block.
pub const BLOCK_TOKENS: usize = 16;

/// The index of a block in the pool.
pub type BlockId = u32;

/// The pool has fewer free blocks than an operation needs; nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfBlocks {
    pub needed: usize,
    pub free: usize,
}

impl fmt::Display for OutOfBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "KV cache full: {} blocks needed, {} free",
            self.needed, self.free
        )
    }
}

impl std::error::Error for OutOfBlocks {}

/// A block to copy before a sequence writes to it: the shared `src` stays with the other
/// sequences, `dst` is the writer's own copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCopy {
    pub src: BlockId,
    pub dst: BlockId,
}

/// Every block of the cache: which are free, and how many tables hold each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPool {
    refs: Vec<u32>,
    /// Free blocks, taken from the end (so the lowest ids go first).
    free: Vec<BlockId>,
}

impl BlockPool {
    pub fn new(blocks: usize) -> Self {
        Self {
            refs: vec![0; blocks],
            free: (0..blocks as BlockId).rev().collect(),
        }
    }

    /// Blocks in the pool.
    pub fn capacity(&self) -> usize {
        self.refs.len()
    }

    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    pub fn used_blocks(&self) -> usize {
        self.capacity() - self.free_blocks()
    }

    /// Tables holding `block`.
    pub fn refs(&self, block: BlockId) -> u32 {
        self.refs[block as usize]
    }

    fn take(&mut self) -> Option<BlockId> {
        let block = self.free.pop()?;
        self.refs[block as usize] = 1;
        Some(block)
    }

    fn share(&mut self, block: BlockId) {
        self.refs[block as usize] += 1;
    }

    fn release(&mut self, block: BlockId) {
        let refs = &mut self.refs[block as usize];
        debug_assert!(*refs > 0, "block {block} released more often than taken");
        *refs -= 1;
        if *refs == 0 {
            self.free.push(block);
        }
    }
}

/// Blocks needed for `tokens` positions.
pub fn blocks_for(tokens: usize) -> usize {
    tokens.div_ceil(BLOCK_TOKENS)
}

/// One sequence's blocks: position `p` lives in `blocks[p / BLOCK_TOKENS]` at slot
/// `p % BLOCK_TOKENS`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockTable {
    blocks: Vec<BlockId>,
    /// Positions holding K/V.
    len: usize,
}

impl BlockTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }

    /// Positions holding K/V.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where position `pos` lives: (block, slot).
    pub fn locate(&self, pos: usize) -> Option<(BlockId, usize)> {
        let block = *self.blocks.get(pos / BLOCK_TOKENS)?;
        Some((block, pos % BLOCK_TOKENS))
    }

    /// Blocks that appending `tokens` positions would take from the pool, copies of shared
    /// blocks included.
    pub fn blocks_needed(&self, pool: &BlockPool, tokens: usize) -> usize {
        if tokens == 0 {
            return 0;
        }
        let new = blocks_for(self.len + tokens).saturating_sub(self.blocks.len());
        let first = self.len / BLOCK_TOKENS;
        let copy = self
            .blocks
            .get(first)
            .is_some_and(|&b| pool.refs(b) > 1 && self.len % BLOCK_TOKENS != 0);
        new + usize::from(copy)
    }

    /// Makes room for `tokens` more positions: new blocks from the pool, and a private copy of
    /// the partly filled last block when another table shares it. Returns the copies the
    /// device must make before the positions are written. On failure nothing changes.
    pub fn append(
        &mut self,
        pool: &mut BlockPool,
        tokens: usize,
    ) -> Result<Vec<BlockCopy>, OutOfBlocks> {
        let needed = self.blocks_needed(pool, tokens);
        if needed > pool.free_blocks() {
            return Err(OutOfBlocks {
                needed,
                free: pool.free_blocks(),
            });
        }
        let mut copies = Vec::new();
        if tokens == 0 {
            return Ok(copies);
        }
        let first = self.len / BLOCK_TOKENS;
        if let Some(block) = self.blocks.get_mut(first) {
            if pool.refs(*block) > 1 && self.len % BLOCK_TOKENS != 0 {
                let dst = pool.take().expect("counted above");
                copies.push(BlockCopy { src: *block, dst });
                pool.release(*block);
                *block = dst;
            }
        }
        while self.blocks.len() < blocks_for(self.len + tokens) {
            self.blocks.push(pool.take().expect("counted above"));
        }
        self.len += tokens;
        Ok(copies)
    }

    /// A table sharing this one's first `len` positions (a prompt's prefix, or the whole
    /// sequence): their blocks are shared, and whoever writes into a shared block first
    /// copies it.
    pub fn fork(&self, pool: &mut BlockPool, len: usize) -> BlockTable {
        let len = len.min(self.len);
        let blocks = self.blocks[..blocks_for(len)].to_vec();
        for &b in &blocks {
            pool.share(b);
        }
        BlockTable { blocks, len }
    }

    /// Forgets positions from `len` on, returning whole blocks no longer needed to the pool.
    pub fn truncate(&mut self, pool: &mut BlockPool, len: usize) {
        if len >= self.len {
            return;
        }
        for b in self.blocks.drain(blocks_for(len)..) {
            pool.release(b);
        }
        self.len = len;
    }

    /// Returns every block to the pool.
    pub fn clear(&mut self, pool: &mut BlockPool) {
        self.truncate(pool, 0);
    }
}

impl From<OutOfBlocks> for crate::Error {
    fn from(e: OutOfBlocks) -> Self {
        Self::KvFull {
            needed: e.needed,
            free: e.free,
            block_tokens: BLOCK_TOKENS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_takes_blocks_as_positions_cross_block_edges() {
        let mut pool = BlockPool::new(4);
        let mut t = BlockTable::new();
        assert!(t.append(&mut pool, 1).unwrap().is_empty());
        assert_eq!((t.blocks().len(), pool.free_blocks()), (1, 3));
        t.append(&mut pool, 15).unwrap();
        assert_eq!((t.blocks().len(), t.len()), (1, 16));
        t.append(&mut pool, 17).unwrap();
        assert_eq!((t.blocks().len(), t.len()), (3, 33));
        assert_eq!(t.locate(32), Some((t.blocks()[2], 0)));
        assert_eq!(t.locate(48), None);
    }

    #[test]
    fn running_out_changes_nothing() {
        let mut pool = BlockPool::new(2);
        let mut t = BlockTable::new();
        t.append(&mut pool, 20).unwrap();
        let err = t.append(&mut pool, 30).unwrap_err();
        assert_eq!(err, OutOfBlocks { needed: 2, free: 0 });
        assert_eq!((t.len(), t.blocks().len(), pool.free_blocks()), (20, 2, 0));
    }

    #[test]
    fn clear_and_truncate_return_blocks() {
        let mut pool = BlockPool::new(8);
        let mut t = BlockTable::new();
        t.append(&mut pool, 50).unwrap();
        assert_eq!(pool.used_blocks(), 4);
        t.truncate(&mut pool, 17);
        assert_eq!((t.len(), t.blocks().len(), pool.used_blocks()), (17, 2, 2));
        t.clear(&mut pool);
        assert_eq!((t.len(), pool.used_blocks()), (0, 0));
    }

    #[test]
    fn forks_share_blocks_and_copy_the_partial_one_on_write() {
        let mut pool = BlockPool::new(8);
        let mut a = BlockTable::new();
        a.append(&mut pool, 20).unwrap(); // one full block, one holding 4 positions
        let mut b = a.fork(&mut pool, 20);
        assert_eq!(b.blocks(), a.blocks());
        assert_eq!(pool.used_blocks(), 2);
        assert_eq!(b.blocks_needed(&pool, 1), 1);

        // b writes position 20, inside the shared second block: it gets its own copy.
        let copies = b.append(&mut pool, 1).unwrap();
        assert_eq!(copies.len(), 1);
        assert_eq!(copies[0].src, a.blocks()[1]);
        assert_eq!(copies[0].dst, b.blocks()[1]);
        assert_eq!(b.blocks()[0], a.blocks()[0], "the full block stays shared");
        assert_eq!(pool.refs(a.blocks()[0]), 2);
        assert_eq!(pool.refs(a.blocks()[1]), 1);

        // a writes now without copying: b no longer holds its second block.
        assert!(a.append(&mut pool, 1).unwrap().is_empty());
        a.clear(&mut pool);
        b.clear(&mut pool);
        assert_eq!(pool.used_blocks(), 0);
    }

    #[test]
    fn a_fork_at_a_block_edge_needs_no_copy() {
        let mut pool = BlockPool::new(8);
        let mut a = BlockTable::new();
        a.append(&mut pool, 40).unwrap();
        let mut b = a.fork(&mut pool, 32);
        assert_eq!((b.len(), b.blocks().len()), (32, 2));
        assert!(b.append(&mut pool, 5).unwrap().is_empty());
        assert_ne!(b.blocks()[2], a.blocks()[2]);
        assert_eq!(pool.used_blocks(), 4);
    }
}
