//! Schema evolution: `alter TABLE add-column NAME:TYPE` (docs/FORMAT.md "Schema evolution").
//!
//! Delta's rule for added columns: they are nullable, so rows written before keep their bytes
//! (no key for the new column) and readers treat the missing key as null, as Delta readers treat
//! a column missing from an older data file. Type changes and drops are refused.

use std::collections::{BTreeMap, HashSet};

use crate::format::actions::Action;
use crate::error::{Error, Result};
use crate::format::schema::Schema;
use crate::table::{Table, WriteOptions, serializable_info};

/// Add the nullable column `spec` (`NAME:TYPE`, the CLI's column syntax) as one `ADD COLUMNS`
/// commit holding the new `metaData` (Delta's operation name and `columns` parameter). Returns
/// the new version.
///
/// Errors: [`Error::InvalidArgument`] for a bad spec, a NOT NULL column, a name that exists regardless of
/// case (a different type: type changes are not supported), or a reserved name;
/// [`Error::ConcurrentWrite`] when a commit after the version read changed the metadata or
/// protocol (blind appends are rebased over), or `expect_version` no longer holds.
pub fn add_column(table: &Table, spec: &str, opts: &WriteOptions) -> Result<u64> {
    let read_version = table.latest_version()?;
    let snap = table.snapshot(read_version)?;
    table.check_writable_as(&snap, "alter")?;
    let added = Schema::parse_cli(&[spec.to_string()])?;
    let Some(col) = added.columns.into_iter().next() else {
        return Err(Error::InvalidArgument(format!("{} is not NAME:TYPE", crate::util::quote::quoted(spec))));
    };
    if !col.nullable {
        return Err(Error::InvalidArgument(format!(
            "column {}: an added column must be nullable (Delta: rows written before have no value for it); drop the `!`",
            crate::util::quote::quoted(&col.name)
        )));
    }
    if let Some(old) = snap
        .schema
        .columns
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(&col.name))
    {
        return Err(Error::InvalidArgument(if old.ty == col.ty {
            format!(
                "column {} already exists (column names are case-insensitive)",
                crate::util::quote::quoted(&old.name)
            )
        } else {
            format!(
                "column {} already exists as {}: changing a column's type is not supported (Delta allows only adding nullable columns here)",
                crate::util::quote::quoted(&old.name),
                old.ty
            )
        }));
    }
    let mut schema = snap.schema.clone();
    schema.columns.push(col.clone());
    schema.check_unique_names()?;
    let mut metadata = snap.metadata.clone();
    metadata.schema_string = schema.to_schema_string();
    // A type that needs a table feature the protocol lacks upgrades it in the same commit.
    let needed: Vec<&str> = schema
        .features()
        .into_iter()
        .filter(|f| !snap.protocol.reader_features.iter().flatten().any(|r| r == f))
        .collect();
    let protocol = (!needed.is_empty()).then(|| crate::log::snapshot::protocol_with(&needed, Some(&snap.protocol)));
    let field = serde_json::json!([{"column": {"name": col.name, "type": col.ty.delta_type(), "nullable": true, "metadata": {}}}]);
    let mut params = BTreeMap::from([("columns".to_string(), field.to_string())]);
    params.extend(opts.extra_params.iter().cloned());
    let metrics = BTreeMap::new();
    let res = crate::table::commit::commit_loop_serializable(table, read_version, &HashSet::new(), opts.expect_version, |_, ts| {
        let mut actions = vec![serializable_info("ADD COLUMNS", &params, &metrics, read_version, ts)];
        actions.extend(protocol.clone().map(Action::protocol));
        actions.push(Action::metadata(metadata.clone()));
        actions
    });
    table.finish(res, &[], &snap)
}
