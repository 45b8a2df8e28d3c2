//! A version's rows as Arrow record batches, read file by file in batches of
//! [`crate::ops::export::convert::BATCH_ROWS`] rows (docs/PYTHON.md "Outputs"): the reader behind
//! the Python package's `to_arrow`. Memory: one batch and one read buffer, whatever the size of
//! the version.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};

use crate::error::Result;
use crate::log::snapshot::Snapshot;
use crate::ops::export::convert::{JsonlBatches, arrow_schema, writes_type};
use crate::table::Table;

/// The record batches of one version: its data files in the order of the snapshot, each
/// streamed through [`JsonlBatches`]. Every data file is opened (and its size checked) before
/// the first batch, as `tinydelta read` does: a version is read whole or not at all (a bounded
/// number of them kept open meanwhile, [`Table::open_data_files`]).
pub struct VersionBatches {
    schema: crate::format::schema::Schema,
    arrow: SchemaRef,
    /// The table folder (data file paths in messages).
    root: PathBuf,
    files: crate::table::DataFiles,
    current: Option<JsonlBatches<BufReader<crate::table::CheckedLen<File>>>>,
}

/// The rows of `snap` (a version of `t`) as Arrow record batches (types as docs/EXPORT.md
/// "Table": a `json` column is its canonical text).
///
/// Errors: as [`Table::open_data_files`]; [`crate::error::Error::InvalidArgument`] for a column type
/// with no Arrow form (a map whose keys are not strings).
pub fn batches(t: &Table, snap: &Snapshot) -> Result<VersionBatches> {
    if let Some(c) = snap.schema.columns.iter().find(|c| !writes_type(&c.ty)) {
        return Err(crate::error::Error::InvalidArgument(format!(
            "column {} of type {} has no Arrow form (a map whose keys are not strings)",
            crate::util::quote::quoted(&c.name),
            c.ty
        )));
    }
    let files = t.open_data_files(snap)?;
    Ok(VersionBatches {
        arrow: arrow_schema(&snap.schema),
        schema: snap.schema.clone(),
        root: t.root().to_path_buf(),
        files,
        current: None,
    })
}

impl VersionBatches {
    /// The next batch, `None` after the last file.
    ///
    /// Errors: as [`JsonlBatches::next_batch`], naming the data file and the line.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(cur) = &mut self.current {
                match cur.next_batch()? {
                    Some(b) => return Ok(Some(b)),
                    None => self.current = None,
                }
            }
            let Some((f, file)) = self.files.next_file()? else {
                return Ok(None);
            };
            let path = self.root.join(&f.path);
            self.current = Some(JsonlBatches::new(
                BufReader::with_capacity(1 << 20, crate::table::CheckedLen::new(file, &f)),
                &path,
                &self.schema,
            )?);
        }
    }
}

impl Iterator for VersionBatches {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch()
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))
            .transpose()
    }
}

impl RecordBatchReader for VersionBatches {
    fn schema(&self) -> SchemaRef {
        self.arrow.clone()
    }
}
