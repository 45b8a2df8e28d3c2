//! What the bytes mean: the schema, Delta actions, canonical JSONL rows, other writers' Parquet
//! data files, and the errors that teach (docs/FORMAT.md, docs/ARCHITECTURE.md).

pub mod actions;
pub mod diagnose;
pub mod dv;
pub mod expr;
pub mod parquet;
pub mod rows;
pub mod schema;
