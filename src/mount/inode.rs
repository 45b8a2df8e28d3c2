//! Inode numbers: a fixed, stateless encoding of every node of the mount.
//!
//! Version nodes are computed from the version number, so they need no table and stay the same
//! across remounts. Staged files in `incoming/` get a sequence number for the life of the mount.

/// The mount's root directory.
pub const ROOT: u64 = 1;
/// `v/`.
pub const V_DIR: u64 = 2;
/// `latest`.
pub const LATEST: u64 = 3;
/// `incoming/`.
pub const INCOMING: u64 = 4;
/// `changes.jsonl`.
pub const CHANGES: u64 = 5;
/// `at/`.
pub const AT_DIR: u64 = 6;

const VERSION_BASE: u64 = 0x100;
const STAGED_BASE: u64 = 1 << 62;
/// `at/` symlinks, by the version they point at (above every staged number).
const AT_BASE: u64 = 1 << 63;
/// `v/<n>/data.jsonl.error` notes, by `n`: between the `at/` numbers (versions are below
/// 2^60) and the `parts/` ones.
const EDIT_NOTE_BASE: u64 = AT_BASE + (1 << 60);
/// `v/<n>/parts/` and its files: `PARTS_BASE + (n << PART_BITS)` is the folder, `+ 1 + i` part
/// `i` (above every `at/` number).
const PARTS_BASE: u64 = AT_BASE + (1 << 61);
const PART_BITS: u32 = 22;
/// `latest` as it names version n: `LATEST_AT_BASE + n` (above every `parts/` number, which
/// end at `PARTS_BASE + 2^62`).
const LATEST_AT_BASE: u64 = PARTS_BASE + (1 << 62);
/// The largest version with a `parts/` folder.
pub const MAX_PARTS_VERSION: u64 = (1 << 40) - 1;
/// How many parts a `parts/` folder lists at most (a version with more lists the first ones).
pub const MAX_PARTS: u64 = (1 << PART_BITS) - 1;

/// A file of a version directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VersionFile {
    /// `data.jsonl`: the version's data files concatenated.
    Data,
    /// `commit.json`: the version's commit file as stored.
    Commit,
    /// `schema.json`: the schema at the version.
    Schema,
}

impl VersionFile {
    /// Every version file, in listing order.
    pub const ALL: [VersionFile; 3] = [VersionFile::Data, VersionFile::Commit, VersionFile::Schema];

    /// The file's name in `v/<n>/`.
    pub fn name(self) -> &'static str {
        match self {
            VersionFile::Data => "data.jsonl",
            VersionFile::Commit => "commit.json",
            VersionFile::Schema => "schema.json",
        }
    }

    /// The file named `name`, if any.
    pub fn from_name(name: &str) -> Option<VersionFile> {
        VersionFile::ALL.into_iter().find(|f| f.name() == name)
    }

    fn index(self) -> u64 {
        match self {
            VersionFile::Data => 1,
            VersionFile::Commit => 2,
            VersionFile::Schema => 3,
        }
    }
}

/// What an inode number stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    /// The root directory.
    Root,
    /// `v/`.
    VDir,
    /// The `latest` symlink, with no version of its own (the number `ls` of the root lists).
    Latest,
    /// The `latest` symlink as it names `v/<n>`: what a lookup of `latest` answers while n is
    /// the newest version. Its target never changes, so the kernel may cache it
    /// (`FUSE_CACHE_SYMLINKS`); when a newer version lands, the lookup answers another inode
    /// (docs/MOUNT.md "Reading").
    LatestAt(u64),
    /// `incoming/`.
    Incoming,
    /// `v/<n>/`.
    VersionDir(u64),
    /// A file in `v/<n>/`.
    VersionFile(u64, VersionFile),
    /// A staged file in `incoming/`, by sequence number.
    Staged(u64),
    /// The `NAME.error` note of a staged file, by the staged file's sequence number.
    ErrorNote(u64),
    /// `changes.jsonl`, the change feed.
    Changes,
    /// `at/`.
    AtDir,
    /// A symlink in `at/` to `../v/<n>`, by `n`.
    AtLink(u64),
    /// `v/<n>/parts/`, for `n` up to [`MAX_PARTS_VERSION`].
    PartsDir(u64),
    /// Part `i` (from 0, below [`MAX_PARTS`]) of `v/<n>/parts/`: the `i`-th file of `data.jsonl`.
    Part(u64, u64),
    /// `v/<n>/data.jsonl.error`: why the last edit of version n's `data.jsonl` failed
    /// (docs/MOUNT.md "Editing latest/data.jsonl").
    EditNote(u64),
}

/// The name of part `i` in `parts/`: seven digits and `.jsonl`, so that names sort in the
/// order of `data.jsonl` (`cat parts/*` gives its bytes).
pub fn part_name(i: u64) -> String {
    format!("{i:07}.jsonl")
}

/// The part a name in `parts/` stands for.
pub fn parse_part_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".jsonl")?;
    if digits.len() != 7 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|i| *i < MAX_PARTS)
}

/// The largest version the encoding can name.
pub const MAX_VERSION: u64 = (STAGED_BASE - VERSION_BASE) / 4 - 1;

impl Node {
    /// The node's inode number. Versions above [`MAX_VERSION`] and sequence numbers at or above
    /// 2^61 are not representable; callers never produce them.
    pub fn ino(self) -> u64 {
        match self {
            Node::Root => ROOT,
            Node::VDir => V_DIR,
            Node::Latest => LATEST,
            Node::LatestAt(v) => LATEST_AT_BASE + v,
            Node::Incoming => INCOMING,
            Node::VersionDir(v) => VERSION_BASE + v * 4,
            Node::VersionFile(v, f) => VERSION_BASE + v * 4 + f.index(),
            Node::Staged(s) => STAGED_BASE + s * 2,
            Node::ErrorNote(s) => STAGED_BASE + s * 2 + 1,
            Node::Changes => CHANGES,
            Node::AtDir => AT_DIR,
            Node::AtLink(v) => AT_BASE + v,
            Node::EditNote(v) => EDIT_NOTE_BASE + v,
            Node::PartsDir(v) => PARTS_BASE + (v << PART_BITS),
            Node::Part(v, i) => PARTS_BASE + (v << PART_BITS) + 1 + i,
        }
    }

    /// The node an inode number stands for, if any.
    pub fn from_ino(ino: u64) -> Option<Node> {
        match ino {
            ROOT => Some(Node::Root),
            V_DIR => Some(Node::VDir),
            LATEST => Some(Node::Latest),
            INCOMING => Some(Node::Incoming),
            CHANGES => Some(Node::Changes),
            AT_DIR => Some(Node::AtDir),
            i if i >= LATEST_AT_BASE => Some(Node::LatestAt(i - LATEST_AT_BASE)),
            i if i >= PARTS_BASE => {
                let (v, j) = ((i - PARTS_BASE) >> PART_BITS, (i - PARTS_BASE) & MAX_PARTS);
                Some(if j == 0 {
                    Node::PartsDir(v)
                } else {
                    Node::Part(v, j - 1)
                })
            }
            i if i >= EDIT_NOTE_BASE => Some(Node::EditNote(i - EDIT_NOTE_BASE)),
            i if i >= AT_BASE => Some(Node::AtLink(i - AT_BASE)),
            i if i >= STAGED_BASE => {
                let s = (i - STAGED_BASE) / 2;
                Some(if (i - STAGED_BASE).is_multiple_of(2) {
                    Node::Staged(s)
                } else {
                    Node::ErrorNote(s)
                })
            }
            i if i >= VERSION_BASE => {
                let v = (i - VERSION_BASE) / 4;
                match (i - VERSION_BASE) % 4 {
                    0 => Some(Node::VersionDir(v)),
                    1 => Some(Node::VersionFile(v, VersionFile::Data)),
                    2 => Some(Node::VersionFile(v, VersionFile::Commit)),
                    _ => Some(Node::VersionFile(v, VersionFile::Schema)),
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let nodes = [
            Node::Root,
            Node::VDir,
            Node::Latest,
            Node::LatestAt(0),
            Node::LatestAt(MAX_VERSION),
            Node::Incoming,
            Node::VersionDir(0),
            Node::VersionDir(MAX_VERSION),
            Node::VersionFile(7, VersionFile::Data),
            Node::VersionFile(7, VersionFile::Commit),
            Node::VersionFile(MAX_VERSION, VersionFile::Schema),
            Node::Staged(0),
            Node::Staged(12345),
            Node::ErrorNote(0),
            Node::ErrorNote(99),
            Node::Changes,
            Node::AtDir,
            Node::AtLink(0),
            Node::AtLink(MAX_VERSION),
            Node::EditNote(0),
            Node::EditNote(MAX_VERSION),
            Node::PartsDir(0),
            Node::PartsDir(MAX_PARTS_VERSION),
            Node::Part(0, 0),
            Node::Part(3, 11),
            Node::Part(MAX_PARTS_VERSION, MAX_PARTS - 1),
        ];
        for n in nodes {
            assert_eq!(Node::from_ino(n.ino()), Some(n), "{n:?}");
        }
        assert!(Node::AtLink(MAX_VERSION).ino() < Node::PartsDir(0).ino());
        assert!(Node::Part(MAX_PARTS_VERSION, MAX_PARTS - 1).ino() < Node::LatestAt(0).ino());
        assert!(Node::LatestAt(MAX_VERSION).ino() < u64::MAX);
        assert_eq!(parse_part_name(&part_name(42)), Some(42));
        assert_eq!(part_name(3), "0000003.jsonl");
        for bad in ["000003.jsonl", "0000003.json", "+000003.jsonl", "9999999.jsonl"] {
            assert_eq!(parse_part_name(bad), None, "{bad}");
        }
        assert_eq!(Node::from_ino(0), None);
        assert_eq!(Node::from_ino(7), None);
    }
}
