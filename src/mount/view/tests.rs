//! Unit tests of the inner view: no kernel, no mount.

use std::ffi::OsStr;

use super::*;
use crate::table::WriteOptions;
use crate::format::schema::Schema;

const ME: Caller = Caller {
    tgid: Some(100),
    killed: false,
    still_open: false,
    ino: None,
    tid: None,
};

fn table(dir: &Path) -> Table {
    let schema = Schema::parse_cli(&["id:int!".to_string(), "name:str".to_string()]).unwrap();
    Table::create(dir, &schema).unwrap()
}

fn view(dir: &Path) -> TableView {
    TableView::load(dir, ViewConfig::default()).unwrap()
}

fn rows(t: &Table, v: u64) -> Vec<u8> {
    let snap = t.snapshot(v).unwrap();
    let mut out = Vec::new();
    t.write_rows(&snap, &mut out).unwrap();
    out
}

fn lookup_path(v: &TableView, path: &str) -> FsResult<Attr> {
    let mut ino = inode::ROOT;
    let mut attr = v.getattr(ino)?;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        attr = v.lookup(ino, OsStr::new(part))?;
        ino = attr.ino;
    }
    Ok(attr)
}

fn read_all(v: &TableView, ino: u64) -> Vec<u8> {
    let o = v.open(ino, false, false, Caller::default()).unwrap();
    let mut out = Vec::new();
    loop {
        let chunk = v.read(o.fh, out.len() as u64, 7).unwrap();
        if chunk.is_empty() {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    v.release(o.fh);
    out
}

/// Create `incoming/name`, write `data`, close it as `closer`.
fn put(v: &TableView, name: &str, data: &[u8], closer: Caller) -> FsResult<()> {
    let (_, o) = v.create(
        inode::INCOMING,
        OsStr::new(name),
        true,
        libc::O_CREAT | libc::O_TRUNC,
        ME,
    )?;
    let r = v.write(o.fh, 0, data).and_then(|_| v.flush(o.fh, closer));
    v.release(o.fh);
    r
}

fn names(v: &TableView) -> Vec<String> {
    let fh = v.opendir(inode::INCOMING).unwrap();
    let list = v.readdir(inode::INCOMING, fh, 2, 100).unwrap();
    v.releasedir(fh);
    list.into_iter().map(|e| e.name).collect()
}

#[test]
fn layout_and_versions() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    assert_eq!(v.readlink(inode::LATEST).unwrap(), b"v/0");
    let root: Vec<_> = v
        .readdir(inode::ROOT, 0, 0, 10)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(root, [".", "..", "latest", "v", "incoming", "changes.jsonl", "at"]);
    t.append(
        "x",
        &b"{\"id\":1}\n{\"id\":2,\"name\":\"b\"}\n"[..],
        &WriteOptions::default(),
    )
    .unwrap();
    // latest is read from the log at every call.
    assert_eq!(v.readlink(inode::LATEST).unwrap(), b"v/1");
    let vs: Vec<_> = v
        .readdir(inode::V_DIR, 0, 2, 100)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(vs, ["0", "1"]);
    let a = lookup_path(&v, "v/1/data.jsonl").unwrap();
    assert_eq!(a.size, rows(&t, 1).len() as u64);
    assert_eq!(read_all(&v, a.ino), rows(&t, 1));
    let info = t.commit_info(1).unwrap();
    assert_eq!(a.mtime, ms_to_time(info.timestamp));
    let c = lookup_path(&v, "v/1/commit.json").unwrap();
    assert_eq!(read_all(&v, c.ino), std::fs::read(t.commit_path(1)).unwrap());
    let s = lookup_path(&v, "v/0/schema.json").unwrap();
    let schema = String::from_utf8(read_all(&v, s.ino)).unwrap();
    assert!(schema.contains("\"id\""), "{schema}");
    assert_eq!(lookup_path(&v, "v/0/data.jsonl").unwrap().size, 0);
    for missing in ["v/2", "v/01", "v/+1", "v/1/nope", "nope"] {
        assert_eq!(lookup_path(&v, missing).unwrap_err().errno(), libc::ENOENT, "{missing}");
    }
}

/// `latest` is one inode per version it names, each with a fixed target (so the kernel may cache
/// it) and an entry that is never cached; the newest version's names are cached, their
/// attributes not.
#[test]
fn latest_is_one_inode_per_version() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    t.append("x", &b"{\"id\":1}\n"[..], &WriteOptions::default()).unwrap();
    let one = lookup_path(&v, "latest").unwrap();
    assert_eq!(one.kind, Kind::Symlink);
    assert_eq!(one.entry_ttl, Some(Duration::ZERO));
    assert!(one.ttl > Duration::ZERO);
    assert_eq!(v.readlink(one.ino).unwrap(), b"v/1");
    assert_eq!(v.getattr(one.ino).unwrap().size, 3);
    let data = lookup_path(&v, "v/1/data.jsonl").unwrap();
    assert_eq!((data.ttl, data.perm), (Duration::ZERO, 0o644));
    assert!(data.entry_ttl.is_some_and(|e| e > Duration::ZERO));
    let dir1 = lookup_path(&v, "v/1").unwrap();
    assert_eq!(dir1.ttl, Duration::ZERO);
    assert!(dir1.entry_ttl.is_some_and(|e| e > Duration::ZERO));
    t.append("x", &b"{\"id\":2}\n"[..], &WriteOptions::default()).unwrap();
    let two = lookup_path(&v, "latest").unwrap();
    assert_ne!(two.ino, one.ino);
    assert_eq!(v.readlink(two.ino).unwrap(), b"v/2");
    // The old inode still names the version it named.
    assert_eq!(v.readlink(one.ino).unwrap(), b"v/1");
    assert_eq!(v.readlink(inode::LATEST).unwrap(), b"v/2");
    let old = lookup_path(&v, "v/1/data.jsonl").unwrap();
    assert_eq!((old.perm, old.entry_ttl), (0o444, None));
    assert!(old.ttl > Duration::ZERO);
    // A link to a version that does not exist is no inode of the mount.
    assert_eq!(
        v.getattr(inode::Node::LatestAt(7).ino()).unwrap_err().errno(),
        libc::ENOENT
    );
}

#[test]
fn open_reader_keeps_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    t.append("x", &b"{\"id\":1}\n"[..], &WriteOptions::default()).unwrap();
    let a = lookup_path(&v, "latest").unwrap();
    assert_eq!(a.kind, Kind::Symlink);
    let data = lookup_path(&v, "v/1/data.jsonl").unwrap();
    let o = v.open(data.ino, false, false, Caller::default()).unwrap();
    assert!(o.keep_cache);
    t.append("x", &b"{\"id\":2}\n"[..], &WriteOptions::default()).unwrap();
    assert_eq!(v.read(o.fh, 0, 1000).unwrap(), b"{\"id\":1,\"name\":null}\n");
    v.release(o.fh);
}

#[test]
fn close_commits_once_and_the_name_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    put(&v, "a.jsonl", b"{\"id\":1}\r\n{\"id\":2}", ME).unwrap();
    assert_eq!(t.latest_version().unwrap(), 1);
    assert_eq!(rows(&t, 1), b"{\"id\":1,\"name\":null}\n{\"id\":2,\"name\":null}\n");
    let info = t.commit_info(1).unwrap();
    assert!(info.operation_parameters.contains_key(STAGING_ID_PARAM));
    assert!(names(&v).is_empty());
    // Not listed, but still reachable for a moment (stat, chmod, utime by path after close).
    lookup_path(&v, "incoming/a.jsonl").unwrap();
    // Nothing left in _staging/ but the lock.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("_staging")).unwrap().collect();
    assert_eq!(left.len(), 1);
}

#[test]
fn forked_child_and_killed_writer_do_not_commit() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    let (_, o) = v
        .create(
            inode::INCOMING,
            OsStr::new("a.jsonl"),
            true,
            libc::O_CREAT | libc::O_TRUNC,
            ME,
        )
        .unwrap();
    v.write(o.fh, 0, b"{\"id\":1}\n").unwrap();
    let child = Caller { tgid: Some(101), ..ME };
    v.flush(o.fh, child).unwrap();
    assert_eq!(t.latest_version().unwrap(), 0);
    let killed = Caller { killed: true, ..ME };
    v.flush(o.fh, killed).unwrap();
    assert_eq!(t.latest_version().unwrap(), 0);
    let dup = Caller { still_open: true, ..ME };
    v.flush(o.fh, dup).unwrap();
    assert_eq!(t.latest_version().unwrap(), 0);
    assert_eq!(names(&v), ["a.jsonl"]);
    v.flush(o.fh, ME).unwrap();
    v.release(o.fh);
    assert_eq!(t.latest_version().unwrap(), 1);
}

#[test]
fn bad_input_stays_with_a_note_and_retries() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    let e = put(&v, "b.jsonl", b"{\"id\":1}\n{\"id\":\"x\"}\n", ME).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert_eq!(t.latest_version().unwrap(), 0);
    assert_eq!(names(&v), ["b.jsonl", "b.jsonl.error"]);
    let note = lookup_path(&v, "incoming/b.jsonl.error").unwrap();
    let text = String::from_utf8(read_all(&v, note.ino)).unwrap();
    assert!(text.contains("incoming/b.jsonl") && text.contains("line 2"), "{text}");
    assert_eq!(v.open(note.ino, true, false, ME).unwrap_err().errno(), libc::EACCES);
    // Fix it in place (O_TRUNC arrives as setattr size 0) and close again.
    let f = lookup_path(&v, "incoming/b.jsonl").unwrap();
    v.setattr(
        f.ino,
        None,
        SetAttrs {
            size: Some(0),
            ..SetAttrs::default()
        },
    )
    .unwrap();
    let o = v.open(f.ino, true, false, ME).unwrap();
    v.write(o.fh, 0, b"{\"id\":3}\n").unwrap();
    v.flush(o.fh, ME).unwrap();
    v.release(o.fh);
    assert_eq!(t.latest_version().unwrap(), 1);
    assert!(names(&v).is_empty());
}

#[test]
fn rm_discards_and_rm_note_clears() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    put(&v, "b.jsonl", b"nope\n", ME).unwrap_err();
    v.unlink(inode::INCOMING, OsStr::new("b.jsonl.error")).unwrap();
    assert_eq!(names(&v), ["b.jsonl"]);
    v.unlink(inode::INCOMING, OsStr::new("b.jsonl")).unwrap();
    assert!(names(&v).is_empty());
    assert_eq!(t.latest_version().unwrap(), 0);
    assert_eq!(
        v.unlink(inode::INCOMING, OsStr::new("b.jsonl")).unwrap_err().errno(),
        libc::ENOENT
    );
}

#[test]
fn scratch_names_commit_on_rename() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    put(&v, ".a.jsonl.XyZ12", b"{\"id\":1}\n", ME).unwrap();
    assert_eq!(t.latest_version().unwrap(), 0);
    assert_eq!(names(&v), [".a.jsonl.XyZ12"]);
    v.rename(
        inode::INCOMING,
        OsStr::new(".a.jsonl.XyZ12"),
        inode::INCOMING,
        OsStr::new("a.jsonl~"),
        false,
        ME,
    )
    .unwrap();
    assert_eq!(t.latest_version().unwrap(), 0);
    v.rename(
        inode::INCOMING,
        OsStr::new("a.jsonl~"),
        inode::INCOMING,
        OsStr::new("a.jsonl"),
        false,
        ME,
    )
    .unwrap();
    assert_eq!(t.latest_version().unwrap(), 1);
    assert!(names(&v).is_empty());
    // A bad file renamed to a plain name: the rename fails and the note explains.
    put(&v, ".b.tmp", b"[1]\n", ME).unwrap();
    let e = v
        .rename(
            inode::INCOMING,
            OsStr::new(".b.tmp"),
            inode::INCOMING,
            OsStr::new("b.jsonl"),
            false,
            ME,
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert_eq!(names(&v), ["b.jsonl", "b.jsonl.error"]);
}

#[test]
fn empty_file_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    put(&v, "e.jsonl", b"", ME).unwrap();
    put(&v, "blank.jsonl", b"\n\n", ME).unwrap();
    assert_eq!(t.latest_version().unwrap(), 0);
    assert!(names(&v).is_empty());
}

#[test]
fn read_only_outside_incoming() {
    let dir = tempfile::tempdir().unwrap();
    let _t = table(dir.path());
    let v = view(dir.path());
    // Version 0 is no longer the newest (whose folder takes edits, docs/MOUNT.md "Editing
    // latest/data.jsonl").
    put(&v, "a.jsonl", b"{\"id\":1}\n", ME).unwrap();
    let data = lookup_path(&v, "v/0/data.jsonl").unwrap();
    let erofs = libc::EROFS;
    assert_eq!(v.open(data.ino, true, false, ME).unwrap_err().errno(), erofs);
    for parent in [inode::ROOT, inode::V_DIR, lookup_path(&v, "v/0").unwrap().ino] {
        assert_eq!(
            v.create(parent, OsStr::new("x"), true, libc::O_CREAT, ME)
                .unwrap_err()
                .errno(),
            erofs
        );
        assert_eq!(v.unlink(parent, OsStr::new("data.jsonl")).unwrap_err().errno(), erofs);
    }
    let touch = SetAttrs {
        mtime: Some(SystemTime::now()),
        ..SetAttrs::default()
    };
    assert_eq!(v.setattr(data.ino, None, touch).unwrap_err().errno(), erofs);
    assert_eq!(v.access(data.ino, true).unwrap_err().errno(), erofs);
    v.access(data.ino, false).unwrap();
    assert_eq!(
        v.rename(
            inode::INCOMING,
            OsStr::new("a"),
            inode::ROOT,
            OsStr::new("a"),
            false,
            ME
        )
        .unwrap_err()
        .errno(),
        erofs
    );
    assert_eq!(
        v.create(
            inode::INCOMING,
            OsStr::new("x.error"),
            true,
            libc::O_CREAT | libc::O_TRUNC,
            ME
        )
        .unwrap_err()
        .errno(),
        libc::EINVAL
    );
}

#[test]
fn fsync_commits_and_later_writes_start_a_new_segment() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    let (_, o) = v
        .create(
            inode::INCOMING,
            OsStr::new("log.jsonl"),
            true,
            libc::O_CREAT | libc::O_TRUNC,
            ME,
        )
        .unwrap();
    let first = b"{\"id\":1}\n";
    v.write(o.fh, 0, first).unwrap();
    v.fsync(o.fh).unwrap();
    assert_eq!(t.latest_version().unwrap(), 1);
    assert!(names(&v).is_empty());
    assert_eq!(v.write(o.fh, 0, b"x").unwrap_err().errno(), libc::EPERM);
    v.write(o.fh, first.len() as u64, b"{\"id\":2}\n").unwrap();
    assert_eq!(names(&v), ["log.jsonl"]);
    let a = lookup_path(&v, "incoming/log.jsonl").unwrap();
    assert_eq!(a.size, 2 * first.len() as u64);
    v.flush(o.fh, ME).unwrap();
    v.release(o.fh);
    assert_eq!(t.latest_version().unwrap(), 2);
    assert_eq!(rows(&t, 2), b"{\"id\":1,\"name\":null}\n{\"id\":2,\"name\":null}\n");
}

#[test]
fn staged_bytes_survive_a_restart_unless_committed() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    {
        let v = view(dir.path());
        let (_, o) = v
            .create(
                inode::INCOMING,
                OsStr::new("keep.jsonl"),
                true,
                libc::O_CREAT | libc::O_TRUNC,
                ME,
            )
            .unwrap();
        v.write(o.fh, 0, b"{\"id\":7}\n").unwrap();
        // Crash: no flush, no release.
        put(&v, "bad.jsonl", b"{", ME).unwrap_err();
    }
    // A staged file whose commit was published just before the crash.
    let staging = Staging::open(dir.path()).unwrap();
    let (id, mut f) = staging.create("done.jsonl").unwrap();
    std::io::Write::write_all(&mut f, b"{\"id\":8}\n").unwrap();
    let opts = WriteOptions {
        expect_version: None,
        extra_params: vec![(STAGING_ID_PARAM.into(), id.clone())],
        max_line_bytes: None,
        merge_schema: None,
    };
    t.append("incoming/done.jsonl", &b"{\"id\":8}\n"[..], &opts).unwrap();
    drop(staging);
    let v = view(dir.path());
    assert_eq!(names(&v), ["bad.jsonl", "bad.jsonl.error", "keep.jsonl"]);
    let keep = lookup_path(&v, "incoming/keep.jsonl").unwrap();
    assert_eq!(read_all(&v, keep.ino), b"{\"id\":7}\n");
    assert!(!dir.path().join("_staging").join(format!("{id}.data")).exists());
    // The second mount of the same table is refused while this one lives.
    let e = TableView::load(dir.path(), ViewConfig::default()).unwrap_err();
    assert!(e.to_string().contains("mounted once"), "{e}");
}

#[test]
fn many_writers_all_commit() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = Arc::new(view(dir.path()));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let v = v.clone();
            std::thread::spawn(move || {
                let body = format!("{{\"id\":{i}}}\n{{\"id\":{}}}\n", i + 100);
                put(&v, &format!("f{i}.jsonl"), body.as_bytes(), ME).unwrap();
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert_eq!(t.latest_version().unwrap(), 8);
    assert_eq!(t.snapshot(8).unwrap().num_records(), 16);
}

#[test]
fn torn_staged_file_is_never_committed_by_a_bare_close() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    {
        // Staged before a "power loss": never fsynced, its data file older than this boot.
        let staging = Staging::open(dir.path()).unwrap();
        let (id, mut f) = staging.create("torn.jsonl").unwrap();
        std::io::Write::write_all(&mut f, b"{\"id\":1}\n{\"id\":2}\n").unwrap();
        f.set_modified(UNIX_EPOCH + Duration::from_secs(1)).unwrap();
        drop(f);
        assert!(dir.path().join("_staging").join(format!("{id}.data")).exists());
    }
    let v = view(dir.path());
    assert_eq!(names(&v), ["torn.jsonl", "torn.jsonl.error"]);
    let note = lookup_path(&v, "incoming/torn.jsonl.error").unwrap();
    let text = String::from_utf8(read_all(&v, note.ino)).unwrap();
    assert!(text.contains("may be torn"), "{text}");
    // touch: open for writing, close. Not committed, and the close says so.
    let f = lookup_path(&v, "incoming/torn.jsonl").unwrap();
    let o = v.open(f.ino, true, false, ME).unwrap();
    assert_eq!(v.flush(o.fh, ME).unwrap_err().errno(), libc::EIO);
    v.release(o.fh);
    assert_eq!(t.latest_version().unwrap(), 0);
    // Rewritten from offset 0 (O_TRUNC): committed.
    let o = v.open(f.ino, true, true, ME).unwrap();
    v.write(o.fh, 0, b"{\"id\":3}\n").unwrap();
    v.flush(o.fh, ME).unwrap();
    v.release(o.fh);
    assert_eq!(rows(&t, 1), b"{\"id\":3,\"name\":null}\n");
}

#[test]
fn only_writers_commit_and_notes_quote_a_short_excerpt() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    let (_, w) = v
        .create(
            inode::INCOMING,
            OsStr::new("p.jsonl"),
            true,
            libc::O_CREAT | libc::O_TRUNC,
            ME,
        )
        .unwrap();
    v.write(w.fh, 0, b"{\"id\":1}\n").unwrap();
    // A reader's fsync only syncs.
    let f = lookup_path(&v, "incoming/p.jsonl").unwrap();
    let r = v.open(f.ino, false, false, Caller { tgid: Some(200), ..ME }).unwrap();
    v.fsync(r.fh).unwrap();
    v.flush(r.fh, Caller { tgid: Some(200), ..ME }).unwrap();
    v.release(r.fh);
    assert_eq!(t.latest_version().unwrap(), 0);
    assert_eq!(names(&v), ["p.jsonl"]);
    v.flush(w.fh, ME).unwrap();
    v.release(w.fh);
    assert_eq!(t.latest_version().unwrap(), 1);
    // A 100 KB rejected value: the note quotes about 200 bytes of it.
    let big = format!("{{\"id\":{}}}\n", "9".repeat(100_000));
    assert_eq!(
        put(&v, "big.jsonl", big.as_bytes(), ME).unwrap_err().errno(),
        libc::EINVAL
    );
    let note = lookup_path(&v, "incoming/big.jsonl.error").unwrap();
    assert!(note.size < 400, "{}", note.size);
    // A 10 MB key: the note quotes about 200 bytes of it, and its length.
    let key = format!("{{\"id\":1,\"{}\":1}}\n", "k".repeat(10_000_000));
    assert_eq!(put(&v, "key.jsonl", key.as_bytes(), ME).unwrap_err().errno(), libc::EINVAL);
    let note = lookup_path(&v, "incoming/key.jsonl.error").unwrap();
    assert!(note.size < 600, "{}", note.size);
    let text = String::from_utf8(read_all(&v, note.ino)).unwrap();
    assert!(text.contains("...\" (10000000 bytes in all)"), "{text}");
    assert_eq!(note.perm, 0o400);
    assert_eq!(f.perm, 0o600);
}

#[test]
fn streamed_and_random_order_files_commit_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    // Streamed, a last line without a newline: the canonical rows kept while writing are linked.
    let (_, o) = v
        .create(
            inode::INCOMING,
            OsStr::new("s.jsonl"),
            true,
            libc::O_CREAT | libc::O_TRUNC,
            ME,
        )
        .unwrap();
    v.write(o.fh, 0, b"{\"id\":1}\n{\"id\"").unwrap();
    v.write(o.fh, 14, b":2}").unwrap();
    v.flush(o.fh, ME).unwrap();
    v.release(o.fh);
    assert_eq!(rows(&t, 1), b"{\"id\":1,\"name\":null}\n{\"id\":2,\"name\":null}\n");
    // Written back to front: canonicalised from the staged bytes at the close.
    let (_, o) = v
        .create(
            inode::INCOMING,
            OsStr::new("r.jsonl"),
            true,
            libc::O_CREAT | libc::O_TRUNC,
            ME,
        )
        .unwrap();
    v.write(o.fh, 9, b"{\"id\":4}\n").unwrap();
    v.write(o.fh, 0, b"{\"id\":3}\n").unwrap();
    v.flush(o.fh, ME).unwrap();
    v.release(o.fh);
    assert_eq!(
        rows(&t, 2),
        b"{\"id\":1,\"name\":null}\n{\"id\":2,\"name\":null}\n{\"id\":3,\"name\":null}\n{\"id\":4,\"name\":null}\n"
    );
    // A bad last line without a newline fails the close, not a write.
    let (_, o) = v
        .create(
            inode::INCOMING,
            OsStr::new("b.jsonl"),
            true,
            libc::O_CREAT | libc::O_TRUNC,
            ME,
        )
        .unwrap();
    v.write(o.fh, 0, b"{\"id\":5}\n{\"id\":\"x\"}").unwrap();
    assert_eq!(v.flush(o.fh, ME).unwrap_err().errno(), libc::EINVAL);
    v.release(o.fh);
    assert_eq!(t.latest_version().unwrap(), 2);
    // Nothing left in _staging/ but the lock and the refused file's data (its name in its
    // attribute) and note.
    let left = std::fs::read_dir(dir.path().join("_staging")).unwrap().count();
    assert_eq!(left, 3);
}

#[test]
fn open_directory_handles_share_one_listing() {
    let dir = tempfile::tempdir().unwrap();
    table(dir.path());
    let v = view(dir.path());
    for i in 0..50 {
        let (_, o) = v
            .create(
                inode::INCOMING,
                OsStr::new(&format!("f{i}.tmp")),
                true,
                libc::O_CREAT | libc::O_TRUNC,
                ME,
            )
            .unwrap();
        v.release(o.fh);
    }
    let listing = |fh: u64| match v.handle(fh).unwrap().as_ref() {
        Handle::Dir(l) => l.clone(),
        _ => panic!("not a directory handle"),
    };
    let fhs: Vec<u64> = (0..100).map(|_| v.opendir(inode::INCOMING).unwrap()).collect();
    let first = listing(fhs[0]);
    assert_eq!(first.len(), 52);
    assert!(fhs.iter().all(|fh| Arc::ptr_eq(&listing(*fh), &first)));
    // A change makes a new listing for later opens; open handles keep theirs.
    let (_, o) = v
        .create(
            inode::INCOMING,
            OsStr::new("new.tmp"),
            true,
            libc::O_CREAT | libc::O_TRUNC,
            ME,
        )
        .unwrap();
    v.release(o.fh);
    let fh = v.opendir(inode::INCOMING).unwrap();
    assert_eq!(listing(fh).len(), 53);
    assert_eq!(listing(fhs[99]).len(), 52);
    for fh in fhs.into_iter().chain([fh]) {
        v.releasedir(fh);
    }
}

#[test]
fn changes_jsonl_grows_with_every_commit_and_at_names_versions() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    let feed = lookup_path(&v, "changes.jsonl").unwrap();
    assert_eq!((feed.size, feed.ttl, feed.perm), (0, Duration::ZERO, 0o444));
    t.append("x", &b"{\"id\":1}\n"[..], &WriteOptions::default()).unwrap();
    // An incoming/ commit through the view and a CLI commit: both grow the size at once.
    put(&v, "a.jsonl", b"{\"id\":2,\"name\":\"b\"}\n", ME).unwrap();
    let size = v.getattr(inode::CHANGES).unwrap().size;
    let bytes = read_all(&v, inode::CHANGES);
    assert_eq!(bytes.len() as u64, size);
    let text = String::from_utf8(bytes).unwrap();
    let ids: Vec<(i64, u64)> = text
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            (r["id"].as_i64().unwrap(), r["_commit_version"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(ids, [(1, 1), (2, 2)]);
    assert_eq!(
        v.open(inode::CHANGES, true, false, ME).unwrap_err().to_string(),
        FsError::ReadOnly.to_string()
    );
    // at/: one symlink per version named by its commit time; a lookup by any time form.
    let at = v.readdir(inode::AT_DIR, 0, 2, 100).unwrap();
    assert_eq!(at.len(), 3);
    for (n, e) in at.iter().enumerate() {
        let a = v.lookup(inode::AT_DIR, OsStr::new(&e.name)).unwrap();
        assert_eq!(v.readlink(a.ino).unwrap(), format!("../v/{n}").into_bytes());
        assert_eq!(a.ttl, Duration::ZERO);
    }
    let now = v.lookup(inode::AT_DIR, OsStr::new("now")).unwrap();
    assert_eq!(v.readlink(now.ino).unwrap(), b"../v/2");
    for bad in ["2001-01-01", "not a time"] {
        assert!(
            matches!(v.lookup(inode::AT_DIR, OsStr::new(bad)), Err(FsError::NotFound)),
            "{bad}"
        );
    }
}

/// With a watcher (`cache_newest`), the newest version's folder and `data.jsonl` are answered
/// with [`NEWEST_TTL`] and handed out for invalidation once a newer version exists, each once;
/// while an edit is open, `data.jsonl`s have TTL 0.
#[test]
fn the_newest_attributes_are_cached_until_a_newer_version() {
    let dir = tempfile::tempdir().unwrap();
    let t = table(dir.path());
    let v = view(dir.path());
    t.append("x", &b"{\"id\":1}\n"[..], &WriteOptions::default()).unwrap();
    // No watcher: TTL 0, nothing to invalidate.
    assert_eq!(lookup_path(&v, "v/1/data.jsonl").unwrap().ttl, Duration::ZERO);
    assert!(v.stale_newest().is_empty());
    v.cache_newest(true);
    let data = lookup_path(&v, "v/1/data.jsonl").unwrap();
    assert_eq!((data.ttl, data.perm), (NEWEST_TTL, 0o644));
    assert_eq!(lookup_path(&v, "v/1").unwrap().ttl, NEWEST_TTL);
    // Still the newest: nothing is stale.
    assert!(v.stale_newest().is_empty());
    t.append("x", &b"{\"id\":2}\n"[..], &WriteOptions::default()).unwrap();
    let mut stale = v.stale_newest();
    stale.sort_unstable();
    let mut want = vec![data.ino, inode::Node::VersionDir(1).ino()];
    want.sort_unstable();
    assert_eq!(stale, want);
    assert!(v.stale_newest().is_empty(), "handed out twice");
    assert_eq!(lookup_path(&v, "v/1/data.jsonl").unwrap().perm, 0o444);
    // An edit open: every data.jsonl has TTL 0 until it is released.
    let newest = lookup_path(&v, "v/2/data.jsonl").unwrap();
    assert_eq!(newest.ttl, NEWEST_TTL);
    let o = v.open_flags(newest.ino, true, libc::O_WRONLY, ME).unwrap();
    assert_eq!(lookup_path(&v, "v/2/data.jsonl").unwrap().ttl, Duration::ZERO);
    assert_eq!(lookup_path(&v, "v/1/data.jsonl").unwrap().ttl, Duration::ZERO);
    v.release(o.fh);
    assert_eq!(lookup_path(&v, "v/2/data.jsonl").unwrap().ttl, NEWEST_TTL);
}
