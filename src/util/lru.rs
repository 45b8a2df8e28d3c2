//! A small map that forgets its least recently used entries: the mount's bounded caches of open
//! descriptors (data files, staged files) and of version facts (docs/MOUNT.md "Limits").

use std::collections::HashMap;
use std::sync::Arc;

/// At most `cap` entries; inserting one more drops the least recently used (`get` and `put`
/// count as uses). Eviction scans the map (O(cap)), which suits the few hundred entries kept.
#[derive(Debug)]
pub struct Lru<K, V> {
    cap: usize,
    tick: u64,
    map: HashMap<K, (u64, Arc<V>)>,
}

impl<K: std::hash::Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map that keeps at most `cap` entries (at least one).
    pub fn new(cap: usize) -> Self {
        Lru {
            cap: cap.max(1),
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

    /// Insert or replace `k`, dropping the least recently used entry when full.
    pub fn put(&mut self, k: K, v: Arc<V>) {
        if self.map.len() >= self.cap
            && !self.map.contains_key(&k)
            && let Some(oldest) = self.map.iter().min_by_key(|(_, (t, _))| *t).map(|(k, _)| k.clone())
        {
            self.map.remove(&oldest);
        }
        self.tick += 1;
        self.map.insert(k, (self.tick, v));
    }

    /// Forget `k`; returns its value.
    pub fn remove(&mut self, k: &K) -> Option<Arc<V>> {
        self.map.remove(k).map(|(_, v)| v)
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
