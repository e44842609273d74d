//! The service's queue as its callers see it: completions running, waiting for a cache row,
//! and sent to the engine's thread but not yet taken by it. A caller that bounds the queue
//! (`--max-queue`) reserves its place as it submits, in one atomic step, so requests that
//! arrive together are each counted before the next is checked: a burst cannot pass a limit
//! that every one of them saw before any was counted.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::ServiceError;

pub(super) struct Queue {
    /// Completions the engine's thread runs at once.
    slots: AtomicUsize,
    running: AtomicUsize,
    /// Completions the engine's thread holds that wait for a cache row.
    waiting: AtomicUsize,
    /// Completions submitted and not yet counted in `running` or `waiting`.
    submitted: AtomicUsize,
}

impl Queue {
    pub(super) fn new() -> Self {
        Self {
            slots: AtomicUsize::new(1),
            running: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            submitted: AtomicUsize::new(0),
        }
    }

    /// Set once, before the engine's thread takes requests.
    pub(super) fn set_slots(&self, slots: usize) {
        self.slots.store(slots.max(1), Ordering::SeqCst);
    }

    /// Completions the engine's thread holds that wait for a cache row.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Counts `n` completions as submitted, unless `limit` or more completions would wait
    /// ahead of them: those waiting, and those submitted past the free slots.
    pub(super) fn reserve(&self, n: usize, limit: Option<usize>) -> Result<(), ServiceError> {
        let mut submitted = self.submitted.load(Ordering::SeqCst);
        loop {
            if let Some(limit) = limit {
                let free = self
                    .slots
                    .load(Ordering::SeqCst)
                    .saturating_sub(self.running.load(Ordering::SeqCst));
                let waiting = self.waiting() + submitted.saturating_sub(free);
                if waiting >= limit {
                    return Err(ServiceError::QueueFull { waiting, limit });
                }
            }
            match self.submitted.compare_exchange(
                submitted,
                submitted + n,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => submitted = now,
            }
        }
    }

    /// The engine's thread took (or refused) submissions of `n` completions, and
    /// [`publish`](Self::publish)ed the load that counts them.
    pub(super) fn taken(&self, n: usize) {
        // Never below zero, whatever a caller's bookkeeping did.
        let _ = self
            .submitted
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                Some(s.saturating_sub(n))
            });
    }

    /// The engine thread's load now. Published before [`taken`](Self::taken), so that a
    /// completion is counted twice for a moment (refusing a little early) rather than not at
    /// all.
    pub(super) fn publish(&self, running: usize, waiting: usize) {
        self.running.store(running, Ordering::SeqCst);
        self.waiting.store(waiting, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_fills_the_free_slots_and_the_queue_then_is_refused() {
        // One slot and a queue of two: of twelve requests at once, three are taken.
        let q = Queue::new();
        let taken = (0..12).filter(|_| q.reserve(1, Some(2)).is_ok()).count();
        assert_eq!(taken, 3);
        match q.reserve(1, Some(2)) {
            Err(ServiceError::QueueFull { waiting, limit }) => assert_eq!((waiting, limit), (2, 2)),
            other => panic!("{other:?}"),
        }
        // The engine's thread took them: one runs, two wait; still full.
        q.publish(1, 2);
        q.taken(3);
        assert!(q.reserve(1, Some(2)).is_err());
        // The first finished and the next runs: room for one.
        q.publish(1, 1);
        assert!(q.reserve(1, Some(2)).is_ok());
        assert!(q.reserve(1, Some(2)).is_err());
        // Unbounded submissions are counted, never refused.
        assert!(q.reserve(5, None).is_ok());
    }
}
