//! Data files: the one opener (checked beneath the table folder, of the size its `add`
//! records, JSONL or Parquet), and the streams of a version's rows (docs/FORMAT.md "Data files").

#[allow(unused_imports)]
use super::*;

impl Table {
    /// The `add` action (with its stats, its path decoded) that made `file` live, read again
    /// from its commit. Errors: [`Error::Corrupt`] when that commit no longer names the file.
    pub fn add_action(&self, file: &crate::log::snapshot::FileEntry) -> Result<Add> {
        self.add_actions(&[file])?.pop().ok_or_else(|| Error::Corrupt {
            path: self.commit_path(file.added_in),
            reason: format!("no add action for {}", file.path),
        })
    }

    /// The `add` actions of `files` (as [`Table::add_action`]), reading each commit that added
    /// one of them once: O(files + their commits' bytes), not O(files x commit size).
    /// Errors: as [`Table::add_action`].
    pub fn add_actions(&self, files: &[&crate::log::snapshot::FileEntry]) -> Result<Vec<Add>> {
        let mut by_version: BTreeMap<u64, std::collections::HashMap<String, Add>> = BTreeMap::new();
        for f in files {
            by_version.entry(f.added_in).or_default();
        }
        for (v, adds) in by_version.iter_mut() {
            for a in self.read_commit(*v)?.actions.into_iter().filter_map(|a| a.add) {
                // The last add of a path in a commit wins, as in replay.
                adds.insert(a.path.clone(), a);
            }
            // A file a snapshot took from a Delta checkpoint at `v` was added before it: its
            // add is in the checkpoint.
            if files.iter().any(|f| f.added_in == *v && !adds.contains_key(f.path.as_str()))
                && let Ok(actions) = self.delta_checkpoint_actions(*v)
            {
                for a in actions.into_iter().filter_map(|a| a.add) {
                    adds.entry(a.path.clone()).or_insert(a);
                }
            }
        }
        // A file whose `add` is in neither (a Delta checkpoint gave its `added_in`, and that
        // checkpoint is gone): it was added at or before that version, so the older commits
        // are read back, newest first, until every such file is found (or the log's start).
        let mut missing: HashSet<&str> = files
            .iter()
            .filter(|f| by_version.get(&f.added_in).is_none_or(|m| !m.contains_key(f.path.as_str())))
            .map(|f| f.path.as_str())
            .collect();
        if !missing.is_empty() {
            let first = self.segment()?.first;
            let newest = files.iter().map(|f| f.added_in).max().unwrap_or(0);
            let mut found: std::collections::HashMap<String, Add> = std::collections::HashMap::new();
            for v in (first..newest).rev() {
                if missing.is_empty() {
                    break;
                }
                let mut adds: std::collections::HashMap<String, Add> = std::collections::HashMap::new();
                for a in self.read_commit(v)?.actions.into_iter().filter_map(|a| a.add) {
                    adds.insert(a.path.clone(), a);
                }
                for (p, a) in adds {
                    if missing.remove(p.as_str()) {
                        found.insert(p, a);
                    }
                }
            }
            for f in files {
                if let Some(a) = found.get(f.path.as_str()) {
                    by_version.entry(f.added_in).or_default().insert(f.path.to_string(), a.clone());
                }
            }
        }
        files
            .iter()
            .map(|f| {
                by_version
                    .get(&f.added_in)
                    .and_then(|m| m.get(f.path.as_str()))
                    .cloned()
                    .ok_or_else(|| Error::Corrupt {
                        path: self.commit_path(f.added_in),
                        reason: format!("no add action for {}", f.path),
                    })
            })
            .collect()
    }

    /// Open the data file `rel` (a decoded path relative to the table root, as in
    /// [`crate::log::snapshot::FileEntry::path`]) for reading, beneath the table folder with
    /// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` ([`crate::sys::beneath::Dir`]), and check that
    /// it is what the log says: a regular file of exactly `expected_size` bytes (`add.size`),
    /// in JSONL, not Parquet. The one opener of data files for the CLI and the mount (see
    /// docs/FORMAT.md, "Data files").
    ///
    /// Errors: [`Error::Corrupt`] naming the file when it is missing, a symlink, not a regular
    /// file, of another size, or a Parquet file; [`Error::Io`] for other failures.
    pub fn open_data_file(&self, rel: &str, expected_size: u64) -> Result<File> {
        open_data_file(&self.dir, rel, expected_size)
    }

    /// The data files of `snapshot` (each as [`Table::open_rows`] opens it), in order, for one
    /// pass over the version's rows: every file is opened and checked before the first one is
    /// handed out, so a version is read whole or not at all, but at most
    /// [`held_files_budget`] descriptors stay open between that check and the read; the rest
    /// are opened again (and checked again) when their turn comes ([`DataFiles`]). A file a
    /// retention vacuum deleted is [`Error::Vacuumed`] (exit 4).
    ///
    /// Errors: as [`Table::open_rows`], naming the file.
    pub fn open_data_files(&self, snapshot: &Snapshot) -> Result<DataFiles> {
        DataFiles::open(self, snapshot.files.clone(), &snapshot.schema, Some(snapshot.version))
    }

    /// The rows of the data file `f` as canonical JSONL under `schema` (the schema of a version
    /// that names it): the JSONL file itself, or for a Parquet data file its converted rows
    /// from the cache ([`crate::table::parquet_cache`], converting it now on a miss). Returns the open
    /// file and its length in bytes. Errors: as [`Table::open_data_file`] and
    /// [`crate::table::parquet_cache::converted`].
    pub fn open_rows(&self, f: &crate::log::snapshot::FileEntry, schema: &Schema) -> Result<(File, u64)> {
        if f.converted() {
            let c = self.converted(f, schema)?;
            return Ok((c.open()?, c.len));
        }
        Ok((self.open_data_file(&f.path, f.size)?, f.size))
    }

    /// [`Table::open_rows`], but a Parquet data file's rows are converted now from the Parquet
    /// file itself into a private temporary file, never read from the converted-rows cache: for
    /// the writers that turn rows into new data (`optimize`, `export`). Errors: as
    /// [`Table::open_rows`].
    pub fn open_rows_fresh(&self, f: &crate::log::snapshot::FileEntry, schema: &Schema) -> Result<(File, u64)> {
        if f.converted()
            && let Some(out) = crate::table::parquet_cache::convert_fresh(&self.dir, f, schema, true)?
        {
            return Ok(out);
        }
        Ok((self.open_data_file(&f.path, f.size)?, f.size))
    }

    /// The converted rows of the Parquet data file `f` under `schema` ([`Table::open_rows`]).
    /// Errors: as [`crate::table::parquet_cache::converted`].
    pub fn converted(
        &self,
        f: &crate::log::snapshot::FileEntry,
        schema: &Schema,
    ) -> Result<crate::table::parquet_cache::Converted> {
        crate::table::parquet_cache::converted(&self.dir, f, schema)
    }

    /// Prove every data file of `snapshot` present beneath the table, a regular file (no
    /// symlink) of its recorded size, with one `fstatat` each and no read of a JSONL file (a
    /// Parquet file is converted, or found in the converted-rows cache) (`describe`: its
    /// numbers must be backed by the files; docs/CLI.md "Usage"). Errors: [`Error::Corrupt`] naming
    /// the first file that is missing, not a regular file, or of another size, as `read` says it. A
    /// file that a recorded retention vacuum deleted is not damage: the version's numbers are still
    /// what the log recorded, and `describe` lists which versions are readable.
    pub fn stat_data_files(&self, snapshot: &Snapshot) -> Result<()> {
        let files = &snapshot.files;
        // The stats (the cost of a version of a million files) run on up to 4 threads, each
        // over one stretch of the files; what they find is then taken in order, so the file
        // named is the first one that fails, as one pass would name it.
        let threads = if files.len() < STAT_FILES_PER_THREAD {
            1
        } else {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4)
                .min(files.len() / STAT_FILES_PER_THREAD)
                .max(1)
        };
        let chunk = files.len().div_ceil(threads).max(1);
        let stat_chunk = |from: usize| -> Vec<(usize, Error)> {
            let mut bad = Vec::new();
            for (i, f) in files.iter().enumerate().skip(from).take(chunk) {
                if let Err(e) = stat_data_file(&self.dir, &f.path, f.size) {
                    bad.push((i, e));
                }
            }
            bad
        };
        let failed: Vec<(usize, Error)> = if threads == 1 {
            stat_chunk(0)
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads).map(|t| s.spawn(move || stat_chunk(t * chunk))).collect();
                handles
                    .into_iter()
                    .map(|h| h.join().map_err(|_| Error::Internal("a stat thread panicked".into())))
                    .collect::<Result<Vec<_>>>()
            })?
            .into_iter()
            .flatten()
            .collect()
        };
        let mut failed = failed.into_iter().peekable();
        for (i, f) in files.iter().enumerate() {
            let stat = match failed.peek() {
                Some((j, _)) if *j == i => failed.next().map(|(_, e)| e),
                _ => None,
            };
            if stat.is_none() && !f.converted() {
                continue;
            }
            // A Parquet data file must also convert (read once, then from the cache): `describe`
            // never reports a version `read` refuses.
            let checked = match stat {
                Some(e) => Err(e),
                None => self.converted(f, &snapshot.schema).map(|_| ()),
            };
            if let Err(e) = checked {
                match crate::table::history::explain_missing(self, snapshot.version, &f.path, e) {
                    Error::Vacuumed { .. } => {}
                    e => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// [`Table::stat_data_files`] for one file `rel` of `expected_size` bytes.
    pub fn stat_data_file(&self, rel: &str, expected_size: u64) -> Result<()> {
        stat_data_file(&self.dir, rel, expected_size)
    }

    /// Write the rows of `snapshot` (its data files concatenated) to `out`.
    pub fn write_rows(&self, snapshot: &Snapshot, out: &mut impl Write) -> Result<u64> {
        // 256 KiB reads and writes: std::io::copy's 8 KiB buffer costs 4x the syscalls of cat.
        let mut buf = vec![0u8; 256 << 10];
        let mut n = 0;
        let mut files = self.open_data_files(snapshot)?;
        while let Some((f, file)) = files.next_file()? {
            let path = self.root.join(&f.path);
            let mut file = CheckedLen::new(file, &f);
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

}

/// The fewest files [`Table::stat_data_files`] gives one thread of its own.
const STAT_FILES_PER_THREAD: usize = 16 << 10;

/// How many data files [`DataFiles`] keeps open between checking a version's files and reading
/// them: a quarter of the soft `RLIMIT_NOFILE` (getrlimit(2)), at most 256 and at least 1, so a
/// version of any number of files reads within the process's descriptor limit.
pub fn held_files_budget() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    usize::try_from(soft / 4).unwrap_or(usize::MAX).clamp(1, 256)
}

/// The data files of one version (or of a chosen subset of them) for one pass in order
/// ([`Table::open_data_files`]): all checked when made, at most [`held_files_budget`] kept
/// open, the others opened again (with the same checks) when [`DataFiles::next_file`] reaches
/// them. Owns what it needs (a clone of the table handle, the entries), so it can outlive the
/// snapshot it came from.
#[derive(Debug)]
pub struct DataFiles {
    table: Table,
    files: Vec<Arc<crate::log::snapshot::FileEntry>>,
    schema: Schema,
    /// The version named when a missing file is explained as vacuumed (`None`: not explained).
    version: Option<u64>,
    /// The open files of `files[next..]` kept from the check, in order (a prefix of the rest).
    held: std::collections::VecDeque<File>,
    /// Each file's identity when it was checked (inode, mtime in ns): a file opened again must
    /// be the same file, unchanged (a rename over it or a rewrite changes these; a new hard link
    /// or a chmod, which change only the ctime, do not fail a read).
    ids: Vec<(u64, i64)>,
    next: usize,
}

/// The identity [`DataFiles`] compares: inode and modification time in ns.
fn file_id(file: &File, path: impl FnOnce() -> PathBuf) -> Result<(u64, i64)> {
    let st = rustix::fs::fstat(file).map_err(|e| Error::io("stat", path(), std::io::Error::from_raw_os_error(e.raw_os_error())))?;
    Ok((st.st_ino, (st.st_mtime as i64).saturating_mul(1_000_000_000).saturating_add(st.st_mtime_nsec as i64)))
}

/// A data file's reader that fails at its end when it did not yield exactly `expected` bytes
/// (the size its `add` action records): a file cut or grown after it was checked never passes
/// as a shorter or longer version (docs/FORMAT.md "Data files"). `expected` `None` reads as is
/// (converted Parquet rows, whose cache file is tinydelta's own).
pub struct CheckedLen<R> {
    inner: R,
    expected: Option<u64>,
    read: u64,
}

impl<R: Read> CheckedLen<R> {
    /// Wrap `inner`, the data file of `entry` (the reader's errors name the file).
    pub fn new(inner: R, entry: &crate::log::snapshot::FileEntry) -> CheckedLen<R> {
        CheckedLen {
            inner,
            expected: expected_len(entry),
            read: 0,
        }
    }
}

impl<R: Read> Read for CheckedLen<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.read += k as u64;
        if let Some(want) = self.expected
            && ((k == 0 && self.read != want) || self.read > want)
        {
            return Err(std::io::Error::other(changed_len(self.read, want)));
        }
        Ok(k)
    }
}

/// The bytes a reader of `entry`'s data file must get: its `add.size`, or `None` for converted
/// Parquet rows.
fn expected_len(entry: &crate::log::snapshot::FileEntry) -> Option<u64> {
    (!entry.converted()).then_some(entry.size)
}

/// Why a data file read `got` bytes where its `add` says `want` (the caller names the file).
fn changed_len(got: u64, want: u64) -> String {
    format!("data file changed while it was read: {got} bytes read, but its add action says {want} bytes")
}

impl DataFiles {
    /// Open and check every file of `files` (as [`Table::open_rows`] does, under `schema`),
    /// keeping the first [`held_files_budget`] open. A missing file is explained against
    /// `version` ([`crate::table::history::explain_missing`]) when it is given.
    ///
    /// Errors: as [`Table::open_rows`], for the first file that fails.
    pub fn open(
        table: &Table,
        files: Vec<Arc<crate::log::snapshot::FileEntry>>,
        schema: &Schema,
        version: Option<u64>,
    ) -> Result<DataFiles> {
        let budget = held_files_budget();
        let mut out = DataFiles {
            table: table.clone(),
            files,
            schema: schema.clone(),
            version,
            held: Default::default(),
            ids: Vec::new(),
            next: 0,
        };
        for i in 0..out.files.len() {
            let file = out.open_one(i)?;
            if out.held.len() >= budget {
                let id = file_id(&file, || out.table.root.join(&out.files[i].path))?;
                out.ids.resize(i, (0, 0));
                out.ids.push(id);
            }
            if out.held.len() < budget {
                out.held.push_back(file);
            }
        }
        Ok(out)
    }

    fn open_one(&self, i: usize) -> Result<File> {
        let f = &self.files[i];
        self.table.open_rows(f, &self.schema).map(|(file, _)| file).map_err(|e| match self.version {
            Some(v) => crate::table::history::explain_missing(&self.table, v, &f.path, e),
            None => e,
        })
    }

    /// Check that `n` bytes were read from `entry`'s data file, the size its `add` records
    /// (converted Parquet rows are not checked). Errors: [`Error::Corrupt`] naming the file
    /// when it was cut or grown after its check.
    pub fn check_len(&self, entry: &crate::log::snapshot::FileEntry, n: u64) -> Result<()> {
        match expected_len(entry) {
            Some(want) if n != want => {
                let path = self.table.root.join(&entry.path);
                Err(Error::Corrupt {
                    reason: changed_len(n, want),
                    path,
                })
            }
            _ => Ok(()),
        }
    }

    /// How many files it holds in all.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether it holds no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The next file and its open descriptor, `None` after the last. Errors: as
    /// [`Table::open_rows`] for a file opened again that is no longer what the log says
    /// (deleted or changed since the check).
    pub fn next_file(&mut self) -> Result<Option<(Arc<crate::log::snapshot::FileEntry>, File)>> {
        let i = self.next;
        let Some(entry) = self.files.get(i).cloned() else {
            return Ok(None);
        };
        let file = match self.held.pop_front() {
            Some(f) => f,
            None => {
                let file = self.open_one(i)?;
                let path = || self.table.root.join(&entry.path);
                if !entry.converted() && self.ids.get(i) != Some(&file_id(&file, path)?) {
                    return Err(Error::Corrupt {
                        path: path(),
                        reason: "data file changed while the version was read (replaced or rewritten after it was checked)".into(),
                    });
                }
                file
            }
        };
        self.next += 1;
        Ok(Some((entry, file)))
    }
}

/// [`Table::open_data_file`] beneath the table folder `root` (a directory handle): the one
/// opener of data files, for holders of the folder's handle that have no [`Table`] (the mount's
/// shared file pool). Errors: as [`Table::open_data_file`].
pub fn open_data_file(root: &Dir, rel: &str, expected_size: u64) -> Result<File> {
    // The absolute path only for messages, made when one is needed (not once per file of a
    // version of a million).
    let path = || root.join(rel);
    let file = match root.open_file(rel) {
        Ok(f) => f,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::MissingDataFile { path: path() });
        }
        Err(e) => return Err(e),
    };
    let len = file.metadata().map_err(|e| Error::io("stat", path(), e))?.len();
    if len != expected_size {
        return Err(Error::Corrupt {
            path: path(),
            reason: format!("data file is {len} bytes, but its add action says {expected_size} bytes"),
        });
    }
    // A Parquet data file is opened as itself (its rows are read through the converted-rows
    // cache, `Table::open_rows`); any other file must be canonical JSONL.
    if is_parquet_name(rel) {
        return Ok(file);
    }
    if !rel.ends_with(".jsonl") && len >= 4 {
        let mut magic = [0u8; 4];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut magic, 0).map_err(|e| Error::io("read", path(), e))?;
        if &magic == b"PAR1" {
            return Err(parquet_error(path()));
        }
    }
    check_jsonl_ends(&file, path, len)?;
    Ok(file)
}


/// Whether `e` is [`open_data_file`]'s error for a missing data file.
pub fn is_missing_data_file(e: &Error) -> bool {
    matches!(e, Error::MissingDataFile { .. })
}

/// Before a commit naming `file` (at `path`) is linked: it must still have a name (vacuum
/// never deletes a file [`hold_data_file`] holds; this is the last line of defence).
pub(super) fn still_linked(file: &File, path: &Path) -> Result<()> {
    let st = rustix::fs::fstat(file)
        .map_err(|e| Error::io("stat", path, std::io::Error::from_raw_os_error(e.raw_os_error())))?;
    if st.st_nlink == 0 {
        return Err(deleted_in_flight(path.to_path_buf()));
    }
    Ok(())
}

pub(super) fn deleted_in_flight(path: PathBuf) -> Error {
    Error::Corrupt {
        path,
        reason: "the new data file was deleted before its commit was published (a vacuum?); nothing was committed"
            .into(),
    }
}

/// A non-empty canonical JSONL data file starts with `{` and ends with `\n` (docs/FORMAT.md,
/// "Data files"): two 1-byte preads on the open descriptor, so a file of other bytes with the
/// right size (Parquet named `part-*.jsonl`, garbage) is never served as rows.
/// Errors: [`Error::Corrupt`] naming `path()` (Parquet's `PAR1` magic is named as such).
pub(super) fn check_jsonl_ends(file: &File, path: impl Fn() -> PathBuf, len: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    if len == 0 {
        return Ok(());
    }
    let (mut first, mut last) = ([0u8; 1], [0u8; 1]);
    file.read_exact_at(&mut first, 0).map_err(|e| Error::io("read", path(), e))?;
    file.read_exact_at(&mut last, len - 1).map_err(|e| Error::io("read", path(), e))?;
    if first == *b"{" && last == *b"\n" {
        return Ok(());
    }
    let mut magic = [0u8; 4];
    let reason = if len >= 4 && file.read_exact_at(&mut magic, 0).is_ok() && &magic == b"PAR1" {
        "data file holds Parquet bytes (PAR1 magic), not JSONL rows".to_string()
    } else if first != *b"{" {
        format!(
            "data file is not canonical JSONL: it starts with byte 0x{:02x}, not `{{`",
            first[0]
        )
    } else {
        "data file is not canonical JSONL: its last line has no newline".to_string()
    };
    Err(Error::Corrupt { path: path(), reason })
}

/// [`open_data_file`]'s presence, type and size checks by `fstatat` beneath `root`, no open.
pub(super) fn stat_data_file(root: &Dir, rel: &str, expected_size: u64) -> Result<()> {
    // The absolute path only for messages (no allocation per file of a million).
    let path = || root.join(rel);
    let st = match root.stat(rel)? {
        Some(st) => st,
        None => {
            return Err(Error::MissingDataFile { path: path() });
        }
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(Error::Corrupt {
            path: path(),
            reason: "data file is not a regular file (a symlink, folder or device is never followed)".into(),
        });
    }
    let len = st.st_size as u64;
    if len != expected_size {
        return Err(Error::Corrupt {
            path: path(),
            reason: format!("data file is {len} bytes, but its add action says {expected_size} bytes"),
        });
    }
    Ok(())
}

use crate::format::parquet::is_parquet_name;

pub(super) fn parquet_error(path: PathBuf) -> Error {
    Error::MisnamedParquet { path }
}

/// Whether `e` says a data file is in a format tinydelta does not read (Parquet): the table is
/// not damaged, but the versions naming the file cannot be read by tinydelta.
pub fn is_unsupported_format(e: &Error) -> bool {
    matches!(e, Error::MisnamedParquet { .. })
}


