//! Opening, creating and deleting files beneath a table folder without ever leaving it.
//!
//! A table folder may be writable by people other than whoever reads, mounts or vacuums it (see
//! docs/SECURITY.md "Who is who"). So every file tinydelta touches under a table is reached through
//! a [`Dir`] handle with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (see openat2(2)): no
//! symlink is followed at any component, no `..` escapes, and the file's type is checked on the
//! open descriptor (`fstat`), never by path before the open. Regular files are opened with
//! `O_NONBLOCK` so a FIFO planted under a commit's name cannot block the opener; the flag is
//! cleared again once the descriptor is known to be a regular file. Kernels without `openat2`
//! (before 5.6) get the same rule by walking the components with `O_NOFOLLOW`.
//!
//! Only the table root itself is opened by path (following symlinks: the user named it).

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};

/// An open directory under (or at) a table root, with its path for messages.
///
/// Cheap to clone (the descriptor is shared). All `rel` arguments are relative paths below this
/// directory (`part-1.jsonl`, `_delta_log/00000000000000000003.json`).
#[derive(Debug, Clone)]
pub struct Dir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
    /// The fsyncs of this directory, shared by the handle's clones ([`Dir::sync`]).
    syncs: Arc<super::group_sync::SyncGroup>,
}

/// What kind of entry a listing found (`d_type`, or `fstatat` without following when the file
/// system does not say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One entry of [`Dir::entries`].
#[derive(Debug, Clone)]
pub struct Entry {
    /// The bare name.
    pub name: OsString,
    /// Its type, not following symlinks.
    pub kind: Kind,
}

fn kind_of(t: FileType) -> Kind {
    match t {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

fn io_err(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// The error for a path that the rules refuse (a symlink, an escape, a wrong file type).
fn refused(path: PathBuf, what: &str) -> Error {
    Error::Corrupt {
        path,
        reason: format!("{what}; tinydelta never follows symlinks or opens special files inside a table"),
    }
}

/// Map an errno from a beneath-open of `path` into the crate error.
fn open_error(op: &'static str, path: PathBuf, e: Errno) -> Error {
    match e {
        Errno::LOOP => refused(path, "is a symbolic link (or passes through one)"),
        Errno::XDEV => refused(path, "leads out of the table folder"),
        other => Error::io(op, path, io_err(other)),
    }
}

impl Dir {
    /// Open the directory at `path` (the table root, or a folder the user named). Symlinks in
    /// `path` itself are followed: the user chose it.
    ///
    /// Errors: [`Error::Io`] naming `path` (`ENOENT`, `ENOTDIR`, ...).
    pub fn open(path: &Path) -> Result<Dir> {
        let fd = rfs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io("open", path, io_err(e)))?;
        Ok(Dir {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
            syncs: Arc::default(),
        })
    }

    /// [`Dir::open`] without following a symlink as the last component of `path` (a folder the
    /// user named as an output, where a link planted by someone else must not redirect the
    /// writes). Errors: [`Error::Corrupt`] when it is a symlink; [`Error::Io`] otherwise.
    pub fn open_nofollow(path: &Path) -> Result<Dir> {
        match rfs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Dir {
                fd: Arc::new(fd),
                path: path.to_path_buf(),
                syncs: Arc::default(),
            }),
            Err(Errno::LOOP) => Err(refused(path.to_path_buf(), "is a symbolic link")),
            Err(Errno::NOTDIR) if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) => {
                Err(refused(path.to_path_buf(), "is a symbolic link"))
            }
            Err(e) => Err(Error::io("open", path, io_err(e))),
        }
    }

    /// This directory's path (for messages and for code that still needs a path).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path()/rel`, for messages.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// The directory descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `openat2` beneath this directory with no symlinks; falls back to a component walk with
    /// `O_NOFOLLOW` where `openat2` is missing (`ENOSYS`) or filtered (`EPERM` under seccomp).
    fn open_beneath(&self, rel: &str, flags: OFlags, mode: Mode) -> std::result::Result<OwnedFd, Errno> {
        let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        match rfs::openat2(
            self.fd(),
            rel,
            flags,
            mode,
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Err(Errno::NOSYS) | Err(Errno::PERM) => self.open_walk(rel, flags, mode),
            other => other,
        }
    }

    fn open_walk(&self, rel: &str, flags: OFlags, mode: Mode) -> std::result::Result<OwnedFd, Errno> {
        let comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
        if comps.is_empty() || comps.contains(&"..") || rel.starts_with('/') {
            return Err(Errno::XDEV);
        }
        let mut cur: Option<OwnedFd> = None;
        for (i, c) in comps.iter().enumerate() {
            let base = cur.as_ref().map(|f| f.as_fd()).unwrap_or(self.fd());
            let last = i + 1 == comps.len();
            let fl = if last {
                flags
            } else {
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
            };
            let fd = rfs::openat(base, *c, fl, mode)?;
            cur = Some(fd);
        }
        cur.ok_or(Errno::INVAL)
    }

    /// Open the sub-directory `rel` (no symlinks anywhere). Errors: [`Error::Io`] (`ENOENT`,
    /// `ENOTDIR` when it is a file); [`Error::Corrupt`] when it is or passes through a symlink.
    pub fn dir(&self, rel: &str) -> Result<Dir> {
        let path = self.join(rel);
        let fd = match self.open_beneath(rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
            Ok(fd) => fd,
            // With O_DIRECTORY a symlink as the last component is ENOTDIR, not ELOOP: say what it is.
            Err(Errno::NOTDIR)
                if self
                    .stat(rel)
                    .ok()
                    .flatten()
                    .is_some_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink) =>
            {
                return Err(refused(path, "is a symbolic link"));
            }
            Err(e) => return Err(open_error("open", path, e)),
        };
        Ok(Dir {
            fd: Arc::new(fd),
            path,
            syncs: Arc::default(),
        })
    }

    /// [`Dir::dir`], or `None` when it does not exist.
    pub fn try_dir(&self, rel: &str) -> Result<Option<Dir>> {
        match self.dir(rel) {
            Ok(d) => Ok(Some(d)),
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Open the sub-directory `name` (one component), creating it with `mode` first if missing.
    pub fn create_dir(&self, name: &str, mode: u32) -> Result<Dir> {
        match rfs::mkdirat(self.fd(), name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io("mkdir", self.join(name), io_err(e))),
        }
        self.dir(name)
    }

    /// Open the regular file `rel` read-only. A symlink, a FIFO, a device or a directory is
    /// refused ([`Error::Corrupt`] naming it) without blocking; other errors are [`Error::Io`].
    pub fn open_file(&self, rel: &str) -> Result<File> {
        self.open_regular(rel, OFlags::RDONLY)
    }

    /// [`Dir::open_file`] for a file read once to its end (commits): also returns its `fstat`,
    /// and leaves `O_NONBLOCK` set (it has no effect on a regular file), so the open costs two
    /// system calls instead of five. Errors: as [`Dir::open_file`].
    pub fn open_file_stat(&self, rel: &str) -> Result<(File, rfs::Stat)> {
        let path = self.join(rel);
        let fd = self
            .open_beneath(rel, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY, Mode::empty())
            .map_err(|e| open_error("open", path.clone(), e))?;
        let st = rfs::fstat(&fd).map_err(|e| Error::io("stat", path.clone(), io_err(e)))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(refused(path, "is not a regular file"));
        }
        Ok((File::from(fd), st))
    }

    /// [`Dir::open_file`], or `None` when it does not exist.
    pub fn try_open_file(&self, rel: &str) -> Result<Option<File>> {
        match self.open_file(rel) {
            Ok(f) => Ok(Some(f)),
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Open the existing regular file `rel` for reading and writing (same checks as
    /// [`Dir::open_file`]).
    pub fn open_rw(&self, rel: &str) -> Result<File> {
        self.open_regular(rel, OFlags::RDWR)
    }

    fn open_regular(&self, rel: &str, access: OFlags) -> Result<File> {
        let path = self.join(rel);
        let fd = self
            .open_beneath(rel, access | OFlags::NONBLOCK | OFlags::NOCTTY, Mode::empty())
            .map_err(|e| open_error("open", path.clone(), e))?;
        let st = rfs::fstat(&fd).map_err(|e| Error::io("stat", path.clone(), io_err(e)))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(refused(path, "is not a regular file"));
        }
        let fl = rfs::fcntl_getfl(&fd).map_err(|e| Error::io("fcntl", path.clone(), io_err(e)))?;
        rfs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK).map_err(|e| Error::io("fcntl", path.clone(), io_err(e)))?;
        Ok(File::from(fd))
    }

    /// Create the new regular file `rel` (`O_CREAT | O_EXCL`, write-only) with `mode`. An existing
    /// name, even a dangling symlink, is [`Error::Io`] with `EEXIST`.
    pub fn create_new(&self, rel: &str, mode: u32) -> Result<File> {
        self.create_excl(rel, mode, OFlags::WRONLY)
    }

    /// [`Dir::create_new`], opened for reading and writing (one `openat2`, where creating and
    /// opening again would take two). Errors: as [`Dir::create_new`].
    pub fn create_new_rw(&self, rel: &str, mode: u32) -> Result<File> {
        self.create_excl(rel, mode, OFlags::RDWR)
    }

    fn create_excl(&self, rel: &str, mode: u32, access: OFlags) -> Result<File> {
        let path = self.join(rel);
        let fd = self
            .open_beneath(rel, access | OFlags::CREATE | OFlags::EXCL, Mode::from_raw_mode(mode))
            .map_err(|e| open_error("create", path, e))?;
        Ok(File::from(fd))
    }

    /// `unlinkat(rel)`: removes the name itself (a symlink is removed, never its target).
    /// Errors: [`Error::Io`] naming the path.
    pub fn unlink(&self, rel: &str) -> Result<()> {
        self.parent_of(rel, |dir, name| {
            rfs::unlinkat(dir, name, AtFlags::empty()).map_err(|e| Error::io("remove", self.join(rel), io_err(e)))
        })
    }

    /// [`Dir::unlink`]; `Ok(false)` when the name did not exist.
    pub fn try_unlink(&self, rel: &str) -> Result<bool> {
        match self.unlink(rel) {
            Ok(()) => Ok(true),
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Remove the empty directory `rel`.
    pub fn rmdir(&self, rel: &str) -> Result<()> {
        self.parent_of(rel, |dir, name| {
            rfs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(|e| Error::io("rmdir", self.join(rel), io_err(e)))
        })
    }

    /// `linkat(self/from, to_dir/to)` without following symlinks; never replaces `to` (`EEXIST`).
    /// The raw errno is kept so callers can tell `EEXIST` (a lost race) from real failures.
    pub fn link(&self, from: &str, to_dir: &Dir, to: &str) -> std::result::Result<(), io::Error> {
        let (fdir, fname) = self.split(from).map_err(io_err)?;
        let (tdir, tname) = to_dir.split(to).map_err(io_err)?;
        let fb = fdir.as_ref().map(|f| f.as_fd()).unwrap_or(self.fd());
        let tb = tdir.as_ref().map(|f| f.as_fd()).unwrap_or(to_dir.fd());
        rfs::linkat(fb, fname, tb, tname, AtFlags::empty()).map_err(io_err)
    }

    /// `renameat(self/from, to_dir/to)`, replacing `to`. Used only for names tinydelta owns.
    pub fn rename(&self, from: &str, to_dir: &Dir, to: &str) -> std::result::Result<(), io::Error> {
        let (fdir, fname) = self.split(from).map_err(io_err)?;
        let (tdir, tname) = to_dir.split(to).map_err(io_err)?;
        let fb = fdir.as_ref().map(|f| f.as_fd()).unwrap_or(self.fd());
        let tb = tdir.as_ref().map(|f| f.as_fd()).unwrap_or(to_dir.fd());
        rfs::renameat(fb, fname, tb, tname).map_err(io_err)
    }

    /// The entries of this directory (without `.` and `..`), types not following symlinks.
    /// Errors: [`Error::Io`] naming the directory; a listing error is never a shorter listing.
    pub fn entries(&self) -> Result<Vec<Entry>> {
        let fd = rfs::openat(
            self.fd(),
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io("list", self.path.clone(), io_err(e)))?;
        let mut dir = rfs::Dir::new(fd).map_err(|e| Error::io("list", self.path.clone(), io_err(e)))?;
        let mut out = Vec::new();
        for ent in &mut dir {
            let ent = ent.map_err(|e| Error::io("list", self.path.clone(), io_err(e)))?;
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsString::from_vec(name.to_vec());
            let kind = match ent.file_type() {
                FileType::Unknown => match rfs::statat(self.fd(), name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => kind_of(FileType::from_raw_mode(st.st_mode)),
                    Err(Errno::NOENT) => continue,
                    Err(e) => return Err(Error::io("stat", self.join(&name), io_err(e))),
                },
                t => kind_of(t),
            };
            out.push(Entry { name, kind });
        }
        Ok(out)
    }

    /// `fstatat(rel)` without following symlinks; `None` when it does not exist.
    pub fn stat(&self, rel: &str) -> Result<Option<rfs::Stat>> {
        self.parent_of(rel, |dir, name| {
            match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => Ok(Some(st)),
                Err(Errno::NOENT) => Ok(None),
                Err(e) => Err(Error::io("stat", self.join(rel), io_err(e))),
            }
        })
    }

    /// `fsync` the directory itself (makes created, linked and removed names durable).
    ///
    /// Concurrent calls through this handle and its clones share fsyncs
    /// ([`super::group_sync::SyncGroup`]): each returns after an fsync that started after it was
    /// called, so every name changed before the call is durable on success, and several commits
    /// publishing at once pay for one fsync of `_delta_log/` rather than one each.
    pub fn sync(&self) -> Result<()> {
        self.syncs
            .sync(|| rfs::fsync(self.fd()).map_err(|e| e.raw_os_error()))
            .map_err(|e| Error::io("fsync", self.path.clone(), io::Error::from_raw_os_error(e)))
    }

    /// Split `rel` into (the directory holding its last component, opened beneath, or `None` for
    /// this one; the last component).
    fn split<'a>(&self, rel: &'a str) -> std::result::Result<(Option<OwnedFd>, &'a str), Errno> {
        match rel.rsplit_once('/') {
            None => Ok((None, rel)),
            Some((parent, name)) => {
                let fd = self.open_beneath(parent, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())?;
                Ok((Some(fd), name))
            }
        }
    }

    fn parent_of<T>(&self, rel: &str, f: impl FnOnce(BorrowedFd<'_>, &str) -> Result<T>) -> Result<T> {
        let (dir, name) = self.split(rel).map_err(|e| open_error("open", self.join(rel), e))?;
        let base = dir.as_ref().map(|d| d.as_fd()).unwrap_or(self.fd());
        f(base, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Dir) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        std::fs::write(t.path().join("sub/a.txt"), b"hello").unwrap();
        std::fs::write(t.path().join("outside.txt"), b"secret").unwrap();
        let root = t.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let d = Dir::open(&root).unwrap();
        (t, d)
    }

    #[test]
    fn reads_regular_files_beneath() {
        let (_t, d) = setup();
        std::fs::create_dir(d.join("x")).unwrap();
        std::fs::write(d.join("x/f"), b"ok").unwrap();
        let mut s = String::new();
        d.open_file("x/f").unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "ok");
        assert!(d.try_open_file("nope").unwrap().is_none());
    }

    #[test]
    fn refuses_symlinks_escapes_and_fifos() {
        let (t, d) = setup();
        symlink(t.path().join("outside.txt"), d.join("link")).unwrap();
        symlink(t.path().join("sub"), d.join("dirlink")).unwrap();
        std::fs::write(d.join("inner"), b"x").unwrap();
        symlink("inner", d.join("innerlink")).unwrap();
        for rel in ["link", "dirlink/a.txt", "../outside.txt", "innerlink"] {
            let e = d.open_file(rel).unwrap_err();
            assert!(matches!(e, Error::Corrupt { .. }), "{rel}: {e}");
        }
        rustix::fs::mknodat(d.fd(), "fifo", FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        let e = d.open_file("fifo").unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(d.dir("dirlink").is_err());
        // create_new never writes through a dangling symlink.
        symlink(t.path().join("new-target"), d.join("dangling")).unwrap();
        assert!(d.create_new("dangling", 0o600).is_err());
        assert!(!t.path().join("new-target").exists());
        // unlink removes the link, not the target.
        d.unlink("link").unwrap();
        assert!(t.path().join("outside.txt").exists());
    }

    #[test]
    fn create_link_list_unlink() {
        let (_t, d) = setup();
        let sub = d.create_dir("s", 0o700).unwrap();
        let mut f = sub.create_new("a", 0o600).unwrap();
        f.write_all(b"1").unwrap();
        assert!(sub.create_new("a", 0o600).is_err());
        d.link("s/a", &sub, "b").unwrap();
        assert_eq!(
            d.link("s/a", &sub, "b").unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        let mut names: Vec<_> = sub.entries().unwrap().into_iter().map(|e| e.name).collect();
        names.sort();
        assert_eq!(names, vec![OsString::from("a"), OsString::from("b")]);
        assert!(d.try_unlink("s/a").unwrap());
        assert!(!d.try_unlink("s/a").unwrap());
        assert!(d.stat("s/b").unwrap().is_some());
        sub.sync().unwrap();
    }
}
