//! The one lock helper.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Lock `m`, taking the data of a poisoned mutex as it is: a panic in another thread while it
/// held the lock must not take down every later request (the data is kept consistent by each
/// critical section, which never leaves half-made state across a call that can panic).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
