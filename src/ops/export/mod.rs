//! `tinydelta export TABLE DEST [--version N | --all-versions]`: write a Delta table with
//! Parquet data files that every Delta engine reads (docs/EXPORT.md "Export").
//!
//! The source is read only through the snapshot/replay API ([`Table::snapshot`],
//! [`Table::snapshot_after`], [`Table::read_commit`]: every version proven by the log segment)
//! and its data files only through the checked opener ([`Table::open_data_file`]). Each data
//! file becomes one Parquet file ([`convert::write_parquet`], streamed in batches), written
//! under a temporary name, fsynced and renamed into place before the commit that names it is
//! published with tinydelta's own [`publish::publish`] (a temporary commit file, fsynced, then
//! `link(2)`ed as `_delta_log/<v:020>.json`, never replacing a version, and `_delta_log/`
//! fsynced); then the commit file's mtime is set to its `commitInfo.timestamp` (and set again
//! by the next run if it stopped in between). An export interrupted anywhere leaves
//! DEST readable at its last complete version; running it again continues from there.
//!
//! Each commit records its source in `commitInfo.operationParameters` ([`PARAM_SOURCE_ID`],
//! [`PARAM_SOURCE_VERSION`], [`PARAM_MODE`]); a later run refuses ([`Error::ExportRefused`])
//! unless DEST's newest commit is such a record of the same table and mode and DEST's live files
//! are exactly those of that source version.


pub mod convert;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

pub use convert::write_parquet;

use crate::format::actions::{Action, Add, CommitInfo, Format, Metadata, Protocol, Remove, encode_path};
use crate::sys::beneath::{Dir, Kind};
use crate::log::publish::{self, Publish};
use crate::error::{Error, IoContext, Result};
use crate::log::files::{self, LOG_DIR, LogFile};
use crate::log::delta_checkpoint as checkpoint;
use crate::log::snapshot::Snapshot;
use crate::table::{ENGINE_INFO, Table};

/// `commitInfo.operationParameters` key: the source table's `metaData.id`.
pub const PARAM_SOURCE_ID: &str = "tinydeltaExportSourceId";
/// `commitInfo.operationParameters` key: the source version this DEST version holds.
pub const PARAM_SOURCE_VERSION: &str = "tinydeltaExportSourceVersion";
/// `commitInfo.operationParameters` key: `all-versions` or `snapshot`.
pub const PARAM_MODE: &str = "tinydeltaExportMode";
/// A Delta checkpoint is written at every version that is a multiple of this (as delta-rs's
/// default `delta.checkpointInterval`), and `_last_checkpoint` points at it.
pub const CHECKPOINT_INTERVAL: u64 = 100;

/// What to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One version of the source (the latest when `None`) as the next version of DEST (version
    /// 0 of a new DEST; a later run commits the difference to another source version).
    Snapshot(Option<u64>),
    /// Every version: version k of DEST holds the rows of version k of the source.
    AllVersions,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Snapshot(_) => "snapshot",
            Mode::AllVersions => "all-versions",
        }
    }
}

/// Reported after each DEST version is published.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// The source version just exported.
    pub source_version: u64,
    /// The last source version this run exports.
    pub last_version: u64,
    /// JSONL bytes read so far by this run.
    pub bytes_in: u64,
}

/// What an export did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The first and last DEST versions this run committed (`None`: DEST was up to date).
    pub dest_versions: Option<(u64, u64)>,
    /// The source version DEST's newest version now holds.
    pub source_version: u64,
    /// Parquet files written.
    pub files_written: u64,
    /// Files a version re-adds that an earlier DEST version already holds (a restore).
    pub files_reused: u64,
    /// Rows written into Parquet files by this run (an export of an older version than DEST
    /// holds writes none: it removes files).
    pub rows: u64,
    /// Rows DEST's newest version holds (those of source version `source_version`), whether
    /// this run wrote them or an earlier one did.
    pub rows_held: u64,
    /// JSONL bytes read.
    pub bytes_in: u64,
    /// Parquet bytes written.
    pub bytes_out: u64,
    /// Versions at which a Delta checkpoint was written.
    pub checkpoints: Vec<u64>,
    /// `--all-versions` into a new DEST of a table whose older versions a retention vacuum made
    /// unreadable: the first version exported (DEST starts there with a checkpoint;
    /// docs/EXPORT.md "All versions: `--all-versions`").
    pub started_at: Option<u64>,
}

/// The export record of one DEST commit.
#[derive(Debug, Clone)]
struct Marker {
    source_id: String,
    source_version: u64,
    mode: String,
}

impl Marker {
    fn of(info: &CommitInfo) -> Option<Marker> {
        let p = &info.operation_parameters;
        Some(Marker {
            source_id: p.get(PARAM_SOURCE_ID)?.clone(),
            source_version: p.get(PARAM_SOURCE_VERSION)?.parse().ok()?,
            mode: p.get(PARAM_MODE)?.clone(),
        })
    }
}

/// DEST: its folder handles and its state by log replay (paths decoded).
struct Dest {
    path: PathBuf,
    root: Dir,
    log: Dir,
    /// DEST's `metaData.id`.
    table_id: String,
    metadata: Option<Metadata>,
    /// DEST's protocol.
    protocol: Option<Protocol>,
    /// The newest version and its commit time.
    latest: Option<(u64, i64)>,
    marker: Option<Marker>,
    /// Live files.
    live: BTreeMap<String, Add>,
    /// Removed files not re-added (checkpoint tombstones).
    tombstones: BTreeMap<String, Remove>,
    /// Bytes of the live files.
    live_bytes: u64,
    /// Every file any version added, with the add that did.
    ever: HashMap<String, Add>,
    /// Folders with entries renamed into them since the last commit (to fsync before it).
    dirty: BTreeSet<String>,
}

/// Export `source` into the folder `dest` (created when missing) as `mode` says, calling
/// `progress` after each DEST version is published.
///
/// Errors: [`Error::ExportRefused`] when DEST holds something other than an earlier export of
/// the same table in the same mode (a Delta table no export wrote; an export of another
/// table or in the other mode), or another writer committed to it after the last export;
/// [`Error::Corrupt`] naming a source commit or data file that is damaged or whose rows are
/// not what its schema and `add` say; [`Error::Vacuumed`] when a version to export lost its
/// data files to a vacuum; [`Error::ConcurrentWrite`] when another writer published a DEST
/// version while this export ran; [`Error::NotDurable`], [`Error::Io`]. On any error the
/// versions already published stay (DEST is readable at its last complete version).
///
/// An error after this run published DEST versions is [`Error::ExportStopped`] (the exit
/// status of the error under it), saying which DEST versions this run published. When it
/// published none, the folders it created itself (DEST, `DEST/_delta_log`) are removed again,
/// each only when empty.
pub fn export(source: &Table, dest: &Path, mode: Mode, progress: &mut dyn FnMut(&Progress)) -> Result<Report> {
    let existed = dest.try_exists().ctx("stat", dest)?;
    let log_path = dest.join(LOG_DIR);
    let log_existed = log_path.try_exists().ctx("stat", &log_path)?;
    let mut report = Report::default();
    match export_into(source, dest, mode, progress, &mut report) {
        Ok(()) => Ok(report),
        Err(e) => match report.dest_versions {
            Some((first, last)) => Err(Error::ExportStopped {
                dest: dest.to_path_buf(),
                table: source.root().to_path_buf(),
                first,
                last,
                source_version: report.source_version,
                source: Box::new(e),
            }),
            None => {
                // Only folders this run created, and only when empty (rmdir refuses others).
                if !log_existed {
                    let _ = std::fs::remove_dir(&log_path);
                }
                if !existed {
                    let _ = std::fs::remove_dir(dest);
                }
                Err(e)
            }
        },
    }
}

fn export_into(
    source: &Table,
    dest: &Path,
    mode: Mode,
    progress: &mut dyn FnMut(&Progress),
    report: &mut Report,
) -> Result<()> {
    let latest = source.latest_version()?;
    // Columns are only ever added, so the newest exported version's schema holds every column
    // of the versions before it.
    let last = match mode {
        Mode::AllVersions => latest,
        Mode::Snapshot(v) => v.unwrap_or(latest).min(latest),
    };
    if let Some(c) = source
        .snapshot(last)?
        .schema
        .columns
        .iter()
        .find(|c| !convert::writes_type(&c.ty))
    {
        return Err(refused(
            dest,
            format!(
                "column {:?} has type {}, which export does not write (a map's keys must be str; docs/EXPORT.md \"Table\")",
                c.name, c.ty
            ),
        ));
    }
    let mut d = Dest::open(dest, source)?;
    if let Some(m) = &d.marker {
        let src_id = source.snapshot(m.source_version.min(latest))?.metadata.id;
        let refuse = |reason: String| Err(refused(dest, reason));
        if m.source_id != src_id {
            return refuse(format!(
                "it is an export of the table with id {}, not of {} (id {src_id})",
                m.source_id,
                source.root().display()
            ));
        }
        if m.mode != mode.name() {
            return refuse(format!(
                "it holds an export in {} mode; run the export again {}",
                m.mode,
                if m.mode == "all-versions" {
                    format!("with {}", crate::util::spelling::switch("all_versions"))
                } else {
                    format!("without {}", crate::util::spelling::switch("all_versions"))
                }
            ));
        }
        if m.source_version > latest {
            return refuse(format!(
                "it holds version {} of {}, which has only versions up to {latest}",
                m.source_version,
                source.root().display()
            ));
        }
    }
    match mode {
        Mode::AllVersions => export_all(source, &mut d, latest, report, progress)?,
        Mode::Snapshot(v) => export_snapshot(source, &mut d, v.unwrap_or(latest), report, progress)?,
    }
    // A run interrupted after a checkpoint version's commit but before its checkpoint.
    if let Some((v, _)) = d.latest
        && v > 0
        && v.is_multiple_of(CHECKPOINT_INTERVAL)
        && !report.checkpoints.contains(&v)
        && d.log.stat(&checkpoint::file_name(v))?.is_none()
    {
        checkpoint::write(&d.log, v, &d.checkpoint_state())?;
        report.checkpoints.push(v);
    }
    Ok(())
}

fn refused(dest: &Path, reason: String) -> Error {
    Error::ExportRefused {
        dest: dest.to_path_buf(),
        reason,
    }
}

/// `--all-versions`: source versions after the last exported one, each as the same DEST version.
fn export_all(
    source: &Table,
    d: &mut Dest,
    latest: u64,
    report: &mut Report,
    progress: &mut dyn FnMut(&Progress),
) -> Result<()> {
    let first = source.segment()?.first;
    if first > 0 {
        return Err(Error::InvalidArgument(format!(
            "{}: versions before {first} are not available (their commits were cleaned up), so {} cannot \
             export them; export one version with {}",
            source.root().display(),
            crate::util::spelling::switch("all_versions"),
            crate::util::spelling::opt("version")
        )));
    }
    let mut base = match &d.marker {
        None => None,
        Some(m) => {
            let (dv, dts) = d.latest.unwrap_or((0, 0));
            let snap = source.snapshot(m.source_version)?;
            if dv != m.source_version || dts != snap.timestamp {
                return Err(refused(
                    &d.path,
                    format!(
                        "its newest version {dv} (committed at {dts} ms) does not hold version {} of {} (committed at {} ms)",
                        m.source_version,
                        source.root().display(),
                        snap.timestamp
                    ),
                ));
            }
            d.check_matches(&snap)?;
            Some(snap)
        }
    };
    let mut start = base.as_ref().map_or(0, |b| b.version + 1);
    if let Some(b) = &base {
        report.source_version = b.version;
    }
    // A new DEST of a table whose older versions a retention vacuum made unreadable: from the
    // first version from which every version to the latest is readable.
    if base.is_none()
        && let Some(&(from, through)) = crate::table::history::readable_versions(source)?.last()
        && through == latest
        && from > 0
    {
        let snap = export_start(source, d, from, report)?;
        report.started_at = Some(from);
        exported(report, from, latest, progress);
        base = Some(snap);
        start = from + 1;
    }
    for v in start..=latest {
        let snap = match &base {
            Some(b) => source.snapshot_after(b, v)?,
            None => source.snapshot(v)?,
        };
        let commit = source.read_commit(v)?;
        let ts = snap.timestamp;
        let mut body = Vec::new();
        let mut files = FileTotals::default();
        if let Some(p) = d.protocol_for(&snap.schema) {
            body.push(Action::protocol(p));
        }
        for a in &commit.actions {
            if let Some(m) = &a.metadata {
                body.push(Action::metadata(d.metadata_for(m, &snap.schema)));
            }
            if let Some(add) = &a.add {
                let out = d.file_for(source, v, add, &snap, report)?;
                files.add(&out);
                body.push(Action::add(Add {
                    data_change: add.data_change,
                    modification_time: ts,
                    ..out
                }));
            }
            if let Some(r) = &a.remove {
                let r = d.remove_for(&dest_path(&r.path), r.deletion_timestamp.unwrap_or(ts), r.data_change);
                files.removed_bytes = files.removed_bytes.saturating_add(r.size.unwrap_or(0));
                files.removes += 1;
                body.push(Action::remove(r));
            }
        }
        // Checked before publishing: the mapping must keep every live file apart (two source
        // paths never share a DEST path).
        let after = d.live_after(&body);
        if after.0 != snap.files.len() as u64 {
            return Err(Error::Corrupt {
                path: source.commit_path(v),
                reason: format!(
                    "version {v} has {} live files, but its export would hold {} (two data file paths map to one \
                     Parquet path); nothing exported for it",
                    snap.files.len(),
                    after.0
                ),
            });
        }
        files.after = Some(after);
        let info = dest_info(&snap.commit_info, ts, &files, Marker::params(&snap, Mode::AllVersions));
        d.commit(v, info, body, report)?;
        exported(report, v, latest, progress);
        base = Some(snap);
    }
    if let Some(b) = &base {
        d.check_matches(b)?;
        report.rows_held = b.num_records();
    }
    Ok(())
}

/// Source version `v` (of `latest`) is exported: record it and report progress.
fn exported(report: &mut Report, v: u64, latest: u64, progress: &mut dyn FnMut(&Progress)) {
    report.source_version = v;
    progress(&Progress {
        source_version: v,
        last_version: latest,
        bytes_in: report.bytes_in,
    });
}

/// The first DEST version of an `--all-versions` export that starts at source version `from`
/// (> 0, older versions unreadable): DEST version `from` holds the whole snapshot (protocol,
/// metaData, an `add` per live file), and a Delta checkpoint of it is written before the commit
/// is published, so readers need no earlier commit (Delta PROTOCOL "Checkpoints"; a stop between
/// the two leaves a checkpoint that the next run writes again). Returns the snapshot of `from`.
fn export_start(source: &Table, d: &mut Dest, from: u64, report: &mut Report) -> Result<Snapshot> {
    let snap = source.snapshot(from)?;
    let ts = snap.timestamp;
    let mut body = vec![
        Action::protocol(dest_protocol(&snap.schema, d.protocol.as_ref())),
        Action::metadata(d.metadata_for(&snap.metadata, &snap.schema)),
    ];
    let mut files = FileTotals::default();
    let adds = source.add_actions(&snap.files.iter().map(|f| &**f).collect::<Vec<_>>())?;
    for add in &adds {
        let out = d.file_for(source, from, add, &snap, report)?;
        files.add(&out);
        body.push(Action::add(Add {
            data_change: true,
            modification_time: ts,
            ..out
        }));
    }
    files.after = Some(d.live_after(&body));
    for a in &body {
        let mut a = a.clone();
        if let Some(add) = &mut a.add {
            add.path = crate::format::actions::decode_path(&add.path).unwrap_or_default();
        }
        d.apply(a);
    }
    checkpoint::write(&d.log, from, &d.checkpoint_state())?;
    report.checkpoints.push(from);
    let info = dest_info(&snap.commit_info, ts, &files, Marker::params(&snap, Mode::AllVersions));
    d.commit(from, info, body, report)?;
    report.checkpoints.dedup();
    d.check_matches(&snap)?;
    Ok(snap)
}

/// One version (`target`) as the next DEST version: all its files into a new DEST, else the
/// difference from the version DEST holds.
fn export_snapshot(
    source: &Table,
    d: &mut Dest,
    target: u64,
    report: &mut Report,
    progress: &mut dyn FnMut(&Progress),
) -> Result<()> {
    let snap = source.snapshot(target)?;
    if let Some(m) = &d.marker {
        let held = source.snapshot(m.source_version)?;
        d.check_matches(&held)?;
        report.source_version = m.source_version;
        report.rows_held = held.num_records();
        if m.source_version == target {
            return Ok(());
        }
    }
    let ts = publish::next_timestamp(d.latest.map(|(_, t)| t));
    let mut body = Vec::new();
    if let Some(p) = d.protocol_for(&snap.schema) {
        body.push(Action::protocol(p));
    }
    if d.metadata.as_ref().is_none_or(|m| {
        m.schema_string != convert::dest_schema(&snap.schema).to_schema_string()
            || m.configuration != dest_configuration(&snap.metadata.configuration)
    }) {
        body.push(Action::metadata(d.metadata_for(&snap.metadata, &snap.schema)));
    }
    let wanted: BTreeSet<String> = snap.files.iter().map(|f| dest_path(&f.path)).collect();
    let mut files = FileTotals::default();
    let gone: Vec<String> = d.live.keys().filter(|p| !wanted.contains(*p)).cloned().collect();
    for p in gone {
        let r = d.remove_for(&p, ts, true);
        files.removed_bytes = files.removed_bytes.saturating_add(r.size.unwrap_or(0));
        files.removes += 1;
        body.push(Action::remove(r));
    }
    let adds = source.add_actions(&snap.files.iter().map(|f| &**f).collect::<Vec<_>>())?;
    for (f, add) in snap.files.iter().zip(&adds) {
        if d.live.contains_key(&dest_path(&f.path)) {
            continue;
        }
        let out = d.file_for(source, target, add, &snap, report)?;
        files.add(&out);
        body.push(Action::add(Add {
            modification_time: ts,
            ..out
        }));
    }
    let mode = if files.removes > 0 || d.latest.is_none() {
        "Overwrite"
    } else {
        "Append"
    };
    let mut params = Marker::params(&snap, Mode::Snapshot(Some(target)));
    params.insert("mode".into(), mode.into());
    let info = CommitInfo {
        timestamp: ts,
        timestamp_recorded: true,
        operation: "WRITE".into(),
        operation_parameters: params,
        read_version: d.latest.map(|(v, _)| v as i64),
        isolation_level: Some("Serializable".into()),
        is_blind_append: mode == "Append",
        operation_metrics: BTreeMap::new(),
        engine_info: Some(ENGINE_INFO.into()),
    };
    let info = dest_info(&info, ts, &files, BTreeMap::new());
    let version = d.latest.map_or(0, |(v, _)| v + 1);
    d.commit(version, info, body, report)?;
    report.source_version = target;
    report.rows_held = snap.num_records();
    d.check_matches(&snap)?;
    progress(&Progress {
        source_version: target,
        last_version: target,
        bytes_in: report.bytes_in,
    });
    Ok(())
}

impl Marker {
    fn params(snap: &Snapshot, mode: Mode) -> BTreeMap<String, String> {
        BTreeMap::from([
            (PARAM_SOURCE_ID.to_string(), snap.metadata.id.clone()),
            (PARAM_SOURCE_VERSION.to_string(), snap.version.to_string()),
            (PARAM_MODE.to_string(), mode.name().to_string()),
        ])
    }
}

/// The protocol DEST declares for a source `schema`, given the one it has (`current`): reader 1
/// / writer 2 (what delta-rs writes for such a table), reader 3 / writer 7 with the
/// `timestampNtz` feature once a column is `timestamp_ntz` (docs/EXPORT.md "Table"); a
/// protocol is never downgraded.
fn dest_protocol(schema: &crate::format::schema::Schema, current: Option<&Protocol>) -> Protocol {
    crate::log::snapshot::protocol_with(&convert::dest_schema(schema).features(), current)
}

/// The DEST path of a source data file: `.jsonl` replaced by `.parquet`, a `.parquet` name kept
/// (another Delta writer's file in the source), `.parquet` appended to any other; folders are
/// kept. Two source paths that would meet stop the export before the version that joins them.
pub fn dest_path(source_path: &str) -> String {
    match source_path.strip_suffix(".jsonl") {
        Some(stem) => format!("{stem}.parquet"),
        None if source_path.ends_with(".parquet") => source_path.to_string(),
        None => format!("{source_path}.parquet"),
    }
}

/// Adds and removes of one DEST commit, for its metrics.
#[derive(Default)]
struct FileTotals {
    adds: u64,
    rows: u64,
    added_bytes: u64,
    removes: u64,
    removed_bytes: u64,
    /// Live files and their bytes after the commit (for RESTORE metrics).
    after: Option<(u64, u64)>,
}

impl FileTotals {
    fn add(&mut self, a: &Add) {
        self.adds += 1;
        self.rows = self.rows.saturating_add(a.num_records().unwrap_or(0));
        self.added_bytes = self.added_bytes.saturating_add(a.size);
    }
}

/// DEST's commitInfo for a source commit `src`: the same operation, parameters (plus `marker`)
/// and time; the metrics that count files, rows and bytes recomputed for the Parquet files, so
/// that every operation's counts agree with the commit (docs/FORMAT.md, "Commit completeness").
fn dest_info(src: &CommitInfo, ts: i64, f: &FileTotals, marker: BTreeMap<String, String>) -> CommitInfo {
    let mut m = src.operation_metrics.clone();
    if src.operation == "RESTORE" {
        // tinydelta before 0.2 wrote these names; the export writes Delta's.
        m.remove("numRestoredFile");
        m.remove("numRemovedFile");
    }
    // Another writer's commit may record no operation, remove files in a WRITE that is not an
    // Overwrite, or add files in a CREATE TABLE: named so that the commit passes tinydelta's
    // completeness checks (docs/FORMAT.md), as every exported commit must.
    let mut params = src.operation_parameters.clone();
    let operation = match src.operation.as_str() {
        "" => "WRITE",
        "CREATE TABLE" if f.adds + f.removes > 0 => "CREATE TABLE AS SELECT",
        op => op,
    };
    if operation == "WRITE" && (f.removes > 0 || !params.contains_key("mode")) {
        let mode = if f.removes > 0 { "Overwrite" } else { "Append" };
        params.insert("mode".into(), mode.into());
    }
    params.extend(marker);
    let mut set = |k: &str, v: u64| {
        m.insert(k.to_string(), v.to_string());
    };
    match operation {
        "WRITE" => {
            set("numFiles", f.adds);
            set("numOutputRows", f.rows);
            set("numOutputBytes", f.added_bytes);
            if params.get("mode").map(String::as_str) == Some("Overwrite") {
                set("numRemovedFiles", f.removes);
            }
        }
        "UPDATE" | "DELETE" | "MERGE" | "OPTIMIZE" => {
            set("numAddedFiles", f.adds);
            set("numRemovedFiles", f.removes);
            set("numAddedBytes", f.added_bytes);
            set("numRemovedBytes", f.removed_bytes);
        }
        "RESTORE" => {
            set("numRestoredFiles", f.adds);
            set("numRemovedFiles", f.removes);
            set("restoredFilesSize", f.added_bytes);
            set("removedFilesSize", f.removed_bytes);
            if let Some((files, bytes)) = f.after {
                set("numOfFilesAfterRestore", files);
                set("tableSizeAfterRestore", bytes);
            }
        }
        _ => {}
    }
    CommitInfo {
        timestamp: ts,
        timestamp_recorded: true,
        operation: operation.to_string(),
        operation_parameters: params,
        read_version: src.read_version,
        isolation_level: src.isolation_level.clone(),
        is_blind_append: src.is_blind_append,
        operation_metrics: m,
        engine_info: Some(ENGINE_INFO.into()),
    }
}

/// Open the folder DEST without following a symlink, and refuse one that another user owns in
/// a folder others can write (docs/EXPORT.md "Export"): such a DEST may be a trap set for the
/// user who runs the export (root), as `--rejects` and `--log-file` refuse theirs.
/// Errors: [`Error::ExportRefused`]; [`Error::Io`].
fn open_dest(path: &Path) -> Result<Dir> {
    let root = match Dir::open_nofollow(path) {
        Ok(d) => d,
        Err(Error::Corrupt { .. }) => {
            return Err(refused(
                path,
                "it is a symbolic link; export never writes through one (name the folder itself)".into(),
            ));
        }
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(root.fd()).map_err(|e| Error::io("stat", path, e.into()))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let parent = abs.parent().unwrap_or(Path::new("/"));
        let pst = rustix::fs::stat(parent).map_err(|e| Error::io("stat", parent, e.into()))?;
        if pst.st_mode & 0o022 != 0 {
            return Err(refused(
                path,
                format!(
                    "it belongs to uid {} (not uid {me}, who runs the export) in {}, a folder others can write \
                     (mode {:o}); export into a folder of your own",
                    st.st_uid,
                    parent.display(),
                    pst.st_mode & 0o7777
                ),
            ));
        }
    }
    Ok(root)
}

impl Dest {
    /// Open DEST (creating the folder when missing) and replay its log. A folder without a log
    /// may hold only what an interrupted export leaves (`_delta_log/` without commits,
    /// `*.parquet`, temporaries); anything else is refused.
    fn open(path: &Path, source: &Table) -> Result<Dest> {
        std::fs::create_dir_all(path).ctx("create", path)?;
        let root = open_dest(path)?;
        let (a, b) = (
            rustix::fs::fstat(root.fd()).map_err(|e| Error::io("stat", path, e.into()))?,
            rustix::fs::fstat(source.dir().fd()).map_err(|e| Error::io("stat", source.root(), e.into()))?,
        );
        // One export into DEST at a time: an exclusive flock(2) on DEST's folder, held (with
        // this descriptor) until the export ends.
        match rustix::fs::flock(root.fd(), rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(refused(path, "another export into it is running".into()));
            }
            Err(e) => return Err(Error::io("lock", path, e.into())),
        }
        if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) {
            return Err(Error::InvalidArgument(format!(
                "{} is the source table itself; export into another folder",
                path.display()
            )));
        }
        let has_table = match root.try_dir(LOG_DIR)? {
            Some(l) => l.stat(&files::commit_file_name(0))?.is_some() || !Self::no_commits(&l)?,
            None => false,
        };
        if !has_table {
            for e in root.entries()? {
                let name = e.name.to_string_lossy();
                // Folders: `_delta_log/`, or the folders of nested data file paths.
                let ours = e.kind == Kind::Dir
                    || (e.kind == Kind::File && (name.ends_with(".parquet") || name.ends_with(".tmp")));
                if !ours {
                    return Err(refused(
                        path,
                        format!(
                            "it is a folder holding {name:?} and no Delta table; export into a new or empty folder"
                        ),
                    ));
                }
            }
        }
        let mut d = Dest {
            path: path.to_path_buf(),
            log: root.create_dir(LOG_DIR, 0o755)?,
            root,
            table_id: uuid::Uuid::new_v4().to_string(),
            metadata: None,
            protocol: None,
            latest: None,
            marker: None,
            live: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            live_bytes: 0,
            ever: HashMap::new(),
            dirty: BTreeSet::new(),
        };
        if !has_table {
            return Ok(d);
        }
        let t = Table::open(path)?;
        let latest = t.latest_version()?;
        // From the first commit: an `--all-versions` DEST may start at a later version, whose
        // commit holds the whole state (`export_start`).
        // The newest version an export wrote, to say what DEST is when its newest is not one.
        let mut last_export = None;
        let first = t.segment()?.first;
        for v in first..=latest {
            let c = t.read_commit(v)?;
            if c.info.as_ref().is_some_and(|i| i.is_tinydelta() && Marker::of(i).is_some()) {
                last_export = Some(v);
            }
            for a in c.actions {
                d.apply(a);
            }
        }
        let info = t.commit_info(latest)?;
        d.latest = Some((latest, info.timestamp));
        let foreign = || {
            let newest = format!(
                "operation {}, engine {}",
                crate::util::quote::quoted(&info.operation),
                crate::util::quote::quoted(info.engine_info.as_deref().unwrap_or("none"))
            );
            refused(
                path,
                match last_export {
                    Some(e) if e < latest => format!(
                        "its newest version {latest} was not written by tinydelta export ({newest}): another writer \
                         committed after the export's version {e}"
                    ),
                    Some(_) => format!(
                        "its newest version {latest} is an export, but its table's format is {}, not Parquet",
                        crate::util::quote::quoted(d.metadata.as_ref().map_or("none", |m| m.format.provider.as_str()))
                    ),
                    None => format!(
                        "it is a Delta table that tinydelta export did not write (none of its versions {first}-{latest} \
                         is an export; the newest: {newest}); export into a new folder"
                    ),
                },
            )
        };
        if !info.is_tinydelta() {
            return Err(foreign());
        }
        d.marker = Some(Marker::of(&info).ok_or_else(foreign)?);
        match &d.metadata {
            Some(m) if m.format.provider == "parquet" => d.table_id = m.id.clone(),
            _ => return Err(foreign()),
        }
        // An export stopped between publishing its newest commit and setting that commit's
        // time: set it now (older commits were stamped before the next one was published).
        if t.read_commit(latest)?.mtime_ms != info.timestamp {
            stamp_commit(&d.log, latest, info.timestamp)?;
        }
        Ok(d)
    }

    /// Whether `_delta_log/` holds no commit at all (any version).
    fn no_commits(log: &Dir) -> Result<bool> {
        Ok(!log
            .entries()?
            .iter()
            .any(|e| matches!(LogFile::parse(&e.name.to_string_lossy()), LogFile::Commit(_))))
    }

    /// Replay one DEST action.
    /// The protocol DEST needs for a version of schema `schema`, when it is not the one DEST
    /// has.
    fn protocol_for(&self, schema: &crate::format::schema::Schema) -> Option<Protocol> {
        let p = dest_protocol(schema, self.protocol.as_ref());
        (self.protocol.as_ref() != Some(&p)).then_some(p)
    }

    fn apply(&mut self, a: Action) {
        if let Some(p) = a.protocol {
            self.protocol = Some(p);
        }
        if let Some(m) = a.metadata {
            self.metadata = Some(m);
        }
        if let Some(add) = a.add {
            self.tombstones.remove(&add.path);
            self.ever.insert(add.path.clone(), add.clone());
            self.live_bytes = self.live_bytes.saturating_add(add.size);
            if let Some(old) = self.live.insert(add.path.clone(), add) {
                self.live_bytes = self.live_bytes.saturating_sub(old.size);
            }
        }
        if let Some(r) = a.remove {
            if let Some(old) = self.live.remove(&r.path) {
                self.live_bytes = self.live_bytes.saturating_sub(old.size);
            }
            self.tombstones.insert(r.path.clone(), r);
        }
    }

    /// (files, bytes) live after `body` (paths encoded) is applied, in O(actions of `body`).
    fn live_after(&self, body: &[Action]) -> (u64, u64) {
        // The last action on each path decides: Some(size) live, None removed.
        let mut touched: HashMap<String, Option<u64>> = HashMap::new();
        for a in body {
            if let Some(r) = &a.remove {
                touched.insert(crate::format::actions::decode_path(&r.path).unwrap_or_default(), None);
            }
            if let Some(add) = &a.add {
                touched.insert(
                    crate::format::actions::decode_path(&add.path).unwrap_or_default(),
                    Some(add.size),
                );
            }
        }
        let (mut files, mut bytes) = (self.live.len() as u64, self.live_bytes);
        for (p, after) in touched {
            if let Some(old) = self.live.get(&p) {
                files -= 1;
                bytes = bytes.saturating_sub(old.size);
            }
            if let Some(size) = after {
                files += 1;
                bytes = bytes.saturating_add(size);
            }
        }
        (files, bytes)
    }

    /// DEST's live files must be exactly those of `snap`, mapped.
    fn check_matches(&self, snap: &Snapshot) -> Result<()> {
        let want: BTreeSet<String> = snap.files.iter().map(|f| dest_path(&f.path)).collect();
        let have: BTreeSet<&String> = self.live.keys().collect();
        if let Some(p) = want
            .iter()
            .find(|p| !have.contains(p))
            .or_else(|| self.live.keys().find(|p| !want.contains(*p)))
        {
            return Err(refused(
                &self.path,
                format!(
                    "its files differ from an export of version {} of {} ({p} is {}): another writer changed it",
                    snap.version,
                    snap.root.display(),
                    if want.contains(p) {
                        "missing"
                    } else {
                        "not in that version"
                    }
                ),
            ));
        }
        // The same files under another schema: an export by an earlier tinydelta, which wrote
        // `timestamp_ntz` columns as `timestamp` (UTC instants), continued now would mix the two.
        if let Some(m) = &self.metadata
            && m.schema_string != convert::dest_schema(&snap.schema).to_schema_string()
        {
            return Err(refused(
                &self.path,
                format!(
                    "its schema differs from an export of version {} of {} (an export by an earlier tinydelta, \
                     which wrote timestamp_ntz columns as timestamp, or another writer changed it); export into a new DEST",
                    snap.version,
                    snap.root.display()
                ),
            ));
        }
        Ok(())
    }

    /// DEST's `metaData` for the source's `m` (in force with `schema`): DEST's own table id,
    /// provider `parquet`, `schema` written with the Delta types the Parquet files hold
    /// (docs/EXPORT.md "Table"; a source's `integer` column is a `long` in DEST), the same
    /// configuration. A partitioned source is exported unpartitioned: its partition columns are
    /// ordinary columns of the rows, whose values the reader fills in from `partitionValues`.
    fn metadata_for(&self, m: &Metadata, schema: &crate::format::schema::Schema) -> Metadata {
        Metadata {
            id: self.table_id.clone(),
            format: Format {
                provider: "parquet".into(),
                options: BTreeMap::new(),
            },
            schema_string: convert::dest_schema(schema).to_schema_string(),
            partition_columns: vec![],
            configuration: dest_configuration(&m.configuration),
            created_time: m.created_time,
        }
    }

    /// The `remove` of the DEST file `rel` (decoded), with its size when a version added it.
    fn remove_for(&self, rel: &str, deletion_timestamp: i64, data_change: bool) -> Remove {
        let size = self.ever.get(rel).map(|a| a.size);
        Remove {
            path: encode_path(rel),
            deletion_timestamp: Some(deletion_timestamp),
            data_change,
            extended_file_metadata: Some(size.is_some()),
            partition_values: Some(BTreeMap::new()),
            size,
            deletion_vector: None,
        }
    }

    /// The DEST `add` (path encoded) for the source `add` of `version`: an earlier DEST version's
    /// file when it is still there with its recorded size (a restore re-adds a file), else a new
    /// Parquet file written, fsynced and renamed into place.
    fn file_for(
        &mut self,
        source: &Table,
        version: u64,
        add: &Add,
        snap: &Snapshot,
        report: &mut Report,
    ) -> Result<Add> {
        let rel = dest_path(&add.path);
        if let Some(old) = self.ever.get(&rel)
            && self.root.stat(&rel)?.is_some_and(|st| st.st_size as u64 == old.size)
        {
            report.files_reused += 1;
            return Ok(Add {
                path: encode_path(&rel),
                ..old.clone()
            });
        }
        let src_path = source.root().join(&add.path);
        // Its rows as canonical JSONL: the JSONL file itself, or a Parquet data file (another
        // Delta writer's append) converted by the read side.
        let entry = crate::log::snapshot::FileEntry::from_add(add, version);
        let (file, _) = source
            .open_rows_fresh(&entry, &snap.schema)
            .map_err(|e| crate::table::history::explain_missing(source, version, &add.path, e))?;
        let (parent, name) = match rel.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, rel.as_str()),
        };
        let dir = match parent {
            None => self.root.clone(),
            Some(p) => p
                .split('/')
                .try_fold(self.root.clone(), |d, c| d.create_dir(c, 0o755))?,
        };
        let tmp = format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple());
        let tmp_path = dir.join(&tmp);
        let out = dir.create_new(&tmp, 0o644)?;
        let result = write_parquet(
            BufReader::with_capacity(1 << 20, file),
            &src_path,
            &snap.schema,
            &out,
            &tmp_path,
        )
        .and_then(|w| {
            match add.num_records() {
                Some(n) if n != w.rows => {
                    return Err(Error::Corrupt {
                        path: src_path.clone(),
                        reason: format!(
                            "data file holds {} rows, but its add action (version {version}) says {n}",
                            w.rows
                        ),
                    });
                }
                _ => {}
            }
            out.sync_all().ctx("fsync", &tmp_path)?;
            dir.rename(&tmp, &dir, name).ctx("rename", dir.join(name))?;
            Ok(w)
        });
        let w = match result {
            Ok(w) => w,
            Err(e) => {
                let _ = dir.try_unlink(&tmp);
                return Err(e);
            }
        };
        self.dirty.insert(parent.unwrap_or("").to_string());
        report.files_written += 1;
        report.rows = report.rows.saturating_add(w.rows);
        report.bytes_in = report.bytes_in.saturating_add(w.bytes_in);
        report.bytes_out = report.bytes_out.saturating_add(w.size);
        Ok(Add {
            path: encode_path(&rel),
            partition_values: BTreeMap::new(),
            size: w.size,
            modification_time: 0,
            data_change: true,
            stats: Some(w.stats),
            parsed_rows: Default::default(),
            deletion_vector: None,
        })
    }

    /// Publish `body` (after `info`) as DEST version `version`, once the folders of the new
    /// files are fsynced; then replay it and write a checkpoint when `version` is due one.
    fn commit(&mut self, version: u64, info: CommitInfo, body: Vec<Action>, report: &mut Report) -> Result<()> {
        for rel in std::mem::take(&mut self.dirty) {
            if rel.is_empty() {
                self.root.sync()?;
            } else {
                self.root.dir(&rel)?.sync()?;
            }
        }
        let ts = info.timestamp;
        let mut actions = Vec::with_capacity(body.len() + 1);
        actions.push(Action::commit_info(info));
        actions.extend(body);
        let bytes = publish::encode(&actions);
        // Published as tinydelta's own commits are (no-clobber link, fsyncs, failpoints); the
        // Parquet files and their folders were fsynced above.
        match publish::publish(&self.root, &self.log, version, &bytes)? {
            Publish::Won => {}
            Publish::Lost => {
                return Err(Error::ConcurrentWrite {
                    table: self.path.clone(),
                    read_version: version.saturating_sub(1),
                    version,
                });
            }
        }
        report.dest_versions = Some((report.dest_versions.map_or(version, |(a, _)| a), version));
        stamp_commit(&self.log, version, ts)?;
        for mut a in actions {
            // Replay with decoded paths, as a reader of the log would.
            if let Some(add) = &mut a.add {
                add.path = crate::format::actions::decode_path(&add.path).unwrap_or_default();
            }
            if let Some(r) = &mut a.remove {
                r.path = crate::format::actions::decode_path(&r.path).unwrap_or_default();
            }
            self.apply(a);
        }
        self.latest = Some((version, ts));
        if version > 0 && version.is_multiple_of(CHECKPOINT_INTERVAL) {
            checkpoint::write(&self.log, version, &self.checkpoint_state())?;
            report.checkpoints.push(version);
        }
        Ok(())
    }

    fn checkpoint_state(&self) -> checkpoint::State<'_> {
        checkpoint::State {
            // Every DEST version 0 (and a first version after vacuumed ones) has a protocol.
            protocol: self.protocol.clone().unwrap_or_else(|| crate::log::snapshot::protocol_with(&[], None)),
            metadata: self.metadata.as_ref(),
            live: self.live.iter().map(|(p, a)| (p.as_str(), a)).collect(),
            tombstones: &self.tombstones,
        }
    }
}

/// Set the mtime (and atime) of DEST's published commit `version` to `ts_ms` (ms since the
/// epoch) and fsync it, so that readers that take a version's time from its commit file's
/// modification time agree with `commitInfo.timestamp`. The commit is opened beneath
/// `_delta_log/` (no symlink followed). Errors: [`Error::Io`] naming the commit.
fn stamp_commit(log: &Dir, version: u64, ts_ms: i64) -> Result<()> {
    let name = files::commit_file_name(version);
    let path = log.join(&name);
    let f = log.open_file(&name)?;
    set_mtime(&f, ts_ms).ctx("set the time of", &path)?;
    f.sync_all().ctx("fsync", &path)
}

/// Set `f`'s modification (and access) time to `ms` since the epoch.
fn set_mtime(f: &File, ms: i64) -> std::io::Result<()> {
    let t = if ms >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64)
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_millis(ms.unsigned_abs())
    };
    f.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
}

/// DEST's table properties for the source's `configuration`: the same, less column mapping's
/// (`delta.columnMapping.*`): DEST's Parquet files hold the columns by their names
/// (docs/EXPORT.md "Table").
fn dest_configuration(configuration: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    configuration
        .iter()
        .filter(|(k, _)| !k.starts_with("delta.columnMapping."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exported commits pass tinydelta's completeness checks whatever the source's commitInfo.
    #[test]
    fn dest_commit_info_passes_the_completeness_checks() {
        let add = |p: &str| {
            Action::add(Add {
                path: p.into(),
                partition_values: BTreeMap::new(),
                size: 10,
                modification_time: 1,
                data_change: true,
                stats: Some(r#"{"numRecords":3}"#.into()),
                parsed_rows: Default::default(),
                deletion_vector: None,
            })
        };
        let remove = |p: &str| {
            Action::remove(Remove {
                path: p.into(),
                deletion_timestamp: Some(1),
                data_change: true,
                extended_file_metadata: Some(true),
                partition_values: Some(BTreeMap::new()),
                size: Some(10),
                deletion_vector: None,
            })
        };
        let foreign = |op: &str, mode: Option<&str>| CommitInfo {
            operation: op.into(),
            operation_parameters: mode.map(|m| ("mode".to_string(), m.to_string())).into_iter().collect(),
            ..Default::default()
        };
        for (src, body, op) in [
            (foreign("", None), vec![remove("a"), add("b")], "WRITE"),
            (foreign("WRITE", Some("Append")), vec![remove("a"), add("b")], "WRITE"),
            (foreign("WRITE", Some("ErrorIfExists")), vec![add("b")], "WRITE"),
            (foreign("CREATE TABLE", None), vec![add("b")], "CREATE TABLE AS SELECT"),
            (foreign("DELETE", None), vec![remove("a")], "DELETE"),
            (foreign("RESTORE", None), vec![add("b")], "RESTORE"),
        ] {
            let mut f = FileTotals::default();
            for a in &body {
                if let Some(a) = &a.add {
                    f.add(a);
                }
                if a.remove.is_some() {
                    f.removes += 1;
                }
            }
            let info = dest_info(&src, 5, &f, BTreeMap::new());
            assert_eq!(info.operation, op);
            let mut actions = vec![Action::commit_info(info)];
            actions.extend(body);
            let bytes = publish::encode(&actions);
            if let Err(e) = files::parse_commit(1, Path::new("x"), &bytes, 0) {
                panic!("{op}: {e}");
            }
        }
    }

    #[test]
    fn dest_paths() {
        assert_eq!(dest_path("part-1.jsonl"), "part-1.parquet");
        assert_eq!(dest_path("a/b.jsonl"), "a/b.parquet");
        assert_eq!(dest_path("x.parquet"), "x.parquet");
        assert_eq!(dest_path("x.csv"), "x.csv.parquet");
    }
}
