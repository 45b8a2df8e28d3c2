//! Schema evolution: `alter TABLE add-column NAME:TYPE` (docs/FORMAT.md "Schema evolution"),
//! and table properties: `alter TABLE set-property KEY=VALUE` (docs/FORMAT.md "Table properties").
//!
//! Delta's rule for added columns: they are nullable, so rows written before keep their bytes
//! (no key for the new column) and readers treat the missing key as null, as Delta readers treat
//! a column missing from an older data file. Type changes and drops are refused.

use std::collections::{BTreeMap, HashSet};

use crate::error::{Error, Result};
use crate::format::schema::Schema;
use crate::table::{Table, WriteOptions, schema_change_actions, serializable_info};
use crate::util::quote::quoted;

/// Add the nullable column `spec` (`NAME:TYPE`, the CLI's column syntax) as one `ADD COLUMNS`
/// commit holding the new `metaData` (Delta's operation name and `columns` parameter). Returns
/// the new version.
///
/// `NAME` may be a path `PARENT.FIELD` (any depth): the field is added at the end of the struct
/// column (or struct field) `PARENT`, or of the structs an array or map `PARENT` holds.
///
/// Errors: [`Error::InvalidArgument`] for a bad spec, a NOT NULL column, a name that exists regardless of
/// case (a different type: type changes are not supported), a path naming no struct, or a reserved name;
/// [`Error::ConcurrentWrite`] when a commit after the version read changed the metadata or
/// protocol (blind appends are rebased over), or `expect_version` no longer holds.
pub fn add_column(table: &Table, spec: &str, opts: &WriteOptions) -> Result<u64> {
    let read_version = table.latest_version()?;
    let snap = table.snapshot(read_version)?;
    table.check_writable_as(&snap, "alter")?;
    // `user.email:str` adds the field `email` to the struct column `user` (docs/FORMAT.md
    // "Schema evolution"); the type is parsed with the last segment as the column's name.
    let (name, _) = spec
        .split_once(':')
        .ok_or_else(|| Error::InvalidArgument(format!("{} is not NAME:TYPE", quoted(spec))))?;
    // `events[].kind` and `attrs{}.note`, as `append --merge-schema` prints added paths, name
    // the same field as `events.kind` and `attrs.note`.
    let path: Vec<&str> = name
        .split('.')
        .map(|p| p.trim_end_matches("[]").trim_end_matches("{}"))
        .collect();
    if path.iter().any(|p| p.is_empty()) {
        return Err(Error::InvalidArgument(format!(
            "{} has an empty name segment (a nested field is PARENT.FIELD:TYPE)",
            quoted(spec)
        )));
    }
    let leaf = &spec[name.len() - path[path.len() - 1].len()..];
    let added = Schema::parse_cli(&[leaf.to_string()])?;
    let Some(col) = added.columns.into_iter().next() else {
        return Err(Error::InvalidArgument(format!("{} is not NAME:TYPE", quoted(spec))));
    };
    if !col.nullable {
        return Err(Error::InvalidArgument(format!(
            "column {}: an added column must be nullable (Delta: rows written before have no value for it); drop the `!`",
            quoted(name)
        )));
    }
    let schema = snap.schema.with_field(&path, col.clone())?;
    let changes = schema_change_actions(&snap, &schema);
    let field = serde_json::json!([{"column": {"name": name, "type": col.ty.delta_type(), "nullable": true, "metadata": {}}}]);
    let mut params = BTreeMap::from([("columns".to_string(), field.to_string())]);
    params.extend(opts.extra_params.iter().cloned());
    let metrics = BTreeMap::new();
    let res = crate::table::commit::commit_loop_serializable(table, read_version, &HashSet::new(), opts.expect_version, |_, ts| {
        let mut actions = vec![serializable_info("ADD COLUMNS", &params, &metrics, read_version, ts)];
        actions.extend(changes.iter().cloned());
        actions
    });
    table.finish(res, &[], &snap)
}

/// Set (`Some`) or unset (`None`) table properties in `metaData.configuration` as one
/// `SET TBLPROPERTIES` / `UNSET TBLPROPERTIES` commit (Delta's operation names; docs/FORMAT.md
/// "Table properties"). Values of the properties tinydelta reads are checked first
/// ([`check_property`]). Returns the new version, or `None` when nothing changes (nothing
/// committed).
///
/// Errors: [`Error::InvalidArgument`] for an empty key or a value a known property does not
/// take; [`Error::ConcurrentWrite`] when a commit after the version read changed the metadata
/// or protocol, or `expect_version` no longer holds.
pub fn set_properties(table: &Table, changes: &[(String, Option<String>)], opts: &WriteOptions) -> Result<Option<u64>> {
    let read_version = table.latest_version()?;
    let snap = table.snapshot(read_version)?;
    table.check_writable_as(&snap, "alter")?;
    let mut metadata = snap.metadata.clone();
    for (k, v) in changes {
        if k.is_empty() {
            return Err(Error::InvalidArgument("a table property needs a non-empty name".into()));
        }
        match v {
            Some(v) => {
                crate::ops::properties::check_property(k, v)?;
                metadata.configuration.insert(k.clone(), v.clone());
            }
            None => {
                metadata.configuration.remove(k);
            }
        }
    }
    if metadata.configuration == snap.metadata.configuration {
        return Ok(None);
    }
    let unset = changes.iter().all(|(_, v)| v.is_none());
    let (operation, params) = if unset {
        let keys: Vec<&str> = changes.iter().map(|(k, _)| k.as_str()).collect();
        ("UNSET TBLPROPERTIES", BTreeMap::from([("properties".to_string(), serde_json::json!(keys).to_string())]))
    } else {
        let set: BTreeMap<&str, &str> = changes
            .iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| (k.as_str(), v)))
            .collect();
        ("SET TBLPROPERTIES", BTreeMap::from([("properties".to_string(), serde_json::json!(set).to_string())]))
    };
    let mut params = params;
    params.extend(opts.extra_params.iter().cloned());
    let metrics = BTreeMap::new();
    let res = crate::table::commit::commit_loop_serializable(table, read_version, &HashSet::new(), opts.expect_version, |_, ts| {
        vec![
            serializable_info(operation, &params, &metrics, read_version, ts),
            crate::format::actions::Action::metadata(metadata.clone()),
        ]
    });
    table.finish(res, &[], &snap).map(Some)
}
