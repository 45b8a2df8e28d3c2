//! A small map that forgets its least recently used entries: the mount's bounded caches of open
//! descriptors (data files, staged files) and of version facts (docs/MOUNT.md "Limits").

use std::collections::HashMap;
use std::sync::Arc;

/// At most `cap` entries, and entries of at most `budget` bytes in all (as their inserter
/// sized them, [`Lru::put_sized`]; the most recently inserted entry is kept even when it alone
/// is larger); inserting one more drops the least recently used (`get` and `put` count as uses).
/// Eviction scans the map (O(cap)), which suits the few hundred entries kept.
#[derive(Debug)]
pub struct Lru<K, V> {
    cap: usize,
    budget: usize,
    bytes: usize,
    tick: u64,
    map: HashMap<K, (u64, Arc<V>, usize)>,
}

impl<K: std::hash::Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map that keeps at most `cap` entries (at least one).
    pub fn new(cap: usize) -> Self {
        Lru::with_budget(cap, usize::MAX)
    }

    /// An empty map that keeps at most `cap` entries (at least one) of at most `budget` bytes.
    pub fn with_budget(cap: usize, budget: usize) -> Self {
        Lru {
            cap: cap.max(1),
            budget,
            bytes: 0,
            tick: 0,
            map: HashMap::new(),
        }
    }

    /// The value of `k`, now the most recently used.
    pub fn get(&mut self, k: &K) -> Option<Arc<V>> {
        self.tick += 1;
        let t = self.tick;
        self.map.get_mut(k).map(|e| {
            e.0 = t;
            e.1.clone()
        })
    }

    /// Insert or replace `k`, dropping the least recently used entries when full.
    pub fn put(&mut self, k: K, v: Arc<V>) {
        self.put_sized(k, v, 0);
    }

    /// [`Lru::put`] of an entry of `size` bytes: the least recently used entries are dropped
    /// until it fits the byte budget (or is the only entry).
    pub fn put_sized(&mut self, k: K, v: Arc<V>, size: usize) {
        if let Some((_, _, old)) = self.map.remove(&k) {
            self.bytes -= old;
        }
        while !self.map.is_empty() && (self.map.len() >= self.cap || self.bytes.saturating_add(size) > self.budget) {
            let Some(oldest) = self.map.iter().min_by_key(|(_, (t, _, _))| *t).map(|(k, _)| k.clone()) else {
                break;
            };
            if let Some((_, _, b)) = self.map.remove(&oldest) {
                self.bytes -= b;
            }
        }
        self.tick += 1;
        self.bytes += size;
        self.map.insert(k, (self.tick, v, size));
    }

    /// Remove and return the least recently used entry.
    pub fn pop_oldest(&mut self) -> Option<Arc<V>> {
        let oldest = self.map.iter().min_by_key(|(_, (t, _, _))| *t).map(|(k, _)| k.clone())?;
        self.remove(&oldest)
    }

    /// The bytes of the entries held ([`Lru::put_sized`]).
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forget `k`; returns its value.
    pub fn remove(&mut self, k: &K) -> Option<Arc<V>> {
        self.map.remove(k).map(|(_, v, b)| {
            self.bytes -= b;
            v
        })
    }

    #[cfg(test)]
    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_budget_drops_the_least_recently_used() {
        let mut l = Lru::with_budget(100, 1000);
        for k in 0..10 {
            l.put_sized(k, Arc::new(k), 300);
            assert!(l.bytes() <= 1000, "{} bytes held", l.bytes());
        }
        assert_eq!(l.len(), 3);
        assert!(l.get(&9).is_some() && l.get(&6).is_none());
        // One entry over the whole budget is still kept, alone.
        l.put_sized(99, Arc::new(99), 5000);
        assert_eq!((l.len(), l.bytes()), (1, 5000));
        assert_eq!(l.pop_oldest().as_deref(), Some(&99));
        assert_eq!((l.len(), l.bytes()), (0, 0));
    }
}
