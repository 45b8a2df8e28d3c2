//! A small map that forgets its least recently used entries: the mount's bounded caches of open
//! descriptors (data files, staged files) and of version facts (docs/MOUNT.md "Limits").

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// At most `cap` entries, and entries of at most `budget` bytes in all (as their inserter
/// sized them, [`Lru::put_sized`]; the most recently inserted entry is kept even when it alone
/// is larger); inserting one more drops the least recently used (`get` and `put` count as uses).
/// Every operation is O(log cap): the keys are also kept ordered by their last use, so an
/// eviction (one per data file a read of a version of a million files opens) takes the oldest
/// without scanning the map.
#[derive(Debug)]
pub struct Lru<K, V> {
    cap: usize,
    budget: usize,
    bytes: usize,
    tick: u64,
    map: HashMap<K, (u64, Arc<V>, usize)>,
    /// The keys of `map` by their last use (its tick), oldest first.
    order: BTreeMap<u64, K>,
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
            order: BTreeMap::new(),
        }
    }

    /// The value of `k`, now the most recently used.
    pub fn get(&mut self, k: &K) -> Option<Arc<V>> {
        self.tick += 1;
        let t = self.tick;
        let e = self.map.get_mut(k)?;
        // The key moves to its new place in the order (no clone of it).
        if let Some(key) = self.order.remove(&e.0) {
            self.order.insert(t, key);
        }
        e.0 = t;
        Some(e.1.clone())
    }

    /// Insert or replace `k`, dropping the least recently used entries when full.
    pub fn put(&mut self, k: K, v: Arc<V>) {
        self.put_sized(k, v, 0);
    }

    /// [`Lru::put`] of an entry of `size` bytes: the least recently used entries are dropped
    /// until it fits the byte budget (or is the only entry).
    pub fn put_sized(&mut self, k: K, v: Arc<V>, size: usize) {
        self.remove(&k);
        while !self.map.is_empty() && (self.map.len() >= self.cap || self.bytes.saturating_add(size) > self.budget) {
            if self.pop_oldest().is_none() {
                break;
            }
        }
        self.tick += 1;
        self.bytes += size;
        self.order.insert(self.tick, k.clone());
        self.map.insert(k, (self.tick, v, size));
    }

    /// Remove and return the least recently used entry.
    pub fn pop_oldest(&mut self) -> Option<Arc<V>> {
        let (_, oldest) = self.order.pop_first()?;
        self.map.remove(&oldest).map(|(_, v, b)| {
            self.bytes -= b;
            v
        })
    }

    /// The bytes of the entries held ([`Lru::put_sized`]).
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forget `k`; returns its value.
    pub fn remove(&mut self, k: &K) -> Option<Arc<V>> {
        self.map.remove(k).map(|(t, v, b)| {
            self.order.remove(&t);
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

    /// Against a plain model (a list, most recent last): the same entries kept and evicted for a
    /// long mixed sequence of gets, puts, replacements, removals and pops.
    #[test]
    fn evicts_as_a_plain_list_would() {
        let mut l = Lru::new(8);
        let mut model: Vec<u32> = Vec::new();
        let mut x = 12345u32;
        for _ in 0..20_000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let k = (x >> 16) % 20;
            match (x >> 8) % 5 {
                0 | 1 => {
                    l.put(k, Arc::new(k));
                    model.retain(|&m| m != k);
                    if model.len() >= 8 {
                        model.remove(0);
                    }
                    model.push(k);
                }
                2 => {
                    let got = l.get(&k).map(|v| *v);
                    let want = model.iter().position(|&m| m == k).map(|i| model.remove(i));
                    if let Some(w) = want {
                        model.push(w);
                    }
                    assert_eq!(got, want);
                }
                3 => {
                    assert_eq!(l.remove(&k).map(|v| *v), model.iter().position(|&m| m == k).map(|i| model.remove(i)));
                }
                _ => {
                    let want = (!model.is_empty()).then(|| model.remove(0));
                    assert_eq!(l.pop_oldest().map(|v| *v), want);
                }
            }
            assert_eq!((l.len(), l.order.len()), (model.len(), model.len()));
        }
    }
}
