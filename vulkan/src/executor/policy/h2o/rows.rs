//! H2O's per-row state on the host side: reading and rewriting a row's kept positions and
//! masses (forks, truncation, and the eviction after a dense step run with the CPU
//! reference's code), and keeping each row's state in line with its cache entries.

use super::VkH2o;
use hearth_kernels::kv::h2o::Head;
use hearth_model::Result;

impl VkH2o {
    /// Row `row`'s state: per sparse layer and KV head, layer-major.
    fn read_row(&self, row: usize) -> Result<Vec<Head>> {
        let (n_kv, cap, n_ctx) = (
            self.shape.n_head_kv as usize,
            self.shape.cap as usize,
            self.shape.n_ctx as usize,
        );
        let mut heads = Vec::with_capacity(self.layers.len() * n_kv);
        for s in &self.layers {
            let mut counts = vec![0u32; n_kv];
            s.kept_count
                .download_into((row * n_kv * 4) as u64, &mut counts)?;
            let mut kept = vec![0u32; n_kv * cap];
            s.kept
                .download_into((row * n_kv * cap * 4) as u64, &mut kept)?;
            let mut mass = vec![0f32; n_kv * n_ctx];
            s.mass
                .download_into((row * n_kv * n_ctx * 4) as u64, &mut mass)?;
            for g in 0..n_kv {
                let mut k = kept[g * cap..g * cap + (counts[g] as usize).min(cap)].to_vec();
                k.sort_unstable();
                heads.push(Head {
                    kept: k,
                    mass: mass[g * n_ctx..(g + 1) * n_ctx].to_vec(),
                });
            }
        }
        Ok(heads)
    }

    /// The positions KV head `g` of layer `l` keeps in row `row`, ascending, and their mass.
    pub(in crate::executor) fn head(&self, row: usize, l: usize, g: usize) -> Result<Head> {
        let n_kv = self.shape.n_head_kv as usize;
        let mut heads = self.read_row(row)?;
        Ok(heads.swap_remove((l - self.params.dense_layers) * n_kv + g))
    }

    /// Stores `heads` (as [`read_row`](Self::read_row) returns them) as row `row`'s state.
    fn write_row(&self, row: usize, heads: &[Head]) -> Result<()> {
        let (n_kv, cap, n_ctx) = (
            self.shape.n_head_kv as usize,
            self.shape.cap as usize,
            self.shape.n_ctx as usize,
        );
        for (s, heads) in self.layers.iter().zip(heads.chunks(n_kv)) {
            let counts: Vec<u32> = heads.iter().map(|h| h.kept.len() as u32).collect();
            let mut kept = vec![0u32; n_kv * cap];
            let mut mass = Vec::with_capacity(n_kv * n_ctx);
            for (g, h) in heads.iter().enumerate() {
                kept[g * cap..g * cap + h.kept.len()].copy_from_slice(&h.kept);
                mass.extend_from_slice(&h.mass);
            }
            s.kept_count.upload((row * n_kv * 4) as u64, &counts)?;
            s.kept.upload((row * n_kv * cap * 4) as u64, &kept)?;
            s.mass.upload((row * n_kv * n_ctx * 4) as u64, &mass)?;
        }
        Ok(())
    }

    /// Reads row `src`'s state, edits every head with `edit`, and stores it as row `dst`'s.
    fn rewrite(&self, src: usize, dst: usize, edit: impl Fn(&mut Head)) -> Result<()> {
        let mut heads = self.read_row(src)?;
        heads.iter_mut().for_each(edit);
        self.write_row(dst, &heads)
    }

    /// Brings row `row`'s state in line with its `len` cached entries: positions past them
    /// are forgotten, and entries it has not taken in yet (pending, or appended outside a
    /// step) join with the mass they have, after which the row evicts.
    pub(super) fn sync(&mut self, row: usize, len: usize) -> Result<()> {
        let was = self.synced[row];
        if was == len {
            return Ok(());
        }
        let from = self.pending[row].take().unwrap_or(was).min(len);
        let budget = self.params.budget_tokens(len);
        self.rewrite(row, row, |h| {
            h.truncate(len);
            if from < len {
                h.end_step(from..len, budget);
            }
        })?;
        self.synced[row] = len;
        Ok(())
    }

    /// Takes in row `row`'s pending entries: they join the kept positions and the row evicts.
    pub(super) fn settle(&mut self, row: usize) -> Result<()> {
        let Some(from) = self.pending[row].take() else {
            return Ok(());
        };
        let len = self.synced[row];
        let budget = self.params.budget_tokens(len);
        self.rewrite(row, row, |h| h.end_step(from..len, budget))
    }

    /// Ends a dense step that appended entries `old..new` to row `row`, whose attention the
    /// step added to the masses: they (and any pending before them) join the kept positions
    /// and the row evicts, unless eviction is held.
    pub(super) fn end_dense(&mut self, row: usize, old: usize, new: usize) -> Result<()> {
        self.pending[row].get_or_insert(old);
        self.synced[row] = new;
        match self.holding {
            true => Ok(()),
            false => self.settle(row),
        }
    }

    /// Row `dst` now shares `src`'s first `len` entries: it takes `src`'s state for them.
    /// Should that fail, `dst` keeps what it had up to `len`, trimmed at its next step.
    pub(super) fn fork_row(&mut self, src: usize, dst: usize, len: usize) {
        let copied = self.rewrite(src, dst, |h| h.truncate(len));
        self.pending[dst] = None;
        self.synced[dst] = match copied {
            Ok(()) => len,
            Err(_) => usize::MAX,
        };
    }
}
