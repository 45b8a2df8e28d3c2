//! Operations on a whole table, each with an options value and a report: check, vacuum,
//! optimize, alter, the change data feed and export (docs/CLI.md, docs/ARCHITECTURE.md).

pub mod alter;
pub mod arrow;
pub mod changes;
pub mod check;
pub mod dml;
pub mod edit;
pub mod export;
pub mod optimize;
pub mod properties;
pub mod vacuum;
