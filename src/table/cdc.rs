//! Change data files (PROTOCOL "Add CDC File"; docs/FORMAT.md "The change feed"): the rows a
//! row-level change deleted, the pre- and post-images of the rows it updated and the rows it
//! inserted, each with its `_change_type`, in `_change_data/cdc-<uuid>.jsonl`. A change data
//! reader takes the changes of a version that has `cdc` actions from those files alone, so a
//! copy-on-write rewrite shows as the rows that changed, not as every row of each rewritten file
//! deleted and inserted again.
//!
//! The file is created at the first row and held like a data file in flight
//! ([`crate::table::hold_data_file`]); its commit fsyncs it with the data files.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use crate::error::{IoContext, Result};
use crate::format::actions::AddCdcFile;
use crate::sys::beneath::Dir;
use crate::table::Table;

/// The folder of change data files, beneath the table root (PROTOCOL "Change Data Files").
pub const CHANGE_DATA_DIR: &str = "_change_data";

/// `_change_type` of a deleted row.
pub const DELETE: &str = "delete";
/// `_change_type` of an inserted row.
pub const INSERT: &str = "insert";
/// `_change_type` of an updated row as it was.
pub const PREIMAGE: &str = "update_preimage";
/// `_change_type` of an updated row as it is now.
pub const POSTIMAGE: &str = "update_postimage";

/// The change data file of one commit, written as rows come.
pub struct ChangeData<'t> {
    table: &'t Table,
    open: Option<Open>,
    buf: Vec<u8>,
    rows: u64,
}

struct Open {
    dir: Dir,
    name: String,
    file: File,
    path: PathBuf,
    size: u64,
}

impl<'t> ChangeData<'t> {
    /// Nothing is created until the first row.
    pub fn new(table: &'t Table) -> ChangeData<'t> {
        ChangeData {
            table,
            open: None,
            buf: Vec::new(),
            rows: 0,
        }
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Append `row` (one canonical row, a JSON object, without its newline) with its
    /// `_change_type` `kind` as the object's last member. Errors: [`crate::Error::Io`] creating
    /// or writing the file, naming it.
    pub fn push(&mut self, row: &[u8], kind: &str) -> Result<()> {
        let row = row.strip_suffix(b"\n").unwrap_or(row);
        let body = row.strip_suffix(b"}").unwrap_or(row);
        self.buf.extend_from_slice(body);
        if body.iter().rev().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            self.buf.push(b',');
        }
        self.buf.extend_from_slice(b"\"_change_type\":\"");
        self.buf.extend_from_slice(kind.as_bytes());
        self.buf.extend_from_slice(b"\"}\n");
        self.rows += 1;
        if self.buf.len() >= 1 << 20 {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> Result<()> {
        if self.open.is_none() {
            let root = self.table.dir();
            let dir = match root.try_dir(CHANGE_DATA_DIR)? {
                Some(d) => d,
                None => match root.create_dir(CHANGE_DATA_DIR, 0o755) {
                    Ok(d) => {
                        root.sync()?;
                        d
                    }
                    // Another writer made it meanwhile.
                    Err(_) => root.dir(CHANGE_DATA_DIR)?,
                },
            };
            let name = format!("cdc-{}.jsonl", uuid::Uuid::new_v4());
            let file = dir.create_new(&name, 0o644)?;
            let path = dir.join(&name);
            let open = Open {
                dir,
                name,
                file,
                path,
                size: 0,
            };
            if let Err(e) = crate::table::hold_data_file(&open.dir, &open.name, &open.file) {
                let _ = open.dir.try_unlink(&open.name);
                return Err(e);
            }
            self.open = Some(open);
        }
        if let Some(o) = self.open.as_mut() {
            (&o.file).write_all(&self.buf).ctx("write", &o.path)?;
            o.size += self.buf.len() as u64;
        }
        self.buf.clear();
        Ok(())
    }

    /// The file written and its `cdc` action, or `None` when no row was pushed. The folder's
    /// entry is made durable here; the file's bytes by the commit that names it (with its data
    /// files). Errors: as [`ChangeData::push`], and fsync of the folder.
    pub fn finish(mut self) -> Result<Option<Written>> {
        if self.rows == 0 {
            return Ok(None);
        }
        let res = self.write_out().and_then(|()| match &self.open {
            Some(o) => o.dir.sync(),
            None => Ok(()),
        });
        if let Err(e) = res {
            self.discard();
            return Err(e);
        }
        let Some(o) = self.open.take() else { return Ok(None) };
        Ok(Some(Written {
            action: AddCdcFile {
                path: format!("{CHANGE_DATA_DIR}/{}", o.name),
                partition_values: Default::default(),
                size: o.size,
                data_change: false,
                tags: Some([("numRecords".to_string(), self.rows.to_string())].into()),
            },
            file: o.file,
            path: o.path,
            dir: o.dir,
            name: o.name,
        }))
    }

    /// Delete what was written (the commit failed before publishing).
    pub fn discard(&mut self) {
        if let Some(o) = self.open.take() {
            let _ = o.dir.try_unlink(&o.name);
        }
    }
}

impl Drop for ChangeData<'_> {
    fn drop(&mut self) {
        self.discard();
    }
}

/// A finished change data file: its action, and the file held until the commit is linked.
pub struct Written {
    /// The `cdc` action (path relative to the table root).
    pub action: AddCdcFile,
    /// The file, for the commit's fsync; holding it keeps vacuum away (`flock`).
    pub file: File,
    /// Its path, for errors.
    pub path: PathBuf,
    dir: Dir,
    name: String,
}

impl Written {
    /// Delete it (nothing was published).
    pub fn discard(&self) {
        let _ = self.dir.try_unlink(&self.name);
    }
}
