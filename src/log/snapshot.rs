//! Snapshots: the state of a table at one version, rebuilt by log replay of add/remove actions
//! from version 0 (Delta PROTOCOL "Action Reconciliation").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::format::actions::{CommitInfo, Metadata, Protocol};
use crate::error::{Error, Result};
use crate::log::files::{self, LOG_DIR};

use crate::format::schema::Schema;

/// Highest Delta reader version tinydelta understands: 3 (table features), with only the
/// reader features of [`READER_FEATURES`].
pub const READER_VERSION: i64 = 3;

/// The Delta reader features tinydelta reads (PROTOCOL "Table Features"): `timestampNtz`
/// (the `timestamp_ntz` type, docs/FORMAT.md "Column types"), `variantType` and its preview
/// (tinydelta's `json` columns; Parquet variants decoded to JSON, docs/FORMAT.md "Variant"),
/// `variantShredding-preview` (a file holding shredded values is refused naming the column),
/// `typeWidening` and its preview (values read in the type the schema declares,
/// docs/FORMAT.md "Type widening"),
/// `vacuumProtocolCheck` (a rule for writers' vacuums), `deletionVectors` (the rows they delete
/// are left out wherever rows are read, docs/FORMAT.md "Deletion vectors"),
/// `columnMapping` (modes `none`, `name` and `id`, docs/FORMAT.md "Column mapping") and
/// `v2Checkpoint` (UUID-named checkpoints and sidecars, docs/FORMAT.md "Tables of other Delta
/// writers"). Any
/// other is refused naming it ([`Error::UnsupportedFeature`]).
pub const READER_FEATURES: [&str; 10] = [
    "timestampNtz",
    "vacuumProtocolCheck",
    "columnMapping",
    "variantType",
    "variantType-preview",
    "variantShredding-preview",
    "deletionVectors",
    "v2Checkpoint",
    "typeWidening",
    "typeWidening-preview",
];

/// Refuse a table tinydelta cannot read correctly: a reader version above [`READER_VERSION`]
/// or a reader feature outside [`READER_FEATURES`].
/// Errors: [`Error::UnsupportedProtocol`], [`Error::UnsupportedFeature`].
pub fn check_readable(root: &Path, protocol: &Protocol, metadata: Option<&Metadata>) -> Result<()> {
    if protocol.min_reader_version > READER_VERSION {
        return Err(Error::UnsupportedProtocol {
            table: root.to_path_buf(),
            reader: protocol.min_reader_version,
            writer: protocol.min_writer_version,
        });
    }
    let unsupported = |f: &str| Error::UnsupportedFeature {
        table: root.to_path_buf(),
        feature: f.to_string(),
    };
    if protocol.min_reader_version >= 3 {
        for f in protocol.reader_features.iter().flatten() {
            if !READER_FEATURES.contains(&f.as_str()) {
                return Err(unsupported(f));
            }
        }
    }
    // Column mapping (reader version 2, or the `columnMapping` feature) is read in modes
    // `none`, `name` and `id`: `Schema::of_metadata` names any other mode.
    let _ = metadata;
    Ok(())
}
/// Highest Delta writer version tinydelta writes without table features.
pub const WRITER_VERSION: i64 = 2;

/// The Delta writer features tinydelta honours when it writes (PROTOCOL "Table Features"):
/// `appendOnly` and `invariants` (implied by writer version 2; a table whose `delta.appendOnly`
/// is true gets no commit that removes rows, `crate::table::commit`, whether or not the feature
/// is listed; tinydelta writes no column invariants), `timestampNtz`
/// and `variantType` (the types of its `timestamp_ntz` and `json` columns), and
/// [`JSONL_FEATURE`]. A table at writer version 7 with any other writer feature is not written.
pub const WRITER_FEATURES: [&str; 5] = ["appendOnly", "invariants", "timestampNtz", "variantType", JSONL_FEATURE];

/// The writer feature of tinydelta's JSONL tables (docs/FORMAT.md "A guard against other
/// writers"): other Delta writers do not implement it, so they refuse to commit to such a table
/// (PROTOCOL "Table Features": a writer must not write a table with a writer feature it does not
/// support), where they would otherwise add Parquet files to a table of JSONL files. Readers are
/// not affected (it is no reader feature).
pub const JSONL_FEATURE: &str = "tinydeltaJsonlData";

/// The protocol of a new tinydelta table, or of one whose schema change needs the type
/// features `needed`: [`protocol_with`] at writer version 7 with [`JSONL_FEATURE`] listed
/// (reader version 1 when no reader feature is needed). A table created before the guard keeps
/// its writer version 2 protocol until a type feature upgrades it.
pub fn jsonl_protocol(needed: &[&str], upgrade_from: Option<&Protocol>) -> Protocol {
    if needed.is_empty()
        && let Some(p) = upgrade_from
    {
        return p.clone();
    }
    let mut p = protocol_with(needed, upgrade_from);
    let mut writer = p.writer_features.take().unwrap_or_default();
    if !writer.iter().any(|w| w == JSONL_FEATURE) {
        writer.insert(0, JSONL_FEATURE.to_string());
    }
    p.min_writer_version = 7;
    p.writer_features = Some(writer);
    p
}

/// The protocol of a table whose schema needs the table features `needed` (a subset of
/// [`crate::format::schema::TYPE_FEATURES`], all reader-writer features): reader 1 / writer 2
/// when it needs none, else reader 3 / writer 7 with them listed (PROTOCOL "Table Features").
/// `upgrade_from` is the current protocol when a commit upgrades it: its features are kept,
/// and a writer version 2 table keeps the legacy features it implied (`appendOnly`,
/// `invariants`), as PROTOCOL requires.
pub fn protocol_with(needed: &[&str], upgrade_from: Option<&Protocol>) -> Protocol {
    if needed.is_empty() {
        return upgrade_from.cloned().unwrap_or(Protocol {
            min_reader_version: 1,
            min_writer_version: WRITER_VERSION,
            reader_features: None,
            writer_features: None,
        });
    }
    let mut reader: Vec<String> = Vec::new();
    let mut writer: Vec<String> = Vec::new();
    if let Some(p) = upgrade_from {
        reader.extend(p.reader_features.iter().flatten().cloned());
        writer.extend(p.writer_features.iter().flatten().cloned());
        if p.min_writer_version < 7 {
            writer.extend(["appendOnly".to_string(), "invariants".to_string()]);
        }
    }
    for f in needed {
        if !reader.iter().any(|r| r == f) {
            reader.push(f.to_string());
        }
        if !writer.iter().any(|w| w == f) {
            writer.push(f.to_string());
        }
    }
    Protocol {
        min_reader_version: 3,
        min_writer_version: 7,
        reader_features: Some(reader),
        writer_features: Some(writer),
    }
}

/// The path of a live data file, relative to the table root: a boxed `str` (16 bytes, no
/// spare capacity) where a `String` takes 24, 8 bytes less per live file. Reads as a `str`
/// (`Deref`, `AsRef<Path>`, comparisons with `str` and `String`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EntryPath(Box<str>);

impl EntryPath {
    /// The path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for EntryPath {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for EntryPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<Path> for EntryPath {
    fn as_ref(&self) -> &Path {
        Path::new(&*self.0)
    }
}

impl AsRef<std::ffi::OsStr> for EntryPath {
    fn as_ref(&self) -> &std::ffi::OsStr {
        std::ffi::OsStr::new(&*self.0)
    }
}

impl std::borrow::Borrow<str> for EntryPath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for EntryPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for EntryPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for EntryPath {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for EntryPath {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for EntryPath {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<EntryPath> for String {
    fn eq(&self, other: &EntryPath) -> bool {
        **self == *other.0
    }
}

impl PartialEq<EntryPath> for &str {
    fn eq(&self, other: &EntryPath) -> bool {
        **self == *other.0
    }
}

impl From<String> for EntryPath {
    fn from(s: String) -> EntryPath {
        EntryPath(s.into_boxed_str())
    }
}

impl From<&str> for EntryPath {
    fn from(s: &str) -> EntryPath {
        EntryPath(s.into())
    }
}

impl From<EntryPath> for String {
    fn from(p: EntryPath) -> String {
        p.0.into_string()
    }
}

impl serde::Serialize for EntryPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// One live data file of a snapshot: 72 bytes plus its path (a million live files are a
/// million of these, docs/FORMAT.md "Log replay and checkpoints"): shared as an `Arc`, a
/// 96-byte allocation, and its path a second one (64 bytes for tinydelta's names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Path relative to the table root (checked safe during replay).
    pub path: EntryPath,
    /// Bytes.
    pub size: u64,
    /// Rows, from `add.stats.numRecords` (0 if the stats are missing: see `has_stats`).
    pub num_records: u64,
    /// Whether the add action had stats with `numRecords` (other Delta writers may omit them).
    pub has_stats: bool,
    /// `add.modificationTime`, ms since epoch.
    pub modification_time: i64,
    /// `add.partitionValues`: the partition columns' values of its rows (Delta PROTOCOL
    /// "Partition Value Serialization"); `None` when empty (tinydelta's own files), see
    /// [`FileEntry::partition_values`].
    #[allow(clippy::box_collection)] // 8 bytes per live file instead of a 24-byte empty map
    pub partition_values: Option<Box<BTreeMap<String, Option<String>>>>,
    /// The version whose commit holds the `add` action that made the file live (read it again
    /// with [`crate::table::Table::add_action`]; snapshots keep no stats, to stay small). For a
    /// file taken from a Delta checkpoint, that checkpoint's version: the file was added at or
    /// before it, and its `add` is in the checkpoint (or an older commit).
    pub added_in: u64,
    /// The `add`'s deletion vector (PROTOCOL "Deletion Vectors"): the data file's rows at its
    /// indexes are not rows of the table. `num_records` counts the rows left.
    pub deletion_vector: Option<Arc<crate::format::dv::DeletionVector>>,
}

/// `pv` as [`FileEntry::partition_values`] keeps it: `None` when empty.
#[allow(clippy::box_collection)] // 8 bytes per live file instead of a 24-byte empty map
pub fn boxed_partition_values(
    pv: &BTreeMap<String, Option<String>>,
) -> Option<Box<BTreeMap<String, Option<String>>>> {
    (!pv.is_empty()).then(|| Box::new(pv.clone()))
}

impl FileEntry {
    /// Whether `self` (from a checkpoint) is `replayed` (from the commits) as a checkpoint may
    /// record it: equal, or equal but for an `added_in` at or after the replay's (a file a
    /// Delta checkpoint gave is known to be added at or before the checkpoint's version, see
    /// [`FileEntry::added_in`]).
    pub fn agrees_with_replay(&self, replayed: &FileEntry) -> bool {
        if self == replayed {
            return true;
        }
        if self.added_in < replayed.added_in {
            return false;
        }
        let mut same = self.clone();
        same.added_in = replayed.added_in;
        same == *replayed
    }

    /// The live file an `add` action of `version`'s commit makes.
    pub fn from_add(add: &crate::format::actions::Add, version: u64) -> FileEntry {
        let dv = add.deletion_vector.as_deref().cloned().map(Arc::new);
        let deleted = dv.as_ref().map_or(0, |d| u64::try_from(d.cardinality).unwrap_or(0));
        let rows = add.num_records().map(|n| n.saturating_sub(deleted));
        FileEntry {
            num_records: rows.unwrap_or(0),
            has_stats: rows.is_some(),
            size: add.size,
            modification_time: add.modification_time,
            partition_values: boxed_partition_values(&add.partition_values),
            added_in: version,
            path: add.path.as_str().into(),
            deletion_vector: dv,
        }
    }

    /// `add.partitionValues` (empty for tinydelta's own files).
    pub fn partition_values(&self) -> &BTreeMap<String, Option<String>> {
        static EMPTY: BTreeMap<String, Option<String>> = BTreeMap::new();
        self.partition_values.as_deref().unwrap_or(&EMPTY)
    }

    /// `uniqueId` of its deletion vector (PROTOCOL "Derived Fields"), `None` without one: a
    /// logical file is its path and this.
    pub fn dv_id(&self) -> Option<String> {
        self.deletion_vector.as_ref().map(|d| d.unique_id())
    }

    /// Whether its rows are served converted (through the converted-rows cache, docs/FORMAT.md
    /// "Parquet data files"): a Parquet data file, or any file with a deletion vector.
    pub fn converted(&self) -> bool {
        crate::format::parquet::is_parquet_name(&self.path) || self.deletion_vector.is_some()
    }
}

/// A table frozen at one version: schema, live files in the order they were added, and the
/// commit's provenance. Immutable once built.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Table root.
    pub root: PathBuf,
    /// The version.
    pub version: u64,
    /// `commitInfo.timestamp` of the version, ms since epoch.
    pub timestamp: i64,
    /// The commit's commitInfo.
    pub commit_info: CommitInfo,
    /// Schema in force at the version.
    pub schema: Schema,
    /// The `metaData` action in force.
    pub metadata: Metadata,
    /// The `protocol` action in force.
    pub protocol: Protocol,
    /// Live files; their concatenation is the version's rows.
    pub files: Vec<std::sync::Arc<FileEntry>>,
    /// The newest `txn` version of each application id (Delta PROTOCOL "Transaction
    /// Identifiers"): never rolled back by a restore.
    pub txns: BTreeMap<String, i64>,
    /// How many `VACUUM START` commits the log holds up to this version (docs/FORMAT.md "Vacuum"):
    /// while it is 0, no retention vacuum can have removed a file any version names.
    pub vacuums: u64,
}

impl Snapshot {
    /// Total rows.
    pub fn num_records(&self) -> u64 {
        self.files.iter().fold(0u64, |n, f| n.saturating_add(f.num_records))
    }
    /// Total bytes of the live files.
    pub fn size_bytes(&self) -> u64 {
        self.files.iter().fold(0u64, |n, f| n.saturating_add(f.size))
    }
}

/// The `operationParameters` key that marks a commit of an exported table
/// (`ops::export::PARAM_SOURCE_ID`; this layer cannot name it).
const EXPORT_SOURCE_ID: &str = "tinydeltaExportSourceId";

/// Incremental log replay, one commit at a time (docs/FORMAT.md "Log replay and checkpoints").
///
/// Memory per live file: the shared [`FileEntry`] (also the snapshot's, never copied), its slot
/// in add order and its slot in an index that holds no second copy of the path.
#[derive(Debug, Default)]
pub struct Replay {
    /// Every file added so far, in add order; `None` once removed or added again later.
    files: Vec<Option<Arc<FileEntry>>>,
    /// The slot in `files` of each live path, hashed by path.
    index: hashbrown::HashTable<usize>,
    hasher: std::collections::hash_map::RandomState,
    /// `None` slots in `files`.
    holes: usize,
    rows: u64,
    bytes: u64,
    /// Live files whose `add` has no row count in its stats (their rows are not in `rows`).
    unstated: usize,
    /// The slots the commit being applied (or last applied) added as a data change
    /// (`dataChange` true: not a compaction's rearrangement, Delta PROTOCOL "Add File and Remove
    /// File").
    last_adds: Vec<usize>,
    /// A `remove` of the commit being applied that named no live file, and how many did.
    stray_removes: (Option<String>, u64),
    metadata: Option<Metadata>,
    protocol: Option<Protocol>,
    txns: BTreeMap<String, i64>,
    vacuums: u64,
    /// Every path any `add` named so far.
    pub ever_added: Option<std::collections::HashSet<String>>,
    /// `add` and `remove` actions applied so far.
    file_actions: u64,
}

/// The snapshot of `commit`'s version from `base`, the snapshot of the version before, when the
/// commit only adds files that are not live in `base` and records its time (an append, an
/// `ADD COLUMNS`, a vacuum commit): `base`'s files with the new ones after them, as log replay
/// gives ([`Replay::apply`]). `None` for anything else (a `remove`, a re-added live path, a
/// protocol action, a schema it cannot parse): the caller replays instead.
pub fn advance(base: &Snapshot, commit: &crate::log::files::Commit) -> Option<Snapshot> {
    let info = commit.info.clone().filter(|i| i.timestamp_recorded)?;
    // A RESTORE of tinydelta's is checked against the state it leaves: by replay.
    if info.is_tinydelta() && info.operation == "RESTORE" {
        return None;
    }
    if commit.version != base.version.checked_add(1)? {
        return None;
    }
    let mut snap = Snapshot {
        root: base.root.clone(),
        version: commit.version,
        timestamp: info.timestamp,
        commit_info: info,
        schema: base.schema.clone(),
        metadata: base.metadata.clone(),
        protocol: base.protocol.clone(),
        files: Vec::with_capacity(base.files.len() + 1),
        txns: base.txns.clone(),
        vacuums: base.vacuums,
    };
    if snap.commit_info.operation == crate::format::actions::VACUUM_START {
        snap.vacuums = snap.vacuums.saturating_add(1);
    }
    let mut added: Vec<Arc<FileEntry>> = Vec::new();
    for a in &commit.actions {
        if a.remove.is_some() {
            return None;
        }
        // A protocol change is checked by replay (reader version and features), never here.
        if a.protocol.is_some() {
            return None;
        }
        if let Some(m) = &a.metadata {
            snap.schema = Schema::of_metadata(m).ok()?;
            snap.metadata = m.clone();
        }
        if let Some(t) = &a.txn {
            snap.txns.insert(t.app_id.clone(), t.version);
        }
        if let Some(add) = &a.add {
            // A linear search per add: bounded to commits of a few files (an append adds one).
            let live = |p: &str| base.files.iter().chain(&added).any(|f| f.path == p);
            if added.len() >= 16 || live(&add.path) {
                return None;
            }
            added.push(Arc::new(FileEntry::from_add(add, commit.version)));
        }
    }
    // (Shared entries: a commit costs one pointer copy per live file, not a copy of each.)
    snap.files.extend(base.files.iter().cloned());
    snap.files.extend(added);
    Some(snap)
}

impl Replay {
    fn hash(&self, path: &str) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(path)
    }

    /// The slot of live `path` in `files`.
    fn slot(&self, path: &str) -> Option<usize> {
        let files = &self.files;
        self.index
            .find(self.hash(path), |&s| files[s].as_ref().is_some_and(|f| f.path == path))
            .copied()
    }

    /// Make `entry` live at the end of the add order (replacing a live file of its path).
    fn add_file(&mut self, entry: Arc<FileEntry>) {
        let h = self.hash(&entry.path);
        let slot = self.files.len();
        self.rows = self.rows.saturating_add(entry.num_records);
        self.bytes = self.bytes.saturating_add(entry.size);
        self.unstated += usize::from(!entry.has_stats);
        let files = &mut self.files;
        let hasher = &self.hasher;
        match self
            .index
            .find_mut(h, |&s| files[s].as_ref().is_some_and(|f| f.path == entry.path))
        {
            Some(s) => {
                if let Some(old) = files[*s].take() {
                    self.rows = self.rows.saturating_sub(old.num_records);
                    self.bytes = self.bytes.saturating_sub(old.size);
                    self.unstated = self.unstated.saturating_sub(usize::from(!old.has_stats));
                }
                self.holes += 1;
                *s = slot;
            }
            None => {
                self.index.insert_unique(h, slot, |&s| {
                    use std::hash::BuildHasher;
                    files[s].as_ref().map_or(0, |f| hasher.hash_one(f.path.as_str()))
                });
            }
        }
        files.push(Some(entry));
    }

    /// Remove live `path` whose deletion vector's `uniqueId` is `dv_id` (PROTOCOL "Action
    /// Reconciliation": a logical file is its path and its DV; a DELETE removes the file with its
    /// old DV and adds it with the new one, in either order); `false` when it is not live.
    fn remove_file(&mut self, path: &str, dv_id: Option<&str>) -> bool {
        let h = self.hash(path);
        let files = &mut self.files;
        let Ok(e) = self.index.find_entry(h, |&s| {
            files[s]
                .as_ref()
                .is_some_and(|f| f.path == path && f.dv_id().as_deref() == dv_id)
        }) else {
            return false;
        };
        let (s, _) = e.remove();
        if let Some(old) = files[s].take() {
            self.rows = self.rows.saturating_sub(old.num_records);
            self.bytes = self.bytes.saturating_sub(old.size);
            self.unstated = self.unstated.saturating_sub(usize::from(!old.has_stats));
        }
        self.holes += 1;
        true
    }

    /// Drop the removed slots when they are most of `files` (between commits only: the slots
    /// of `last_adds` stay valid while a commit is applied).
    fn compact(&mut self) {
        if self.holes < 1024 || self.holes < self.files.len() / 2 {
            return;
        }
        self.files.retain(Option::is_some);
        self.files.shrink_to_fit();
        self.holes = 0;
        self.index.clear();
        let hasher = &self.hasher;
        for (slot, f) in self.files.iter().enumerate() {
            use std::hash::BuildHasher;
            if let Some(f) = f {
                let h = hasher.hash_one(f.path.as_str());
                let files = &self.files;
                self.index.insert_unique(h, slot, |&s| {
                    files[s].as_ref().map_or(0, |f| hasher.hash_one(f.path.as_str()))
                });
            }
        }
    }

    /// Start applying the commit of `version` (streamed: [`Replay::action`] per action, then
    /// [`Replay::end`]).
    pub fn begin(&mut self, _version: u64) {
        self.last_adds.clear();
        self.stray_removes = (None, 0);
        self.compact();
    }

    /// Apply one action of the commit of `version` (its path already decoded and checked safe).
    /// Errors: [`Error::UnsupportedProtocol`].
    pub fn action(&mut self, root: &Path, version: u64, a: &crate::format::actions::Action) -> Result<()> {
        if let Some(p) = &a.protocol {
            check_readable(root, p, None)?;
            self.protocol = Some(p.clone());
        }
        if let Some(m) = &a.metadata {
            self.metadata = Some(m.clone());
        }
        if let Some(t) = &a.txn {
            self.txns.insert(t.app_id.clone(), t.version);
        }
        if a.add.is_some() || a.remove.is_some() {
            self.file_actions += 1;
        }
        if let Some(add) = &a.add {
            if let Some(set) = &mut self.ever_added {
                set.insert(add.path.clone());
            }
            if add.data_change {
                self.last_adds.push(self.files.len());
            }
            self.add_file(Arc::new(FileEntry::from_add(add, version)));
        }
        if let Some(r) = &a.remove
            && !self
                .remove_file(&r.path, r.deletion_vector.as_ref().map(|d| d.unique_id()).as_deref())

        {
            let first = &mut self.stray_removes.0;
            if first.is_none() {
                *first = Some(r.path.clone());
            }
            self.stray_removes.1 += 1;
        }
        Ok(())
    }

    /// Finish the commit whose actions [`Replay::action`] applied: the checks a commit
    /// tinydelta wrote gets against the state before it (docs/FORMAT.md "Commit completeness"):
    /// every `remove` names a live file, and a `RESTORE` leaves the files, rows and bytes its
    /// commitInfo records. Errors: [`Error::Corrupt`] naming the version.
    pub fn end(&mut self, root: &Path, commit: &crate::log::files::Commit) -> Result<()> {
        let info = commit.info.as_ref();
        if info.is_some_and(|i| i.operation == crate::format::actions::VACUUM_START) {
            self.vacuums = self.vacuums.saturating_add(1);
        }
        // An exported commit (docs/EXPORT.md "Export") copies its source commit's removes and
        // metrics, which another writer may have written: only tinydelta's own are checked.
        let Some(info) = info.filter(|i| i.is_tinydelta() && !i.operation_parameters.contains_key(EXPORT_SOURCE_ID))
        else {
            return Ok(());
        };
        let damaged = |what: String| {
            let path = root.join(LOG_DIR).join(files::commit_file_name(commit.version));
            crate::log::files::damaged(&path, commit.version, what)
        };
        if let (Some(p), n) = &self.stray_removes {
            return Err(damaged(format!(
                "it removes {n} file(s) that no earlier version left live, first {p:?} (a damaged path)"
            )));
        }
        // A restore that rebased over blind appends (readVersion older than the version
        // before it) keeps their files, which its recorded totals do not count.
        let rebased = info.read_version.and_then(|r| u64::try_from(r).ok()) != commit.version.checked_sub(1);
        if info.operation == "RESTORE" && !rebased {
            let live = (self.files.len() - self.holes) as u64;
            let checks = [
                ("numOfFilesAfterRestore", Some(live)),
                ("tableSizeAfterRestore", Some(self.bytes)),
                ("numOutputRows", (self.unstated == 0).then_some(self.rows)),
            ];
            for (name, got) in checks {
                if let (Some(want), Some(got)) = (info.metric(name), got)
                    && want != got
                {
                    return Err(damaged(format!(
                        "commitInfo records {name} = {want}, but replay leaves {got} (a damaged add)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Apply the actions of one commit (already checked complete by [`crate::log::files::scan_commit`],
    /// paths decoded and safe). Errors: [`Error::UnsupportedProtocol`]; [`Error::Corrupt`] as
    /// [`Replay::end`].
    pub fn apply(&mut self, root: &Path, commit: &crate::log::files::Commit) -> Result<()> {
        self.begin(commit.version);
        for a in &commit.actions {
            self.action(root, commit.version, a)?;
        }
        self.end(root, commit)
    }

    /// The replay state that yields `snap` (files keep their order and are shared).
    pub fn from_snapshot(snap: &Snapshot) -> Self {
        let mut r = Replay {
            metadata: Some(snap.metadata.clone()),
            protocol: Some(snap.protocol.clone()),
            txns: snap.txns.clone(),
            vacuums: snap.vacuums,
            ..Default::default()
        };
        r.files.reserve(snap.files.len());
        r.index.reserve(snap.files.len(), |_| 0);
        for f in &snap.files {
            r.add_file(f.clone());
        }
        r
    }

    /// A replay that also records every path any `add` names (for vacuum).
    pub fn recording_added() -> Self {
        Replay {
            ever_added: Some(Default::default()),
            ..Default::default()
        }
    }

    /// How many `add` and `remove` actions this replay applied (not counting the state it
    /// started from, [`Replay::from_snapshot`]): what decides a checkpoint by the length of the
    /// log segment replayed ([`crate::log::checkpoint::CHECKPOINT_ACTIONS`]).
    pub fn file_actions(&self) -> u64 {
        self.file_actions
    }

    /// Whether `path` is live so far.
    pub fn is_live(&self, path: &str) -> bool {
        self.slot(path).is_some()
    }

    /// (rows, files) live so far. The rows are those the live files' stats count: see
    /// [`Replay::live_without_stats`] for the files they leave out.
    pub fn live_rows(&self) -> (u64, usize) {
        (self.rows, self.files.len() - self.holes)
    }

    /// The live files whose `add` has no row count in its stats (another writer's, Delta
    /// PROTOCOL "Per-file Statistics" makes stats optional); empty when there are none (the
    /// usual case, no walk over the live files).
    pub fn live_without_stats(&self) -> Vec<FileEntry> {
        if self.unstated == 0 {
            return Vec::new();
        }
        self.files
            .iter()
            .flatten()
            .filter(|f| !f.has_stats)
            .map(|f| (**f).clone())
            .collect()
    }

    /// The files the last applied commit added as a data change (`dataChange` true; a
    /// compaction's files, `dataChange` false, are not) that are still live after it.
    pub fn last_added(&self) -> Vec<FileEntry> {
        self.last_adds
            .iter()
            .filter_map(|&s| self.files.get(s)?.as_deref())
            .cloned()
            .collect()
    }

    /// The newest `metaData` replayed so far.
    pub fn metadata(&self) -> Option<&Metadata> {
        self.metadata.as_ref()
    }

    /// Freeze the replay so far as the snapshot of `version` (its files shared with the
    /// replay, in add order: no copy of an entry, no sort).
    pub fn snapshot(&self, root: &Path, version: u64, commit_info: CommitInfo) -> Result<Snapshot> {
        let log_path = || root.join(LOG_DIR).join(files::commit_file_name(version));
        let metadata = self.metadata.clone().ok_or_else(|| Error::Corrupt {
            path: log_path(),
            reason: "no metaData action at or before this version".into(),
        })?;
        let protocol = self.protocol.clone().ok_or_else(|| Error::Corrupt {
            path: log_path(),
            reason: "no protocol action at or before this version".into(),
        })?;
        check_readable(root, &protocol, Some(&metadata))?;
        // Databricks DLT writes a first metaData without schemaString: no rows to read yet.
        if metadata.schema_string.is_empty() {
            return Err(Error::NoSchema {
                table: root.to_path_buf(),
                version,
            });
        }
        let schema = Schema::of_metadata(&metadata).map_err(|reason| Schema::refused(log_path(), reason))?;
        let mut files = Vec::with_capacity(self.files.len() - self.holes);
        files.extend(self.files.iter().flatten().cloned());
        Ok(Snapshot {
            root: root.to_path_buf(),
            version,
            timestamp: commit_info.timestamp,
            commit_info,
            schema,
            metadata,
            protocol,
            files,
            txns: self.txns.clone(),
            vacuums: self.vacuums,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes a live file costs (docs/BENCHMARKS.md "A million live files"): a path in 16
    /// bytes, an entry in 72 (an `Arc` allocation of 88, a 96-byte malloc chunk).
    #[test]
    fn a_live_file_is_small() {
        assert_eq!(std::mem::size_of::<EntryPath>(), 16);
        assert_eq!(std::mem::size_of::<FileEntry>(), 72);
        let p = EntryPath::from("a/b.jsonl");
        let owned = String::from("a/b.jsonl");
        assert_eq!(p, "a/b.jsonl");
        assert_eq!(p, *"a/b.jsonl");
        assert_eq!(p, owned);
        assert_eq!(owned, p);
        assert_eq!((p.as_str(), format!("{p}"), format!("{p:?}")), ("a/b.jsonl", "a/b.jsonl".into(), "\"a/b.jsonl\"".into()));
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"a/b.jsonl\"");
    }
}
