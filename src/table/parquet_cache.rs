//! The converted-rows cache: each Parquet data file's rows as canonical JSONL, converted once
//! (when a version naming the file is first read or, in the mount, stat'ed) and kept as an
//! immutable file (docs/FORMAT.md, "Parquet data files"), so the mount has a size for `stat`
//! and serves the rows like any JSONL data file (passthrough included).
//!
//! Where: `TABLE/_tinydelta/jsonl/`, created and opened beneath the table folder through
//! [`crate::sys::beneath::Dir`] (never through a symlink); when the table folder is not writable, a
//! per-user folder, `$XDG_CACHE_HOME/tinydelta/<table id>/` (else `~/.cache/...`, mode 0700).
//!
//! Names: `<key>-<len>.jsonl`, where `key` is `<path hash>-<size>-<schema hash>` (the data
//! file's decoded log path and `add.size`, and the schema the rows are written under: columns in
//! schema order) and `len` the JSONL's length in bytes. A cache file is checked like a data
//! file when opened (a regular file beneath the folder, exactly `len` bytes, starting with `{`
//! and ending with a newline); one that fails is deleted and converted again. The data file
//! itself is opened and size-checked at every use, so a vacuumed or damaged file is never
//! answered from the cache.

use std::collections::HashMap;
use std::fs::File;
use std::hash::Hasher;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::sys::beneath::Dir;
use crate::error::{Error, Result};
use crate::format::schema::Schema;
use crate::log::snapshot::FileEntry;

/// The cache folder inside the table: `_tinydelta/jsonl`.
pub const CACHE_DIR: &str = "_tinydelta/jsonl";

/// A data file's converted rows: the cache file `rel` beneath `dir`, `len` bytes.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The cache folder (in the table, or the per-user one).
    pub dir: Dir,
    /// The cache file's name in it.
    pub rel: String,
    /// Its length in bytes.
    pub len: u64,
}

impl Converted {
    /// The cache file's path, for messages.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.rel)
    }

    /// Open it, checked as a JSONL data file ([`crate::table::open_data_file`]) and, on the
    /// open descriptor, as an entry this process may trust ([`trusted`]).
    /// Errors: as [`crate::table::open_data_file`]; [`Error::Corrupt`] for an untrusted entry.
    pub fn open(&self) -> Result<File> {
        let f = crate::table::open_data_file(&self.dir, &self.rel, self.len)?;
        let st = rustix::fs::fstat(&f).map_err(|e| Error::io("stat", self.path(), e.into()))?;
        if !trusted(&st) {
            return Err(Error::Corrupt {
                path: self.path(),
                reason: untrusted_reason(&st),
            });
        }
        Ok(f)
    }
}

/// Whether this process may trust a cache folder or entry with status `st` (docs/FORMAT.md,
/// "Parquet data files"): owned by its effective uid and not writable by group or others.
/// Asked of the open descriptor (`fstat`), never of a path.
pub fn trusted(st: &rustix::fs::Stat) -> bool {
    st.st_uid == rustix::process::geteuid().as_raw() && st.st_mode & 0o022 == 0
}

fn untrusted_reason(st: &rustix::fs::Stat) -> String {
    format!(
        "not trusted as a converted-rows cache: owned by uid {} with mode {:o} (this process runs as uid {})",
        st.st_uid,
        st.st_mode & 0o7777,
        rustix::process::geteuid().as_raw()
    )
}

/// How much a conversion may write (docs/FORMAT.md "Parquet data files", "Bounded
/// conversion"): a Parquet file's rows as JSONL may be at most `ratio` times its `add.size` and
/// at most `max_bytes`, whichever is smaller; past that the conversion stops, its temporary is
/// deleted and the data file is [`Error::Corrupt`] (named). Set once per process
/// ([`set_limits`]: `tinydelta --max-convert-ratio/--max-convert-bytes`, and the same flags of
/// `tinydelta-mount`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvertLimits {
    /// The most JSONL bytes per byte of the Parquet file (`add.size`).
    pub ratio: u64,
    /// The most JSONL bytes of one data file, whatever its size.
    pub max_bytes: u64,
}

/// [`ConvertLimits::ratio`] by default: JSONL repeats every column name on every row, so
/// ordinary Parquet files grow 3-50 times; 1000 leaves room for long runs of one value.
pub const DEFAULT_MAX_CONVERT_RATIO: u64 = 1000;

/// [`ConvertLimits::max_bytes`] by default: 16 GiB.
pub const DEFAULT_MAX_CONVERT_BYTES: u64 = 16 << 30;

impl Default for ConvertLimits {
    fn default() -> Self {
        ConvertLimits {
            ratio: DEFAULT_MAX_CONVERT_RATIO,
            max_bytes: DEFAULT_MAX_CONVERT_BYTES,
        }
    }
}

impl ConvertLimits {
    /// The most bytes the rows of a Parquet file of `size` bytes may take.
    pub fn cap(&self, size: u64) -> u64 {
        self.ratio.saturating_mul(size).min(self.max_bytes)
    }
}

static LIMITS: OnceLock<ConvertLimits> = OnceLock::new();

/// Set this process's [`ConvertLimits`] (before the first conversion; later calls are ignored,
/// and a process that never calls it uses [`ConvertLimits::default`]).
pub fn set_limits(limits: ConvertLimits) {
    let _ = LIMITS.set(limits);
}

/// This process's [`ConvertLimits`].
pub fn limits() -> ConvertLimits {
    LIMITS.get().copied().unwrap_or_default()
}

/// How often (in bytes written) a conversion asks whether the process it runs for is still
/// there ([`crate::table::request::requester_gone`]).
const GONE_CHECK_BYTES: u64 = 1 << 20;

/// The writer a conversion writes to: counts the bytes, refuses those past the cap, and stops
/// when the mount's requesting process has gone away. Its errors carry the reason
/// ([`Stop`]) through the conversion as an [`std::io::Error`] of kind `Other`.
struct Capped<W> {
    inner: W,
    written: u64,
    cap: u64,
    next_check: u64,
}

/// Why a [`Capped`] writer stopped.
#[derive(Debug)]
enum Stop {
    /// The rows would pass the cap.
    Cap,
    /// The process the conversion runs for (a reader of the mount) has exited.
    Gone,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stop::Cap => "conversion over its cap",
            Stop::Gone => "the reader went away",
        })
    }
}

impl std::error::Error for Stop {}

impl<W: std::io::Write> std::io::Write for Capped<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.written.saturating_add(buf.len() as u64) > self.cap {
            return Err(std::io::Error::other(Stop::Cap));
        }
        if self.written >= self.next_check {
            self.next_check = self.written.saturating_add(GONE_CHECK_BYTES);
            crate::sys::failpoint::hit("convert-mib").map_err(|e| std::io::Error::other(e.to_string()))?;
            if crate::table::request::requester_gone() {
                return Err(std::io::Error::other(Stop::Gone));
            }
        }
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The [`Stop`] an I/O error of a [`Capped`] writer carries, if any.
fn stop_of(e: &std::io::Error) -> Option<&Stop> {
    e.get_ref().and_then(|i| i.downcast_ref::<Stop>())
}

/// Whether the cache folder `dir` may be trusted ([`trusted`], by `fstat` of its handle); an
/// untrusted one is logged (warn) and ignored by the caller.
fn dir_trusted(dir: &Dir) -> Result<bool> {
    let st = rustix::fs::fstat(dir.fd()).map_err(|e| Error::io("stat", dir.path(), e.into()))?;
    if trusted(&st) {
        return Ok(true);
    }
    ::log::warn!("{}: ignored, {}", dir.path().display(), untrusted_reason(&st));
    Ok(false)
}

fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::with_key(seed);
    h.write(bytes);
    h.finish()
}

/// The hash of a data file's log path in cache names (32 hex digits: two FNV-1a 64 hashes).
pub fn path_hash(path: &str) -> String {
    format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325, path.as_bytes()),
        fnv(0x6c62_272e_07bb_0142, path.as_bytes())
    )
}

/// The name prefix of `file`'s cache entries under `schema`: `<path hash>-<size>-<schema hash>-`.
fn prefix(file: &FileEntry, schema: &Schema) -> String {
    // The rows also depend on the deletion vector (PROTOCOL "Deletion Vectors"): its uniqueId
    // joins the schema's hash.
    let mut h = fnv(0xcbf2_9ce4_8422_2325, schema.to_schema_string().as_bytes());
    // Physical names, field ids (column mapping) and 32-bit floats (type widening) too.
    let sig = schema.file_signature();
    if !sig.is_empty() {
        h = fnv(h, sig.as_bytes());
    }
    if let Some(id) = file.dv_id() {
        h = fnv(h, id.as_bytes());
    }
    format!("{}-{}-{h:016x}-", path_hash(&file.path), file.size)
}

/// The path hash of a cache file name (its first 32 characters), if it is one.
pub fn entry_path_hash(name: &str) -> Option<&str> {
    (name.ends_with(".jsonl") && name.len() > 33 && name.as_bytes()[32] == b'-').then(|| &name[..32])
}

/// Names already found in this process: (folder, prefix) -> (name, len).
type Memo = Mutex<HashMap<(PathBuf, String), (String, u64)>>;

fn memo() -> &'static Memo {
    static M: OnceLock<Memo> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// The per-user cache folder for the table folder `root`: `$XDG_CACHE_HOME/tinydelta/<hash>`
/// or `$HOME/.cache/tinydelta/<hash>` (the [`path_hash`] of the table folder's absolute path),
/// else `$TMPDIR/tinydelta-<euid>/tinydelta/<hash>` ([`private_tmp`]): with neither set, when
/// HOME is not an existing folder, or when the folder under it cannot be made (a HOME this user
/// cannot write). Created with mode 0700 when `create`. `None` without `create` when the folder
/// does not exist or is not trusted ([`trusted`]); with `create`, an untrusted folder is an
/// error.
fn user_dir(root: &Path, create: bool) -> Result<Option<Dir>> {
    let abs = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let hash = path_hash(&abs.to_string_lossy());
    let base = match (std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")) {
        (Some(x), _) if !x.is_empty() => Some(PathBuf::from(x)),
        (_, Some(h)) if !h.is_empty() && Path::new(&h).is_dir() => Some(PathBuf::from(h).join(".cache")),
        _ => None,
    };
    if let Some(base) = base {
        match home_dir(&base.join("tinydelta").join(&hash), create) {
            Ok(Some(d)) => return Ok(Some(d)),
            Ok(None) => {}
            Err(e) if is_permission(&e) => {
                ::log::debug!("{e}: using the temporary folder for converted rows");
            }
            Err(e) => return Err(e),
        }
    }
    // No usable home: a folder of this user's own in the temporary folder.
    let Some(top) = private_tmp(create)? else {
        return Ok(None);
    };
    let d = if create {
        Some(top.create_dir("tinydelta", 0o700)?.create_dir(&hash, 0o700)?)
    } else {
        top.try_dir(&format!("tinydelta/{hash}")).ok().flatten()
    };
    match d {
        Some(d) if dir_trusted(&d)? => Ok(Some(d)),
        Some(d) if create => Err(untrusted_error(&d)),
        _ => Ok(None),
    }
}

/// The cache folder `dir` under the user's home (or `$XDG_CACHE_HOME`), made with mode 0700
/// when `create`; as [`user_dir`] says.
fn home_dir(dir: &Path, create: bool) -> Result<Option<Dir>> {
    use std::os::unix::fs::DirBuilderExt;
    if !create {
        return match Dir::open(dir) {
            Ok(d) if dir_trusted(&d)? => Ok(Some(d)),
            _ => Ok(None),
        };
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io("create", dir, e))?;
    let d = Dir::open(dir)?;
    if !dir_trusted(&d)? {
        return Err(untrusted_error(&d));
    }
    Ok(Some(d))
}

/// [`Error::Corrupt`] naming the untrusted cache folder `d`.
fn untrusted_error(d: &Dir) -> Error {
    match rustix::fs::fstat(d.fd()) {
        Ok(st) => Error::Corrupt {
            path: d.path().to_path_buf(),
            reason: untrusted_reason(&st),
        },
        Err(e) => Error::io("stat", d.path(), e.into()),
    }
}

/// `$TMPDIR/tinydelta-<euid>` (docs/FORMAT.md "Parquet data files"), made with mode 0700 when
/// `create` and missing, and opened without following a symlink: used only when it is a folder
/// owned by this effective uid with no access for group or others (someone else may have made
/// the name first in a shared temporary folder). `None` without `create` when it does not exist.
/// Errors: [`Error::Corrupt`] for a symlink or an untrusted folder.
fn private_tmp(create: bool) -> Result<Option<Dir>> {
    let tmp = Dir::open(&std::env::temp_dir())?;
    let name = format!("tinydelta-{}", rustix::process::geteuid().as_raw());
    let d = if create {
        tmp.create_dir(&name, 0o700)?
    } else {
        match tmp.try_dir(&name)? {
            Some(d) => d,
            None => return Ok(None),
        }
    };
    let st = rustix::fs::fstat(d.fd()).map_err(|e| Error::io("stat", d.path(), e.into()))?;
    if st.st_uid != rustix::process::geteuid().as_raw() || st.st_mode & 0o077 != 0 {
        return Err(Error::Corrupt {
            path: d.path().to_path_buf(),
            reason: format!(
                "not used as a private cache folder: owned by uid {} with mode {:o} (needs uid {}, mode 700)",
                st.st_uid,
                st.st_mode & 0o7777,
                rustix::process::geteuid().as_raw()
            ),
        });
    }
    Ok(Some(d))
}

/// [`table_dir`], with a cache folder that cannot be trusted or used (a symlink, not a folder,
/// another user's) ignored with a warning: `None` then, and the caller uses the per-user
/// folder (docs/FORMAT.md "Parquet data files"). Permission errors are returned (with
/// `create`, the caller falls back to the per-user folder too).
fn table_dir_or_warn(root: &Dir, create: bool) -> Result<Option<Dir>> {
    match table_dir(root, create) {
        Ok(d) => Ok(d),
        Err(e) if is_permission(&e) => Err(e),
        Err(e @ Error::Corrupt { .. }) => {
            ::log::warn!("{}: ignored, using this user's own cache folder: {e}", root.join(CACHE_DIR).display());
            Ok(None)
        }
        Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOTDIR) => {
            ::log::warn!(
                "{}: ignored, not a folder; using this user's own cache folder",
                root.join(CACHE_DIR).display()
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The cache folder in the table (`_tinydelta/jsonl`), created when `create`. `None` when it
/// does not exist or is not trusted ([`trusted`]: another user's folder is ignored, never read
/// or written).
fn table_dir(root: &Dir, create: bool) -> Result<Option<Dir>> {
    let d = if create {
        Some(root.create_dir("_tinydelta", 0o755)?.create_dir("jsonl", 0o755)?)
    } else {
        root.try_dir(CACHE_DIR)?
    };
    match d {
        Some(d) if dir_trusted(&d)? => Ok(Some(d)),
        _ => Ok(None),
    }
}

/// Find an entry with `prefix` in `dir`: (name, len).
fn find(dir: &Dir, prefix: &str) -> Result<Option<(String, u64)>> {
    let key = (dir.path().to_path_buf(), prefix.to_string());
    if let Some(hit) = memo().lock().ok().and_then(|m| m.get(&key).cloned())
        && dir.stat(&hit.0)?.is_some()
    {
        return Ok(Some(hit));
    }
    for e in dir.entries()? {
        let Some(name) = e.name.to_str() else { continue };
        let Some(len) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(".jsonl"))
            .and_then(|l| l.parse::<u64>().ok())
        else {
            continue;
        };
        if let Ok(mut m) = memo().lock() {
            m.insert(key, (name.to_string(), len));
        }
        return Ok(Some((name.to_string(), len)));
    }
    Ok(None)
}

fn is_permission(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::EACCES | libc::EPERM | libc::EROFS)))
}

/// Open the Parquet data file `file` beneath `root` and check it is what the log says: a
/// regular file of exactly `add.size` bytes. Errors: as [`crate::table::open_data_file`].
fn open_source(root: &Dir, file: &FileEntry) -> Result<File> {
    crate::table::open_data_file(root, &file.path, file.size)
}

/// The converted rows of the Parquet data file `file` (beneath the table folder `root`) under
/// `schema`, converting it now unless a cache entry exists (in the table, else in the per-user
/// folder used when the table folder is not writable).
///
/// Errors: [`Error::Corrupt`] naming the data file when it is missing, of another size than
/// its `add.size`, not readable Parquet, holds a value without a JSON form, or holds another
/// number of rows than its `add.stats.numRecords`; [`Error::Io`] when no cache can be written.
pub fn converted(root: &Dir, file: &FileEntry, schema: &Schema) -> Result<Converted> {
    // The data file is checked at every use: a vacuumed or changed file is never served.
    let source = open_source(root, file)?;
    let prefix = prefix(file, schema);
    let mut dirs = Vec::new();
    if let Ok(Some(d)) = table_dir_or_warn(root, false) {
        dirs.push(d);
    }
    if let Ok(Some(d)) = user_dir(root.path(), false) {
        dirs.push(d);
    }
    for dir in &dirs {
        if let Some((rel, len)) = find(dir, &prefix)? {
            let c = Converted {
                dir: dir.clone(),
                rel,
                len,
            };
            match c.open() {
                Ok(_) => return Ok(c),
                Err(e) => {
                    ::log::warn!("converting again: {e}");
                    let _ = dir.try_unlink(&c.rel);
                    if let Ok(mut m) = memo().lock() {
                        m.remove(&(dir.path().to_path_buf(), prefix.clone()));
                    }
                }
            }
        }
    }
    // In the table when it can be written and its cache folder trusted; else (a table this user
    // cannot write, an untrusted or symlinked cache folder) in this user's own folder.
    match table_dir_or_warn(root, true) {
        Ok(Some(d)) => match write_entry(&d, root, &source, file, schema, &prefix) {
            Err(e) if is_permission(&e) => {}
            other => return other,
        },
        Ok(None) => {}
        Err(e) if is_permission(&e) => {}
        Err(e) => return Err(e),
    }
    match user_dir(root.path(), true)? {
        Some(d) => write_entry(&d, root, &source, file, schema, &prefix),
        None => Err(Error::io(
            "create",
            root.join(CACHE_DIR),
            std::io::Error::from_raw_os_error(libc::EACCES),
        )),
    }
}

/// Convert the open Parquet data file `source` (`file`, beneath `root`) to `out` (at
/// `out_path`, for messages) and check its row count against `add.stats.numRecords`.
fn convert(
    root: &Dir,
    source: &File,
    file: &FileEntry,
    schema: &Schema,
    out: &mut impl std::io::Write,
    out_path: &Path,
) -> Result<u64> {
    let data_path = root.join(&file.path);
    let deleted = crate::table::dv::deleted_rows(root, file)?;
    let src = source.try_clone().map_err(|e| Error::io("open", &data_path, e))?;
    let limits = limits();
    let cap = limits.cap(file.size);
    let mut capped = Capped {
        inner: out,
        written: 0,
        cap,
        next_check: GONE_CHECK_BYTES,
    };
    let rows = crate::format::parquet::contained(&data_path, || {
        crate::format::parquet::write_jsonl(src, &data_path, schema, file.partition_values(), deleted.as_ref(), &mut capped)
    })
    .map_err(|e| match e {
            Error::Io { source, .. } if matches!(stop_of(&source), Some(Stop::Cap)) => Error::Corrupt {
                path: data_path.clone(),
                reason: format!(
                    "its rows as JSONL would take more than {cap} bytes, the most a Parquet file of {} bytes may \
                     convert to ({} times its size, at most {} bytes: --max-convert-ratio, --max-convert-bytes)",
                    file.size, limits.ratio, limits.max_bytes
                ),
            },
            Error::Io { source, .. } if matches!(stop_of(&source), Some(Stop::Gone)) => Error::io(
                "convert",
                &data_path,
                std::io::Error::new(std::io::ErrorKind::Interrupted, "the reader went away"),
            ),
            Error::Io { op, source, .. } => Error::io(op, out_path, source),
            // Damage in the file's rows names the version that added it too.
            Error::Corrupt { path, reason } if path == data_path => Error::Corrupt {
                path,
                reason: format!("{reason} (a data file version {} added)", file.added_in),
            },
            e => e,
        })?;
    if file.has_stats && rows != file.num_records {
        return Err(Error::Corrupt {
            path: data_path,
            reason: format!(
                "data file holds {rows} rows, but its add action's stats say {}",
                file.num_records
            ),
        });
    }
    Ok(rows)
}

/// The rows of the Parquet data file `file` (beneath `root`) under `schema`, converted now from
/// the Parquet file itself, never from a cache: for the writers that turn rows into new data
/// (`optimize`, `export`) and for `check --deep`. Without `keep` it only checks (the rows are
/// written to nowhere) and returns `None`; with `keep`, a private temporary file (mode 0600 in
/// the temporary folder, unlinked at once) holding the rows, positioned at its start, with its
/// length in bytes.
/// Errors: as [`converted`].
pub fn convert_fresh(root: &Dir, file: &FileEntry, schema: &Schema, keep: bool) -> Result<Option<(File, u64)>> {
    use std::io::{Seek, Write};
    let source = open_source(root, file)?;
    if !keep {
        convert(
            root,
            &source,
            file,
            schema,
            &mut std::io::sink(),
            Path::new("/dev/null"),
        )?;
        return Ok(None);
    }
    use std::os::unix::fs::OpenOptionsExt;
    // O_CREAT | O_EXCL: never through a name someone else made (a symlink included).
    let tmp_path = std::env::temp_dir().join(format!(".tinydelta-rows-{}.tmp", uuid::Uuid::new_v4().simple()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp_path)
        .map_err(|e| Error::io("create", &tmp_path, e))?;
    let _ = std::fs::remove_file(&tmp_path);
    let mut w = BufWriter::with_capacity(1 << 20, f);
    convert(root, &source, file, schema, &mut w, &tmp_path)?;
    w.flush().map_err(|e| Error::io("write", &tmp_path, e))?;
    let mut f = w
        .into_inner()
        .map_err(|e| Error::io("write", &tmp_path, e.into_error()))?;
    let len = f.stream_position().map_err(|e| Error::io("seek", &tmp_path, e))?;
    f.rewind().map_err(|e| Error::io("seek", &tmp_path, e))?;
    Ok(Some((f, len)))
}

/// Convert `source` into a new cache entry in `dir`: written to a temporary, then linked under
/// its final name (never replacing one: another process converting the same file wins).
fn write_entry(
    dir: &Dir,
    root: &Dir,
    source: &File,
    file: &FileEntry,
    schema: &Schema,
    prefix: &str,
) -> Result<Converted> {
    let tmp = format!(".{prefix}{}.tmp", uuid::Uuid::new_v4().simple());
    let tmp_path = dir.join(&tmp);
    let res = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, dir.create_new(&tmp, 0o644)?);
        convert(root, source, file, schema, &mut w, &tmp_path)?;
        let f = w
            .into_inner()
            .map_err(|e| Error::io("write", &tmp_path, e.into_error()))?;
        let len = f.metadata().map_err(|e| Error::io("stat", &tmp_path, e))?.len();
        let rel = format!("{prefix}{len}.jsonl");
        match dir.link(&tmp, dir, &rel) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("link", dir.join(&rel), e)),
        }
        Ok(Converted {
            dir: dir.clone(),
            rel,
            len,
        })
    })();
    let _ = dir.try_unlink(&tmp);
    res
}

/// Delete every cache entry (in the table's cache folder) whose data file is not in `keep`
/// (path hashes, [`path_hash`]), unless `dry_run`; with temporaries older than `cutoff_s`
/// (seconds since the epoch). Returns what was (or would be) deleted, with sizes.
/// Errors: [`Error::Io`], [`Error::Corrupt`] for a symlinked cache folder.
pub fn sweep(
    root: &Dir,
    keep: &std::collections::HashSet<String>,
    cutoff_s: i64,
    dry_run: bool,
) -> Result<Vec<(PathBuf, u64)>> {
    let Some(dir) = table_dir(root, false)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in dir.entries()? {
        let Some(name) = e.name.to_str() else { continue };
        let Some(st) = dir.stat(name)? else { continue };
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            continue;
        }
        let stale = match entry_path_hash(name) {
            Some(h) => !keep.contains(h),
            None => name.starts_with('.') && name.ends_with(".tmp") && st.st_mtime < cutoff_s,
        };
        if stale && (dry_run || dir.try_unlink(name)?) {
            out.push((dir.join(name), st.st_size as u64));
        }
    }
    Ok(out)
}

