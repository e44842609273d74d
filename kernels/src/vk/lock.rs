//! Locking the device's shared state.

use std::sync::{Mutex, MutexGuard};

/// A poisoned lock only means another thread panicked mid-call; the Vulkan handles inside stay
/// valid, so carry on rather than cascade the panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
