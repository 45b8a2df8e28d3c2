//! The `incoming/` operations of [`TableView`]: create, open, write, flush, fsync, release,
//! rename, unlink and setattr of files in the drop box, and the commit each commit point makes
//! (docs/MOUNT.md "`incoming/`"). The state they act on is [`crate::mount::incoming`].

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufReader};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use log::{debug, info, warn};

use crate::format::rows::{Kept, LineCheck};
use crate::mount::errno::{FsError, FsResult};
use crate::mount::incoming::*;
use crate::mount::inode::Node;
use crate::table::WriteOptions;
use crate::table::staging::{self, ERROR_SUFFIX, FileId, SOURCE_PARAM, STAGING_ID_PARAM};
use crate::util::sync::lock;

use super::{Attr, Caller, Handle, Kind, Opened, SetAttrs, TableView};

/// Who wrote the bytes a commit takes, as the re-save rule (docs/MOUNT.md "Re-saves") cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Own {
    /// The committing process alone, not through `O_APPEND`: a whole-file save.
    Whole,
    /// The committing process alone, some through `O_APPEND`: rows added, never a re-save.
    Appended,
    /// Another process too: a plain append, after which nobody's save is a re-save.
    Mixed,
}

/// What a commit should do with the staged bytes.
enum Plan {
    /// Append bytes `from..len` as one commit.
    Append { from: u64 },
    /// Replace the data file of the same process's previous save.
    Replace { old: String },
}

/// Whether a staged file under `name` is never committed by a commit point of its own: a scratch
/// name, or a scratch file of a version folder (key `<n>/NAME`, docs/MOUNT.md "Editing
/// latest/data.jsonl"), which only a rename onto `data.jsonl` commits.
fn never_committed(name: &str) -> bool {
    staging::is_scratch(name) || name.contains('/')
}

impl TableView {
    pub(super) fn file_perm(&self) -> u16 {
        if self.cfg.share_incoming { 0o644 } else { 0o600 }
    }

    /// Fresh bytes for `name`: validated while written sequentially unless a scratch name
    /// (swap files hold anything).
    fn new_bytes(&self, name: &str, id: String, file: File) -> FsResult<Bytes> {
        Ok(Bytes {
            ident: self.staging.keep_data(&id, file)?,
            id,
            len: 0,
            note: None,
            blocked: None,
            check: self.line_check(name)?,
            verdict: None,
            wrote: Vec::new(),
            appended: false,
        })
    }

    fn line_check(&self, name: &str) -> FsResult<Option<Stream>> {
        if never_committed(name) {
            return Ok(None);
        }
        Ok(Some(Stream::new(
            self.versions.table().latest_snapshot_arc()?.schema.clone(),
            self.cfg.max_line_bytes,
        )))
    }

    /// Stop streaming `b` (writes stopped being sequential, or it is rewritten): its canonical
    /// rows so far are discarded.
    fn end_stream(&self, b: &mut Bytes) {
        if b.check.take().is_some() {
            let _ = self.staging.remove_canon(&b.id);
        }
    }

    /// Bring back the files staged by an earlier mount (called once by `load`).
    pub(super) fn restore_staged(
        &self,
        found: Vec<staging::Found>,
        committed: &std::collections::HashSet<String>,
    ) -> FsResult<()> {
        let mut inc = lock(&self.incoming);
        for f in found {
            if f.name.contains('/') {
                // A scratch file or an edit of a version folder: never committed by itself;
                // an edit not committed before the daemon stopped is not committed
                // (docs/MOUNT.md "Editing latest/data.jsonl").
                info!("staged file {:?} ({}) of an unfinished edit; removing it", f.name, f.id);
                self.staging.remove(&f.id)?;
                continue;
            }
            if committed.contains(&f.id) {
                info!(
                    "staged file {:?} ({}) was committed before a crash; removing it",
                    f.name, f.id
                );
                self.staging.remove(&f.id)?;
                continue;
            }
            let file = self.staging.open_data(&f.id)?;
            let meta = file.metadata()?;
            let mut name = f.name.clone();
            if inc.names.contains_key(&name) {
                name = format!("{}.{}", f.name, &f.id[..8]);
                self.staging.set_name(&f.id, &name, false)?;
            }
            info!("staged file {name:?} is back in incoming/ ({} bytes)", meta.len());
            let note = match (&f.torn, f.error) {
                (Some(t), _) => Some(t.clone()),
                (None, e) => e,
            };
            let bytes = Bytes {
                id: f.id,
                ident: FileId::of(&file)?,
                len: meta.len(),
                note,
                blocked: f.torn,
                check: None,
                verdict: None,
                wrote: Vec::new(),
                appended: false,
            };
            let seq = inc.insert(&name, State::Listed(bytes), self.file_perm());
            inc.get(seq)?.mtime = meta.modified().unwrap_or_else(|_| SystemTime::now());
        }
        Ok(())
    }

    /// The node `name` in `incoming/` names: a listed or reachable file, or a note.
    pub(super) fn incoming_node(&self, name: &str) -> FsResult<Node> {
        let mut inc = lock(&self.incoming);
        self.sweep(&mut inc);
        if let Some(seq) = inc.names.get(name) {
            return Ok(Node::Staged(*seq));
        }
        if let Some(stem) = name.strip_suffix(ERROR_SUFFIX)
            && let Some(seq) = inc.names.get(stem)
            && inc.files.get(seq).is_some_and(|e| {
                matches!(&e.state, State::Listed(b) if b.note.is_some())
                    || matches!(&e.state, State::Committed { note: Some(_), .. })
            })
        {
            return Ok(Node::ErrorNote(*seq));
        }
        Err(FsError::NotFound)
    }

    /// Attributes of a staged file or its note.
    pub(super) fn staged_attr(&self, node: Node) -> FsResult<Attr> {
        let mut inc = lock(&self.incoming);
        match node {
            Node::Staged(seq) => {
                let e = inc.get(seq)?;
                let (size, perm, mtime) = (e.size(), e.perm, e.mtime);
                Ok(self.attr(node.ino(), Kind::File, size, perm, 1, mtime, Duration::ZERO))
            }
            Node::ErrorNote(seq) => {
                let e = inc.get(seq)?;
                let note = e.note().ok_or(FsError::NotFound)?;
                let perm = if self.cfg.share_incoming { 0o444 } else { 0o400 };
                let size = note.len() as u64 + 1;
                Ok(self.attr(node.ino(), Kind::File, size, perm, 1, e.mtime, Duration::ZERO))
            }
            _ => Err(FsError::NotFound),
        }
    }

    /// The listing of `incoming/`: listed files and their notes (never committed names).
    pub(super) fn incoming_list(&self) -> Vec<(u64, Kind, String)> {
        let inc = lock(&self.incoming);
        let mut list = Vec::new();
        // Keys with a `/` are version folders' scratch files (docs/MOUNT.md "Editing
        // latest/data.jsonl").
        for (name, seq) in inc.names.iter().filter(|(n, _)| !n.contains('/')) {
            match inc.files.get(seq).map(|e| &e.state) {
                Some(State::Listed(b)) => {
                    list.push((Node::Staged(*seq).ino(), Kind::File, name.clone()));
                    if b.note.is_some() {
                        list.push((Node::ErrorNote(*seq).ino(), Kind::File, format!("{name}{ERROR_SUFFIX}")));
                    }
                }
                Some(State::Committed { note: Some(_), .. }) => {
                    list.push((Node::ErrorNote(*seq).ino(), Kind::File, format!("{name}{ERROR_SUFFIX}")));
                }
                _ => {}
            }
        }
        list
    }

    /// The note text of `seq`, for opening `NAME.error`.
    pub(super) fn note_text(&self, seq: u64) -> FsResult<String> {
        let mut inc = lock(&self.incoming);
        let e = inc.get(seq)?;
        let note = e.note().ok_or(FsError::NotFound)?;
        Ok(format!("{note}\n"))
    }

    /// Whether process `tgid` holds a read-only handle of an `incoming/` file other than `seq`.
    fn reads_other(&self, tgid: Option<u32>, seq: u64) -> bool {
        let Some(tgid) = tgid else { return false };
        lock(&self.handles).values().any(|h| {
            matches!(h.as_ref(), Handle::Staged { seq: s, writable: false, opener: Some(o), .. } if *s != seq && *o == tgid)
        })
    }

    /// Move the batch of `seq` that other processes than `tgid` are writing to a new number:
    /// their handles follow it; `seq` keeps everything else (the caller then gives it fresh
    /// bytes). Returns the new number. Call with the incoming lock held (taken before handles).
    fn split_off_writers(&self, inc: &mut Incoming, seq: u64, tgid: Option<u32>) -> FsResult<u64> {
        let new = inc.next_seq;
        inc.next_seq += 1;
        let mut moved_fhs = Vec::new();
        for (fh, h) in lock(&self.handles).iter_mut() {
            if let Handle::Staged {
                seq: s,
                writable: true,
                opener,
                append,
            } = h.as_ref()
                && *s == seq
                && *opener != tgid
            {
                let (opener, append) = (*opener, *append);
                *h = Arc::new(Handle::Staged {
                    seq: new,
                    writable: true,
                    opener,
                    append,
                });
                moved_fhs.push(*fh);
            }
        }
        let e = inc.get(seq)?;
        // Each moved handle takes its writer record (and whether its opener closed it) along.
        let (movers, stay): (Vec<Writer>, Vec<Writer>) = std::mem::take(&mut e.writers)
            .into_iter()
            .partition(|w| moved_fhs.contains(&w.fh));
        e.writers = stay;
        let n = u32::try_from(moved_fhs.len()).unwrap_or(u32::MAX);
        e.handles = e.handles.saturating_sub(n);
        let state = match std::mem::replace(&mut e.state, State::Removed(None)) {
            State::Listed(b) => State::Detached(b),
            other => other,
        };
        let moved = Staged {
            name: e.name.clone(),
            state,
            base: e.base,
            handles: n,
            writers: movers,
            mtime: e.mtime,
            perm: e.perm,
            in_place: e.in_place,
            io: std::mem::replace(&mut e.io, Arc::new(Mutex::new(()))),
            // The committed bytes below `base` stay readable through the name.
            kept: Vec::new(),
            since: e.since,
            read_base: e.read_base,
        };
        e.in_place = false;
        inc.files.insert(new, moved);
        Ok(new)
    }

    /// Open a staged file. `trunc`: `O_TRUNC`. A committed name opened for writing starts a new
    /// batch under it (from offset 0 with `trunc`, else after the committed bytes). `O_TRUNC` on a
    /// file another process is writing (or opening a committed name another process still
    /// writes) gives the caller a fresh batch: each racing writer its own batch.
    pub(super) fn open_staged(
        &self,
        seq: u64,
        write: bool,
        trunc: bool,
        append: bool,
        caller: Caller,
    ) -> FsResult<Opened> {
        let in_place = write && self.reads_other(caller.tgid, seq);
        if write {
            return self.with_io(seq, || self.open_for_writing(seq, trunc, append, in_place, caller));
        }
        let mut inc = lock(&self.incoming);
        self.register(&mut inc, seq, false, false, caller)
    }

    /// [`TableView::open_staged`] for writing, with `seq`'s I/O lock held.
    fn open_for_writing(
        &self,
        seq: u64,
        trunc: bool,
        append: bool,
        in_place: bool,
        caller: Caller,
    ) -> FsResult<Opened> {
        {
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            let committed = matches!(e.state, State::Committed { .. });
            // A committed name's note (its durability is unknown) stays while nothing is
            // written (`touch`): the batch shows it, and gives it back if it stays empty.
            let kept_note = match &e.state {
                State::Committed { note, .. } if !trunc => note.clone(),
                _ => None,
            };
            let name = e.name.clone();
            if (trunc || append || committed) && inc.written_by_other(seq, caller.tgid) {
                // Another process still writes this file: its batch moves to a new number (its
                // handles follow; committed at its close), and this inode, which the name
                // leads to, starts a fresh batch for the caller. An `O_APPEND` writer gets its
                // own batch too: sharing one, the other process's writes at its own offsets
                // (an `O_TRUNC` writer's from 0) overwrote rows the appender's close had
                // already reported saved.
                let moved = self.split_off_writers(&mut inc, seq, caller.tgid)?;
                let (id, file) = self.staging.create(&name)?;
                let mut bytes = self.new_bytes(&name, id, file)?;
                bytes.note = kept_note.clone();
                let e = inc.get(seq)?;
                e.state = State::Listed(bytes);
                // With O_TRUNC from offset 0. Without it (`>>` onto a name just committed by
                // another process whose release is still on its way) after the committed bytes,
                // as when nobody else had it open: the kernel writes at the size it was shown,
                // and the new rows commit as their own APPEND (docs/MOUNT.md "What counts as
                // open").
                if trunc {
                    self.restart(e);
                }
                e.mtime = SystemTime::now();
                if !inc.names.contains_key(&name) {
                    inc.names.insert(name.clone(), seq);
                }
                debug!(
                    "incoming/{name:?}: opened for writing while another process writes it: its batch is #{moved}, a new batch here"
                );
            }
            let e = inc.get(seq)?;
            match &mut e.state {
                State::Removed(_) | State::Detached(_) => return Err(FsError::Stale),
                State::Committed { .. } => {
                    let name = e.name.clone();
                    let (id, file) = self.staging.create(&name)?;
                    let mut bytes = self.new_bytes(&name, id, file)?;
                    bytes.note = kept_note;
                    let e = inc.get(seq)?;
                    if trunc {
                        self.restart(e);
                    }
                    e.state = State::Listed(bytes);
                    if inc.names.get(&name) != Some(&seq) {
                        if let std::collections::btree_map::Entry::Vacant(e) = inc.names.entry(name) {
                            e.insert(seq);
                        } else {
                            inc.detach(seq);
                        }
                    }
                    inc.mtime = Some(SystemTime::now());
                }
                State::Listed(_) if trunc => {
                    // Rewritten from offset 0: no longer blocked, and the old note is moot.
                    self.restart(e);
                    if let State::Listed(b) = &mut e.state {
                        b.data(&self.staging)?.set_len(0)?;
                        b.len = 0;
                        b.wrote.clear();
                        b.appended = false;
                        b.blocked = None;
                        b.verdict = None;
                        let fresh = self.line_check(&e.name.clone())?;
                        self.end_stream(b);
                        b.check = fresh;
                        if b.note.take().is_some() {
                            self.staging.clear_error(&b.id)?;
                        }
                    }
                    e.mtime = SystemTime::now();
                    inc.mtime = Some(SystemTime::now());
                }
                State::Listed(_) => {}
            }
            let e = inc.get(seq)?;
            e.in_place = in_place;
            // Counted and registered under both locks, so a racing open that moves this
            // file's writers sees this handle.
            self.register(&mut inc, seq, true, append, caller)
        }
    }

    /// Count a new handle of `seq` and register it (call with the incoming lock held).
    fn register(&self, inc: &mut Incoming, seq: u64, write: bool, append: bool, caller: Caller) -> FsResult<Opened> {
        let e = inc.get(seq)?;
        e.handles += 1;
        let fh = self.new_handle(Handle::Staged {
            seq,
            writable: write,
            opener: caller.tgid,
            append,
        });
        if write {
            e.writers.push(Writer {
                fh,
                tgid: caller.tgid,
                closed: false,
            });
        }
        Ok(Opened {
            fh,
            keep_cache: false,
            no_flush: !write,
        })
    }

    /// Create `name` in `incoming/` (a committed name is created again: it stops being
    /// reachable). `excl`: `O_EXCL`. An existing listed name without `O_EXCL` is opened.
    pub(super) fn create_staged(
        &self,
        name: &str,
        write: bool,
        trunc: bool,
        append: bool,
        excl: bool,
        caller: Caller,
    ) -> FsResult<(u64, Opened)> {
        let mut inc = lock(&self.incoming);
        self.sweep(&mut inc);
        if let Some(seq) = inc.names.get(name).copied() {
            let committed = matches!(inc.get(seq)?.state, State::Committed { .. });
            let busy = inc.written_by_other(seq, caller.tgid);
            if committed || (busy && (excl || trunc)) {
                // A committed name is created again; a name another process is writing right
                // now is a drop slot, not a file that waits: racing `cp`s (stat said "absent",
                // then O_EXCL; or O_TRUNC) each get their own batch.
                inc.detach(seq);
                inc.maybe_drop(seq);
            } else if excl {
                // A file that waits (refused, scratch, idle): EEXIST.
                return Err(FsError::Exists);
            } else {
                drop(inc);
                let opened = self.open_staged(seq, write, trunc, append, caller)?;
                return Ok((seq, opened));
            }
        }
        // Created and opened under one lock, so a racing create sees its writer.
        let (id, file) = self.staging.create(name)?;
        let bytes = self.new_bytes(name, id, file)?;
        let perm = self.file_perm();
        let seq = inc.insert(name, State::Listed(bytes), perm);
        let in_place = write && self.reads_other(caller.tgid, seq);
        inc.get(seq)?.in_place = in_place;
        let opened = self.register(&mut inc, seq, write, append, caller)?;
        debug!("incoming/{name:?}: created");
        Ok((seq, opened))
    }

    /// A new, empty listed file.
    pub(super) fn new_staged(&self, name: &str) -> FsResult<u64> {
        let mut inc = lock(&self.incoming);
        if let Some(&seq) = inc.names.get(name) {
            if !matches!(inc.get(seq)?.state, State::Committed { .. }) {
                return Err(FsError::Exists);
            }
            inc.unname(seq);
            inc.maybe_drop(seq);
        }
        let (id, file) = self.staging.create(name)?;
        let bytes = self.new_bytes(name, id, file)?;
        let perm = self.file_perm();
        let seq = inc.insert(name, State::Listed(bytes), perm);
        debug!("incoming/{name:?}: created");
        Ok(seq)
    }

    pub(super) fn io_lock(&self, seq: u64) -> FsResult<Arc<Mutex<()>>> {
        Ok(lock(&self.incoming).get(seq)?.io.clone())
    }

    /// Run `f` with `seq`'s I/O lock held. The lock is looked up again once held: an open that
    /// moved `seq`'s writers to a new number ([`TableView::split_off_writers`]) gave the lock it
    /// held to the moved batch and `seq` a fresh one, so a caller that waited on the old lock
    /// would otherwise run beside an operation holding `seq`'s new lock (a commit finishing on the
    /// number a racing `O_TRUNC` had just given a fresh batch: its writer got EPERM). `seq`'s lock
    /// only changes under the lock, so once it matches it stays.
    pub(super) fn with_io<R>(&self, seq: u64, f: impl FnOnce() -> FsResult<R>) -> FsResult<R> {
        loop {
            let io = self.io_lock(seq)?;
            let _g = lock(&io);
            if Arc::ptr_eq(&io, &self.io_lock(seq)?) {
                return f();
            }
        }
    }

    /// Read from a staged file.
    pub(super) fn read_staged(&self, seq: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let (file, base, len, kept, name) = {
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            (
                e.file(&self.staging)?,
                e.base,
                e.bytes().map_or(0, |b| b.len),
                e.kept.clone(),
                e.name.clone(),
            )
        };
        let mut buf = Vec::new();
        let (mut offset, mut size) = (offset, u64::from(size));
        // Below `base`: the bytes the closes and renames since the last fsync commit committed,
        // which `stat` counts (docs/MOUNT.md "After the commit the name lingers").
        while size > 0 && offset < base {
            let Some(k) = kept
                .iter()
                .find(|k| k.start <= offset && offset < k.start.saturating_add(k.len))
            else {
                break;
            };
            let Some(committed) = self.staging.committed(&k.id) else {
                return Err(FsError::Io(io::Error::other(format!(
                    "incoming/{}: its committed bytes are no longer kept open (more lingering names \
                     than tinydelta-mount --max-open-staged); they are in the table",
                    name.escape_debug()
                ))));
            };
            let n = (k.start + k.len - offset).min(size);
            let before = buf.len();
            read_full(&committed, offset - k.start, n, &mut buf)?;
            let got = (buf.len() - before) as u64;
            offset += got;
            size -= got;
            if got < n {
                return Ok(buf);
            }
        }
        if size == 0 {
            return Ok(buf);
        }
        let Some(file) = file else { return Ok(buf) };
        if offset < base {
            return if buf.is_empty() {
                Err(FsError::AlreadyCommitted)
            } else {
                Ok(buf)
            };
        }
        let at = offset - base;
        if at >= len {
            return Ok(buf);
        }
        read_full(&file, at, (len - at).min(size), &mut buf)?;
        Ok(buf)
    }

    /// `e` starts again at offset 0 (`O_TRUNC`, a truncate to 0): the bytes committed before are
    /// no longer part of the file, nor readable through it.
    fn restart(&self, e: &mut Staged) {
        e.base = 0;
        for old in e.kept.drain(..) {
            self.staging.forget_committed(&old.id);
        }
    }

    /// [`Incoming::sweep`] now, closing the descriptors of the committed bytes of names that
    /// stopped being reachable.
    fn sweep(&self, inc: &mut Incoming) {
        for id in inc.sweep(Instant::now()) {
            self.staging.forget_committed(&id);
        }
    }

    /// Make sure `seq` has bytes to write into (a write after an fsync commit starts a new batch
    /// after the committed bytes). Call with the file's I/O lock held.
    fn writable_bytes(&self, seq: u64) -> FsResult<()> {
        let mut inc = lock(&self.incoming);
        let e = inc.get(seq)?;
        if let State::Committed { .. } = e.state {
            let name = e.name.clone();
            let (id, file) = self.staging.create(&name)?;
            let bytes = self.new_bytes(&name, id, file)?;
            let named = inc.names.get(&name) == Some(&seq);
            let free = !inc.names.contains_key(&name);
            let e = inc.get(seq)?;
            e.state = if named || free {
                State::Listed(bytes)
            } else {
                State::Detached(bytes)
            };
            if free {
                inc.names.insert(name, seq);
            }
        }
        Ok(())
    }

    /// Record why `seq` failed (in memory, and on disk when possible).
    fn note(&self, seq: u64, msg: &str) {
        let mut inc = lock(&self.incoming);
        let Ok(e) = inc.get(seq) else { return };
        let name = e.name.clone();
        let Some(b) = e.bytes_mut() else { return };
        b.note = Some(msg.to_string());
        let id = b.id.clone();
        e.mtime = SystemTime::now();
        inc.mtime = Some(SystemTime::now());
        drop(inc);
        if let Err(err) = self.staging.set_error(&id, msg) {
            warn!("incoming/{name:?}: cannot record the error on disk (kept in memory): {err}");
        }
    }

    /// Write `data` at `offset` into a staged file (`cached`: see [`TableView::write_from`]).
    pub(super) fn write_staged(&self, fh: u64, offset: u64, data: &[u8], cached: bool) -> FsResult<usize> {
        let (_, _, writer) = self.staged_handle(fh)?;
        let append = !cached && matches!(self.handle(fh)?.as_ref(), Handle::Staged { append: true, .. });
        self.locked(fh, |seq| {
            // An `O_APPEND` write goes to the end of the handle's own batch: the kernel's offset
            // is the size it last saw of the inode, which another process's batch of the same
            // name may have set (docs/MOUNT.md "Concurrent writers on one name").
            let offset = if append {
                lock(&self.incoming).get(seq)?.size()
            } else {
                offset
            };
            self.write_locked(seq, offset, data, (writer, append))
        })
    }

    /// Run `f` on the batch handle `fh` writes, with that batch's I/O lock held. The handle is
    /// resolved again under the lock: another process's open may have moved this writer's batch
    /// to a new number ([`TableView::split_off_writers`]).
    fn locked<R>(&self, fh: u64, f: impl FnOnce(u64) -> FsResult<R>) -> FsResult<R> {
        loop {
            let seq = self.handle_seq(fh)?;
            let io = self.io_lock(seq)?;
            let _g = lock(&io);
            if self.handle_seq(fh)? == seq && Arc::ptr_eq(&io, &self.io_lock(seq)?) {
                return f(seq);
            }
        }
    }

    fn handle_seq(&self, fh: u64) -> FsResult<u64> {
        match self.handle(fh)?.as_ref() {
            Handle::Staged { seq, .. } => Ok(*seq),
            _ => Err(FsError::BadHandle),
        }
    }

    /// `by`: the writing handle's process, and whether it was opened with `O_APPEND`.
    fn write_locked(&self, seq: u64, offset: u64, data: &[u8], by: (Option<u32>, bool)) -> FsResult<usize> {
        let (writer, append) = by;
        if offset < lock(&self.incoming).get(seq)?.base {
            return Err(FsError::AlreadyCommitted);
        }
        self.writable_bytes(seq)?;
        let (file, base, name) = {
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            (e.file(&self.staging)?, e.base, e.name.clone())
        };
        let Some(file) = file else { return Ok(data.len()) };
        if offset < base {
            return Err(FsError::AlreadyCommitted);
        }
        let at = offset - base;
        // The stream this write continues, taken out before the write (the batch's I/O lock is
        // held: nothing else feeds it meanwhile). Renamed to a scratch name while open: never
        // committed, so never checked; and a write elsewhere than the end ends the stream (the
        // close checks everything).
        let mut stream = {
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            match e.bytes_mut() {
                Some(b) if !never_committed(&name) && b.check.as_ref().is_some_and(|s| s.check.offset() == at) => {
                    b.check.take().map(|s| (s, b.id.clone()))
                }
                _ => None,
            }
        };
        // The canonical rows of one write (up to 1 MiB) go through this thread's buffer: a fresh
        // one per write cost a page fault per 4 KiB (a fifth of the daemon's time per `cp`).
        let mut rows = ROWS.with(|r| std::mem::take(&mut *r.borrow_mut()));
        rows.clear();
        // The bytes go into the page cache on this thread while helper threads check the rows
        // (both cost about as much per byte); the answer waits for both.
        let mut written = None;
        let mut write = || written = Some(file.write_all_at(data, at));
        let fed = match stream.as_mut() {
            Some((s, _)) => {
                let fed = s
                    .check
                    .feed_kept_beside(&format!("incoming/{name}"), data, &mut rows, &mut write);
                if fed.is_ok() {
                    s.hash.write(data);
                }
                Some(fed)
            }
            None => {
                write();
                None
            }
        };
        let keep_rows = |rows: Vec<u8>| {
            if rows.capacity() <= MAX_KEPT_ROWS {
                ROWS.with(|r| *r.borrow_mut() = rows);
            }
        };
        if let Err(err) = written.unwrap_or_else(|| Err(std::io::Error::other("the write was not made"))) {
            let msg = format!(
                "a write of {} bytes at offset {offset} failed: {err}; the file is not committed until rewritten from offset 0",
                data.len()
            );
            warn!("incoming/{name:?}: {}", msg.escape_debug());
            keep_rows(rows);
            if let Some((_, id)) = &stream {
                // The stream went past bytes the file does not hold: it ends (the close checks
                // the file itself).
                let _ = self.staging.remove_canon(id);
            }
            if let Some(b) = lock(&self.incoming).get(seq)?.bytes_mut() {
                b.blocked = Some(msg.clone());
            }
            self.note(seq, &msg);
            return Err(err.into());
        }
        {
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            e.mtime = SystemTime::now();
            if let Some(b) = e.bytes_mut() {
                b.len = b.len.max(at + data.len() as u64);
                b.verdict = None;
                if !b.wrote.contains(&writer) {
                    b.wrote.push(writer);
                }
                b.appended |= append;
                if at == 0 && b.blocked.is_some() {
                    b.blocked = None;
                }
                if stream.is_none() {
                    self.end_stream(b);
                }
            }
        }
        let (Some((mut stream, id)), Some(fed)) = (stream, fed) else {
            keep_rows(rows);
            return Ok(data.len());
        };
        if let Ok(kept) = fed {
            stream.keep(&self.staging, &id, &file, kept, &rows);
        }
        keep_rows(rows);
        match fed {
            Ok(_) => {
                if let Some(b) = lock(&self.incoming).get(seq)?.bytes_mut() {
                    b.check = Some(stream);
                }
                Ok(data.len())
            }
            Err(bad) => {
                let _ = self.staging.remove_canon(&id);
                self.note(seq, &bad.to_string());
                Err(FsError::Table(bad))
            }
        }
    }

    /// Change attributes of a staged file or a reachable committed name.
    pub(super) fn setattr_staged(&self, seq: u64, fh: Option<u64>, set: SetAttrs) -> FsResult<()> {
        match fh {
            Some(fh) if self.handle_seq(fh).is_ok() => self.locked(fh, |seq| self.setattr_locked(seq, set)),
            _ => self.with_io(seq, || self.setattr_locked(seq, set)),
        }
    }

    fn setattr_locked(&self, seq: u64, set: SetAttrs) -> FsResult<()> {
        if let Some(size) = set.size {
            let name = lock(&self.incoming).get(seq)?.name.clone();
            let mut check_at_zero = self.line_check(&name)?;
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            if size == 0 && e.bytes().is_some_and(|b| b.len == 0) {
                // ftruncate(fd, 0) right after opening a committed name (vim's re-save, `>`
                // without O_TRUNC): the new batch starts at offset 0.
                self.restart(e);
                if let Some(b) = e.bytes_mut() {
                    self.end_stream(b);
                    b.check = check_at_zero.take();
                    b.blocked = None;
                }
            }
            if e.size() != size {
                if size < e.base || e.bytes().is_none() {
                    return Err(FsError::AlreadyCommitted);
                }
                let base = e.base;
                if let Some(b) = e.bytes_mut() {
                    b.data(&self.staging)?.set_len(size - base)?;
                    b.len = size - base;
                    if b.len == 0 {
                        b.wrote.clear();
                        b.appended = false;
                    }
                    b.verdict = None;
                    self.end_stream(b);
                    if size == 0 {
                        b.blocked = None;
                        b.check = check_at_zero;
                    }
                }
                e.mtime = SystemTime::now();
            }
        }
        let mut inc = lock(&self.incoming);
        let e = inc.get(seq)?;
        if let Some(t) = set.mtime {
            e.mtime = t;
        }
        if let Some(mode) = set.mode {
            e.perm = (mode & 0o777) as u16;
        }
        Ok(())
    }

    /// `close()`: the commit point of the process that opened the file for writing.
    pub(super) fn flush_staged(&self, fh: u64, writable: bool, opener: Option<u32>, caller: Caller) -> FsResult<()> {
        if !writable {
            return Ok(());
        }
        let seq = self.handle_seq(fh)?;
        if caller.killed {
            info!("not committing staged file #{seq}: the writing process was killed by a signal");
            return Ok(());
        }
        if opener != caller.tgid {
            debug!(
                "flush of staged file #{seq} by {:?}, opened by {opener:?}: not a commit point",
                caller.tgid
            );
            return Ok(());
        }
        if caller.still_open {
            debug!("flush of staged file #{seq}: the process still has it open on another descriptor");
            return Ok(());
        }
        // The opener's last close: this handle writes no more, whatever batch it writes now
        // (an O_TRUNC open by another process may have moved it), and its release is on its
        // way. Marked before waiting, so that another writer of the batch closing at the same
        // time does not wait for this handle's release, which comes only after this close is
        // answered.
        self.close_writer(fh);
        let ino = caller.ino.unwrap_or_else(|| Node::Staged(seq).ino());
        self.await_released(Some(fh), seq, ino);
        self.locked(fh, |seq| {
            {
                let mut inc = lock(&self.incoming);
                let e = inc.get(seq)?;
                if e.live_writers().next().is_some() {
                    // Another writer of this very batch still has it open: its bytes (and this
                    // close's) commit at that writer's own last close.
                    debug!("flush of staged file #{seq}: other writers still have it open");
                    return Ok(());
                }
                if e.in_place {
                    debug!(
                        "incoming/{:?}: an in-place edit; its commit point is its rename",
                        e.name
                    );
                    return Ok(());
                }
            }
            self.commit_locked(seq, caller.tgid, true, false)
        })
    }

    /// `fsync()`: through a descriptor opened for writing, a commit point (except for scratch
    /// names, in-place edits and files another writer has open: then the bytes, the name and a
    /// durability record are synced). Through a read-only descriptor, only a sync.
    pub(super) fn fsync_staged(&self, fh: u64, writable: bool, opener: Option<u32>) -> FsResult<()> {
        self.locked(fh, |seq| {
            let (sync_only, id, name, file, len) = {
                let mut inc = lock(&self.incoming);
                let e = inc.get(seq)?;
                let others = e.live_writers().any(|w| w.fh != fh);
                let sync_only = !writable || others || e.in_place || never_committed(&e.name);
                let Some(b) = e.bytes() else { return Ok(()) };
                (sync_only, b.id.clone(), e.name.clone(), b.data(&self.staging)?, b.len)
            };
            if sync_only {
                self.staging.sync(&id, &name, &file, len)?;
                return Ok(());
            }
            self.commit_locked(seq, opener, false, false)
        })
    }

    /// The last descriptor of an open was closed.
    ///
    /// The handle leaves the table of handles and its counts leave its batch under the incoming
    /// lock together: a racing open must never see the counts of a handle it can no longer
    /// move ([`TableView::split_off_writers`]), or the fresh batch it makes would keep a
    /// phantom writer and its own close would not commit.
    pub(super) fn release_staged(&self, fh: u64) {
        let mut inc = lock(&self.incoming);
        let Some(h) = lock(&self.handles).remove(&fh) else {
            return;
        };
        let Handle::Staged { seq, writable, .. } = *h else {
            return;
        };
        if let Some(e) = inc.files.get_mut(&seq) {
            e.handles = e.handles.saturating_sub(1);
            if writable {
                e.writers.retain(|w| w.fh != fh);
            }
        }
        self.drop_if_empty(&mut inc, seq);
        inc.maybe_drop(seq);
        self.released.notify_all();
    }

    /// Mark writer handle `fh` closed by its opener ([`Writer::closed`]), in the batch it
    /// writes now.
    fn close_writer(&self, fh: u64) {
        let mut inc = lock(&self.incoming);
        let Ok(seq) = self.handle_seq(fh) else { return };
        if let Ok(e) = inc.get(seq)
            && let Some(w) = e.writers.iter_mut().find(|w| w.fh == fh)
        {
            w.closed = true;
        }
        self.released.notify_all();
    }

    /// Wait until the batch (the one handle `fh` writes, else `seq`) counts no writer handle
    /// that its opener has not closed ([`Writer::closed`]), while none of those handles'
    /// processes holds a descriptor of inode `ino` open for writing: such a handle's last
    /// descriptor is closed without its opener's close being seen (another descriptor of the
    /// file was still open then, or the opener was killed), and the kernel sends `release`
    /// asynchronously (queued before that close() returned, but served on any thread, so the
    /// closing process's next request, a rename, or another process's open, can overtake it).
    /// A commit point that went by those counts would commit nothing and still answer 0
    /// (rsync's rename, `: > f; cmd >> f`). Returns at once when one of those processes writes
    /// the file (a real other writer of the batch; other processes may write other batches of
    /// the same name behind the same inode), and after [`RELEASE_WAIT`] in any case (a mapping
    /// without a descriptor); the caller then checks the counts as before.
    pub(super) fn await_released(&self, fh: Option<u64>, seq: u64, ino: u64) {
        let deadline = Instant::now() + RELEASE_WAIT;
        let mut inc = lock(&self.incoming);
        let mut checked = false;
        loop {
            let seq = fh.and_then(|fh| self.handle_seq(fh).ok()).unwrap_or(seq);
            let live: Vec<Option<u32>> = match inc.get(seq) {
                Ok(e) => e.live_writers().map(|w| w.tgid).collect(),
                Err(_) => return,
            };
            if live.is_empty() {
                return;
            }
            if !checked {
                drop(inc);
                if live.iter().any(|t| t.is_none_or(|t| self.procs.writes_open(t, ino))) {
                    return;
                }
                checked = true;
                debug!("staged file #{seq}: waiting for the release of a closed writer handle");
                inc = lock(&self.incoming);
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                warn!("staged file #{seq}: a writer handle no process holds was not released in {RELEASE_WAIT:?}");
                return;
            }
            inc = match self.released.wait_timeout(inc, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// An empty, plain-named, unblocked file that nobody has open leaves `incoming/` (`touch`, a
    /// `cp` of an empty file): nothing to commit, nothing to keep. A batch that continues a
    /// committed name (it starts after committed bytes) and got nothing since (`touch`, `: >>`,
    /// an open whose truncate below the committed bytes failed) makes the name committed again,
    /// as right after its commit: not listed, reachable for [`GHOST_TTL`], reading its committed bytes
    /// (docs/MOUNT.md "After the commit the name lingers"), whatever its name.
    fn drop_if_empty(&self, inc: &mut Incoming, seq: u64) {
        let Some(e) = inc.files.get_mut(&seq) else { return };
        let Some(b) = e.bytes() else { return };
        let continues = e.base > 0;
        if e.handles > 0 || b.len > 0 || e.in_place || b.blocked.is_some() {
            return;
        }
        if !continues && (b.note.is_some() || never_committed(&e.name)) {
            return;
        }
        if continues {
            self.committed_again(inc, seq);
            return;
        }
        if let Err(err) = self.staging.remove(&b.id) {
            warn!("incoming/{:?}: cannot remove the empty staged file: {err}", e.name);
            return;
        }
        debug!("incoming/{:?}: empty, nothing committed", e.name);
        e.state = State::Removed(None);
        inc.unname(seq);
    }

    /// `seq` continues a committed name and holds no byte (`touch`, `: >>`): the name is
    /// committed again, as right after its commit (not listed, reachable for [`GHOST_TTL`], its
    /// durability note kept); its empty staged file is removed.
    fn committed_again(&self, inc: &mut Incoming, seq: u64) {
        let Some(e) = inc.files.get_mut(&seq) else { return };
        let Some(b) = e.bytes() else { return };
        if let Err(err) = self.staging.remove(&b.id) {
            warn!("incoming/{:?}: cannot remove the empty staged file: {err}", e.name);
        }
        debug!(
            "incoming/{:?}: nothing written since its commit; committed again",
            e.name
        );
        let note = b.note.clone();
        let until = Instant::now() + GHOST_TTL;
        e.state = State::Committed { until, note };
        inc.mtime = Some(SystemTime::now());
        inc.due_at(until, Due::Name(seq));
    }

    /// Validate `seq` and commit it; on success its name stops being listed (it stays reachable
    /// for [`GHOST_TTL`]). `tgid`: the process whose commit point this is (for re-saves). An
    /// empty file commits nothing. On failure the bytes stay and `NAME.error` explains.
    /// `edit`: the rename of an in-place edit onto the name it edited, which is a re-save of that
    /// name whoever saved it before (docs/MOUNT.md "Re-saves").
    pub(super) fn commit(&self, seq: u64, tgid: Option<u32>, edit: bool) -> FsResult<()> {
        self.with_io(seq, || self.commit_locked(seq, tgid, true, edit))
    }

    /// [`TableView::commit`] with `seq`'s I/O lock held. `keep`: the commit point is a close or a
    /// rename, after which the lingering name reads the committed bytes ([`KeptBatch`]); after an
    /// `fsync` commit, reads below the committed bytes are refused instead (docs/MOUNT.md
    /// "Commit points").
    fn commit_locked(&self, seq: u64, tgid: Option<u32>, keep: bool, edit: bool) -> FsResult<()> {
        let (id, name, file, len, base, own) = {
            let mut inc = lock(&self.incoming);
            self.sweep(&mut inc);
            let e = inc.get(seq)?;
            if never_committed(&e.name) {
                return Ok(());
            }
            let Some(b) = e.bytes() else { return Ok(()) };
            if let Some(why) = &b.blocked {
                return Err(FsError::Blocked(why.clone()));
            }
            // Written by the committing process alone (or by nobody through the mount): the
            // re-save rule applies (see [`Bytes::wrote`]).
            let own = b.wrote.iter().all(|w| w.is_some() && *w == tgid);
            let own = match (own, b.appended) {
                (false, _) => Own::Mixed,
                (true, true) => Own::Appended,
                (true, false) => Own::Whole,
            };
            (b.id.clone(), e.name.clone(), b.data(&self.staging)?, b.len, e.base, own)
        };
        if len == 0 {
            // Nothing to commit (a shell redirection closes a duplicate of the new, still empty
            // file before anything is written). An empty file leaves at its last close; one that
            // continues a committed name (`touch`, `: >>`) is that committed name again at once,
            // as a commit's close leaves it (the release may come much later).
            if base > 0 {
                self.committed_again(&mut lock(&self.incoming), seq);
            }
            return Ok(());
        }
        let recent = {
            let inc = lock(&self.incoming);
            inc.recent.get(&name).cloned()
        };
        let mut plan = Plan::Append { from: 0 };
        if base == 0
            && own == Own::Whole
            && let (Some(r), Some(t)) = (&recent, tgid)
            && (r.tgid == t || edit)
        {
            let same_prefix = len >= r.len && hash_prefix(&file, r.len)? == r.hash;
            plan = if same_prefix {
                Plan::Append { from: r.len }
            } else {
                match self.table().added_path(r.version)? {
                    Some(old) => Plan::Replace { old },
                    None => Plan::Append { from: 0 },
                }
            };
        }
        let opts = WriteOptions {
            expect_version: None,
            extra_params: vec![
                (STAGING_ID_PARAM.to_string(), id.clone()),
                (SOURCE_PARAM.to_string(), name.clone()),
            ],
            max_line_bytes: Some(self.cfg.max_line_bytes),
            merge_schema: None,
        };
        let source = format!("incoming/{name}");
        let prepared = match plan {
            Plan::Append { from: 0 } => self.commit_prepared(seq, &id, &file, &source, len, &opts)?,
            _ => None,
        };
        let from = match plan {
            Plan::Append { from } => from,
            Plan::Replace { .. } => 0,
        };
        let validated = match prepared {
            Some(_) => None,
            None => Some(self.validation_budget(seq, &source, from, len)?),
        };
        let (result, hash) = match (&plan, prepared) {
            (_, Some(done)) => done,
            (Plan::Append { from }, None) => {
                let mut reader = BufReader::with_capacity(1 << 20, PreadReader::new(file.clone(), *from, len));
                let r = self.table().append(&source, &mut reader, &opts);
                (r, reader.into_inner().hash.finish())
            }
            (Plan::Replace { old }, None) => {
                let mut reader = BufReader::with_capacity(1 << 20, PreadReader::new(file.clone(), 0, len));
                let r = self.table().replace_file(&source, old, &mut reader, &opts).map(Some);
                (r, reader.into_inner().hash.finish())
            }
        };
        match result {
            Ok(version) => {
                match (&plan, version) {
                    (Plan::Replace { old }, Some(v)) => {
                        info!("incoming/{name:?}: re-saved; version {v} replaces {old}")
                    }
                    (_, Some(v)) => info!("incoming/{name:?}: committed {len} bytes as version {v}"),
                    (_, None) => info!("incoming/{name:?}: no new rows, nothing committed"),
                }
                if let Err(e) = self.staging.remove(&id) {
                    warn!("incoming/{name:?}: committed, but removing its staged bytes failed: {e}");
                }
                if keep {
                    self.staging.keep_committed(&id, file.clone());
                }
                let mut inc = lock(&self.incoming);
                let now = Instant::now();
                if own == Own::Mixed {
                    // Rows of several processes: nobody's later save is a re-save of them.
                    inc.recent.remove(&name);
                } else if base == 0
                    && own == Own::Whole
                    && let Some(t) = tgid
                {
                    let hash = match &plan {
                        Plan::Append { from: 0 } | Plan::Replace { .. } => Some(hash),
                        Plan::Append { .. } => hash_prefix(&file, len).ok(),
                    };
                    let version = match (version, &recent) {
                        (Some(v), _) => Some(v),
                        (None, Some(r)) => Some(r.version),
                        (None, None) => None,
                    };
                    if let (Some(hash), Some(version)) = (hash, version) {
                        // The re-save rule needs one data file per save: a save that appended
                        // to an earlier one is not replaceable by a later re-save.
                        let whole = matches!(plan, Plan::Append { from: 0 } | Plan::Replace { .. });
                        if whole {
                            inc.recent.insert(
                                name.clone(),
                                Recent {
                                    tgid: t,
                                    len,
                                    hash,
                                    version,
                                    until: now + GHOST_TTL,
                                },
                            );
                            inc.due_at(now + GHOST_TTL, Due::Recent(name.clone()));
                        } else {
                            inc.recent.remove(&name);
                        }
                    }
                }
                let e = inc.get(seq)?;
                if keep {
                    e.kept.push(KeptBatch {
                        id: id.clone(),
                        start: e.base,
                        len,
                    });
                    if e.kept.len() > MAX_KEPT_BATCHES {
                        let old = e.kept.remove(0);
                        self.staging.forget_committed(&old.id);
                    }
                } else {
                    for old in e.kept.drain(..) {
                        self.staging.forget_committed(&old.id);
                    }
                }
                e.base += len;
                e.state = State::Committed {
                    until: now + GHOST_TTL,
                    note: None,
                };
                e.mtime = SystemTime::now();
                inc.mtime = Some(SystemTime::now());
                inc.due_at(now + GHOST_TTL, Due::Name(seq));
                inc.maybe_drop(seq);
                drop(inc);
                self.after_commit();
                Ok(())
            }
            Err(crate::error::Error::NotDurable { table, version, reason }) => {
                // Published: the rows are in the table, so the bytes must never be committed
                // again (a `touch` or a retry would duplicate them), yet the caller must not
                // believe the commit durable. The close or fsync fails with EIO and the note
                // says which version to check.
                let msg = format!(
                    "committed as version {version}; durability unknown ({reason}); do not send it again, check the table after a crash"
                );
                warn!("incoming/{name:?}: {}", msg.escape_debug());
                if let Err(e) = self.staging.remove(&id) {
                    warn!("incoming/{name:?}: committed, but removing its staged bytes failed: {e}");
                }
                let mut inc = lock(&self.incoming);
                inc.recent.remove(&name);
                let e = inc.get(seq)?;
                for old in e.kept.drain(..) {
                    self.staging.forget_committed(&old.id);
                }
                e.base += len;
                // With a note it is not swept (see [`Incoming::sweep`]); `rm NAME.error` gives
                // it a new time.
                e.state = State::Committed {
                    until: Instant::now() + GHOST_TTL,
                    note: Some(msg),
                };
                e.mtime = SystemTime::now();
                inc.mtime = Some(SystemTime::now());
                Err(FsError::Table(crate::error::Error::NotDurable { table, version, reason }))
            }
            Err(err) => {
                if let (
                    Some(schema),
                    crate::error::Error::BadInput {
                        line, column, reason, ..
                    },
                ) = (validated, &err)
                    && let Some(b) = lock(&self.incoming).get(seq)?.bytes_mut()
                {
                    b.verdict = Some(Verdict {
                        from,
                        len,
                        schema,
                        line: *line,
                        column: column.clone(),
                        reason: reason.clone(),
                    });
                }
                // Bad input: every bad line, the total and hints (src/format/diagnose.rs).
                let reader = BufReader::with_capacity(1 << 20, PreadReader::new(file.clone(), from, len));
                let msg = crate::format::diagnose::note_for(
                    || {
                        let schema = self.table().latest_snapshot()?.schema.clone();
                        Ok(LineCheck::new(schema).with_max_line_bytes(self.cfg.max_line_bytes))
                    },
                    &source,
                    reader,
                    &err,
                );
                warn!("incoming/{name:?}: not committed: {}", msg.escape_debug());
                self.note(seq, &msg);
                Err(FsError::Table(err))
            }
        }
    }

    /// Before a commit validates bytes `from..len` of `seq` in one request (docs/MOUNT.md
    /// "Limits"): when validation refused exactly these bytes against the same schema before, that
    /// refusal again, without reading them; when they are more than
    /// [`super::ViewConfig::max_validate_bytes`], `EFBIG` ([`FsError::TooBig`]) and a note saying
    /// why. Returns the schema the validation will use, to key the verdict it may give.
    fn validation_budget(&self, seq: u64, source: &str, from: u64, len: u64) -> FsResult<crate::format::schema::Schema> {
        let schema = self.versions.table().latest_snapshot_arc()?.schema.clone();
        let kept = lock(&self.incoming).get(seq)?.bytes().and_then(|b| b.verdict.clone());
        if let Some(v) = kept
            && v.from == from
            && v.len == len
            && v.schema == schema
        {
            debug!("{source}: unchanged since validation refused it; not validated again");
            return Err(FsError::Table(v.error(source)));
        }
        let need = len - from;
        let cap = self.cfg.max_validate_bytes;
        if need > cap {
            let msg = format!(
                "not committed: {source} would need {need} bytes validated in one request, more than the limit of \
                 {cap} (tinydelta-mount --max-validate-bytes); write it sequentially from offset 0 under a plain name \
                 (as cp does), which validates it as it arrives, or use `tinydelta append`"
            );
            warn!("{}", msg.escape_debug());
            self.note(seq, &msg);
            return Err(FsError::TooBig(msg));
        }
        Ok(schema)
    }

    /// The commit of a file streamed from offset 0 to its end: finish the tail and link the
    /// canonical rows into the table (no second pass): the data file `data` itself when every
    /// row is its own canonical form, else the rows kept in `<id>.canon` while it was written.
    /// `None` when it does not qualify or the rows cannot be placed (the caller canonicalises
    /// the staged bytes instead). Call with `seq`'s I/O lock held.
    #[allow(clippy::type_complexity)]
    fn commit_prepared(
        &self,
        seq: u64,
        id: &str,
        data: &File,
        source: &str,
        len: u64,
        opts: &WriteOptions,
    ) -> FsResult<Option<(crate::error::Result<Option<u64>>, u64)>> {
        let (stream, data_ident) = {
            let mut inc = lock(&self.incoming);
            let Some(b) = inc.get(seq)?.bytes_mut() else {
                return Ok(None);
            };
            match b.check.take() {
                Some(s) if s.check.offset() == len && !s.canon_failed => (s, b.ident),
                other => {
                    b.check = other;
                    return Ok(None);
                }
            }
        };
        let mut stream = stream;
        let mut rows = Vec::new();
        let (stats, kept) = match stream.check.finish_kept(source, &mut rows) {
            Ok(done) => done,
            Err(bad) => {
                let _ = self.staging.remove_canon(id);
                return Ok(Some((Err(bad), 0)));
            }
        };
        stream.keep(&self.staging, id, data, kept, &rows);
        // Every row its own canonical form: the staged file is the data file. The mount never
        // writes it again once committed (a later write, fsync commit or re-save starts a new
        // staged file), so no bytes a version names change (docs/MOUNT.md "One pass over the bytes,
        // written once").
        let whole = kept == Kept::Same && stream.canon.is_none() && stats.bytes == len;
        let have_rows = whole || stream.canon.is_some() || stats.num_records == 0;
        if stream.canon_failed || !have_rows {
            let _ = self.staging.remove_canon(id);
            return Ok(None);
        }
        let ident = if whole { Some(data_ident) } else { stream.canon };
        let canon = match stream
            .canon
            .filter(|_| !whole)
            .map(|ident| self.staging.canon(id, ident))
            .transpose()
        {
            Ok(c) => c,
            Err(e) => {
                debug!("{source}: {e}; canonicalising its bytes");
                let _ = self.staging.remove_canon(id);
                return Ok(None);
            }
        };
        let rows_file: Option<&File> = if whole { Some(data) } else { canon.as_deref() };
        // The canonical rows are not fsynced here: the publish fsyncs them at the same time as
        // the commit and the table folder (one journal commit; commit::publish_after).
        let placed = std::cell::Cell::new(None);
        let result = self.table().append_prepared_after(
            stream.check.schema(),
            &stats,
            rows_file,
            |path| {
                let Some(ident) = ident else {
                    placed.set(Some(false));
                    return Err(crate::error::Error::io("link", path, std::io::ErrorKind::NotFound.into()));
                };
                let r = if whole {
                    self.staging.link_data(id, path, ident, stats.bytes)
                } else {
                    self.staging.link_canon(id, path, ident, stats.bytes)
                };
                // A file changed behind the mount's back is refused, not worked around: the
                // commit fails (EIO) and the note says why.
                placed.set(Some(r.is_ok() || matches!(&r, Err(e) if e.is_damage())));
                r.map(Some)
            },
            opts,
        );
        // A conflict before anything was placed: the schema changed since the rows were
        // checked; they are checked again against the new one.
        let schema_changed = placed.get().is_none() && matches!(result, Err(crate::error::Error::ConcurrentWrite { .. }));
        if placed.get() == Some(false) || schema_changed {
            debug!("{source}: cannot link its canonical rows into the table; canonicalising its bytes");
            let _ = self.staging.remove_canon(id);
            return Ok(None);
        }
        if matches!(&result, Err(e) if e.is_damage()) {
            let _ = self.staging.remove_canon(id);
        }
        Ok(Some((result, stream.hash.finish())))
    }

    /// The descriptor a listed file being removed keeps for its open handles (they read its
    /// bytes until closed, as after an unlink on disk); none when nobody has it open.
    fn pin_removed(&self, handles: u32, b: &Bytes) -> Option<Arc<File>> {
        if handles == 0 {
            return None;
        }
        b.data(&self.staging)
            .inspect_err(|e| warn!("a removed staged file's open handles cannot read it any more: {e}"))
            .ok()
    }

    /// Remove `name` from `incoming/`: discards a listed file, forgets a committed name (the
    /// table keeps its rows), or clears a note (`rm NAME.error`).
    pub(super) fn unlink_staged(&self, name: &str) -> FsResult<()> {
        let mut inc = lock(&self.incoming);
        self.sweep(&mut inc);
        if let Some(&seq) = inc.names.get(name) {
            let e = inc.get(seq)?;
            if let State::Listed(b) = &e.state {
                let file = self.pin_removed(e.handles, b);
                self.staging.remove(&b.id)?;
                e.state = State::Removed(file);
            }
            inc.unname(seq);
            inc.maybe_drop(seq);
            // A name removed is no longer reachable: the next save of it is a new file, not a
            // re-save of the removed one (docs/MOUNT.md "Re-saves"), even by the same process.
            inc.recent.remove(name);
            debug!("incoming/{name:?}: removed");
            return Ok(());
        }
        if let Some(stem) = name.strip_suffix(ERROR_SUFFIX)
            && let Some(&seq) = inc.names.get(stem)
        {
            let e = inc.get(seq)?;
            if let State::Committed { note, until } = &mut e.state
                && note.take().is_some()
            {
                let now = Instant::now();
                *until = now;
                inc.mtime = Some(SystemTime::now());
                inc.due_at(now, Due::Name(seq));
                return Ok(());
            }
            if let Some(b) = e.bytes_mut()
                && b.note.is_some()
            {
                self.staging.clear_error(&b.id)?;
                b.note = None;
                inc.mtime = Some(SystemTime::now());
                return Ok(());
            }
        }
        Err(FsError::NotFound)
    }

    /// Rename within `incoming/`. A rename onto an existing name replaces that file and its note
    /// (unless `noreplace`: EEXIST, as on ext4). A committed name moves without a second commit. A
    /// listed file renamed to a plain name while nobody has it open for writing is committed
    /// (rsync, editors, `sed -i`, `.part` + `mv`); if that commit fails, the file keeps its new
    /// name, `NAME.error` explains, and the rename reports the error.
    pub(super) fn rename_staged(&self, old: &str, newname: &OsStr, noreplace: bool, caller: Caller) -> FsResult<()> {
        let new = Self::check_name(newname)?;
        self.rename_checked(old, new, noreplace, caller)
    }

    /// [`TableView::rename_staged`] onto a checked name (or a version folder's scratch key).
    pub(super) fn rename_checked(&self, old: &str, new: &str, noreplace: bool, caller: Caller) -> FsResult<()> {
        // An in-place edit (`sed -i`): it read the name it replaces, and saves it again.
        let edit;
        let seq = {
            let mut inc = lock(&self.incoming);
            self.sweep(&mut inc);
            let Some(&seq) = inc.names.get(old) else {
                if old
                    .strip_suffix(ERROR_SUFFIX)
                    .is_some_and(|s| inc.names.contains_key(s))
                {
                    return Err(FsError::NotSupported);
                }
                return Err(FsError::NotFound);
            };
            if old == new {
                return Ok(());
            }
            if let Some(&dst) = inc.names.get(new) {
                if noreplace {
                    return Err(FsError::Exists);
                }
                let e = inc.get(dst)?;
                if let State::Listed(b) = &e.state {
                    let file = self.pin_removed(e.handles, b);
                    self.staging.remove(&b.id)?;
                    e.state = State::Removed(file);
                }
                inc.unname(dst);
                inc.maybe_drop(dst);
            }
            let e = inc.get(seq)?;
            if let Some(b) = e.bytes() {
                self.staging.set_name(&b.id, new, false)?;
            }
            if let State::Committed { until, .. } = &mut e.state {
                let at = Instant::now() + GHOST_TTL;
                *until = at;
                inc.due_at(at, Due::Name(seq));
            }
            inc.names.remove(old);
            inc.names.insert(new.to_string(), seq);
            inc.mtime = Some(SystemTime::now());
            if let Some(r) = inc.recent.remove(old) {
                inc.due_at(r.until, Due::Recent(new.to_string()));
                inc.recent.insert(new.to_string(), r);
            }
            let e = inc.get(seq)?;
            e.name = new.to_string();
            debug!("incoming/{old:?} renamed to {new:?}");
            if e.bytes().is_none() || never_committed(new) {
                return Ok(());
            }
            edit = e.in_place;
            // A writer handle whose opener closed it (rsync closes its temporary, then renames
            // it at once; the release may still be on its way) writes no more.
            let counted = e.live_writers().next().is_some();
            if !counted {
                e.in_place = false;
            }
            (seq, counted)
        };
        let (seq, counted) = seq;
        if counted {
            // Writer handles are still counted whose opener's close was not seen: open, or
            // closed with their release on its way.
            self.await_released(None, seq, Node::Staged(seq).ino());
            let mut inc = lock(&self.incoming);
            let e = inc.get(seq)?;
            if e.live_writers().next().is_some() || e.name != new || e.bytes().is_none() {
                return Ok(());
            }
            e.in_place = false;
        }
        self.commit(seq, caller.tgid, edit)?;
        let mut inc = lock(&self.incoming);
        self.drop_if_empty(&mut inc, seq);
        inc.maybe_drop(seq);
        Ok(())
    }

    pub(super) fn check_name(name: &OsStr) -> FsResult<&str> {
        let name = name
            .to_str()
            .ok_or_else(|| FsError::BadName("names in incoming/ must be UTF-8".into()))?;
        if !staging::valid_name(name) {
            return Err(FsError::BadName(format!(
                "{name:?} (names ending in {ERROR_SUFFIX} are reserved)"
            )));
        }
        Ok(name)
    }
}

/// Read `n` bytes of `file` at `at` onto the end of `buf` (fewer at its end).
fn read_full(file: &File, at: u64, n: u64, buf: &mut Vec<u8>) -> FsResult<()> {
    let start = buf.len();
    let n = usize::try_from(n).unwrap_or(0);
    buf.resize(start + n, 0);
    let mut done = 0;
    while done < n {
        match file.read_at(&mut buf[start + done..], at + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                buf.truncate(start);
                return Err(e.into());
            }
        }
    }
    buf.truncate(start + done);
    Ok(())
}
