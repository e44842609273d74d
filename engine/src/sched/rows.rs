//! Cache rows: admitting waiting sequences into rows, each sharing the longest prefix some
//! row has cached, and each step's plan, which finds its blocks by evicting cached prefixes
//! and then preempting the newest sequences.

use std::collections::VecDeque;

use super::{Phase, Scheduler};
use hearth_model::kv::OutOfBlocks;
use hearth_model::Result;

/// What a cache row holds.
#[derive(Clone, Debug)]
pub(super) enum Row {
    Free,
    /// A running sequence (index into `seqs`).
    Busy(usize),
    /// A finished sequence's tokens, kept as a prefix cache until the room is needed.
    Cached {
        tokens: Vec<u32>,
        used: u64,
    },
}

impl Scheduler<'_> {
    /// Moves waiting sequences into free rows, oldest first, each sharing the longest cached
    /// prefix of its tokens.
    pub(super) fn admit(&mut self) {
        let mut still = VecDeque::new();
        let mut running = self.running();
        while let Some(i) = self.waiting.pop_front() {
            if self.seqs[i].phase != Phase::Waiting {
                continue;
            }
            if running >= self.max_running {
                still.push_back(i);
                still.extend(self.waiting.drain(..));
                break;
            }
            // Completions of one request follow its first once that has read the prompt.
            if let Some(lead) = self.seqs[i].after {
                let l = &self.seqs[lead];
                if l.phase == Phase::Waiting
                    || (l.phase == Phase::Running && l.computed < l.stream.prompt_len() - 1)
                {
                    still.push_back(i);
                    continue;
                }
            }
            let Some(row) = self.take_row(i) else {
                still.push_back(i);
                still.extend(self.waiting.drain(..));
                break;
            };
            self.clock += 1;
            let s = &mut self.seqs[i];
            s.phase = Phase::Running;
            s.row = row;
            s.admitted = self.clock;
            self.rows[row] = Row::Busy(i);
            running += 1;
        }
        self.waiting = still;
    }

    /// A row for sequence `i`, holding as much of its tokens as some row has cached (at most
    /// all but the last, which must run to give logits), or `None` when every row is busy.
    fn take_row(&mut self, i: usize) -> Option<usize> {
        let tokens = self.seqs[i].tokens();
        let limit = tokens.len() - 1;
        // The row with the longest common prefix.
        let mut best: Option<(usize, usize)> = None;
        for (r, row) in self.rows.iter().enumerate() {
            let cached: &[u32] = match row {
                Row::Busy(j) => &self.seqs[*j].tokens()[..self.seqs[*j].computed],
                Row::Cached { tokens, .. } => tokens,
                Row::Free => continue,
            };
            let lcp = cached
                .iter()
                .zip(tokens)
                .take_while(|(a, b)| a == b)
                .count()
                .min(limit);
            if lcp > 0 && best.is_none_or(|(_, l)| lcp > l) {
                best = Some((r, lcp));
            }
        }
        let free = self.rows.iter().position(|r| matches!(r, Row::Free));
        let (row, keep) = match (free, best) {
            (Some(row), Some((src, keep))) => {
                self.model.fork(src, row, keep);
                (row, keep)
            }
            (Some(row), None) => (row, 0),
            // No free row: take over the best cached one, or the least recently used.
            (None, Some((src, keep))) if matches!(self.rows[src], Row::Cached { .. }) => {
                self.model.kv_mut().truncate(src, keep);
                (src, keep)
            }
            (None, _) => {
                let lru = lru_cached(&self.rows)?;
                self.model.kv_mut().clear(lru);
                (lru, 0)
            }
        };
        self.reused_tokens += keep;
        self.seqs[i].computed = keep;
        self.seqs[i].times.reused = keep;
        Some(row)
    }

    /// This step's work: (sequence, tokens) for every running sequence, decodes first, then
    /// prompt chunks within the step's token budget; blocks are found by evicting cached
    /// prefixes and then preempting the newest sequences.
    pub(super) fn plan(&mut self) -> Result<Vec<(usize, usize)>> {
        let budget = self.model.max_step_tokens();
        loop {
            let mut running: Vec<usize> = (0..self.seqs.len())
                .filter(|&i| self.seqs[i].phase == Phase::Running)
                .collect();
            running.sort_by_key(|&i| {
                (
                    self.seqs[i].tokens().len() - self.seqs[i].computed > 1,
                    self.seqs[i].admitted,
                )
            });
            let mut plan = Vec::new();
            let mut left = budget;
            for &i in &running {
                let s = &mut self.seqs[i];
                let n = (s.tokens().len() - s.computed + s.draft.len()).min(left);
                // A draft cut by the budget is cut here, so the step and the draft agree.
                let fed = s.tokens().len() - s.computed;
                s.draft.truncate(n.saturating_sub(fed));
                if n == 0 {
                    continue;
                }
                plan.push((i, n));
                left -= n;
            }
            let kv = self.model.kv();
            let needed: usize = plan
                .iter()
                .map(|&(i, n)| kv.blocks_needed(self.seqs[i].row, n))
                .sum();
            let free = kv.pool().free_blocks();
            if needed <= free {
                return Ok(plan);
            }
            // Drafts are a gamble: they never take blocks a sequence needs.
            if running.iter().any(|&i| !self.seqs[i].draft.is_empty()) {
                for &i in &running {
                    self.seqs[i].draft.clear();
                }
                continue;
            }
            if self.evict_cached() {
                continue;
            }
            // Preempt the newest running sequence; the oldest always keeps its room (every
            // request fits the pool alone, checked when it was added).
            let newest = running
                .iter()
                .copied()
                .max_by_key(|&i| self.seqs[i].admitted);
            match newest {
                Some(i) if running.len() > 1 => self.preempt(i),
                _ => return Err(OutOfBlocks { needed, free }.into()),
            }
        }
    }

    /// Frees the least recently used cached prefix; false when there is none.
    fn evict_cached(&mut self) -> bool {
        match lru_cached(&self.rows) {
            Some(r) => {
                self.model.kv_mut().clear(r);
                self.rows[r] = Row::Free;
                true
            }
            None => false,
        }
    }

    /// Frees sequence `i`'s row and blocks; it is recomputed from its tokens when readmitted.
    fn preempt(&mut self, i: usize) {
        let row = self.seqs[i].row;
        self.model.kv_mut().clear(row);
        self.rows[row] = Row::Free;
        let s = &mut self.seqs[i];
        s.phase = Phase::Waiting;
        s.computed = 0;
        s.draft.clear();
        self.waiting.push_front(i);
        self.preemptions += 1;
    }
}

/// The cached row used least recently.
fn lru_cached(rows: &[Row]) -> Option<usize> {
    rows.iter()
        .enumerate()
        .filter_map(|(r, row)| match row {
            Row::Cached { used, .. } => Some((r, *used)),
            _ => None,
        })
        .min_by_key(|&(_, used)| used)
        .map(|(r, _)| r)
}
