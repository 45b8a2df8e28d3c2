//! The lowest layer: helpers with no knowledge of tables (docs/ARCHITECTURE.md).

pub mod lru;
pub mod pool;
pub mod quote;
pub mod spelling;
pub mod sync;
pub mod time;
