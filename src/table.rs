//! A table on disk and its operations: create, append, overwrite, restore, snapshots, history.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{BufRead, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::actions::{Action, Add, CommitInfo, Format, Metadata, Protocol, Remove};
use crate::checkpoint;
use crate::commit::{self, Isolation, Publish};
use crate::error::{Error, IoContext, Result};
use crate::failpoint;
use crate::log::{self, LOG_DIR};
use crate::rows;
use crate::schema::Schema;
use crate::snapshot::{Replay, Snapshot, WRITER_VERSION};

/// `commitInfo.engineInfo`.
pub const ENGINE_INFO: &str = concat!("tinydelta/", env!("CARGO_PKG_VERSION"));

/// Options shared by every write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Commit only if the latest version is still this one (`--expect-version`).
    pub expect_version: Option<u64>,
    /// Extra `commitInfo.operationParameters` (e.g. the mount's `stagingId`).
    pub extra_params: Vec<(String, String)>,
}

/// A table folder: data files plus `_delta_log/`.
#[derive(Debug, Clone)]
pub struct Table {
    root: PathBuf,
    log_dir: PathBuf,
    /// A version known to exist (versions never disappear), shared by clones; `u64::MAX` until
    /// the first listing. [`Table::latest_version`] probes forward from it.
    known: Arc<AtomicU64>,
    /// The newest snapshot this table (or a clone) built, to replay later versions from.
    tip: Arc<Mutex<Option<Arc<Snapshot>>>>,
}

/// One line of `history`.
#[derive(Debug, Clone)]
pub struct HistoryEntry {
    /// The version.
    pub version: u64,
    /// The commit's commitInfo.
    pub commit_info: CommitInfo,
    /// Rows live after the commit.
    pub table_rows: u64,
    /// Live files after the commit.
    pub table_files: usize,
}

impl Table {
    /// Open an existing table. Errors: [`Error::TableNotFound`] when `root` has no version 0.
    pub fn open(root: impl AsRef<Path>) -> Result<Table> {
        let root = root.as_ref().to_path_buf();
        let log_dir = root.join(LOG_DIR);
        if !log_dir.join(log::commit_file_name(0)).is_file() {
            return Err(Error::TableNotFound(root));
        }
        Ok(Table::new(root, log_dir))
    }

    fn new(root: PathBuf, log_dir: PathBuf) -> Table {
        Table {
            root,
            log_dir,
            known: Arc::new(AtomicU64::new(u64::MAX)),
            tip: Arc::new(Mutex::new(None)),
        }
    }

    /// Create a table with `schema` as version 0 (`CREATE TABLE`: commitInfo, protocol,
    /// metaData). The folder may exist (empty or not) but must hold no table.
    ///
    /// Errors: [`Error::TableExists`]; [`Error::Io`].
    pub fn create(root: impl AsRef<Path>, schema: &Schema) -> Result<Table> {
        let root = root.as_ref().to_path_buf();
        let log_dir = root.join(LOG_DIR);
        fs::create_dir_all(&log_dir).ctx("create", &log_dir)?;
        if log_dir.join(log::commit_file_name(0)).exists() {
            return Err(Error::TableExists(root));
        }
        if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
            let _ = commit::fsync_dir(parent);
        }
        commit::fsync_dir(&root)?;
        let ts = commit::now_ms();
        let schema_string = schema.to_schema_string();
        let actions = vec![
            Action::commit_info(CommitInfo {
                timestamp: ts,
                operation: "CREATE TABLE".into(),
                operation_parameters: BTreeMap::from([
                    ("mode".into(), "ErrorIfExists".into()),
                    ("partitionBy".into(), "[]".into()),
                    ("description".into(), String::new()),
                    ("properties".into(), "{}".into()),
                ]),
                read_version: None,
                isolation_level: Some("Serializable".into()),
                is_blind_append: true,
                operation_metrics: BTreeMap::new(),
                engine_info: Some(ENGINE_INFO.into()),
            }),
            Action::protocol(Protocol {
                min_reader_version: 1,
                min_writer_version: WRITER_VERSION,
            }),
            Action::metadata(Metadata {
                id: uuid::Uuid::new_v4().to_string(),
                format: Format {
                    provider: "json".into(),
                    options: BTreeMap::new(),
                },
                schema_string,
                partition_columns: vec![],
                configuration: BTreeMap::new(),
                created_time: Some(ts),
            }),
        ];
        match commit::publish(&root, 0, &commit::encode(&actions))? {
            Publish::Won => Ok(Table::new(root, log_dir)),
            Publish::Lost => Err(Error::TableExists(root)),
        }
    }

    /// The table folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `_delta_log/{version:020}.json`.
    pub fn commit_path(&self, version: u64) -> PathBuf {
        self.log_dir.join(log::commit_file_name(version))
    }

    /// The newest version. The first call starts from the newest checkpoint (or lists
    /// `_delta_log/` when there is none); later calls (on this table or
    /// its clones) probe `known + 1, known + 2, ...` with stat(2) from the newest version seen,
    /// so they cost one failed stat plus one per new commit. Errors: [`Error::Io`].
    pub fn latest_version(&self) -> Result<u64> {
        let known = match self.known.load(Ordering::Acquire) {
            // A checkpoint names a version that exists; probing from it avoids listing a big log.
            u64::MAX => match checkpoint::newest_at_or_before(&self.root, u64::MAX) {
                Some(v) if self.commit_path(v).exists() => v,
                _ => log::list_versions(&self.log_dir)?.last().copied().unwrap_or(0),
            },
            k => k,
        };
        let v = self.latest_version_from(known);
        // Publish the newest version seen: replace the sentinel or a smaller value.
        let _ = self.known.fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| {
            (k == u64::MAX || k < v).then_some(v)
        });
        Ok(v)
    }

    /// The newest version at or after `hint` (a version known to exist), found by probing
    /// `hint + 1, hint + 2, ...` with stat(2); cost proportional to the commits since `hint`.
    pub fn latest_version_from(&self, hint: u64) -> u64 {
        let mut v = hint;
        while self.commit_path(v + 1).exists() {
            v += 1;
        }
        v
    }

    /// The commitInfo of one version. Errors: [`Error::VersionNotFound`], [`Error::Corrupt`].
    pub fn commit_info(&self, version: u64) -> Result<CommitInfo> {
        log::read_commit_info(&self.commit_path(version)).map_err(|e| self.not_found(version, e))
    }

    fn not_found(&self, version: u64, e: Error) -> Error {
        match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => Error::VersionNotFound {
                table: self.root.clone(),
                version,
                latest: self.latest_version().unwrap_or(0),
            },
            e => e,
        }
    }

    /// Replay versions `0..=version`, calling `each` after every commit. Errors:
    /// [`Error::VersionNotFound`] (including a gap in the log), [`Error::Corrupt`].
    fn replay(
        &self,
        version: u64,
        replay: &mut Replay,
        mut each: impl FnMut(u64, &Replay, CommitInfo) -> Result<()>,
    ) -> Result<()> {
        for v in 0..=version {
            let path = self.commit_path(v);
            let actions = match log::read_commit(&path) {
                Ok(a) => a,
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    let latest = self.latest_version()?;
                    if v <= latest {
                        return Err(Error::Corrupt {
                            path,
                            reason: format!("the log has a gap: version {v} is missing but version {latest} exists"),
                        });
                    }
                    return Err(Error::VersionNotFound {
                        table: self.root.clone(),
                        version,
                        latest,
                    });
                }
                Err(e) => return Err(e),
            };
            let info = replay.apply(&self.root, &path, actions)?;
            each(v, replay, info)?;
        }
        Ok(())
    }

    /// The snapshot of `version` by log replay, from the newest of: this table's last snapshot
    /// (kept in memory and shared by clones), the newest checkpoint at or before `version`, or
    /// version 0. Writes a checkpoint when `version` is [`checkpoint::CHECKPOINT_INTERVAL`] or
    /// more past the newest one.
    ///
    /// Errors: [`Error::VersionNotFound`], [`Error::Corrupt`], [`Error::UnsupportedProtocol`].
    pub fn snapshot(&self, version: u64) -> Result<Snapshot> {
        let cp = checkpoint::newest_at_or_before(&self.root, version);
        let mut base = self
            .tip
            .lock()
            .ok()
            .and_then(|t| t.clone())
            .filter(|t| t.version <= version);
        if let Some(c) = cp
            && base.as_ref().is_none_or(|b| b.version < c)
        {
            match checkpoint::read(&self.root, c) {
                Ok(snap) => base = Some(Arc::new(snap)),
                Err(e) => ::log::warn!("ignoring checkpoint: {e}"),
            }
        }
        let snap = match &base {
            Some(b) => self.snapshot_after(b, version)?,
            None => {
                let mut replay = Replay::default();
                let mut last = None;
                self.replay(version, &mut replay, |v, _, info| {
                    if v == version {
                        last = Some(info);
                    }
                    Ok(())
                })?;
                replay.snapshot(&self.root, version, last.unwrap_or_default())?
            }
        };
        if version - cp.unwrap_or(0) >= checkpoint::CHECKPOINT_INTERVAL
            && let Err(e) = checkpoint::write(&snap)
        {
            ::log::debug!("no checkpoint written for version {version}: {e}");
        }
        if let Ok(mut tip) = self.tip.lock()
            && tip.as_ref().is_none_or(|t| t.version < snap.version)
        {
            *tip = Some(Arc::new(snap.clone()));
        }
        Ok(snap)
    }

    /// The totals `describe` prints (file count, rows, bytes, schema, commit time) for `version`.
    /// From a checkpoint followed only by blind appends this reads the checkpoint's header and
    /// the commits after it, so it costs O(commits since the checkpoint), not O(live files);
    /// otherwise it builds the snapshot. Errors: as [`Table::snapshot`].
    pub fn totals(&self, version: u64) -> Result<checkpoint::Totals> {
        let from_snapshot = |s: Snapshot| checkpoint::Totals {
            version: s.version,
            num_files: s.files.len() as u64,
            num_records: s.num_records(),
            size_bytes: s.size_bytes(),
            commit_info: s.commit_info,
            metadata: s.metadata,
        };
        let Some(cp) = checkpoint::newest_at_or_before(&self.root, version) else {
            return self.snapshot(version).map(from_snapshot);
        };
        let Ok(mut t) = checkpoint::read_totals(&self.root, cp) else {
            return self.snapshot(version).map(from_snapshot);
        };
        for v in cp + 1..=version {
            let path = self.commit_path(v);
            let actions = log::read_commit(&path).map_err(|e| self.not_found(version, e))?;
            let blind = actions.iter().all(|a| a.remove.is_none() && a.protocol.is_none())
                && actions
                    .iter()
                    .any(|a| a.commit_info.as_ref().is_some_and(|c| c.is_blind_append));
            if !blind || version - cp >= checkpoint::CHECKPOINT_INTERVAL {
                return self.snapshot(version).map(from_snapshot);
            }
            for a in actions {
                if let Some(c) = a.commit_info {
                    t.commit_info = c;
                }
                if let Some(m) = a.metadata {
                    t.metadata = m;
                }
                if let Some(add) = a.add {
                    if !crate::actions::is_safe_relative_path(&add.path) {
                        return self.snapshot(version).map(from_snapshot);
                    }
                    t.num_files += 1;
                    t.num_records += add.num_records().unwrap_or(0);
                    t.size_bytes += add.size;
                }
            }
        }
        t.version = version;
        Ok(t)
    }

    /// The snapshot of `version`, replaying only the commits after `base` when `base` is older
    /// (cost: `base`'s live files plus the new commits), else a full replay.
    ///
    /// Errors: as [`Table::snapshot`].
    pub fn snapshot_after(&self, base: &Snapshot, version: u64) -> Result<Snapshot> {
        if version < base.version {
            return self.snapshot(version);
        }
        if version == base.version {
            return Ok(base.clone());
        }
        let mut replay = Replay::from_snapshot(base);
        let mut last = (version == base.version).then(|| base.commit_info.clone());
        for v in base.version + 1..=version {
            let path = self.commit_path(v);
            let actions = log::read_commit(&path).map_err(|e| self.not_found(version, e))?;
            let info = replay.apply(&self.root, &path, actions)?;
            if v == version {
                last = Some(info);
            }
        }
        replay.snapshot(&self.root, version, last.unwrap_or_default())
    }

    /// The snapshot of the newest version.
    pub fn latest_snapshot(&self) -> Result<Snapshot> {
        self.snapshot(self.latest_version()?)
    }

    /// One entry per version, oldest first, with the table's rows and files after each commit.
    pub fn history(&self) -> Result<Vec<HistoryEntry>> {
        let latest = self.latest_version()?;
        let mut out = Vec::new();
        let mut replay = Replay::default();
        self.replay(latest, &mut replay, |v, r, info| {
            let snap_rows = r.live_rows();
            out.push(HistoryEntry {
                version: v,
                commit_info: info,
                table_rows: snap_rows.0,
                table_files: snap_rows.1,
            });
            Ok(())
        })?;
        Ok(out)
    }

    /// Every data file path any `add` of any version named (for vacuum).
    pub fn all_added_paths(&self) -> Result<HashSet<String>> {
        Ok(self.inventory(None)?.0)
    }

    /// One replay of the whole log: every data file path any `add` named, and every value of
    /// `commitInfo.operationParameters[param]` (the mount's `stagingId`s, for vacuum).
    pub fn inventory_with_param(&self, param: &str) -> Result<(HashSet<String>, HashSet<String>)> {
        self.inventory(Some(param))
    }

    fn inventory(&self, param: Option<&str>) -> Result<(HashSet<String>, HashSet<String>)> {
        let mut replay = Replay::recording_added();
        let latest = self.latest_version()?;
        let mut values = HashSet::new();
        self.replay(latest, &mut replay, |_, _, info| {
            if let Some(v) = param.and_then(|p| info.operation_parameters.get(p)) {
                values.insert(v.clone());
            }
            Ok(())
        })?;
        Ok((replay.ever_added.unwrap_or_default(), values))
    }

    /// The newest version whose commit timestamp is at or before `time_ms` (timestamps are
    /// strictly increasing, so a binary search). Errors: `None` when `time_ms` is before
    /// version 0.
    pub fn version_as_of(&self, time_ms: i64) -> Result<Option<u64>> {
        let latest = self.latest_version()?;
        if self.commit_info(0)?.timestamp > time_ms {
            return Ok(None);
        }
        let (mut lo, mut hi) = (0u64, latest);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.commit_info(mid)?.timestamp <= time_ms {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(Some(lo))
    }

    /// The `add` action (with its stats) that made `file` live, read again from its commit.
    /// Errors: [`Error::Corrupt`] when that commit no longer names the file.
    pub fn add_action(&self, file: &crate::snapshot::FileEntry) -> Result<Add> {
        let path = self.commit_path(file.added_in);
        log::read_commit(&path)?
            .into_iter()
            .filter_map(|a| a.add)
            .rfind(|a| a.path == file.path)
            .ok_or_else(|| Error::Corrupt {
                path,
                reason: format!("no add action for {}", file.path),
            })
    }

    /// Open a data file of a snapshot for reading, refusing a symlink that leads out of the table.
    pub fn open_data_file(&self, rel: &str) -> Result<File> {
        let path = self.root.join(rel);
        let meta = fs::symlink_metadata(&path).ctx("stat", &path)?;
        // A path with a folder in it may pass through a symlinked folder: resolve those too.
        if meta.file_type().is_symlink() || rel.contains('/') {
            let real = fs::canonicalize(&path).ctx("resolve", &path)?;
            let root = fs::canonicalize(&self.root).ctx("resolve", &self.root)?;
            if !real.starts_with(&root) {
                return Err(Error::Corrupt {
                    path,
                    reason: "data file is reached through a symlink leading out of the table".into(),
                });
            }
        }
        File::open(&path).ctx("open", &path)
    }

    /// Write the rows of `snapshot` (its data files concatenated) to `out`.
    pub fn write_rows(&self, snapshot: &Snapshot, out: &mut impl Write) -> Result<u64> {
        // 256 KiB reads and writes: std::io::copy's 8 KiB buffer costs 4x the syscalls of cat.
        let mut buf = vec![0u8; 256 << 10];
        let mut n = 0;
        for f in &snapshot.files {
            let path = self.root.join(&f.path);
            let mut file = self.open_data_file(&f.path)?;
            loop {
                let k = match file.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(Error::io("read", path, e)),
                };
                out.write_all(&buf[..k])
                    .map_err(|e| Error::io("write", "<output>", e))?;
                n += k as u64;
            }
        }
        Ok(n)
    }

    /// Validate and canonicalise `input` into a new `part-<uuid>.jsonl`, fsynced (its folder entry
    /// is fsynced by [`commit::publish`] before the commit is linked).
    /// Returns the `add` action, or `None` (and no file) when the input has no rows.
    fn write_data_file(&self, schema: &Schema, source: &str, input: impl BufRead) -> Result<Option<Add>> {
        let name = format!("part-{}.jsonl", uuid::Uuid::new_v4());
        let path = self.root.join(&name);
        let mut w = BufWriter::with_capacity(1 << 20, commit::create_new(&path)?);
        let result = rows::canonicalize(schema, source, input, &mut w, &path).and_then(|stats| {
            let file = w.into_inner().map_err(|e| Error::io("write", &path, e.into_error()))?;
            file.sync_all().ctx("fsync", &path)?;
            Ok(stats)
        });
        let stats = match result {
            Ok(s) if s.num_records > 0 => s,
            other => {
                let _ = fs::remove_file(&path);
                return other.map(|_| None);
            }
        };
        // The folder entry of the new file is made durable by publish(), which fsyncs the table
        // folder before the link.
        if let Err(e) = failpoint::hit("data-written") {
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        Ok(Some(Self::new_add(name, schema, &stats)))
    }

    /// Append the rows of `input` as one `WRITE` (mode `Append`) commit, a blind append that
    /// rebases over concurrent appends. Returns the new version, or `None` when the input has no
    /// rows (nothing is committed).
    ///
    /// Errors: [`Error::BadInput`] (nothing committed, no file left); [`Error::ConcurrentWrite`]
    /// when a concurrent commit changed the schema or `expect_version` no longer holds.
    pub fn append(&self, source: &str, input: impl BufRead, opts: &WriteOptions) -> Result<Option<u64>> {
        let read_version = self.latest_version()?;
        let snap = self.snapshot(read_version)?;
        self.check_writable(&snap)?;
        let Some(add) = self.write_data_file(&snap.schema, source, input)? else {
            return Ok(None);
        };
        self.commit_append(read_version, add, opts).map(Some)
    }

    /// Append rows the caller already validated and canonicalised against `schema` (the mount's
    /// `incoming/` canonicalises while a file is written, so its close only finishes the tail):
    /// `place(path)` must create the fsynced canonical bytes at `path` (a new
    /// `part-<uuid>.jsonl` in the root, e.g. by a hard link), `stats` describes them. Then one
    /// `WRITE`/`Append` commit as [`Table::append`] makes. Returns `None` when `stats` counts no
    /// rows (nothing placed, nothing committed).
    ///
    /// Errors: [`Error::ConcurrentWrite`] when the table's schema is no longer `schema` (nothing
    /// committed; the caller validates again); errors of `place`; as [`Table::append`].
    pub fn append_prepared(
        &self,
        schema: &Schema,
        stats: &rows::FileStats,
        place: impl FnOnce(&Path) -> Result<()>,
        opts: &WriteOptions,
    ) -> Result<Option<u64>> {
        let read_version = self.latest_version()?;
        let snap = self.snapshot(read_version)?;
        self.check_writable(&snap)?;
        if snap.schema != *schema {
            return Err(Error::ConcurrentWrite {
                table: self.root.clone(),
                read_version,
                version: read_version,
            });
        }
        if stats.num_records == 0 {
            return Ok(None);
        }
        let name = format!("part-{}.jsonl", uuid::Uuid::new_v4());
        place(&self.root.join(&name))?;
        self.commit_append(read_version, Self::new_add(name, schema, stats), opts)
            .map(Some)
    }

    /// The `add` of a new data file `name` (relative to the root) with `stats`.
    fn new_add(name: String, schema: &Schema, stats: &rows::FileStats) -> Add {
        Add {
            path: name,
            partition_values: BTreeMap::new(),
            size: stats.bytes,
            modification_time: commit::now_ms(),
            data_change: true,
            stats: Some(stats.to_stats_json(schema)),
        }
    }

    /// Commit `add` (a data file already durable in the root) as one blind `WRITE`/`Append`.
    fn commit_append(&self, read_version: u64, add: Add, opts: &WriteOptions) -> Result<u64> {
        let rows = add.num_records().unwrap_or(0);
        let mut params = BTreeMap::from([("mode".to_string(), "Append".to_string())]);
        params.extend(opts.extra_params.iter().cloned());
        let metrics = BTreeMap::from([
            ("numFiles".into(), "1".into()),
            ("numOutputRows".into(), rows.to_string()),
            ("numOutputBytes".into(), add.size.to_string()),
        ]);
        let res = commit::commit_loop(
            &self.root,
            read_version,
            Isolation::BlindAppend,
            opts.expect_version,
            |v, ts| {
                vec![
                    Self::write_info("WRITE", &params, &metrics, v, ts, true),
                    Action::add(add.clone()),
                ]
            },
        );
        self.cleanup_on_error(res, &[&add.path])
    }

    /// Replace the rows of one live data file `old` (a path relative to the root, as its `add`
    /// named it) with the rows of `input`, as one `UPDATE` commit (a `remove` of `old` and an
    /// `add` of the new file; the mount's re-save of a file it committed moments ago, README
    /// "incoming/"). Rebases over commits that leave `old` live. Returns the new version.
    ///
    /// Errors: [`Error::BadInput`] (nothing committed); [`Error::ConcurrentWrite`] when `old`
    /// is no longer live or a commit in between changed the schema.
    pub fn replace_file(&self, source: &str, old: &str, input: impl BufRead, opts: &WriteOptions) -> Result<u64> {
        let mut read_version = self.latest_version()?;
        let snap = self.snapshot(read_version)?;
        self.check_writable(&snap)?;
        let add = self.write_data_file(&snap.schema, source, input)?;
        let rows = add.as_ref().and_then(Add::num_records).unwrap_or(0);
        let mut params = BTreeMap::from([("replaces".to_string(), old.to_string())]);
        params.extend(opts.extra_params.iter().cloned());
        let metrics = BTreeMap::from([
            ("numAddedFiles".into(), usize::from(add.is_some()).to_string()),
            ("numRemovedFiles".into(), "1".to_string()),
            ("numOutputRows".into(), rows.to_string()),
        ]);
        let files: Vec<&str> = add.iter().map(|a| a.path.as_str()).collect();
        let mut snap = snap;
        for _ in 0..16 {
            let Some(old_entry) = snap.files.iter().find(|f| f.path == old) else {
                return self.cleanup_on_error(
                    Err(Error::ConcurrentWrite {
                        table: self.root.clone(),
                        read_version,
                        version: read_version,
                    }),
                    &files,
                );
            };
            let res = commit::commit_loop(
                &self.root,
                read_version,
                Isolation::ReadDependent,
                opts.expect_version,
                |v, ts| {
                    let mut actions = vec![Self::write_info("UPDATE", &params, &metrics, v, ts, false)];
                    actions.extend(Self::removes(&[old_entry], ts));
                    actions.extend(add.iter().cloned().map(Action::add));
                    actions
                },
            );
            match res {
                Err(Error::ConcurrentWrite { .. }) if opts.expect_version.is_none() => {
                    read_version = self.latest_version()?;
                    snap = self.snapshot(read_version)?;
                }
                other => return self.cleanup_on_error(other, &files),
            }
        }
        self.cleanup_on_error(
            Err(Error::ConcurrentWrite {
                table: self.root.clone(),
                read_version,
                version: read_version + 1,
            }),
            &files,
        )
    }

    /// The path of the data file that version `version`'s commit added (its first `add`), if
    /// it added one. Errors: as [`crate::log::read_commit`].
    pub fn added_path(&self, version: u64) -> Result<Option<String>> {
        let actions = crate::log::read_commit(&self.commit_path(version))?;
        Ok(actions.into_iter().find_map(|a| a.add.map(|a| a.path)))
    }

    /// The `commitInfo` action of a write at version `v`, timestamp `ts`.
    fn write_info(
        operation: &str,
        params: &BTreeMap<String, String>,
        metrics: &BTreeMap<String, String>,
        v: u64,
        ts: i64,
        blind: bool,
    ) -> Action {
        Action::commit_info(CommitInfo {
            timestamp: ts,
            operation: operation.into(),
            operation_parameters: params.clone(),
            read_version: Some(v as i64 - 1),
            isolation_level: Some("Serializable".into()),
            is_blind_append: blind,
            operation_metrics: metrics.clone(),
            engine_info: Some(ENGINE_INFO.into()),
        })
    }

    fn cleanup_on_error(&self, res: Result<u64>, files: &[&str]) -> Result<u64> {
        if res.is_err() {
            for f in files {
                let _ = fs::remove_file(self.root.join(f));
            }
        }
        res
    }

    fn check_writable(&self, snap: &Snapshot) -> Result<()> {
        if snap.protocol.min_writer_version > WRITER_VERSION {
            return Err(Error::UnsupportedProtocol {
                table: self.root.clone(),
                reader: snap.protocol.min_reader_version,
                writer: snap.protocol.min_writer_version,
            });
        }
        Ok(())
    }

    fn removes(snap_files: &[&crate::snapshot::FileEntry], ts: i64) -> Vec<Action> {
        snap_files
            .iter()
            .map(|f| {
                Action::remove(Remove {
                    path: f.path.clone(),
                    deletion_timestamp: Some(ts),
                    data_change: true,
                    extended_file_metadata: Some(true),
                    partition_values: Some(BTreeMap::new()),
                    size: Some(f.size),
                })
            })
            .collect()
    }

    /// Replace every live file with the rows of `input` as one `WRITE` (mode `Overwrite`)
    /// commit. Returns the new version.
    ///
    /// Errors: [`Error::BadInput`]; [`Error::ConcurrentWrite`] if any commit landed after the
    /// version this overwrite read.
    pub fn overwrite(&self, source: &str, input: impl BufRead, opts: &WriteOptions) -> Result<u64> {
        let read_version = self.latest_version()?;
        let snap = self.snapshot(read_version)?;
        self.check_writable(&snap)?;
        let add = self.write_data_file(&snap.schema, source, input)?;
        let rows = add.as_ref().and_then(Add::num_records).unwrap_or(0);
        let mut params = BTreeMap::from([("mode".to_string(), "Overwrite".to_string())]);
        params.extend(opts.extra_params.iter().cloned());
        let metrics = BTreeMap::from([
            ("numFiles".into(), usize::from(add.is_some()).to_string()),
            ("numOutputRows".into(), rows.to_string()),
            ("numOutputBytes".into(), add.as_ref().map_or(0, |a| a.size).to_string()),
            ("numRemovedFiles".into(), snap.files.len().to_string()),
        ]);
        let live: Vec<_> = snap.files.iter().collect();
        let res = commit::commit_loop(
            &self.root,
            read_version,
            Isolation::ReadDependent,
            opts.expect_version,
            |v, ts| {
                let mut actions = vec![Self::write_info("WRITE", &params, &metrics, v, ts, false)];
                actions.extend(Self::removes(&live, ts));
                actions.extend(add.iter().cloned().map(Action::add));
                actions
            },
        );
        let files: Vec<&str> = add.iter().map(|a| a.path.as_str()).collect();
        self.cleanup_on_error(res, &files)
    }

    /// Commit a `RESTORE` whose snapshot equals version `target`'s: same files in the same order
    /// (so `read` is byte-identical) and the same schema. Later versions stay readable.
    ///
    /// Errors: [`Error::VersionNotFound`]; [`Error::ConcurrentWrite`].
    pub fn restore(&self, target: u64, opts: &WriteOptions) -> Result<u64> {
        let read_version = self.latest_version()?;
        let cur = self.snapshot(read_version)?;
        self.check_writable(&cur)?;
        let old = self.snapshot(target)?;
        let wanted: HashSet<&str> = old.files.iter().map(|f| f.path.as_str()).collect();
        let kept: Vec<&str> = cur
            .files
            .iter()
            .map(|f| f.path.as_str())
            .filter(|p| wanted.contains(p))
            .collect();
        // Keep files that are already live when they form a prefix of the target's order; re-add
        // the rest so that replay yields exactly the target's order.
        let prefix = kept.iter().zip(&old.files).take_while(|(a, b)| **a == b.path).count();
        let kept_prefix: HashSet<&str> = kept[..prefix].iter().copied().collect();
        let to_remove: Vec<_> = cur
            .files
            .iter()
            .filter(|f| !kept_prefix.contains(f.path.as_str()))
            .collect();
        let to_add: Vec<Add> = old.files[prefix..]
            .iter()
            .map(|f| self.add_action(f))
            .collect::<Result<_>>()?;
        let schema_changed = cur.metadata != old.metadata;
        let metrics = BTreeMap::from([
            ("numRestoredFile".into(), to_add.len().to_string()),
            ("numRemovedFile".into(), to_remove.len().to_string()),
            (
                "restoredFilesSize".into(),
                to_add.iter().map(|a| a.size).sum::<u64>().to_string(),
            ),
            (
                "removedFilesSize".into(),
                to_remove.iter().map(|f| f.size).sum::<u64>().to_string(),
            ),
            ("numOfFilesAfterRestore".into(), old.files.len().to_string()),
            ("tableSizeAfterRestore".into(), old.size_bytes().to_string()),
            ("numOutputRows".into(), old.num_records().to_string()),
        ]);
        let mut params = BTreeMap::from([("version".to_string(), target.to_string())]);
        params.extend(opts.extra_params.iter().cloned());
        commit::commit_loop(
            &self.root,
            read_version,
            Isolation::ReadDependent,
            opts.expect_version,
            |v, ts| {
                let mut actions = vec![Action::commit_info(CommitInfo {
                    timestamp: ts,
                    operation: "RESTORE".into(),
                    operation_parameters: params.clone(),
                    read_version: Some(v as i64 - 1),
                    isolation_level: Some("Serializable".into()),
                    is_blind_append: false,
                    operation_metrics: metrics.clone(),
                    engine_info: Some(ENGINE_INFO.into()),
                })];
                if schema_changed {
                    actions.push(Action::metadata(old.metadata.clone()));
                }
                actions.extend(Self::removes(&to_remove, ts));
                actions.extend(to_add.iter().cloned().map(|mut a| {
                    a.data_change = true;
                    Action::add(a)
                }));
                actions
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (tempfile::TempDir, Table) {
        let dir = tempfile::tempdir().expect("tempdir");
        let schema = Schema::parse_cli(&["id:int!".into(), "s:str".into()]).expect("schema");
        let t = Table::create(dir.path().join("t"), &schema).expect("create");
        (dir, t)
    }

    fn append(t: &Table, rows: &str) -> u64 {
        t.append("test", rows.as_bytes(), &WriteOptions::default())
            .expect("append")
            .expect("rows")
    }

    #[test]
    fn incremental_snapshot_equals_full_replay() {
        let (_d, t) = table();
        let base = t.snapshot(0).expect("snapshot 0");
        append(&t, "{\"id\":1}\n");
        append(&t, "{\"id\":2}\n{\"id\":3}\n");
        let mid = t.snapshot(2).expect("snapshot 2");
        t.overwrite("test", "{\"id\":4}\n".as_bytes(), &WriteOptions::default())
            .expect("overwrite");
        t.restore(2, &WriteOptions::default()).expect("restore");
        append(&t, "{\"id\":5}\n");
        for v in 0..=5 {
            let full = t.snapshot(v).expect("full");
            for b in [&base, &mid] {
                let inc = t.snapshot_after(b, v).expect("incremental");
                assert_eq!(inc.files, full.files, "version {v} from base {}", b.version);
                assert_eq!(inc.num_records(), full.num_records());
                assert_eq!(inc.timestamp, full.timestamp);
                assert_eq!(inc.schema, full.schema);
            }
        }
        assert!(matches!(
            t.snapshot_after(&mid, 9),
            Err(Error::VersionNotFound { version: 9, .. })
        ));
    }

    #[test]
    fn latest_version_sees_commits_by_other_handles() {
        let (_d, t) = table();
        let other = Table::open(t.root()).expect("open");
        assert_eq!(t.latest_version().expect("latest"), 0);
        append(&other, "{\"id\":1}\n");
        append(&other, "{\"id\":2}\n");
        assert_eq!(t.latest_version().expect("latest"), 2);
        assert_eq!(t.clone().latest_version().expect("latest"), 2);
    }

    #[test]
    fn checkpoints_agree_with_replay_and_bad_ones_are_ignored() {
        let (_d, t) = table();
        append(&t, "{\"id\":1}\n");
        append(&t, "{\"id\":2}\n{\"id\":3}\n");
        t.overwrite("test", "{\"id\":4}\n".as_bytes(), &WriteOptions::default())
            .expect("overwrite");
        append(&t, "{\"id\":5,\"s\":\"x\"}\n");
        append(&t, "{\"id\":6}\n");
        let full: Vec<Snapshot> = (0..=5).map(|v| t.snapshot(v).expect("snapshot")).collect();
        checkpoint::write(&full[3]).expect("write checkpoint");
        let fresh = Table::open(t.root()).expect("open");
        assert_eq!(fresh.latest_version().expect("latest"), 5);
        for (v, f) in full.iter().enumerate() {
            let v = v as u64;
            let s = fresh.snapshot(v).expect("snapshot");
            assert_eq!(s.files, f.files, "version {v}");
            assert_eq!(s.timestamp, f.timestamp);
            let tot = fresh.totals(v).expect("totals");
            assert_eq!(
                (tot.num_files, tot.num_records, tot.size_bytes),
                (f.files.len() as u64, f.num_records(), f.size_bytes()),
                "totals of version {v}"
            );
            assert_eq!(tot.commit_info.timestamp, f.timestamp);
        }
        // A damaged checkpoint is ignored: replay is the truth.
        let cp = t
            .root()
            .join(checkpoint::CHECKPOINT_DIR)
            .join(format!("{:020}.jsonl", 3));
        std::fs::write(&cp, "{\"version\":3,\"numFiles\":9}\n").expect("damage");
        assert_eq!(fresh.snapshot(5).expect("snapshot").files, full[5].files);
        assert_eq!(fresh.totals(4).expect("totals").num_records, full[4].num_records());
    }
}
