//! Writes: append, overwrite, restore and idempotent appends, each as one commit of new data
//! files (docs/FORMAT.md "How a write becomes visible").

#[allow(unused_imports)]
use super::*;

impl Table {
    /// Validate and canonicalise `input` into a new `part-<uuid>.jsonl`, fsynced (its folder entry
    /// is fsynced by [`publish::publish`] before the commit is linked).
    /// Returns the `add` action, or `None` (and no file) when the input has no rows.
    /// The file is returned open and locked ([`hold_data_file`]): keep it until the commit is
    /// linked, so vacuum cannot delete it meanwhile.
    pub(super) fn write_data_file(
        &self,
        schema: &Schema,
        source: &str,
        input: impl BufRead,
        opts: &WriteOptions,
    ) -> Result<(Option<Add>, Option<File>)> {
        let Some((add, file)) = self.create_data_file(schema, source, input, opts)? else {
            return Ok((None, None));
        };
        if let Err(e) = file.sync_all() {
            let _ = self.dir.try_unlink(&add.path);
            return Err(Error::io("fsync", self.root.join(&add.path), e));
        }
        Ok((Some(add), Some(file)))
    }

    /// [`Table::write_data_file`] without the fsync: the file is returned open, for
    /// [`publish::publish_after`] to fsync together with the commit (one journal commit, not two).
    pub(super) fn create_data_file(
        &self,
        schema: &Schema,
        source: &str,
        input: impl BufRead,
        opts: &WriteOptions,
    ) -> Result<Option<(Add, File)>> {
        let name = format!("part-{}.jsonl", uuid::Uuid::new_v4());
        let path = self.root.join(&name);
        let created = self.dir.create_new(&name, 0o644)?;
        if let Err(e) = hold_data_file(&self.dir, &name, &created) {
            let _ = self.dir.try_unlink(&name);
            return Err(e);
        }
        let mut w = BufWriter::with_capacity(256 << 10, Writeback::new(created));
        let result = rows::canonicalize_with(
            schema,
            opts.max_line_bytes.unwrap_or(rows::DEFAULT_MAX_LINE_BYTES),
            source,
            input,
            &mut w,
            &path,
        ).and_then(|stats| {
            let file = w.into_inner().map_err(|e| Error::io("write", &path, e.into_error()))?;
            Ok((stats, file.file))
        });
        let (stats, file) = match result {
            Ok((s, f)) if s.num_records > 0 => (s, f),
            other => {
                let _ = self.dir.try_unlink(&name);
                return other.map(|_| None);
            }
        };
        if let Err(e) = failpoint::hit("data-written") {
            let _ = self.dir.try_unlink(&name);
            return Err(e);
        }
        Ok(Some((Self::new_add(name, schema, &stats), file)))
    }

    /// Append the rows of `input` as one `WRITE` (mode `Append`) commit, a blind append that
    /// rebases over concurrent appends. Returns the new version, or `None` when the input has no
    /// rows (nothing is committed). With [`WriteOptions::merge_schema`] the rows are checked
    /// against the merged schema, whose `metaData` is committed with them.
    ///
    /// Errors: [`Error::BadInput`] (nothing committed, no file left); [`Error::ConcurrentWrite`]
    /// when a concurrent commit changed the schema or `expect_version` no longer holds.
    pub fn append(&self, source: &str, input: impl BufRead, opts: &WriteOptions) -> Result<Option<u64>> {
        let read_version = self.latest_version()?;
        let snap = self.snapshot(read_version)?;
        self.check_writable_as(&snap, "append")?;
        let schema = write_schema(&snap, opts)?;
        let Some((add, file)) = self.create_data_file(&schema, source, input, opts)? else {
            return Ok(None);
        };
        let path = self.root.join(&add.path);
        still_linked(&file, &path)?;
        self.commit_append_after(&snap, read_version, add, &schema, opts, &[(&file, &path)])
            .map(Some)
    }

    /// [`Table::append`] for the rows of a regular file `input` (from byte `start` to its end)
    /// when every line is its own canonical row already (docs/BENCHMARKS.md "What each figure
    /// measures", figure 6): the file is copied into the new `part-<uuid>.jsonl` by the kernel
    /// (`copy_file_range`, as `cp` does), and the copy, which nobody else writes, is what is
    /// checked ([`rows::check_canonical_while`], every row in full, as [`Table::append`] checks it)
    /// and committed, so bytes that change in `input` after the check cannot reach the table. The
    /// disk starts writing the copy while it is checked; it is fsynced with the commit
    /// ([`publish::publish_after`]). `unchanged` is called once the copy reached the end of
    /// `input`: an error from it fails the append (the caller's check that the input was not
    /// written meanwhile).
    ///
    /// Returns [`FileAppend::NotCanonical`] (nothing committed, no file left) when a line is not
    /// its own canonical row, valid or not: the caller then appends with [`Table::append`],
    /// which canonicalises the rows or words the error.
    ///
    /// Errors: as [`Table::append`] (never [`Error::BadInput`]); [`Error::Io`] when the copy
    /// fails; those of `unchanged`.
    pub fn append_file(
        &self,
        source: &str,
        input: &File,
        start: u64,
        unchanged: impl FnOnce() -> Result<()>,
        opts: &WriteOptions,
    ) -> Result<FileAppend> {
        // The one-pass check allows lines up to the default maximum: a lower
        // `max_line_bytes` is enforced by the general path (a longer line is not canonical
        // here, so a higher one is too).
        if opts.max_line_bytes.is_some_and(|n| n < rows::DEFAULT_MAX_LINE_BYTES) {
            return Ok(FileAppend::NotCanonical);
        }
        let read_version = self.latest_version()?;
        let snap = self.snapshot(read_version)?;
        self.check_writable_as(&snap, "append")?;
        let schema = write_schema(&snap, opts)?;
        let (add, file) = match self.copy_data_file(&schema, source, input, start, unchanged)? {
            Copied::Rows(add, file) => (add, file),
            Copied::NoRows => return Ok(FileAppend::Done(None)),
            Copied::NotCanonical => return Ok(FileAppend::NotCanonical),
        };
        let path = self.root.join(&add.path);
        still_linked(&file, &path)?;
        self.commit_append_after(&snap, read_version, add, &schema, opts, &[(&file, &path)])
            .map(|v| FileAppend::Done(Some(v)))
    }

    /// [`Table::create_data_file`] for [`Table::append_file`]: copy `input` from `start` into a
    /// new `part-<uuid>.jsonl` and check the copy. The file is returned open, held
    /// ([`hold_data_file`]) and not yet fsynced; on any other outcome it is removed.
    pub(super) fn copy_data_file(
        &self,
        schema: &Schema,
        source: &str,
        input: &File,
        start: u64,
        unchanged: impl FnOnce() -> Result<()>,
    ) -> Result<Copied> {
        let name = format!("part-{}.jsonl", uuid::Uuid::new_v4());
        let path = self.root.join(&name);
        let created = self.dir.create_new_rw(&name, 0o644)?;
        let result = hold_data_file(&self.dir, &name, &created)
            .and_then(|()| {
                // This thread copies (the kernel writes the copy's pages) and starts the disk
                // writing each step, while the other threads check the steps already copied.
                let written = rows::Written::default();
                let mut copy = Ok(0);
                let checked = rows::check_canonical_while(schema, &created, &path, &written, || {
                    let mut started = 0;
                    copy = crate::table::staging::copy_to_end(input, start, &created, COPY_STEP, &mut |n| {
                        written.advance(n);
                        if n >= started + COPY_STEP as u64 {
                            crate::table::staging::start_writeback(&created, started, n - started);
                            started = n;
                        }
                    })
                    .map_err(|e| Error::io("copy", source, io_context(e, &path)))
                    .and_then(|len| {
                        if len > started {
                            crate::table::staging::start_writeback(&created, started, len - started);
                        }
                        unchanged().map(|()| len)
                    });
                    match copy {
                        Ok(len) => written.finish(len),
                        Err(_) => written.stop(),
                    }
                });
                let len = copy?;
                let stats = checked?;
                Ok((len > 0).then(|| stats.filter(|st| st.num_records > 0)))
            })
            .and_then(|checked| failpoint::hit("data-written").map(|()| checked));
        match result {
            Ok(Some(Some(stats))) => Ok(Copied::Rows(Self::new_add(name, schema, &stats), created)),
            other => {
                let _ = self.dir.try_unlink(&name);
                other.map(|c| match c {
                    None => Copied::NoRows,
                    Some(_) => Copied::NotCanonical,
                })
            }
        }
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
        self.append_prepared_after(schema, stats, None, |path| place(path).map(|()| None), opts)
    }

    /// [`Table::append_prepared`] for canonical rows that may not be fsynced yet: `canon`, when
    /// given, is the open file whose bytes `place(path)` links to `path`; it is fsynced together
    /// with the commit ([`publish::publish_after`]), before the version is published (`None`: the
    /// placed bytes are durable already).
    ///
    /// `place` may return the placed file's descriptor, opened beneath the table folder, to hold
    /// it by ([`hold_data_file`]) instead of opening it again.
    ///
    /// Errors: as [`Table::append_prepared`] ([`Error::ConcurrentWrite`] for a changed schema comes
    /// before `place` is called; every other conflict after); a failed fsync of `canon`
    /// (nothing committed, the placed name removed).
    pub fn append_prepared_after(
        &self,
        schema: &Schema,
        stats: &rows::FileStats,
        canon: Option<&File>,
        place: impl FnOnce(&Path) -> Result<Option<File>>,
        opts: &WriteOptions,
    ) -> Result<Option<u64>> {
        let read_version = self.latest_version()?;
        let snap = self.snapshot_arc(read_version)?;
        self.check_writable_as(&snap, "append")?;
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
        let path = self.root.join(&name);
        let placed = place(&path)?;
        // Held until the commit is linked: vacuum skips a data file a writer holds.
        let _held = placed.map_or_else(|| self.dir.open_file(&name), Ok).and_then(|f| {
            hold_data_file(&self.dir, &name, &f)?;
            Ok(f)
        });
        let _held = match _held {
            Ok(f) => f,
            Err(e) => {
                let _ = self.dir.try_unlink(&name);
                return Err(e);
            }
        };
        let add = Self::new_add(name, schema, stats);
        let data: Vec<(&File, &Path)> = canon.map(|f| (f, path.as_path())).into_iter().collect();
        self.commit_append_after(&snap, read_version, add, schema, opts, &data)
            .map(Some)
    }

    /// The `add` of a new data file `name` (relative to the root) with `stats`.
    pub(crate) fn new_add(name: String, schema: &Schema, stats: &rows::FileStats) -> Add {
        Add {
            path: name,
            partition_values: BTreeMap::new(),
            size: stats.bytes,
            modification_time: crate::util::time::now_ms(),
            data_change: true,
            stats: Some(stats.to_stats_json(schema)),
            parsed_rows: Default::default(),
            deletion_vector: None,
        }
    }

    /// Commit `add` (a data file already durable in the root) as one blind `WRITE`/`Append`
    /// read from `snap` at `read_version`, its rows written against `schema` (the table's, or a
    /// merged one whose `metaData`, and `protocol` if its types need table features, join the
    /// commit: [`schema_change_actions`]).
    /// `data`: the new data file if it is not yet fsynced (it and its path), which the publish
    /// fsyncs together with the commit.
    pub(super) fn commit_append_after(
        &self,
        snap: &Snapshot,
        read_version: u64,
        add: Add,
        schema: &Schema,
        opts: &WriteOptions,
        data: &[(&File, &Path)],
    ) -> Result<u64> {
        let (mut params, metrics) = write_params("Append", Some(&add), opts);
        let changes = schema_change_actions(snap, schema);
        if !changes.is_empty() {
            params.insert("mergeSchema".into(), "true".into());
        }
        let res = crate::table::commit::commit_loop_published(
            self,
            read_version,
            Isolation::BlindAppend,
            opts.expect_version,
            data,
            |v, ts| {
                let mut actions = vec![Self::write_info("WRITE", &params, &metrics, v, ts, changes.is_empty())];
                actions.extend(changes.iter().cloned());
                actions.push(Action::add(add.clone()));
                actions
            },
        );
        match res {
            Ok((v, bytes)) => {
                self.write_crc_published(v, snap, Some(&bytes));
                Ok(v)
            }
            Err(e) => self.finish(Err(e), &[&add.path], snap),
        }
    }

    /// Replace the rows of one live data file `old` (a path relative to the root, as its `add`
    /// named it) with the rows of `input`, as one `UPDATE` commit (a `remove` of `old` and an
    /// `add` of the new file; the mount's re-save of a file it committed moments ago, docs/MOUNT.md
    /// "Re-saves"). Rebases over commits that leave `old` live. Returns the new version.
    ///
    /// Errors: [`Error::BadInput`] (nothing committed); [`Error::ReplacedFileRemoved`] when
    /// `old` is no longer live (naming the version and operation that removed it);
    /// [`Error::ConcurrentWrite`] when a commit in between changed the schema.
    pub fn replace_file(&self, source: &str, old: &str, input: impl BufRead, opts: &WriteOptions) -> Result<u64> {
        let mut read_version = self.latest_version()?;
        let mut snap = self.snapshot(read_version)?;
        self.check_writable_as(&snap, "this re-save")?;
        let (add, held) = self.write_data_file(&snap.schema, source, input, opts)?;
        if let (Some(a), Some(f)) = (&add, &held) {
            still_linked(f, &self.root.join(&a.path))?;
        }
        let rows = add.as_ref().and_then(Add::num_records).unwrap_or(0);
        let mut params = BTreeMap::from([("replaces".to_string(), old.to_string())]);
        params.extend(opts.extra_params.iter().cloned());
        let metrics = BTreeMap::from([
            ("numAddedFiles".into(), usize::from(add.is_some()).to_string()),
            ("numRemovedFiles".into(), "1".to_string()),
            ("numOutputRows".into(), rows.to_string()),
        ]);
        let files: Vec<&str> = add.iter().map(|a| a.path.as_str()).collect();
        for _ in 0..16 {
            let Some(old_entry) = snap.files.iter().find(|f| f.path == old) else {
                let conflict = Err(Error::ReplacedFileRemoved {
                    table: self.root.clone(),
                    path: old.to_string(),
                    latest: read_version,
                    removed: self.removed_by(old, read_version),
                });
                return self.finish(conflict, &files, &snap);
            };
            let res = crate::table::commit::commit_loop(
                self,
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
                other => return self.finish(other, &files, &snap),
            }
        }
        let conflict = Err(Error::ConcurrentWrite {
            table: self.root.clone(),
            read_version,
            version: read_version + 1,
        });
        self.finish(conflict, &files, &snap)
    }

    /// The newest version at or before `latest` whose commit removes `path`, with its operation
    /// (`WRITE (mode Overwrite)`)
    /// (for messages: a commit that cannot be read, or none within the last 10000 versions,
    /// gives `None`).
    pub(super) fn removed_by(&self, path: &str, latest: u64) -> Option<(u64, String)> {
        for v in (latest.saturating_sub(10_000)..=latest).rev() {
            let c = self.read_commit(v).ok()?;
            if c.actions.iter().any(|a| a.add.as_ref().is_some_and(|a| a.path == path)) {
                return None;
            }
            if c.actions
                .iter()
                .any(|a| a.remove.as_ref().is_some_and(|r| r.path == path))
            {
                let op = c.info.map_or_else(
                    || "a commit without commitInfo".into(),
                    |i| match i.operation_parameters.get("mode") {
                        Some(mode) => format!("{} (mode {mode})", i.operation),
                        None => i.operation,
                    },
                );
                return Some((v, op));
            }
        }
        None
    }

    /// The path of the data file that version `version`'s commit added (its first `add`), if
    /// it added one. Errors: as [`Table::read_commit`].
    pub fn added_path(&self, version: u64) -> Result<Option<String>> {
        let c = self.read_commit(version)?;
        Ok(c.actions.into_iter().find_map(|a| a.add.map(|a| a.path)))
    }

    /// The `commitInfo` action of a write at version `v`, timestamp `ts`.
    pub(super) fn write_info(
        operation: &str,
        params: &BTreeMap<String, String>,
        metrics: &BTreeMap<String, String>,
        v: u64,
        ts: i64,
        blind: bool,
    ) -> Action {
        commit_info_action(operation, params, metrics, v as i64 - 1, ts, blind)
    }

    /// An idempotent append (Delta PROTOCOL "Transaction Identifiers"; docs/FORMAT.md "Idempotent
    /// appends"): commits the rows of `input` with a `txn` action (`app_id`, `version`) only if the
    /// table's recorded version for `app_id` is lower than `version`; else commits nothing and
    /// returns [`TxnOutcome::AlreadyApplied`]. The check is repeated against every commit it
    /// rebases over, so of racing writers with one `txn` exactly one commits. An input with no rows
    /// still commits the `txn` action. Errors: as [`Table::append`].
    pub fn append_txn(
        &self,
        source: &str,
        input: impl BufRead,
        opts: &WriteOptions,
        app_id: &str,
        txn_version: i64,
    ) -> Result<TxnOutcome> {
        let read_version = self.latest_version()?;
        let snap = self.snapshot(read_version)?;
        self.check_writable_as(&snap, "append")?;
        if let Some(&recorded) = snap.txns.get(app_id)
            && recorded >= txn_version
        {
            return Ok(TxnOutcome::AlreadyApplied { recorded });
        }
        let schema = write_schema(&snap, opts)?;
        let changes = schema_change_actions(&snap, &schema);
        let created = self.create_data_file(&schema, source, input, opts)?;
        let add = created.as_ref().map(|(a, _)| a.clone());
        let path = add.as_ref().map(|a| self.root.join(&a.path));
        let data: Vec<(&File, &Path)> = match (&created, &path) {
            (Some((_, f)), Some(p)) => vec![(f, p.as_path())],
            _ => vec![],
        };
        let (mut params, metrics) = write_params("Append", add.as_ref(), opts);
        // A schema change only with rows: an input without rows commits the `txn` alone.
        let changes = if add.is_some() { changes } else { Vec::new() };
        if !changes.is_empty() {
            params.insert("mergeSchema".into(), "true".into());
        }
        // A rebase over a commit recording this app id at `txn_version` or later: already applied.
        let applied = std::cell::Cell::new(None);
        let build = |v: u64, ts: i64| {
            let mut actions = vec![
                Self::write_info("WRITE", &params, &metrics, v, ts, changes.is_empty()),
                Action::txn(crate::format::actions::Txn {
                    app_id: app_id.to_string(),
                    version: txn_version,
                    last_updated: Some(ts),
                }),
            ];
            actions.extend(changes.iter().cloned());
            actions.extend(add.iter().cloned().map(Action::add));
            actions
        };
        let res = crate::table::commit::commit_loop_checked(self, read_version, opts.expect_version, &data, build, |winner| {
            let c = self.read_commit(winner)?;
            if let Some(t) = c
                .actions
                .iter()
                .filter_map(|a| a.txn.as_ref())
                .find(|t| t.app_id == app_id)
                && t.version >= txn_version
            {
                applied.set(Some(t.version));
                return Ok(true);
            }
            Ok(c.actions.iter().any(|a| a.metadata.is_some() || a.protocol.is_some()))
        });
        let files: Vec<&str> = add.iter().map(|a| a.path.as_str()).collect();
        match (self.finish(res, &files, &snap), applied.get()) {
            (Err(Error::ConcurrentWrite { .. }), Some(recorded)) => Ok(TxnOutcome::AlreadyApplied { recorded }),
            (r, _) => r.map(TxnOutcome::Committed),
        }
    }

    /// After a commit attempt: on an error that left nothing published, remove the data files
    /// written for it; after a publish (even one whose durability is unknown), keep them and
    /// write the version checksum from `base` (the snapshot the write read).
    pub(crate) fn finish(&self, res: Result<u64>, files: &[&str], base: &Snapshot) -> Result<u64> {
        match &res {
            Ok(v) => self.write_crc_after(*v, Some(base)),
            Err(Error::NotDurable { .. }) => {}
            Err(_) => {
                for f in files {
                    let _ = self.dir.try_unlink(f);
                }
            }
        }
        res
    }

    /// Write `_delta_log/{version:020}.crc` (Delta PROTOCOL "Version Checksum File": table size,
    /// file count, metadata, protocol) for a version just committed, replaying it from `base`.
    /// Best effort: readers never need it, so a failure is a warning.
    ///
    /// The common case, one commit on top of `base` that only adds new files (an append), costs
    /// one read of that commit and a copy of `base`'s file list ([`advance`]), no hashing or
    /// sorting of the live files, and the snapshot built becomes this table's newest one, so the
    /// next write starts from it.
    pub(crate) fn write_crc_after(&self, version: u64, base: Option<&Snapshot>) {
        match base {
            Some(b) => self.write_crc_published(version, b, None),
            None => self.write_crc_snapshot(version, self.snapshot(version), None),
        }
    }

    /// [`Table::write_crc_after`] from `base`, for a version this handle just linked whose
    /// commit file holds `published` (the bytes it wrote and linked, when known): those bytes
    /// are parsed and checked as a read of the file would (`scan_commit`, with the file's
    /// modification time and size from the stamp taken first), so the snapshot is the one a
    /// replay of the file gives, without opening and reading it again. A stamp whose size is not
    /// `published`'s length (the file was replaced since the link) reads the file instead.
    pub(crate) fn write_crc_published(&self, version: u64, base: &Snapshot, published: Option<&[u8]>) {
        let stamp = self.commit_stamp(version);
        let from_memory = match (published, stamp) {
            (Some(bytes), Some(CommitStamp(Some((_, size, mtime, mtime_ns, _, _)))))
                if version == base.version + 1 && u64::try_from(size).ok() == Some(bytes.len() as u64) =>
            {
                let mtime_ms = mtime.saturating_mul(1000).saturating_add(mtime_ns / 1_000_000);
                let path = self.log_dir.join(crate::log::files::commit_file_name(version));
                let mut actions = Vec::new();
                Some(
                    crate::log::files::scan_commit(version, &path, bytes, mtime_ms, |a| {
                        actions.push(a);
                        Ok(())
                    })
                    .map(|mut c| {
                        c.actions = actions;
                        c
                    }),
                )
            }
            _ => None,
        };
        // This handle just linked `version` on top of `base` (plus any versions it rebased
        // over, which it read): replayed from the commits themselves, with no listing of the
        // log (a listing costs O(versions) per commit; readers never need the .crc).
        let snap = match from_memory {
            Some(c) => self.advance_read(version, base, c),
            None if version == base.version + 1 => self.advance_read(version, base, self.read_commit(version)),
            None if version > base.version => self.replay_after(base, version),
            None => self.snapshot_after(base, version),
        };
        self.write_crc_snapshot(version, snap, Some(stamp));
    }

    /// The snapshot of `version` = `base.version + 1` from its commit `read` (read and checked
    /// whole), by [`advance`] when it only adds files, else by replay.
    fn advance_read(&self, version: u64, base: &Snapshot, read: Result<crate::log::files::Commit>) -> Result<Snapshot> {
        let c = read?;
        // Read and checked whole: the next [`Table::latest_version`] need not read it again
        // while it is the newest (at worst a newer store is undone, and that version is read
        // once more).
        self.newest_ok.store(version, Ordering::Release);
        match crate::log::snapshot::advance(base, &c) {
            Some(s) => Ok(s),
            None => self.replay_after(base, version),
        }
    }

    /// Keep `snap`, the snapshot of `version` just committed, as the newest (under `stamp`, its
    /// commit's stamp taken before it was built; `None`: taken now) and write its version
    /// checksum after the reply.
    fn write_crc_snapshot(&self, version: u64, snap: Result<Snapshot>, stamp: Option<Option<CommitStamp>>) {
        let snap = match snap {
            Ok(s) => s,
            Err(e) => {
                ::log::warn!("no version checksum written for version {version}: {e}");
                return;
            }
        };
        let snap = Arc::new(snap);
        if let Some(stamp) = stamp.unwrap_or_else(|| self.commit_stamp(version)) {
            self.set_tip(snap.clone(), stamp);
        }
        // Advisory (docs/FORMAT.md, "Version checksums"): in the mount, written after the
        // reply to the commit's close.
        let log = self.log.clone();
        let checkpoint = delta_checkpoint_due(&snap).then(|| self.clone());
        crate::table::request::after_reply(move || {
            if let Err(e) = crate::log::crc::write(&log, &snap) {
                ::log::warn!("no version checksum written for version {version}: {e}");
            }
            if let Some(table) = checkpoint
                && let Err(e) = table.write_delta_checkpoint(&snap)
            {
                ::log::warn!("no Delta checkpoint written for version {version}: {e}");
            }
        });
    }

    /// Write the classic Delta checkpoint of `snap` (`_delta_log/<v:020>.checkpoint.parquet`
    /// and `_last_checkpoint`; docs/FORMAT.md "Delta checkpoints"): the protocol, the metaData,
    /// every live file's `add` as committed, and the `remove`s of the last
    /// `delta.checkpointInterval` commits whose files are not live. Advisory, like the version
    /// checksum: readers replay the commits without it. Errors: reading the commits that added
    /// the live files; [`Error::Io`] writing, naming the file.
    pub(crate) fn write_delta_checkpoint(&self, snap: &Snapshot) -> Result<()> {
        let files: Vec<&crate::log::snapshot::FileEntry> = snap.files.iter().map(|f| &**f).collect();
        // In snapshot order: the order of the version's rows.
        let adds = self.add_actions(&files)?;
        let live: std::collections::HashSet<&str> = adds.iter().map(|a| a.path.as_str()).collect();
        let mut tombstones: BTreeMap<String, Remove> = BTreeMap::new();
        let from = snap.version.saturating_sub(checkpoint_interval(&snap.metadata) - 1);
        for v in from..=snap.version {
            // A version before the log segment's first (cleaned up) has no removes to keep.
            let Ok(c) = self.read_commit(v) else { continue };
            for a in c.actions {
                if let Some(r) = a.remove
                    && !live.contains(r.path.as_str())
                {
                    tombstones.insert(r.path.clone(), r);
                }
                if let Some(add) = a.add {
                    tombstones.remove(&add.path);
                }
            }
        }
        let state = crate::log::delta_checkpoint::State {
            protocol: snap.protocol.clone(),
            metadata: Some(&snap.metadata),
            live: adds.iter().map(|a| (a.path.as_str(), a)).collect(),
            tombstones: &tombstones,
        };
        crate::log::delta_checkpoint::write(&self.log, snap.version, &state)
    }

    /// Refuse writes of JSONL data files into a table whose `metaData.format.provider` is not
    /// `json` ([`Error::ReadOnlyTable`] naming `operation`), and writes to a protocol tinydelta
    /// does not write ([`Error::UnsupportedProtocol`]).
    #[allow(dead_code)]
    pub(crate) fn check_writable(&self, snap: &Snapshot) -> Result<()> {
        self.check_writable_as(snap, "this write")
    }

    /// [`Table::check_writable`] for the latest version, naming `operation` in the error (the
    /// mount asks before every change in `incoming/`; costs one `fstat` of `_delta_log/` while
    /// the newest snapshot is cached). Errors: as [`Table::check_writable`] and
    /// [`Table::snapshot`].
    pub fn check_accepts_writes(&self, operation: &str) -> Result<()> {
        let v = self.latest_version()?;
        match self.tip_if(|tv| tv == v) {
            Some(t) => self.check_writable_as(&t, operation),
            None => self.check_writable_as(&self.snapshot(v)?, operation),
        }
    }

    pub(crate) fn check_writable_as(&self, snap: &Snapshot, operation: &str) -> Result<()> {
        if snap.metadata.format.provider != "json" {
            return Err(Error::ReadOnlyTable {
                table: self.root.clone(),
                provider: snap.metadata.format.provider.clone(),
                operation: operation.into(),
            });
        }
        self.check_protocol_writable(snap)
    }

    /// Refuse a commit to a table whose protocol asks for a newer writer than tinydelta.
    pub(crate) fn check_protocol_writable(&self, snap: &Snapshot) -> Result<()> {
        let p = &snap.protocol;
        let features_known = p.min_writer_version == 7
            && p.writer_features
                .iter()
                .flatten()
                .all(|f| crate::log::snapshot::WRITER_FEATURES.contains(&f.as_str()));
        if p.min_writer_version > WRITER_VERSION && !features_known {
            return Err(Error::UnsupportedProtocol {
                table: self.root.clone(),
                reader: snap.protocol.min_reader_version,
                writer: snap.protocol.min_writer_version,
            });
        }
        Ok(())
    }

    /// The `remove`s (`dataChange: true`, at `ts`) of live files a commit replaces, each with
    /// its deletion vector (PROTOCOL "Deletion Vectors": a remove names the logical file).
    pub(crate) fn removes(snap_files: &[&crate::log::snapshot::FileEntry], ts: i64) -> Vec<Action> {
        snap_files
            .iter()
            .map(|f| {
                Action::remove(Remove {
                    path: crate::format::actions::encode_path(&f.path),
                    deletion_timestamp: Some(ts),
                    data_change: true,
                    extended_file_metadata: Some(true),
                    partition_values: Some(BTreeMap::new()),
                    size: Some(f.size),
                    deletion_vector: f.deletion_vector.as_deref().cloned().map(Box::new),
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
        self.check_writable_as(&snap, "overwrite")?;
        let (add, held) = self.write_data_file(&snap.schema, source, input, opts)?;
        if let (Some(a), Some(f)) = (&add, &held) {
            still_linked(f, &self.root.join(&a.path))?;
        }
        let (params, mut metrics) = write_params("Overwrite", add.as_ref(), opts);
        metrics.insert("numRemovedFiles".into(), snap.files.len().to_string());
        let live: Vec<_> = snap.files.iter().map(|f| &**f).collect();
        let read_files: HashSet<String> = snap.files.iter().map(|f| f.path.to_string()).collect();
        let res = crate::table::commit::commit_loop_serializable(self, read_version, &read_files, opts.expect_version, |_, ts| {
            let mut actions = vec![serializable_info("WRITE", &params, &metrics, read_version, ts)];
            actions.extend(Self::removes(&live, ts));
            actions.extend(add.iter().cloned().map(Action::add));
            actions
        });
        let files: Vec<&str> = add.iter().map(|a| a.path.as_str()).collect();
        self.finish(res, &files, &snap)
    }

    /// Commit a `RESTORE` whose snapshot equals version `target`'s: same files in the same order
    /// (so `read` is byte-identical) and the same schema. Later versions stay readable.
    ///
    /// Errors: [`Error::VersionNotFound`]; [`Error::ConcurrentWrite`].
    pub fn restore(&self, target: u64, opts: &WriteOptions) -> Result<u64> {
        let read_version = self.latest_version()?;
        let cur = self.snapshot(read_version)?;
        self.check_protocol_writable(&cur)?;
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
        let to_add: Vec<Add> = self.add_actions(&old.files[prefix..].iter().map(|f| &**f).collect::<Vec<_>>())?;
        self.check_restorable(target, &cur, &to_add)?;
        // A live file the restore re-adds is not also removed: re-adding a live path is how
        // Delta updates it (PROTOCOL "Add File and Remove File"; one path in both an add and a
        // remove of one commit is not allowed), and replay moves it to the end all the same.
        let readded: HashSet<&str> = to_add.iter().map(|a| a.path.as_str()).collect();
        let to_remove: Vec<_> = cur
            .files
            .iter()
            .filter(|f| !kept_prefix.contains(f.path.as_str()) && !readded.contains(f.path.as_str()))
            .map(|f| &**f)
            .collect();
        let schema_changed = cur.metadata != old.metadata;
        let metrics = BTreeMap::from([
            ("numRestoredFiles".into(), to_add.len().to_string()),
            ("numRemovedFiles".into(), to_remove.len().to_string()),
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
        let read_files: HashSet<String> = cur.files.iter().map(|f| f.path.to_string()).collect();
        let res = crate::table::commit::commit_loop_serializable(self, read_version, &read_files, opts.expect_version, |_, ts| {
            let mut actions = vec![serializable_info("RESTORE", &params, &metrics, read_version, ts)];
            if schema_changed {
                actions.push(Action::metadata(old.metadata.clone()));
            }
            actions.extend(Self::removes(&to_remove, ts));
            actions.extend(to_add.iter().cloned().map(|mut a| {
                a.data_change = true;
                a.path = crate::format::actions::encode_path(&a.path);
                Action::add(a)
            }));
            actions
        });
        self.finish(res, &[], &cur)
    }
}

impl Table {
    /// Before a restore to `target` re-adds `to_add`: each file not live in `cur` is still on
    /// disk (opened and size-checked), else the error names the vacuum that deleted it
    /// ([`Error::Vacuumed`]). Errors: as [`Table::open_data_file`].
    pub(super) fn check_restorable(&self, target: u64, cur: &Snapshot, to_add: &[Add]) -> Result<()> {
        let live: HashSet<&str> = cur.files.iter().map(|f| f.path.as_str()).collect();
        for a in to_add.iter().filter(|a| !live.contains(a.path.as_str())) {
            self.open_data_file(&a.path, a.size)
                .map_err(|e| crate::table::history::explain_missing(self, target, &a.path, e))?;
        }
        Ok(())
    }
}

/// The schema an append writes its rows against: the table's, or with
/// [`WriteOptions::merge_schema`] the table's merged with it ([`Schema::merged_with`]).
///
/// Errors: [`Error::InvalidArgument`] when the merged schema is not one a table may have
/// ([`Schema::check_evolved`]: a reserved or empty name, a depth beyond
/// [`crate::format::schema::MAX_TYPE_DEPTH`]); nothing is written.
fn write_schema(snap: &Snapshot, opts: &WriteOptions) -> Result<Schema> {
    match &opts.merge_schema {
        Some(incoming) => {
            let (schema, added) = snap.schema.merged_with(incoming);
            if !added.is_empty() {
                schema.check_evolved()?;
            }
            Ok(schema)
        }
        None => Ok(snap.schema.clone()),
    }
}

/// The actions that change the table from `snap`'s schema to `schema` in one commit: none when
/// they are equal; else a `protocol` when `schema`'s types need table features `snap`'s protocol
/// lacks (PROTOCOL "Table Features"; existing features kept), then the `metaData` with the new
/// `schemaString` (docs/FORMAT.md "Schema evolution").
pub(crate) fn schema_change_actions(snap: &Snapshot, schema: &Schema) -> Vec<Action> {
    if *schema == snap.schema {
        return Vec::new();
    }
    let needed: Vec<&str> = schema
        .features()
        .into_iter()
        .filter(|f| !snap.protocol.reader_features.iter().flatten().any(|r| r == f))
        .collect();
    let mut actions = Vec::new();
    if !needed.is_empty() {
        actions.push(Action::protocol(crate::log::snapshot::jsonl_protocol(&needed, Some(&snap.protocol))));
    }
    let mut metadata = snap.metadata.clone();
    metadata.schema_string = schema.to_schema_string();
    actions.push(Action::metadata(metadata));
    actions
}

/// The `commitInfo` of a WriteSerializable operation that read `read_version` and is not a
/// blind append (overwrite, restore, optimize), committed at `ts` (ms since epoch).
pub(crate) fn serializable_info(
    operation: &str,
    params: &BTreeMap<String, String>,
    metrics: &BTreeMap<String, String>,
    read_version: u64,
    ts: i64,
) -> Action {
    commit_info_action(operation, params, metrics, read_version as i64, ts, false)
}

/// The `commitInfo` action of a WriteSerializable tinydelta commit that read `read_version`,
/// committed at `ts` (ms since epoch); `blind`: an append that read nothing it depends on.
pub(super) fn commit_info_action(
    operation: &str,
    params: &BTreeMap<String, String>,
    metrics: &BTreeMap<String, String>,
    read_version: i64,
    ts: i64,
    blind: bool,
) -> Action {
    Action::commit_info(CommitInfo {
        timestamp: ts,
        timestamp_recorded: true,
        operation: operation.into(),
        operation_parameters: params.clone(),
        read_version: Some(read_version),
        isolation_level: Some("WriteSerializable".into()),
        is_blind_append: blind,
        operation_metrics: metrics.clone(),
        engine_info: Some(ENGINE_INFO.into()),
    })
}

/// `commitInfo.operationParameters` and `operationMetrics` of a Delta `WRITE` in `mode`
/// (`Append`, `Overwrite`) that adds `add` (none for empty input), with the caller's extra
/// parameters; Delta's metric names (docs/FORMAT.md).
pub(super) fn write_params(
    mode: &str,
    add: Option<&Add>,
    opts: &WriteOptions,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut params = BTreeMap::from([("mode".to_string(), mode.to_string())]);
    params.extend(opts.extra_params.iter().cloned());
    let metrics = BTreeMap::from([
        ("numFiles".into(), usize::from(add.is_some()).to_string()),
        (
            "numOutputRows".into(),
            add.and_then(Add::num_records).unwrap_or(0).to_string(),
        ),
        ("numOutputBytes".into(), add.map_or(0, |a| a.size).to_string()),
    ]);
    (params, metrics)
}

/// Bytes [`Table::append_file`] copies at a time: the check of a step starts once it is copied,
/// and the disk starts writing it ([`crate::table::staging::start_writeback`]).
pub(super) const COPY_STEP: usize = 1 << 20;

/// What [`Table::append_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAppend {
    /// Committed as this version, or nothing committed because the input has no rows (`None`).
    Done(Option<u64>),
    /// A line of the input is not its own canonical row (valid or not): nothing was committed
    /// and no file is left; append with [`Table::append`], which canonicalises the rows or words
    /// the error.
    NotCanonical,
}

/// What [`Table::copy_data_file`] made of its input.
pub(super) enum Copied {
    /// The held, not yet fsynced copy and its `add`.
    Rows(Add, File),
    /// The input is empty (no file left).
    NoRows,
    /// See [`FileAppend::NotCanonical`] (no file left).
    NotCanonical,
}

/// Table property: write a Delta checkpoint every this many commits (Delta's name; docs/FORMAT.md
/// "Delta checkpoints").
pub const CHECKPOINT_INTERVAL_PROPERTY: &str = "delta.checkpointInterval";

/// The checkpoint interval when the property is not set: delta-rs's default.
pub const DEFAULT_CHECKPOINT_INTERVAL: u64 = 100;

/// `delta.checkpointInterval` of `metadata`, else [`DEFAULT_CHECKPOINT_INTERVAL`] (also for a
/// value that is not a positive integer: the property is checked when it is set).
pub fn checkpoint_interval(metadata: &crate::format::actions::Metadata) -> u64 {
    metadata
        .configuration
        .get(CHECKPOINT_INTERVAL_PROPERTY)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_CHECKPOINT_INTERVAL)
}

/// Whether a commit that made `snap` writes a Delta checkpoint (docs/FORMAT.md "Delta
/// checkpoints"): a version that is a multiple of the interval, of a JSONL table carrying the
/// guard feature (a table other writers may write keeps only the checkpoints they write).
fn delta_checkpoint_due(snap: &Snapshot) -> bool {
    snap.version > 0
        && snap.version.is_multiple_of(checkpoint_interval(&snap.metadata))
        && snap.metadata.format.provider == "json"
        && snap
            .protocol
            .writer_features
            .iter()
            .flatten()
            .any(|f| f == crate::log::snapshot::JSONL_FEATURE)
}

/// `e`, a failed copy from the input, saying which file it was copied to.
pub(super) fn io_context(e: std::io::Error, to: &Path) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{e} (copying to {})", to.display()))
}

/// Take a shared `flock` on `file`, a data file just created (or placed) as `name` beneath `dir`,
/// and prove the name still refers to it (docs/FORMAT.md, "Vacuum and writers in flight"):
/// vacuum deletes an orphan only under `LOCK_EX` after the same proof, so once this returns the
/// name survives until `file` is closed. Errors: [`Error::Corrupt`] naming the file when it was
/// deleted or replaced before the lock was taken (nothing may be published).
pub(crate) fn hold_data_file(dir: &Dir, name: &str, file: &File) -> Result<()> {
    let path = dir.join(name);
    rustix::fs::flock(file, rustix::fs::FlockOperation::LockShared)
        .map_err(|e| Error::io("lock", &path, std::io::Error::from_raw_os_error(e.raw_os_error())))?;
    let mine = rustix::fs::fstat(file)
        .map_err(|e| Error::io("stat", &path, std::io::Error::from_raw_os_error(e.raw_os_error())))?;
    match dir.stat(name)? {
        Some(st) if st.st_ino == mine.st_ino && st.st_dev == mine.st_dev && mine.st_nlink > 0 => Ok(()),
        _ => Err(deleted_in_flight(path)),
    }
}

/// A new data file being written: starts the writeback of every [`Writeback::STEP`] bytes
/// written ([`crate::table::staging::start_writeback`]), so the fsync of its commit only waits for the
/// last ones, while the disk writes the rest during the validation of the input.
pub(super) struct Writeback {
    file: File,
    written: u64,
    started: u64,
}

impl Writeback {
    const STEP: u64 = 1 << 20;

    pub(super) fn new(file: File) -> Writeback {
        Writeback {
            file,
            written: 0,
            started: 0,
        }
    }
}

impl Write for Writeback {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written >= self.started + Self::STEP {
            crate::table::staging::start_writeback(&self.file, self.started, self.written - self.started);
            self.started = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

