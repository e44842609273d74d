//! InfiniGen's evicting pool in the Vulkan executor (`--kv-pool-capacity`): row 0 (the single
//! sequence the engine's session runs) evicts its least fetched tokens to make room
//! (`kv::infinigen::evict`). Their entries are refilled from the end of the row by device
//! copies of K, V and partial keys, and `seq_pos` records which position each entry now
//! holds.

use super::VkInfinigen;
use hearth_kernels::infinigen::IgShape;
use hearth_kernels::kv::infinigen::evict::SlotMove;
use hearth_kernels::kv::KvCache;
use hearth_kernels::vk::{Buffer, Recorder};
use hearth_model::Result;

impl VkInfinigen {
    /// Tokens `row` has evicted: how far its positions run ahead of its entries.
    pub(super) fn evicted_from(&self, row: usize) -> usize {
        match (&self.slots, row) {
            (Some(map), 0) => map.evicted(),
            _ => 0,
        }
    }

    /// Notes that row 0 already holds `len` tokens (the cache when InfiniGen is turned on).
    pub(super) fn adopt(&mut self, len: usize) {
        if let Some(map) = &mut self.slots {
            map.clear();
            map.append(len);
        }
    }

    /// Makes room in row 0 for `incoming` tokens and records their positions: when the pool
    /// would overflow, the least fetched tokens leave and the last entries fill their places
    /// (copied on the device before this returns), and the row shrinks in `kv`.
    pub(super) fn make_room(&mut self, kv: &mut KvCache, incoming: usize) -> Result<()> {
        let first_sparse = self.first_sparse();
        let Some(map) = &mut self.slots else {
            return Ok(());
        };
        let slots = map.slots();
        // Row 0's counters come first.
        let mut fetches: Vec<u32> = self.fetches.download(slots)?;
        let moves = map.make_room(incoming, &mut fetches)?;
        if !moves.is_empty() {
            let mut rec = Recorder::new(&self.device)?;
            kv.record_entry_moves(&mut rec, 0, &moves)?;
            for pkeys in &self.pkeys[first_sparse.min(self.pkeys.len())..] {
                record_pkey_moves(&mut rec, self.shape, pkeys, &moves)?;
            }
            rec.submit()?;
        }
        let kept = map.slots();
        kv.truncate(0, kept);
        self.stats.evicted += (slots - kept) as u64;
        self.fetches.upload(0, &fetches)?;
        // The new tokens' positions, then every entry that moved.
        let next = map.next_position() as u32;
        let new: Vec<u32> = (next..next + incoming as u32).collect();
        self.seq_pos.upload(kept as u64 * 4, &new)?;
        for m in &moves {
            let at = m.to as usize;
            self.seq_pos
                .upload(at as u64 * 4, &map.positions()[at..at + 1])?;
        }
        map.append(incoming);
        Ok(())
    }

    /// Forgets row 0's tokens from position `len` on and returns the entries it keeps: all
    /// of them up to `len` when the tokens past `len` are the row's last entries (they
    /// arrived after its last eviction), otherwise none (the row starts over).
    pub(super) fn truncate_row0(&mut self, entries: usize, len: usize) -> Result<usize> {
        let Some(map) = &mut self.slots else {
            return Ok(len.min(entries));
        };
        let kept = map.truncate(len);
        if kept < entries {
            self.fetches
                .upload(kept as u64 * 4, &vec![0u32; entries - kept])?;
        }
        if map.slots() == 0 {
            // Entries are positions again.
            let identity: Vec<u32> = (0..self.shape.n_ctx).collect();
            self.seq_pos.upload(0, &identity)?;
        }
        Ok(kept)
    }
}

/// Records eviction's moves in row 0 of a layer's partial key cache.
fn record_pkey_moves<'a>(
    rec: &mut Recorder<'a>,
    s: IgShape,
    pkeys: &'a Buffer,
    moves: &[SlotMove],
) -> Result<()> {
    let entry = s.pkey_entry_bytes();
    // Row 0's entries come first.
    let offsets: Vec<(u64, u64)> = moves
        .iter()
        .map(|m| (m.from as u64 * entry, m.to as u64 * entry))
        .collect();
    Ok(rec.copy_regions("kv_evict_move", pkeys, pkeys, &offsets, entry)?)
}
