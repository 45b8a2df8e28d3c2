//! Table properties tinydelta reads from `metaData.configuration` (docs/FORMAT.md "Table
//! properties"): their names, how their values parse, and the check `alter set-property` makes.

use crate::error::{Error, Result};
use crate::util::quote::quoted;

/// The table property that turns auto compaction on or off (Delta's name; docs/FORMAT.md
/// "Auto compaction"): `true`, `auto` or `legacy` on, `false` off.
pub const AUTO_COMPACT_PROPERTY: &str = "delta.autoOptimize.autoCompact";

/// The table property with the number of small files that starts an auto compaction
/// (tinydelta's; Databricks keeps the same setting, `minNumFiles`, in the session).
pub const AUTO_COMPACT_MIN_FILES_PROPERTY: &str = "tinydelta.autoCompact.minNumFiles";

/// Small files in the latest version that start an auto compaction (Databricks' default
/// `minNumFiles`).
pub const DEFAULT_AUTO_COMPACT_MIN_FILES: usize = 50;

/// [`AUTO_COMPACT_PROPERTY`]'s value as on (`true`) or off; `None` when it is not one of
/// `true`, `false`, `auto`, `legacy` (any case).
pub fn parse_auto_compact(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "auto" | "legacy" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// Refuse a value that a property tinydelta reads would not take (docs/FORMAT.md "Table
/// properties"); other properties are stored as given.
pub fn check_property(key: &str, value: &str) -> Result<()> {
    // tinydelta writes no physical names (PROTOCOL "Column Mapping"; docs/FORMAT.md "Column
    // mapping").
    if key == crate::format::schema::COLUMN_MAPPING_MODE && value != "none" {
        return Err(Error::InvalidArgument(format!(
            "table property {key} = {}: unsupported: writing a table with column mapping",
            quoted(value)
        )));
    }
    let ok = match key {
        crate::ops::vacuum::RETENTION_PROPERTY => crate::ops::vacuum::parse_interval(value).is_some(),
        AUTO_COMPACT_PROPERTY => parse_auto_compact(value).is_some(),
        AUTO_COMPACT_MIN_FILES_PROPERTY => value.trim().parse::<usize>().is_ok_and(|n| n >= 2),
        crate::table::CHECKPOINT_INTERVAL_PROPERTY => value.trim().parse::<u64>().is_ok_and(|n| n >= 1),
        _ => true,
    };
    if ok {
        return Ok(());
    }
    let wants = match key {
        crate::ops::vacuum::RETENTION_PROPERTY => "an interval like \"interval 7 days\"",
        AUTO_COMPACT_PROPERTY => "true, false, auto or legacy",
        crate::table::CHECKPOINT_INTERVAL_PROPERTY => "a whole number of commits from 1",
        _ => "a whole number of files from 2",
    };
    Err(Error::InvalidArgument(format!(
        "table property {key} = {} is not {wants}",
        quoted(value)
    )))
}
