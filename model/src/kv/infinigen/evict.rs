//! Pool eviction (`--kv-pool-capacity`): a sequence keeps at most `capacity` tokens' K/V, so
//! generation runs past what the pool holds. When a step needs room, old tokens leave: among
//! those outside the current window (the newest `window` tokens, which selection fetches
//! anyway) and past the first few (the attention sinks most heads lean on, [`SINKS`]), the
//! ones fetched least often so far (InfiniGen's counter policy), the oldest among equals.
//! Prefill fetches nothing, so what a prompt overflows leaves oldest first.
//!
//! Attention does not care in which slot a token's K/V sit, and RoPE has already turned each
//! key by its own position, so a kept token may move. The row stays dense: the last slots'
//! tokens fill the victims' slots, the row shrinks, and new tokens append as before. A slot no
//! longer equals a position afterwards, so [`SlotMap`] keeps the position of every slot (the
//! recent window and RoPE read it) and moves the fetch counters along with the tokens.

use std::fmt;
use std::str::FromStr;

/// The first tokens of a sequence, which eviction keeps: small models park much of their
/// attention on them (attention sinks), and dropping them costs far more than their share.
pub const SINKS: usize = 4;

/// How many tokens a sequence's pool holds (`--kv-pool-capacity`): a fraction of the context
/// (`0.5`) or a token count (`1024`, `1024t`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PoolCapacity {
    Fraction(f64),
    Tokens(usize),
}

impl PoolCapacity {
    /// Tokens held with a context of `n_ctx`: at least one, at most `n_ctx`.
    pub fn tokens(self, n_ctx: usize) -> usize {
        let tokens = match self {
            Self::Fraction(f) => (f * n_ctx as f64).floor() as usize,
            Self::Tokens(t) => t,
        };
        tokens.clamp(1, n_ctx.max(1))
    }
}

impl FromStr for PoolCapacity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad =
            || format!("`{s}` is neither a fraction in (0, 1] nor a token count (1024, 1024t)");
        if let Some(t) = s.strip_suffix('t') {
            return match t.parse::<usize>() {
                Ok(t) if t > 0 => Ok(Self::Tokens(t)),
                _ => Err(bad()),
            };
        }
        if let Ok(t) = s.parse::<usize>() {
            if t >= 2 {
                return Ok(Self::Tokens(t));
            }
        }
        match s.parse::<f64>() {
            Ok(f) if f > 0.0 && f <= 1.0 => Ok(Self::Fraction(f)),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for PoolCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fraction(x) => write!(f, "{x}"),
            Self::Tokens(t) => write!(f, "{t}t"),
        }
    }
}

/// Move the token in slot `from` to slot `to` (K, V, partial keys and counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotMove {
    pub from: u32,
    pub to: u32,
}

/// A step brings more tokens than eviction can make room for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoRoom {
    pub incoming: usize,
    pub capacity: usize,
    pub window: usize,
}

impl fmt::Display for NoRoom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a step of {} tokens does not fit a KV pool of {} tokens that keeps the newest {} \
             (raise --kv-pool-capacity)",
            self.incoming, self.capacity, self.window
        )
    }
}

impl std::error::Error for NoRoom {}

/// One sequence's slots: the position each holds, and eviction when the pool is full.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotMap {
    capacity: usize,
    window: usize,
    /// Positions below this are never evicted.
    sinks: usize,
    /// Position of the token in each slot.
    positions: Vec<u32>,
    /// Positions seen: the next token's position.
    next: usize,
}

impl SlotMap {
    /// A pool of `capacity` tokens that never evicts the newest `window` (at least one).
    pub fn new(capacity: usize, window: usize) -> Self {
        Self {
            capacity,
            window: window.max(1),
            sinks: 0,
            positions: Vec::new(),
            next: 0,
        }
    }

    /// Never evicts the first `n` positions either.
    pub fn keeping_first(self, n: usize) -> Self {
        Self { sinks: n, ..self }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn window(&self) -> usize {
        self.window
    }

    /// Slots in use.
    pub fn slots(&self) -> usize {
        self.positions.len()
    }

    /// The position each slot holds.
    pub fn positions(&self) -> &[u32] {
        &self.positions
    }

    /// The next token's position: every token the sequence has seen.
    pub fn next_position(&self) -> usize {
        self.next
    }

    /// Tokens evicted so far.
    pub fn evicted(&self) -> usize {
        self.next - self.positions.len()
    }

    /// Whether slot `s` holds one of the newest `n` tokens.
    pub fn is_recent(&self, s: usize, n: usize) -> bool {
        self.positions[s] as usize + n >= self.next
    }

    /// Records `n` tokens appended at the next slots.
    pub fn append(&mut self, n: usize) {
        let next = self.next as u32;
        self.positions.extend(next..next + n as u32);
        self.next += n;
    }

    /// Forgets every token.
    pub fn clear(&mut self) {
        self.positions.clear();
        self.next = 0;
    }

    /// Forgets the tokens from position `len` on and returns the slots kept. That keeps the
    /// rest when the forgotten tokens fill the last slots (they came after the last
    /// eviction); otherwise the map is cleared, and the sequence must start over.
    pub fn truncate(&mut self, len: usize) -> usize {
        if len >= self.next {
            return self.slots();
        }
        let kept = self.slots().checked_sub(self.next - len);
        let tail_is_newest = kept.is_some_and(|kept| {
            self.positions[kept..]
                .iter()
                .zip(len as u32..)
                .all(|(&p, want)| p == want)
        });
        if let (true, Some(kept)) = (tail_is_newest, kept) {
            self.positions.truncate(kept);
            self.next = len;
        } else {
            self.clear();
        }
        self.slots()
    }

    /// Makes room for `incoming` tokens: when they would overflow the pool, evicts the
    /// fewest-fetched tokens outside the window and returns the moves that fill their slots
    /// from the end of the row (to run before the new tokens are stored). `fetches` holds each
    /// slot's fetch counter; it is moved with the tokens, and the freed slots are zeroed for
    /// the tokens to come. On failure nothing changes.
    pub fn make_room(
        &mut self,
        incoming: usize,
        fetches: &mut [u32],
    ) -> Result<Vec<SlotMove>, NoRoom> {
        let slots = self.slots();
        let need = (slots + incoming).saturating_sub(self.capacity);
        if need == 0 {
            return Ok(Vec::new());
        }
        let mut candidates: Vec<usize> = (0..slots)
            .filter(|&s| {
                !self.is_recent(s, self.window) && self.positions[s] as usize >= self.sinks
            })
            .collect();
        if need > candidates.len() || incoming > self.capacity {
            return Err(NoRoom {
                incoming,
                capacity: self.capacity,
                window: self.window,
            });
        }
        let order = |&a: &usize, &b: &usize| {
            (fetches[a], self.positions[a]).cmp(&(fetches[b], self.positions[b]))
        };
        if need < candidates.len() {
            candidates.select_nth_unstable_by(need - 1, order);
            candidates.truncate(need);
        }
        let mut victims = vec![false; slots];
        for &s in &candidates {
            victims[s] = true;
        }
        let kept = slots - need;
        let holes = (0..kept).filter(|&s| victims[s]);
        let movers = (kept..slots).filter(|&s| !victims[s]);
        let moves: Vec<SlotMove> = holes
            .zip(movers)
            .map(|(to, from)| SlotMove {
                from: from as u32,
                to: to as u32,
            })
            .collect();
        for m in &moves {
            self.positions[m.to as usize] = self.positions[m.from as usize];
            fetches[m.to as usize] = fetches[m.from as usize];
        }
        self.positions.truncate(kept);
        fetches[kept..slots].fill(0);
        Ok(moves)
    }
}

impl From<NoRoom> for crate::Error {
    fn from(e: NoRoom) -> Self {
        Self::options("kv-pool-capacity", e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_parse_as_fractions_or_tokens() {
        assert_eq!("0.5".parse(), Ok(PoolCapacity::Fraction(0.5)));
        assert_eq!("1".parse(), Ok(PoolCapacity::Fraction(1.0)));
        assert_eq!("1024".parse(), Ok(PoolCapacity::Tokens(1024)));
        assert_eq!("64t".parse(), Ok(PoolCapacity::Tokens(64)));
        for bad in ["0", "1.5", "-0.2", "0t", "many", ""] {
            assert!(bad.parse::<PoolCapacity>().is_err(), "{bad}");
        }
        assert_eq!(PoolCapacity::Fraction(0.25).tokens(2048), 512);
        assert_eq!(PoolCapacity::Tokens(9000).tokens(2048), 2048);
    }

    #[test]
    fn below_capacity_nothing_moves() {
        let mut map = SlotMap::new(8, 2);
        map.append(5);
        let mut fetches = vec![0u32; 8];
        assert_eq!(map.make_room(3, &mut fetches), Ok(Vec::new()));
        assert_eq!(map.positions(), &[0, 1, 2, 3, 4]);
    }

    #[test]
    fn the_least_fetched_go_and_the_last_slots_fill_their_places() {
        let mut map = SlotMap::new(6, 2);
        map.append(6);
        // Slots 1 and 3 were fetched least; 4 and 5 are the window.
        let mut fetches = vec![9, 1, 5, 1, 0, 0, 7, 7];
        let moves = map.make_room(2, &mut fetches).unwrap();
        assert_eq!(
            moves,
            vec![SlotMove { from: 4, to: 1 }, SlotMove { from: 5, to: 3 }]
        );
        assert_eq!(map.positions(), &[0, 4, 2, 5]);
        assert_eq!(&fetches[..6], &[9, 0, 5, 0, 0, 0]);
        assert_eq!((map.evicted(), map.next_position()), (2, 6));
        map.append(2);
        assert_eq!(map.positions(), &[0, 4, 2, 5, 6, 7]);
        // Equal counts: the oldest goes (position 0), and the last slot takes its place.
        let mut fetches = vec![3, 3, 3, 3, 0, 0];
        let moves = map.make_room(1, &mut fetches).unwrap();
        assert_eq!(moves, vec![SlotMove { from: 5, to: 0 }]);
        assert_eq!(map.positions(), &[7, 4, 2, 5, 6]);
    }

    #[test]
    fn eviction_never_drops_the_current_window() {
        // A long generation through a small pool with arbitrary counters: the newest `window`
        // tokens are always held, and every position is held at most once.
        let (capacity, window) = (40, 12);
        let mut map = SlotMap::new(capacity, window);
        let mut fetches = vec![0u32; capacity];
        let mut seed = 7u64;
        for step in 0..500 {
            let incoming = if step % 50 == 0 { 20 } else { 1 };
            map.make_room(incoming, &mut fetches).unwrap();
            map.append(incoming);
            for f in fetches.iter_mut().take(map.slots()) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *f += (seed >> 61) as u32;
            }
            let next = map.next_position() as u32;
            let mut held = map.positions().to_vec();
            held.sort_unstable();
            held.dedup();
            assert_eq!(held.len(), map.slots());
            assert!(map.slots() <= capacity);
            for p in next.saturating_sub(window as u32)..next {
                assert!(
                    held.binary_search(&p).is_ok(),
                    "step {step}: {p} was evicted"
                );
            }
        }
    }

    #[test]
    fn truncation_keeps_what_came_after_the_last_eviction() {
        let mut map = SlotMap::new(6, 2);
        map.append(6);
        map.make_room(1, &mut [0, 1, 1, 1, 0, 0]).unwrap();
        map.append(1);
        assert_eq!(map.positions(), &[5, 1, 2, 3, 4, 6]);
        // Position 6 sits last: it can go.
        assert_eq!(map.truncate(6), 5);
        assert_eq!((map.next_position(), map.evicted()), (6, 1));
        assert_eq!(map.truncate(9), 5);
        // Position 5 moved into slot 0, so positions 4 and 5 are not the last slots in order:
        // going back to 4 starts over.
        assert_eq!(map.truncate(4), 0);
        assert_eq!(map.next_position(), 0);
        // Without evictions, truncation is plain.
        map.append(5);
        assert_eq!(map.truncate(2), 2);
        assert_eq!(map.positions(), &[0, 1]);
    }

    #[test]
    fn the_first_tokens_stay() {
        let mut map = SlotMap::new(8, 2).keeping_first(2);
        map.append(8);
        // Positions 0 and 1 were never fetched, but they are sinks.
        let mut fetches = vec![0, 0, 3, 1, 2, 5, 0, 0];
        let moves = map.make_room(2, &mut fetches).unwrap();
        assert_eq!(
            moves,
            vec![SlotMove { from: 6, to: 3 }, SlotMove { from: 7, to: 4 }]
        );
        assert_eq!(map.positions(), &[0, 1, 2, 6, 7, 5]);
    }

    #[test]
    fn a_step_that_cannot_fit_changes_nothing() {
        let mut map = SlotMap::new(8, 4);
        map.append(8);
        let mut fetches = vec![1u32; 8];
        let err = map.make_room(5, &mut fetches).unwrap_err();
        assert_eq!(
            err,
            NoRoom {
                incoming: 5,
                capacity: 8,
                window: 4
            }
        );
        assert_eq!(
            err.to_string(),
            "a step of 5 tokens does not fit a KV pool of 8 tokens that keeps the newest 4 \
             (raise --kv-pool-capacity)"
        );
        assert_eq!(map.slots(), 8);
        assert_eq!(fetches, vec![1u32; 8]);
        // More than the whole pool never fits.
        assert_eq!(
            map.make_room(9, &mut fetches),
            Err(NoRoom {
                incoming: 9,
                capacity: 8,
                window: 4
            })
        );
        assert_eq!(map.slots(), 8);
    }
}
