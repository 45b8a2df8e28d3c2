//! The operating system beneath the table: opens that cannot leave the table folder, the one
//! mountinfo reader and failpoints (docs/ARCHITECTURE.md).

pub mod beneath;
pub mod failpoint;
pub mod group_sync;
pub mod mountinfo;
