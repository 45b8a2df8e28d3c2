//! Editing the newest version's `data.jsonl` (docs/MOUNT.md "Editing latest/data.jsonl"):
//! opens for writing, the scratch files tools create beside it in `v/<n>/` (staged like
//! `incoming/`'s scratch names, under the key `v/NAME`: one name space for every version
//! folder, each file seen in the folder it was created in and every later one, so a tool whose
//! `latest` moved between its create and its rename or unlink still finds its file), the
//! rename of one onto `data.jsonl`, and the commit of the difference
//! ([`crate::ops::edit::commit_edit`]).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use log::{debug, info, warn};

use crate::format::rows::LineCheck;
use crate::mount::errno::{FsError, FsResult};
use crate::mount::incoming::State;
use crate::mount::inode::{Node, VersionFile};
use crate::mount::versions::ConcatReader;
use crate::ops::edit::{EditOptions, EditSource, commit_edit};
use crate::table::WriteOptions;
use crate::table::staging;
use crate::util::sync::lock;

use super::{Attr, Caller, Handle, Kind, Opened, TableView};

/// The name `data.jsonl.error` of the note of a failed edit.
const NOTE_NAME: &str = "data.jsonl.error";

/// The key of scratch file `name` of the version folders among the staged files (the names
/// of `incoming/` hold no `/`).
pub(super) fn key(name: &str) -> String {
    format!("v/{name}")
}

/// How many threads' lookups of `latest` are remembered; past it the knowledge is dropped (a
/// change in a folder that is no longer the newest is then `EROFS`).
const MAX_LATEST_SEEN: usize = 4096;

/// Whether `name` is one of a version folder's own entries.
fn fixed(name: &str) -> bool {
    VersionFile::from_name(name).is_some() || name == "parts"
}

/// An open of the newest version's `data.jsonl` for writing: the bytes the writer sees are the
/// version's first `prefix` bytes, then the writer's own bytes from `prefix` to `len`, which
/// live in a private staged file at the same offsets (below `prefix` the staged file is a hole).
/// A write below `prefix` first copies the version's bytes from there to `prefix` into the staged
/// file. Nothing of it reaches the version's own file or its readers.
#[derive(Debug)]
pub(crate) struct Edit {
    pub(super) version: u64,
    base: ConcatReader,
    base_len: u64,
    id: String,
    file: File,
    pub(super) opener: Option<u32>,
    append: bool,
    st: Mutex<EditState>,
    /// Counts this edit among the open ones while it lives (their `data.jsonl`s' attributes
    /// then have TTL 0).
    _open: super::EditOpen,
}

#[derive(Debug)]
struct EditState {
    prefix: u64,
    len: u64,
    /// A write or truncate happened since the open (or the last commit).
    changed: bool,
    /// Rows written in order from `check.offset() + check_from` on are validated as they
    /// arrive, as in incoming/, so a bad line fails the write that completes it (a shell's
    /// `>>` closes its descriptor with `dup2`, whose close status nobody sees). `None` once
    /// writes are not in order: the close validates them.
    check: Option<LineCheck>,
    check_from: u64,
}

/// The bytes an [`Edit`] holds now.
struct EditBytes<'a> {
    edit: &'a Edit,
    prefix: u64,
    len: u64,
}

impl EditSource for EditBytes<'_> {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        if at >= self.len {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.len - at);
        if at < self.prefix {
            let n = want.min(self.prefix - at) as usize;
            let got = self.edit.base.read(at, n).map_err(|e| io::Error::other(e.to_string()))?;
            buf[..got.len()].copy_from_slice(&got);
            return Ok(got.len());
        }
        let n = self.edit.file.read_at(&mut buf[..want as usize], at)?;
        if n == 0 {
            // A hole past the staged file's end (a truncate that extended the file).
            buf[..want as usize].fill(0);
            return Ok(want as usize);
        }
        Ok(n)
    }
}

/// A staged scratch file's bytes, for a rename onto `data.jsonl`.
struct StagedBytes {
    file: Arc<File>,
    len: u64,
}

impl EditSource for StagedBytes {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        if at >= self.len {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.len - at) as usize;
        self.file.read_at(&mut buf[..want], at)
    }
}

impl TableView {
    /// `v/<v>/` takes changes by `caller`: it is the newest version of a table of JSONL files,
    /// or an edit began on it or before it while it was: the calling thread's last lookup of
    /// `latest` named `v` (a commit landed between the tool's lookup and its open or create),
    /// or the calling process last opened the `data.jsonl` of `v` or of an older version for
    /// reading while that was the newest version (vim reads `latest/data.jsonl`, then resolves
    /// the link when it writes back what it read). Such an edit, of the version it read, commits
    /// under the rules of concurrent edits (docs/MOUNT.md "Editing latest/data.jsonl"). A version
    /// that was already older when the tool found it stays read-only.
    pub(super) fn editable(&self, v: u64, caller: Caller) -> FsResult<()> {
        if self.versions.latest()? != v {
            let seen = caller.tid.and_then(|t| lock(&self.latest_seen).get(&t).copied()) == Some(v);
            let read = caller
                .tgid
                .and_then(|t| lock(&self.read_bases).get(&t).copied())
                .is_some_and(|(r, newest)| newest && r <= v);
            if !seen && !read {
                return Err(FsError::ReadOnly);
            }
            debug!("v/{v}: a change by {caller:?}, whose edit began on v/{v} before a newer version landed");
        }
        Ok(self.table().check_accepts_writes("an edit of data.jsonl")?)
    }

    /// Remember that thread `tid`'s lookup of `latest` named version `v` (bounded: past
    /// [`MAX_LATEST_SEEN`] threads the map starts again).
    pub(super) fn note_latest_seen(&self, tid: u32, v: u64) {
        let mut m = lock(&self.latest_seen);
        if m.len() >= MAX_LATEST_SEEN && !m.contains_key(&tid) {
            m.clear();
        }
        m.insert(tid, v);
    }

    /// A scratch file `seq` was created (or created again) in `v/<v>/`: it is seen there and in
    /// every later version's folder. A name that already existed keeps its first version.
    pub(super) fn scratch_created(&self, seq: u64, v: u64) {
        if let Ok(e) = lock(&self.incoming).get(seq) {
            e.since.get_or_insert(v);
        }
    }

    /// The writer of staged file `seq` closes it: when it is a scratch file of the version
    /// folders and the writer last opened a version's `data.jsonl` for reading, that version is
    /// the base of the file's rename onto `data.jsonl` (`jq ... latest/data.jsonl >
    /// latest/tmp.jsonl`, whose shell made the file before `jq` read; `mv` reads nothing).
    pub(super) fn note_scratch_read_base(&self, seq: u64, caller: Caller) {
        let Some(t) = caller.tgid else { return };
        let Some((base, _)) = lock(&self.read_bases).get(&t).copied() else { return };
        if let Ok(e) = lock(&self.incoming).get(seq)
            && e.since.is_some()
        {
            e.read_base = Some(base);
        }
    }

    /// Whether `v` is the newest version (its folder and `data.jsonl` are shown writable, with
    /// a short TTL and invalidated when a newer version lands, so the mode changes when it stops
    /// being the newest: docs/MOUNT.md "Reading").
    pub(super) fn is_newest(&self, v: u64) -> bool {
        self.versions.latest().is_ok_and(|l| l == v)
    }

    /// Open `v/<v>/data.jsonl` for writing (`flags`: `O_TRUNC`, `O_APPEND`).
    pub(super) fn open_edit(&self, v: u64, flags: i32, caller: Caller) -> FsResult<Opened> {
        self.editable(v, caller)?;
        let data = self.versions.body(v)?.data.clone();
        let base_len = data.len;
        let (id, file) = self.staging.create(&format!("{v}/data.jsonl"))?;
        let trunc = flags & libc::O_TRUNC != 0;
        let st = EditState {
            prefix: if trunc { 0 } else { base_len },
            len: if trunc { 0 } else { base_len },
            changed: trunc,
            check: Some(self.edit_check()?),
            check_from: if trunc { 0 } else { base_len },
        };
        let edit = Edit {
            version: v,
            base: ConcatReader::new(data, self.versions.files().clone()),
            base_len,
            id,
            file,
            opener: caller.tgid,
            append: flags & libc::O_APPEND != 0,
            st: Mutex::new(st),
            _open: self.edit_opened(),
        };
        debug!("v/{v}/data.jsonl: opened for writing ({} bytes)", base_len);
        Ok(Opened {
            fh: self.new_handle(Handle::Edit(Arc::new(edit))),
            keep_cache: false,
            no_flush: false,
        })
    }

    /// A check of rows written in order (see `EditState::check`).
    fn edit_check(&self) -> FsResult<LineCheck> {
        let schema = self.table().latest_snapshot_arc()?.schema.clone();
        Ok(LineCheck::new(schema).with_max_line_bytes(self.cfg.max_line_bytes))
    }

    /// The size an edit handle shows its writer.
    pub(super) fn edit_size(&self, e: &Edit) -> u64 {
        lock(&e.st).len
    }

    /// Read an edit's bytes.
    pub(super) fn edit_read(&self, e: &Edit, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let st = {
            let g = lock(&e.st);
            EditState {
                check: None,
                ..*g
            }
        };
        let src = EditBytes {
            edit: e,
            prefix: st.prefix,
            len: st.len,
        };
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            let n = src.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        buf.truncate(done);
        Ok(buf)
    }

    /// Copy the version's bytes `to..prefix` into the staged file: the edit's bytes from `to` on
    /// are the staged file's.
    fn materialize(&self, e: &Edit, st: &mut EditState, to: u64) -> FsResult<()> {
        let mut at = to;
        while at < st.prefix {
            let n = (st.prefix - at).min(1 << 20) as usize;
            let got = e.base.read(at, n)?;
            if got.is_empty() {
                return Err(FsError::Io(io::Error::other(format!(
                    "v/{}/data.jsonl: the version's bytes end at {at}, before {}",
                    e.version, st.prefix
                ))));
            }
            e.file.write_all_at(&got, at)?;
            at += got.len() as u64;
        }
        st.prefix = to;
        Ok(())
    }

    /// Write into an edit (`O_APPEND`: at its end, whatever the kernel's offset).
    pub(super) fn edit_write(&self, e: &Edit, offset: u64, data: &[u8]) -> FsResult<usize> {
        let mut st = lock(&e.st);
        let at = if e.append { st.len } else { offset };
        if at < st.prefix {
            self.materialize(e, &mut st, at)?;
        }
        e.file.write_all_at(data, at)?;
        st.len = st.len.max(at + data.len() as u64);
        st.changed = true;
        let from = st.check_from;
        if let Some(check) = &mut st.check {
            if check.offset() + from != at {
                st.check = None;
            } else {
                let mut rows = Vec::new();
                if let Err(bad) = check.feed(&format!("v/{}/data.jsonl", e.version), data, &mut rows) {
                    st.check = None;
                    let msg = format!("not committed: {bad}");
                    lock(&self.edit_notes).insert(e.version, msg);
                    return Err(FsError::Table(bad));
                }
            }
        }
        Ok(data.len())
    }

    /// Truncate an edit to `size` bytes (a zero-byte truncate commits a DELETE of every row at
    /// the close).
    pub(super) fn edit_truncate(&self, e: &Edit, size: u64) -> FsResult<()> {
        let mut st = lock(&e.st);
        if size < st.prefix {
            st.prefix = size;
        }
        e.file.set_len(size)?;
        st.len = size;
        st.changed = true;
        st.check = None;
        if size == 0 {
            st.check = Some(self.edit_check()?);
            st.check_from = 0;
        }
        Ok(())
    }

    /// The opener's last close of an edit: commit it (docs/MOUNT.md "Editing
    /// latest/data.jsonl"). A writer that changed nothing commits nothing.
    pub(super) fn edit_flush(&self, e: &Edit, caller: Caller) -> FsResult<()> {
        if caller.killed {
            info!("v/{}/data.jsonl: not committed: the writing process was killed by a signal", e.version);
            return Ok(());
        }
        if e.opener != caller.tgid {
            return Ok(());
        }
        // Another descriptor of the file open for writing (a shell's redirection saved with
        // `dup`): not the last close. One open for reading only (the tool read the file it
        // rewrites) does not count.
        let ino = caller.ino.unwrap_or_else(|| Node::VersionFile(e.version, VersionFile::Data).ino());
        if caller.still_open && caller.tgid.is_some_and(|t| self.procs.writes_open(t, ino)) {
            // A separate open of the same file by this process is another edit: this one would
            // be dropped at its release, so its close must not answer 0 (docs/MOUNT.md
            // "Limits"). A descriptor duplicated from this one is the same edit: its close
            // commits.
            if lock(&e.st).changed && self.other_edit_open(e) {
                let err = crate::error::Error::InvalidArgument(format!(
                    "this process holds another descriptor of v/{}/data.jsonl open for writing through a \
                     separate open, whose close commits its own edit; write through one open",
                    e.version
                ));
                return Err(self.edit_failed(e.version, &format!("v/{}/data.jsonl", e.version), err));
            }
            return Ok(());
        }
        let mut st = lock(&e.st);
        if !st.changed {
            return Ok(());
        }
        let v = e.version;
        let source = format!("v/{v}/data.jsonl");
        let result = if st.prefix == e.base_len && st.len >= e.base_len {
            // The version's bytes untouched: the rows written after them are one APPEND
            // (`>>`), as in incoming/.
            if st.len == e.base_len {
                Ok(None)
            } else {
                let src = EditBytes {
                    edit: e,
                    prefix: st.prefix,
                    len: st.len,
                };
                let reader = io::BufReader::with_capacity(1 << 20, ReadFrom { src: &src, at: e.base_len });
                let opts = WriteOptions {
                    extra_params: vec![(staging::SOURCE_PARAM.to_string(), source.clone())],
                    max_line_bytes: Some(self.cfg.max_line_bytes),
                    ..Default::default()
                };
                self.table().append(&source, reader, &opts)
            }
        } else {
            let src = EditBytes {
                edit: e,
                prefix: st.prefix,
                len: st.len,
            };
            // Bytes all written by the tool (none read through from `v`): their base is the
            // version the tool read.
            let base = if st.prefix == 0 { self.edit_base(v, caller) } else { v };
            self.commit_edit_of(base, &source, &src)
        };
        match result {
            Ok(version) => {
                st.changed = false;
                // Later writes through the handle start from what was committed.
                match version {
                    Some(n) => info!("{source}: edit committed as version {n}"),
                    None => info!("{source}: no row changed, nothing committed"),
                }
                lock(&self.edit_notes).remove(&v);
                Ok(())
            }
            Err(err) => Err(self.edit_failed(v, &source, err)),
        }
    }

    /// Whether another open of `e`'s file for writing by the same process (a separate edit, not
    /// a descriptor duplicated from `e`'s) is live.
    fn other_edit_open(&self, e: &Edit) -> bool {
        lock(&self.handles).values().any(|h| match &**h {
            Handle::Edit(o) => !std::ptr::eq(&**o, e) && o.opener == e.opener && o.version == e.version,
            _ => false,
        })
    }

    /// Remember that `caller` opened version `v`'s `data.jsonl` for reading (the base of its
    /// next edit). Bounded: past 4096 processes the oldest knowledge is dropped (an edit then
    /// takes its folder's version as its base).
    pub(super) fn note_read_base(&self, v: u64, caller: Caller) {
        let Some(t) = caller.tgid else { return };
        let newest = self.is_newest(v);
        let mut m = lock(&self.read_bases);
        if m.len() >= 4096 && !m.contains_key(&t) {
            m.clear();
        }
        m.insert(t, (v, newest));
    }

    /// The base of an edit written into version `v`'s folder by `caller`: the version of the
    /// `data.jsonl` it last opened for reading when that is older than `v` (the tool read it
    /// before `latest` moved: its edit is checked against the commits since), else `v`.
    pub(super) fn edit_base(&self, v: u64, caller: Caller) -> u64 {
        caller
            .tgid
            .and_then(|t| lock(&self.read_bases).get(&t).map(|r| r.0))
            .filter(|r| *r < v)
            .unwrap_or(v)
    }

    /// Commit `src` as an edit of version `base` (docs/MOUNT.md "Editing latest/data.jsonl").
    fn commit_edit_of(&self, base: u64, source: &str, src: &dyn EditSource) -> crate::error::Result<Option<u64>> {
        let opts = EditOptions {
            max_line_bytes: Some(self.cfg.max_line_bytes),
            extra_params: Vec::new(),
        };
        let r = commit_edit(self.table(), base, source, src, &opts)?;
        if let Some(n) = r.version {
            info!(
                "{source}: {} of {} deleted, {} updated, {} inserted rows as version {n}",
                r.operation, r.deleted, r.updated, r.inserted
            );
        }
        Ok(r.version)
    }

    /// Record why an edit of version `v` failed (`v/<v>/data.jsonl.error`) and give the error.
    fn edit_failed(&self, v: u64, source: &str, err: crate::error::Error) -> FsError {
        let msg = match &err {
            crate::error::Error::ConcurrentWrite { .. } => format!(
                "not committed: {err}; read the newest version and edit again"
            ),
            _ => format!("not committed: {err}"),
        };
        warn!("{source}: {}", msg.escape_debug());
        lock(&self.edit_notes).insert(v, msg);
        FsError::Table(err)
    }

    /// `fsync` of an edit: its bytes are synced; the commit is at the close.
    pub(super) fn edit_fsync(&self, e: &Edit) -> FsResult<()> {
        e.file.sync_data()?;
        Ok(())
    }

    /// The last descriptor of an edit was closed: its staged bytes go.
    pub(super) fn edit_release(&self, e: &Edit) {
        if let Err(err) = self.staging.remove(&e.id) {
            warn!("v/{}/data.jsonl: cannot remove an edit's staged bytes: {err}", e.version);
        }
    }

    /// The node `name` in `v/<v>/` that is not one of the folder's own: a scratch file or the
    /// note of a failed edit.
    pub(super) fn version_dir_node(&self, v: u64, name: &str) -> FsResult<Node> {
        if name == NOTE_NAME {
            return match lock(&self.edit_notes).contains_key(&v) {
                true => Ok(Node::EditNote(v)),
                false => Err(FsError::NotFound),
            };
        }
        let inc = lock(&self.incoming);
        match inc.names.get(&key(name)) {
            Some(seq) if Self::seen_in(inc.files.get(seq), v) => Ok(Node::Staged(*seq)),
            _ => Err(FsError::NotFound),
        }
    }

    /// Whether a scratch file is listed in `v/<v>/` (created in it or an earlier folder).
    fn seen_in(e: Option<&crate::mount::incoming::Staged>, v: u64) -> bool {
        e.is_some_and(|e| matches!(e.state, State::Listed(_)) && e.since.is_none_or(|s| s <= v))
    }

    /// The scratch files and the note of `v/<v>/`.
    pub(super) fn version_dir_list(&self, v: u64) -> Vec<(u64, Kind, String)> {
        let mut list = Vec::new();
        if lock(&self.edit_notes).contains_key(&v) {
            list.push((Node::EditNote(v).ino(), Kind::File, NOTE_NAME.to_string()));
        }
        let prefix = key("");
        let inc = lock(&self.incoming);
        for (k, seq) in inc.names.range(prefix.clone()..) {
            let Some(name) = k.strip_prefix(&prefix) else { break };
            if Self::seen_in(inc.files.get(seq), v) {
                list.push((Node::Staged(*seq).ino(), Kind::File, name.to_string()));
            }
        }
        list
    }

    /// Attributes of `v/<v>/data.jsonl.error`.
    pub(super) fn edit_note_attr(&self, v: u64) -> FsResult<Attr> {
        let len = lock(&self.edit_notes).get(&v).map(|n| n.len() as u64 + 1).ok_or(FsError::NotFound)?;
        let perm = if self.cfg.share_incoming { 0o444 } else { 0o400 };
        Ok(self.attr(Node::EditNote(v).ino(), Kind::File, len, perm, 1, std::time::SystemTime::now(), Duration::ZERO))
    }

    /// The text of `v/<v>/data.jsonl.error`.
    pub(super) fn edit_note_text(&self, v: u64) -> FsResult<String> {
        lock(&self.edit_notes).get(&v).map(|n| format!("{n}\n")).ok_or(FsError::NotFound)
    }

    /// A name for a new scratch file in `v/<v>/` by `caller`: the newest version's folder only
    /// (or one its edit began on, [`TableView::editable`]).
    pub(super) fn version_dir_name<'a>(&self, v: u64, name: &'a OsStr, caller: Caller) -> FsResult<&'a str> {
        self.editable(v, caller)?;
        let name = Self::check_name(name)?;
        if fixed(name) {
            return Err(FsError::Exists);
        }
        Ok(name)
    }

    /// `rm v/<v>/NAME`: a scratch file, or the note (the version's own files: EROFS).
    pub(super) fn version_dir_unlink(&self, v: u64, name: &OsStr) -> FsResult<()> {
        let name = name.to_str().ok_or(FsError::NotFound)?;
        if fixed(name) {
            return Err(FsError::ReadOnly);
        }
        if name == NOTE_NAME {
            return match lock(&self.edit_notes).remove(&v) {
                Some(_) => Ok(()),
                None => Err(FsError::NotFound),
            };
        }
        self.scratch_in(v, name)?;
        self.unlink_staged(&key(name))
    }

    /// The sequence number and creation version of scratch file `name` as seen from `v/<v>/`.
    fn scratch_in(&self, v: u64, name: &str) -> FsResult<(u64, u64)> {
        let inc = lock(&self.incoming);
        let seq = *inc.names.get(&key(name)).ok_or(FsError::NotFound)?;
        let e = inc.files.get(&seq);
        if !Self::seen_in(e, v) {
            return Err(FsError::NotFound);
        }
        Ok((seq, e.and_then(|e| e.since).unwrap_or(v)))
    }

    /// A rename from `v/<v>/` into `v/<w>/` (the same folder, or two that `latest` named when
    /// the kernel looked the two paths up, a commit landing in between): a scratch file onto
    /// another scratch name, or onto `data.jsonl`, which commits its bytes as an edit (`sed -i`,
    /// `perl -pi`, `os.replace`, `mv`). The scratch file must be seen in `v/<v>/`, and `w` be no
    /// older than the folder it was created in (else `EROFS`: an older version is read-only).
    /// The edit's base is the version its writer read ([`TableView::note_scratch_read_base`]),
    /// else the one the renaming process read, else the version it was created in; a commit
    /// since then that conflicts with it fails the rename (`EBUSY`). If the commit fails, the
    /// file keeps its old name and `v/<w>/data.jsonl.error` says why.
    pub(super) fn version_dir_rename(
        &self,
        v: u64,
        old: &OsStr,
        w: u64,
        new: &OsStr,
        noreplace: bool,
        caller: Caller,
    ) -> FsResult<()> {
        let old = old.to_str().ok_or(FsError::NotFound)?;
        let new = new.to_str().ok_or(FsError::NotFound)?;
        if fixed(old) || old == NOTE_NAME {
            return Err(FsError::ReadOnly);
        }
        let (seq, since) = self.scratch_in(v, old)?;
        if w < since {
            return Err(FsError::ReadOnly);
        }
        let old_key = key(old);
        if new != "data.jsonl" {
            if fixed(new) || new == NOTE_NAME {
                return Err(FsError::ReadOnly);
            }
            let new = Self::check_name(OsStr::new(new))?;
            return self.rename_checked(&old_key, &key(new), noreplace, caller);
        }
        if noreplace {
            return Err(FsError::Exists);
        }
        // A writer whose close was seen but whose release is on its way writes no more.
        self.await_released(None, seq, Node::Staged(seq).ino());
        let source = format!("v/{w}/data.jsonl");
        self.with_io(seq, || {
            let (src, written_base) = {
                let mut inc = lock(&self.incoming);
                let e = inc.get(seq)?;
                let read_base = e.read_base;
                let Some(b) = e.bytes() else { return Err(FsError::NotFound) };
                if let Some(why) = &b.blocked {
                    return Err(FsError::Blocked(why.clone()));
                }
                let src = StagedBytes {
                    file: b.data(&self.staging)?,
                    len: b.len,
                };
                (src, read_base)
            };
            let base = written_base.unwrap_or_else(|| self.edit_base(since, caller));
            match self.commit_edit_of(base, &source, &src) {
                Ok(_) => {
                    lock(&self.edit_notes).remove(&w);
                    Ok(())
                }
                Err(err) => Err(self.edit_failed(w, &source, err)),
            }
        })?;
        debug!("v/{v}/{old:?} renamed onto v/{w}/data.jsonl and committed");
        self.unlink_staged(&old_key)
    }
}

/// Reads an [`EditSource`] from `at` on, in order.
struct ReadFrom<'a> {
    src: &'a dyn EditSource,
    at: u64,
}

impl io::Read for ReadFrom<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.src.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}
