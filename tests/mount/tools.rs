//! Unmodified Unix tools against a real mount, one test per tool (docs/MOUNT.md "Tools and
//! outcomes").
//!
//! Every test builds a flights table (v1 = January slice, v2 = + February slice), mounts it,
//! runs the tool through `sh -c` with `$M` = mount point and `$T` = table, and checks the
//! result against `tinydelta read`.

use std::fs;
use std::process::Output;

use crate::support::mount::*;

struct Env {
    f: Fixture,
    _m: Mount,
}

fn setup() -> Env {
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let m = f.mount();
    Env { f, _m: m }
}

impl Env {
    fn sh(&self, script: &str) -> Output {
        sh(self.f.dir.path(), script, &self.f.mnt, &self.f.table)
    }

    /// Run a script that must succeed; its stdout.
    fn ok(&self, script: &str) -> Vec<u8> {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "`{script}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Run a script under `shell` (`dash`, `bash`).
    fn in_shell(&self, shell: &str, script: &str) -> Output {
        std::process::Command::new(shell)
            .arg("-c")
            .arg(script)
            .current_dir(self.f.dir.path())
            .env("M", &self.f.mnt)
            .env("T", &self.f.table)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{shell}: {e}"))
    }

    fn text(&self, script: &str) -> String {
        String::from_utf8(self.ok(script)).expect("utf-8 output")
    }
}

fn last_lines(b: &[u8], n: usize) -> Vec<u8> {
    let l = lines(b);
    let mut out = l[l.len() - n..].join(&b'\n');
    out.push(b'\n');
    out
}

#[test]
fn cat() {
    let e = setup();
    require_tool("cat");
    assert_eq!(e.ok("cat \"$M/v/1/data.jsonl\""), e.f.read_v(1));
    assert_eq!(e.ok("cat \"$M/latest/data.jsonl\""), e.f.read_v(2));
    assert_eq!(e.ok("cat \"$M/v/0/data.jsonl\""), b"");
}

#[test]
fn head() {
    let e = setup();
    require_tool("head");
    let v2 = e.f.read_v(2);
    let mut first3 = lines(&v2)[..3].join(&b'\n');
    first3.push(b'\n');
    assert_eq!(e.ok("head -n 3 \"$M/latest/data.jsonl\""), first3);
    assert_eq!(e.ok("head -c 1000 \"$M/v/2/data.jsonl\""), v2[..1000]);
}

#[test]
fn tail_n() {
    let e = setup();
    require_tool("tail");
    let v2 = e.f.read_v(2);
    assert_eq!(e.ok("tail -n 5 \"$M/latest/data.jsonl\""), last_lines(&v2, 5));
    assert_eq!(e.ok("tail -c 100 \"$M/v/2/data.jsonl\""), v2[v2.len() - 100..]);
}

#[test]
fn wc_l() {
    let e = setup();
    require_tool("wc");
    assert_eq!(e.text("wc -l < \"$M/v/1/data.jsonl\"").trim(), "1800");
    assert_eq!(e.text("wc -l < \"$M/latest/data.jsonl\"").trim(), "2800");
    let bytes = e.f.read_v(2).len().to_string();
    assert_eq!(e.text("wc -c < \"$M/latest/data.jsonl\"").trim(), bytes);
}

#[test]
fn dd_skip() {
    let e = setup();
    require_tool("dd");
    let v2 = e.f.read_v(2);
    // Crosses the boundary between the two data files of version 2.
    let v1_len = e.f.read_v(1).len();
    let skip = v1_len / 512 - 2;
    let got = e.ok(&format!(
        "dd if=\"$M/v/2/data.jsonl\" bs=512 skip={skip} count=5 status=none"
    ));
    assert_eq!(got, v2[skip * 512..skip * 512 + 2560]);
    let got = e.ok("dd if=\"$M/v/2/data.jsonl\" bs=1M skip=3 iflag=skip_bytes status=none");
    assert_eq!(got, v2[3..]);
}

#[test]
fn cp() {
    let e = setup();
    require_tool("cp");
    // Out of the mount: a byte-identical copy.
    e.ok("cp \"$M/v/1/data.jsonl\" copy.jsonl");
    assert_eq!(fs::read(e.f.dir.path().join("copy.jsonl")).unwrap(), e.f.read_v(1));
    // Into incoming/: one commit.
    let src = fixture("flights-mar.jsonl");
    e.ok(&format!("cp '{}' \"$M/incoming/\"", src.display()));
    assert_eq!(e.f.latest_link(), "v/3");
    assert_eq!(lines(&e.f.read_v(3)).len(), 2800 + 600);
}

#[test]
fn rsync() {
    let e = setup();
    require_tool("rsync");
    let src = fixture("flights-mar.jsonl");
    // rsync writes .flights-mar.jsonl.XXXXXX, closes it (scratch: no commit), renames it.
    e.ok(&format!("rsync '{}' \"$M/incoming/\"", src.display()));
    assert_eq!(e.f.latest(), 3, "exactly one commit");
    assert_eq!(e.f.latest_link(), "v/3");
    assert!(fs::read_dir(e.f.m("incoming")).unwrap().next().is_none());
    // rsync -a of a folder (sets times and modes on incoming/ itself).
    fs::create_dir(e.f.dir.path().join("batch")).unwrap();
    fs::copy(fixture("flights-feb.jsonl"), e.f.dir.path().join("batch/feb.jsonl")).unwrap();
    e.ok("rsync -a batch/ \"$M/incoming/\"");
    assert_eq!(e.f.latest(), 4);
    // rsync out of the mount.
    e.ok("rsync -a \"$M/v/1/\" out/");
    assert_eq!(fs::read(e.f.dir.path().join("out/data.jsonl")).unwrap(), e.f.read_v(1));
}

#[test]
fn tee() {
    let e = setup();
    require_tool("tee");
    let src = fixture("flights-mar.jsonl");
    let out = e.ok(&format!(
        "cat '{}' | tee \"$M/incoming/tee.jsonl\" | wc -l",
        src.display()
    ));
    assert_eq!(String::from_utf8_lossy(&out).trim(), "600");
    assert_eq!(e.f.latest_link(), "v/3");
    assert_eq!(lines(&e.f.read_v(3)).len(), 2800 + 600);
}

#[test]
fn shell_redirections() {
    let e = setup();
    let row = String::from_utf8(lines(&fixture_bytes("flights-mar.jsonl"))[0].to_vec()).unwrap();
    // `>` creates and commits on close.
    e.ok(&format!("printf '%s\\n' '{row}' > \"$M/incoming/one.jsonl\""));
    assert_eq!(e.f.latest_link(), "v/3");
    // `>>` onto a name that left incoming/ creates a new file: one more commit.
    e.ok(&format!("printf '%s\\n' '{row}' >> \"$M/incoming/one.jsonl\""));
    assert_eq!(e.f.latest_link(), "v/4");
    // A bad file from a builtin: shells restore fd 1 with dup2, which drops close errors, so
    // the exit status cannot tell; the bytes stay and NAME.error explains.
    e.sh("echo '{\"year\":' > \"$M/incoming/two.jsonl\"");
    assert_eq!(e.f.latest_link(), "v/4");
    let note = fs::read_to_string(e.f.m("incoming/two.jsonl.error")).unwrap();
    assert!(note.contains("line 1"), "{note}");
    // An external command reports the failed close itself (cat closes stdout before exit).
    let out = e.sh("echo '[1]' | cat > \"$M/incoming/three.jsonl\"");
    assert!(!out.status.success(), "cat must report the failed close");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Invalid argument"));
    // `>` over the bad files fixes them (O_TRUNC, write, close).
    e.ok(&format!("printf '%s\\n' '{row}' > \"$M/incoming/two.jsonl\""));
    assert_eq!(e.f.latest_link(), "v/5");
    e.ok(&format!("printf '%s\\n' '{row}' | cat > \"$M/incoming/three.jsonl\""));
    assert_eq!(e.f.latest_link(), "v/6");
    assert_eq!(lines(&e.f.read_v(6)).len(), 2800 + 4);
    assert!(fs::read_dir(e.f.m("incoming")).unwrap().next().is_none());
    // Writing anywhere else is refused.
    let out = e.sh("echo x > \"$M/v/1/data.jsonl\"");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
    // The newest version's data.jsonl takes rows (docs/MOUNT.md "Editing latest/data.jsonl"),
    // and refuses one that is not a row.
    let out = e.sh("echo x >> \"$M/latest/data.jsonl\"");
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(e.f.latest_link(), "v/6");
}

/// The kernel sends `release` asynchronously: queued before close() returns, it may still be
/// served after the closing process's next request (rsync's rename of its temporary) or after
/// the open of the next command. The `staged-release` failpoint holds every release of an
/// `incoming/` file for 300 ms, as a preempted serving thread would (how `rsync` and `>>` once
/// exited 0 with nothing committed on a loaded machine): each tool that exits 0 has committed
/// its rows exactly once by then.
#[test]
fn commit_points_never_depend_on_a_release_in_flight() {
    let f = Fixture::flights(&["flights-jan.jsonl", "flights-feb.jsonl"]);
    let m = f.mount_with_env(&[], &[("TINYDELTA_FAILPOINT", "staged-release=sleep:300")]);
    let e = Env { f, _m: m };
    require_tool("rsync");
    let mar = fixture("flights-mar.jsonl");
    let row = String::from_utf8(lines(&fixture_bytes("flights-mar.jsonl"))[0].to_vec()).unwrap();
    // The rename right after the close of the temporary is the commit point.
    e.ok(&format!("rsync '{}' \"$M/incoming/\"", mar.display()));
    assert_eq!(e.f.latest(), 3, "rsync exited 0: its rename committed");
    e.ok(&format!(
        "cp '{}' \"$M/incoming/.m.tmp\" && mv \"$M/incoming/.m.tmp\" \"$M/incoming/m.jsonl\"",
        mar.display()
    ));
    assert_eq!(e.f.latest(), 4, "mv of a closed scratch file committed");
    // `>` then `>>` onto the name just committed, by two shells one after the other: the
    // `>>` opens while the first writer's release is on its way, and the kernel appends at the
    // committed size; its rows are one more APPEND.
    e.ok(&format!("printf '%s\\n' '{row}' > \"$M/incoming/one.jsonl\""));
    assert_eq!(e.f.latest_link(), "v/5");
    e.ok(&format!("printf '%s\\n' '{row}' >> \"$M/incoming/one.jsonl\""));
    assert_eq!(e.f.latest_link(), "v/6", "`>>` exited 0: committed");
    let mut version = 6;
    let mut rows = 2800 + 2 * 600 + 2;
    assert_eq!(lines(&e.f.read_v(version)).len(), rows);
    // The same within one script, under dash and under bash: a builtin after a builtin (one
    // process), an external command's `>` then a builtin's `>>` and the other way round (the
    // `>>` opens the name while another process's release is on its way), `>>` onto an empty
    // file just closed (`: >`), and `touch` of the name just committed.
    let mar_path = mar.display().to_string();
    for shell in ["dash", "bash"] {
        require_tool(shell);
        let cases = [
            (
                format!(
                    "printf '%s\\n' '{row}' > \"$M/incoming/{shell}-a.jsonl\"; printf '%s\\n' '{row}' >> \"$M/incoming/{shell}-a.jsonl\""
                ),
                2,
                2,
            ),
            (
                format!(
                    "cat '{mar_path}' > \"$M/incoming/{shell}-b.jsonl\"; printf '%s\\n' '{row}' >> \"$M/incoming/{shell}-b.jsonl\""
                ),
                2,
                601,
            ),
            (
                format!(
                    "printf '%s\\n' '{row}' > \"$M/incoming/{shell}-c.jsonl\"; cat '{mar_path}' >> \"$M/incoming/{shell}-c.jsonl\""
                ),
                2,
                601,
            ),
            (
                format!(
                    ": > \"$M/incoming/{shell}-d.jsonl\"; printf '%s\\n' '{row}' >> \"$M/incoming/{shell}-d.jsonl\""
                ),
                1,
                1,
            ),
            (
                format!(": > \"$M/incoming/{shell}-e.jsonl\"; cat '{mar_path}' >> \"$M/incoming/{shell}-e.jsonl\""),
                1,
                600,
            ),
            // `touch` of the name just committed: nothing more, nothing left listed.
            (
                format!(
                    "printf '%s\\n' '{row}' > \"$M/incoming/{shell}-f.jsonl\"; touch \"$M/incoming/{shell}-f.jsonl\""
                ),
                1,
                1,
            ),
        ];
        for (script, commits, added) in cases {
            let out = e.in_shell(shell, &script);
            assert!(
                out.status.success(),
                "{shell}: `{script}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            version += commits;
            rows += added;
            assert_eq!(
                e.f.latest(),
                version,
                "{shell}: `{script}` exited 0: one commit per close"
            );
            assert_eq!(lines(&e.f.read_v(version)).len(), rows, "{shell}: `{script}`");
        }
    }
    assert!(fs::read_dir(e.f.m("incoming")).unwrap().next().is_none());
}

#[test]
fn jq() {
    let e = setup();
    require_tool("jq");
    let n = e.text("jq -c 'select(.month == 2) | .flight' \"$M/latest/data.jsonl\" | wc -l");
    assert_eq!(n.trim(), "1000");
    let schema = e.text("jq -r '.columns[0].name' \"$M/v/1/schema.json\"");
    assert_eq!(schema.trim(), "year");
    let op = e.text("jq -r 'select(.commitInfo) | .commitInfo.operationParameters.mode' \"$M/v/2/commit.json\"");
    assert_eq!(op.trim(), "Append");
}

#[test]
fn python_open_seek_mmap() {
    let py = python(&[]);
    let e = setup();
    let v2 = e.f.read_v(2);
    let script = r#"
import mmap, os, sys, hashlib
p = sys.argv[1]
with open(p, "rb") as f:
    whole = f.read()
    f.seek(1234)
    a = f.read(100)
    f.seek(-50, os.SEEK_END)
    b = f.read()
with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
    c = m[len(m) // 2 : len(m) // 2 + 77]
    n = m.count(b"\n") if hasattr(m, "count") else bytes(m).count(b"\n")
    size = len(m)
print(hashlib.sha256(whole).hexdigest(), a.hex(), b.hex(), c.hex(), n, size)
"#;
    let out = ok(&py, &["-c", script, e.f.m("latest/data.jsonl").to_str().unwrap()]);
    let out = String::from_utf8(out).unwrap();
    let got: Vec<&str> = out.split_whitespace().collect();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mid = v2.len() / 2;
    assert_eq!(got[1], hex(&v2[1234..1334]));
    assert_eq!(got[2], hex(&v2[v2.len() - 50..]));
    assert_eq!(got[3], hex(&v2[mid..mid + 77]));
    assert_eq!(got[4], "2800");
    assert_eq!(got[5], v2.len().to_string());
    // Python writes into incoming/ with open() and commits on close.
    let script = "import sys\nwith open(sys.argv[1], 'w') as f:\n    f.write(open(sys.argv[2]).read())\n";
    ok(
        &py,
        &[
            "-c",
            script,
            e.f.m("incoming/py.jsonl").to_str().unwrap(),
            fixture("flights-mar.jsonl").to_str().unwrap(),
        ],
    );
    assert_eq!(e.f.latest_link(), "v/3");
}

/// A shared writable mapping of an `incoming/` file after an fsync commit (docs/MOUNT.md "Commit
/// points", the fsync commit point): the committed bytes are in the table, not in the file, so a
/// page of them touched after the commit kills the process with SIGBUS (the mapping form of the
/// EPERM a read or write gets), and a page mapped before the commit keeps its bytes while `msync`
/// of a later write to it fails with EPERM; the table has each row once.
#[test]
fn a_shared_mapping_after_an_fsync_commit() {
    use std::os::unix::process::ExitStatusExt;
    let py = python(&[]);
    let e = setup();
    // Mapped after the commit: touching the committed page is SIGBUS.
    let after = r#"
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
os.write(fd, b'{"year":2013,"month":1,"day":1}\n')
os.fsync(fd)
m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
print(len(m), flush=True)
m[0:1] = b"{"
print("wrote", flush=True)
"#;
    let out = std::process::Command::new(&py)
        .args(["-c", after, e.f.m("incoming/after.jsonl").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "32\n");
    assert_eq!(e.f.latest(), 3, "the fsync committed");
    // Mapped before the commit: the cached page reads as before; msync of a write is EPERM.
    let before = r#"
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
os.write(fd, b'{"year":2013,"month":1,"day":1}\n')
m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[0:1] = b"{"
m.flush()
os.fsync(fd)
print(m[0:32].decode().strip(), flush=True)
m[7:11] = b"2014"
try:
    m.flush()
    print("msync ok")
except OSError as err:
    print("msync", err.errno)
m.close()
os.close(fd)
"#;
    let out = ok(&py, &["-c", before, e.f.m("incoming/before.jsonl").to_str().unwrap()]);
    let out = String::from_utf8(out).unwrap();
    assert_eq!(
        out,
        format!("{{\"year\":2013,\"month\":1,\"day\":1}}\nmsync {}\n", libc::EPERM)
    );
    assert_eq!(e.f.latest(), 4, "the fsync committed, nothing after it");
    let v4 = e.f.read_v(4);
    let new = &lines(&v4)[2800..];
    assert_eq!(new.len(), 2, "each row once");
    assert!(new.iter().all(|l| String::from_utf8_lossy(l).contains("\"year\":2013")));
}

#[test]
fn ls_l() {
    let e = setup();
    require_tool("ls");
    let out = e.text("ls -l \"$M/v/2\"");
    let size = e.f.read_v(2).len().to_string();
    let data = out
        .lines()
        .find(|l| l.ends_with("data.jsonl"))
        .expect("data.jsonl listed");
    // v/2 is the newest version: its data.jsonl takes edits (docs/MOUNT.md "Editing
    // latest/data.jsonl"); older versions are read-only.
    assert!(data.starts_with("-rw-r--r--"), "{data}");
    assert!(data.split_whitespace().any(|w| w == size), "true size {size} in {data}");
    let older = e.text("ls -l \"$M/v/1/data.jsonl\"");
    assert!(older.starts_with("-r--r--r--"), "{older}");
    let root = e.text("ls -l \"$M\"");
    assert!(
        root.lines().any(|l| l.starts_with('l') && l.ends_with("latest -> v/2")),
        "{root}"
    );
    let versions = e.text("ls \"$M/v\"");
    assert_eq!(versions.split_whitespace().collect::<Vec<_>>(), ["0", "1", "2"]);
    // The commit time is the mtime (ls --full-time shows the same second as the log).
    let full = e.text("ls -l --time-style=+%s \"$M/v/1/data.jsonl\"");
    let secs: i64 = full.split_whitespace().nth(5).unwrap().parse().unwrap();
    let commit = fs::read_to_string(e.f.table.join("_delta_log/00000000000000000001.json")).unwrap();
    let first: serde_json::Value = serde_json::from_str(commit.lines().next().unwrap()).unwrap();
    assert_eq!(secs, first["commitInfo"]["timestamp"].as_i64().unwrap() / 1000);
}

#[test]
fn stat() {
    let e = setup();
    require_tool("stat");
    let out = e.text("stat -c '%s %F %a' \"$M/v/1/data.jsonl\" \"$M/v/1\" \"$M/incoming\"");
    let size = e.f.read_v(1).len();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("{size} regular file 444"),
            "0 directory 555".into(),
            "0 directory 700".into()
        ]
    );
    assert_eq!(
        e.text("stat -c '%N' \"$M/latest\"").trim(),
        format!("'{}/latest' -> 'v/2'", e.f.mnt.display())
    );
    // -L follows latest to the newest version's directory.
    let a = e.text("stat -L -c '%i' \"$M/latest\"");
    let b = e.text("stat -c '%i' \"$M/v/2\"");
    assert_eq!(a, b);
}

#[test]
fn find() {
    let e = setup();
    require_tool("find");
    // at/ entries are named by commit times (tests/mount/changes.rs checks them).
    let out = e.text("cd \"$M\" && find . -not -path './at/*' | sort");
    let expected = [
        ".",
        "./at",
        "./changes.jsonl",
        "./incoming",
        "./latest",
        "./v",
        "./v/0",
        "./v/0/commit.json",
        "./v/0/data.jsonl",
        "./v/0/parts",
        "./v/0/schema.json",
        "./v/1",
        "./v/1/commit.json",
        "./v/1/data.jsonl",
        "./v/1/parts",
        "./v/1/parts/0000000.jsonl",
        "./v/1/schema.json",
        "./v/2",
        "./v/2/commit.json",
        "./v/2/data.jsonl",
        "./v/2/parts",
        "./v/2/parts/0000000.jsonl",
        "./v/2/parts/0000001.jsonl",
        "./v/2/schema.json",
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), expected);
    let big = e.text("find \"$M/v\" -name data.jsonl -size +100k | sort");
    assert_eq!(big.lines().count(), 2);
    // -L follows the latest symlink: v/2's three files and its two parts.
    let via_latest = e.text("find -L \"$M/latest\" -type f | wc -l");
    assert_eq!(via_latest.trim(), "5");
}

#[test]
fn diff() {
    let e = setup();
    require_tool("diff");
    // Versions differ by exactly the appended rows.
    let out = e.sh("diff \"$M/v/1/data.jsonl\" \"$M/v/2/data.jsonl\"");
    assert_eq!(out.status.code(), Some(1));
    let added = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("> "))
        .count();
    assert_eq!(added, 1000);
    fs::write(e.f.dir.path().join("v1.jsonl"), e.f.read_v(1)).unwrap();
    e.ok("diff v1.jsonl \"$M/v/1/data.jsonl\"");
    e.ok("diff -r \"$M/v/2\" \"$M/latest/\"");
}

#[test]
fn tar() {
    let e = setup();
    require_tool("tar");
    e.ok("tar -C \"$M\" -cf v.tar v/1 v/2");
    e.ok("mkdir x && tar -C x -xf v.tar");
    let dir = e.f.dir.path().join("x");
    assert_eq!(fs::read(dir.join("v/1/data.jsonl")).unwrap(), e.f.read_v(1));
    assert_eq!(fs::read(dir.join("v/2/data.jsonl")).unwrap(), e.f.read_v(2));
    assert_eq!(
        fs::read(dir.join("v/2/commit.json")).unwrap(),
        fs::read(e.f.table.join("_delta_log/00000000000000000002.json")).unwrap()
    );
    // tar -h follows latest; its listing shows the commit-time mtimes and no "file changed" warnings.
    let out = e.sh("tar -C \"$M\" -chf latest.tar latest");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn vim() {
    let e = setup();
    require_tool("vim");
    // A new file: vim probes with a scratch "4913", writes, fsyncs (the commit), closes.
    e.ok(&format!(
        "vim -N -u NONE -i NONE -es -c 'r {}' -c 'g/^$/d' -c 'wq' \"$M/incoming/vim.jsonl\"",
        fixture("flights-mar.jsonl").display()
    ));
    assert_eq!(e.f.latest_link(), "v/3");
    assert_eq!(lines(&e.f.read_v(3)).len(), 2800 + 600);
    // Fixing a refused file in place with vim commits it.
    let out = e.sh("printf '%s\\n' '{\"year\":2013,\"month\":\"x\",\"day\":1}' | cat > \"$M/incoming/fix.jsonl\"");
    assert!(!out.status.success());
    e.ok("vim -N -u NONE -i NONE -es -c 's/\"x\"/5/' -c 'wq' \"$M/incoming/fix.jsonl\"");
    assert_eq!(e.f.latest_link(), "v/4");
    let names: Vec<_> = fs::read_dir(e.f.m("incoming"))
        .unwrap()
        .map(|d| d.unwrap().file_name())
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

// ---- Write idioms into incoming/: each ends with exit status 0, the table holding the final
// content exactly once, and nothing left listed in incoming/ (docs/MOUNT.md "`incoming/`").

const MAR_ROWS: usize = 600;

struct Idiom {
    e: Env,
    /// Rows before the tool ran.
    before: usize,
}

fn idiom() -> Idiom {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount();
    let e = Env { f, _m: m };
    fs::copy(fixture("flights-mar.jsonl"), e.f.dir.path().join("mar.jsonl")).unwrap();
    // The bad value is on the last line: a bad line fails the write that completes it, and a
    // writer stops there, so only a file refused in its last write is whole in incoming/.
    let mut bad = fixture_bytes("flights-mar.jsonl");
    let at = bad.len() - 400
        + bad[bad.len() - 400..]
            .windows(10)
            .position(|w| w == b"\"month\":3,")
            .unwrap();
    bad.splice(at..at + 10, b"\"month\":\"3\",".iter().copied());
    fs::write(e.f.dir.path().join("bad.jsonl"), bad).unwrap();
    let before = lines(&e.f.read_v(e.f.latest())).len();
    Idiom { e, before }
}

impl Idiom {
    fn rows(&self) -> Vec<u8> {
        self.e.f.read_v(self.e.f.latest())
    }

    /// Run the Python `script` with the mount point as its argument; it must succeed.
    fn python_ok(&self, script: &str) {
        let py = python(&[]);
        self.e
            .ok(&format!("{py} -c '{}' \"$M\"", script.replace('\'', "'\\''")));
    }

    /// The rows the tool added to the table, in order, with nothing left listed in `incoming/`.
    fn added_rows(&self) -> Vec<Vec<u8>> {
        assert!(self.listing().is_empty(), "{:?}", self.listing());
        lines(&self.rows())[self.before..].iter().map(|r| r.to_vec()).collect()
    }

    /// Write each of `rows` as a one-line file `r1`, `r2`, ... in the test's folder (the
    /// scripts' current folder).
    fn row_files(&self, rows: &[&[u8]]) {
        for (i, row) in rows.iter().enumerate() {
            fs::write(
                self.e.f.dir.path().join(format!("r{}", i + 1)),
                [row, &b"\n"[..]].concat(),
            )
            .unwrap();
        }
    }

    /// Names listed in incoming/, dot files included, sorted.
    fn listing(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.e.f.m("incoming"))
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// March's rows were added exactly once, and incoming/ lists nothing (or `left`).
    fn added_mar_once(&self, left: &[&str]) {
        let rows = self.rows();
        let first = lines(&fixture_bytes("flights-mar.jsonl"))[0].to_vec();
        assert_eq!(lines(&rows).len(), self.before + MAR_ROWS, "rows added");
        assert_eq!(lines(&rows).iter().filter(|l| **l == first.as_slice()).count(), 1);
        assert_eq!(self.listing(), left);
    }

    fn status(&self, script: &str) -> (i32, String) {
        let out = self.e.sh(script);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

#[test]
fn sed_i_fixes_a_refused_file_once() {
    let t = idiom();
    require_tool("sed");
    let (code, _) = t.status("cp bad.jsonl \"$M/incoming/f.jsonl\"");
    assert_ne!(code, 0, "a bad file fails cp");
    assert_eq!(t.listing(), ["f.jsonl", "f.jsonl.error"]);
    t.e.ok("sed -i 's/\"month\":\"3\"/\"month\":3/' \"$M/incoming/f.jsonl\"");
    t.added_mar_once(&[]);
    // Running it again (the committed name is still reachable) adds nothing.
    t.e.ok("sed -i 's/\"month\":\"3\"/\"month\":3/' \"$M/incoming/f.jsonl\"");
    t.added_mar_once(&[]);
}

#[test]
fn part_file_then_mv() {
    let t = idiom();
    // A download's `.part` name is scratch: closing it commits nothing (a downloader may resume
    // it later); the rename onto the final name commits it once.
    t.e.ok("cp mar.jsonl \"$M/incoming/y.jsonl.part\"");
    assert_eq!(lines(&t.rows()).len(), t.before, "a closed .part file is not committed");
    assert_eq!(t.listing(), ["y.jsonl.part"]);
    t.e.ok("mv \"$M/incoming/y.jsonl.part\" \"$M/incoming/y.jsonl\"");
    t.added_mar_once(&[]);
}

/// `commitInfo.operationParameters.source` of the table's newest commit.
fn newest_source(f: &Fixture) -> String {
    let v = f.latest();
    let text = fs::read_to_string(f.table.join(format!("_delta_log/{v:020}.json"))).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|a| {
            a["commitInfo"]["operationParameters"]["source"]
                .as_str()
                .map(String::from)
        })
        .unwrap_or_default()
}

#[test]
fn python_mkstemp_fsync_replace_commits_under_the_final_name() {
    // tempfile.mkstemp's "tmpXXXXXXXX" is a scratch name: its fsync only syncs, and
    // os.replace onto the final name commits once, under that name (docs/MOUNT.md "Scratch
    // names, in-place edits and blocked files").
    let t = idiom();
    t.python_ok(
        "import os, sys, tempfile\n\
         inc = os.path.join(sys.argv[1], \"incoming\")\n\
         fd, tmp = tempfile.mkstemp(dir=inc)\n\
         os.write(fd, open(\"mar.jsonl\", \"rb\").read())\n\
         os.fsync(fd)\n\
         os.close(fd)\n\
         os.replace(tmp, os.path.join(inc, \"py1.jsonl\"))\n",
    );
    t.added_mar_once(&[]);
    assert_eq!(newest_source(&t.e.f), "py1.jsonl");
}

#[test]
fn mktemp_then_mv_commits_under_the_final_name() {
    let t = idiom();
    require_tool("mktemp");
    t.e.ok("t=$(mktemp -p \"$M/incoming\") && cat mar.jsonl > \"$t\" && mv \"$t\" \"$M/incoming/mk.jsonl\"");
    t.added_mar_once(&[]);
    assert_eq!(newest_source(&t.e.f), "mk.jsonl");
}

#[test]
fn install_m_644() {
    let t = idiom();
    require_tool("install");
    t.e.ok("install -m 644 mar.jsonl \"$M/incoming/\"");
    t.added_mar_once(&[]);
}

#[test]
fn shutil_copy2() {
    let t = idiom();
    let py = python(&["shutil"]);
    t.e.ok(&format!(
        "{py} -c 'import shutil; shutil.copy2(\"mar.jsonl\", \"'\"$M\"'/incoming/\")'"
    ));
    t.added_mar_once(&[]);
}

#[test]
fn cp_p_and_cp_a() {
    let t = idiom();
    t.e.ok("cp -p mar.jsonl \"$M/incoming/p.jsonl\"");
    t.added_mar_once(&[]);
    let t2 = idiom();
    t2.e.ok("cp -a mar.jsonl \"$M/incoming/a.jsonl\"");
    t2.added_mar_once(&[]);
}

#[test]
fn rsync_inplace() {
    let t = idiom();
    require_tool("rsync");
    t.e.ok("rsync --inplace -t mar.jsonl \"$M/incoming/\"");
    t.added_mar_once(&[]);
}

#[test]
fn mv_from_another_file_system() {
    let t = idiom();
    t.e.ok("cp mar.jsonl moved.jsonl && mv moved.jsonl \"$M/incoming/\"");
    t.added_mar_once(&[]);
    assert!(!t.e.f.dir.path().join("moved.jsonl").exists(), "mv removed its source");
}

#[test]
fn tar_x_into_incoming() {
    let t = idiom();
    require_tool("tar");
    t.e.ok("mkdir src && cp -p mar.jsonl src/ && tar -C src -cf m.tar mar.jsonl && tar -C \"$M/incoming\" -xf m.tar");
    t.added_mar_once(&[]);
}

#[test]
fn vim_re_save_appends_only_the_new_rows_or_replaces() {
    let t = idiom();
    require_tool("vim");
    let mar = fixture_bytes("flights-mar.jsonl");
    let l = lines(&mar);
    let (first, second) = (
        String::from_utf8(l[0].to_vec()).unwrap(),
        String::from_utf8(l[1].to_vec()).unwrap(),
    );
    fs::write(t.e.f.dir.path().join("r1"), format!("{first}\n")).unwrap();
    fs::write(t.e.f.dir.path().join("r2"), format!("{second}\n")).unwrap();
    // :w, add a row, :w: the table gains the two rows once each.
    let script = "call setline(1, readfile('r1'))\nw\ncall append('$', readfile('r2'))\nw\nq\n";
    fs::write(t.e.f.dir.path().join("save.vim"), script).unwrap();
    t.e.ok("vim -N -u NONE -i NONE -n -es -S save.vim \"$M/incoming/v.jsonl\"");
    let rows = t.rows();
    assert_eq!(lines(&rows).len(), t.before + 2);
    assert_eq!(lines(&rows)[t.before..], [l[0], l[1]]);
    assert!(t.listing().is_empty(), "{:?}", t.listing());
    // :w, change the first row, :w: the second save replaces the first (one UPDATE commit).
    let script = "call setline(1, readfile('r1'))\nw\n1s/\"day\":1,/\"day\":2,/\nw\nq\n";
    fs::write(t.e.f.dir.path().join("change.vim"), script).unwrap();
    t.e.ok("vim -N -u NONE -i NONE -n -es -S change.vim \"$M/incoming/w.jsonl\"");
    let rows = t.rows();
    assert_eq!(lines(&rows).len(), t.before + 3);
    let changed = first.replacen("\"day\":1,", "\"day\":2,", 1);
    assert_eq!(lines(&rows)[t.before + 2], changed.as_bytes());
    let history = String::from_utf8(t.e.f.td(&["history", &t.e.f.t()])).unwrap();
    let last = history.lines().last().unwrap();
    assert!(
        last.contains("UPDATE") && last.contains("incoming/w.jsonl"),
        "{history}"
    );
}

#[test]
fn sed_i_on_a_scratch_name_commits_nothing() {
    let t = idiom();
    let v = t.e.f.latest();
    t.e.ok("cp mar.jsonl \"$M/incoming/.draft.jsonl\" && sed -i '/\"dep_time\":4,/d' \"$M/incoming/.draft.jsonl\"");
    assert_eq!(t.e.f.latest(), v);
    assert_eq!(t.listing(), [".draft.jsonl"]);
}

#[test]
fn tee_to_two_names_commits_both() {
    let t = idiom();
    t.e.ok("tee \"$M/incoming/a.jsonl\" \"$M/incoming/b.jsonl\" < mar.jsonl > /dev/null");
    assert_eq!(lines(&t.rows()).len(), t.before + 2 * MAR_ROWS);
    assert!(t.listing().is_empty());
}

#[test]
fn dash_redirection_of_a_bad_file_fails() {
    let t = idiom();
    require_tool("dash");
    let v = t.e.f.latest();
    let (code, err) = t.status("dash -c 'cat bad.jsonl > \"$M/incoming/x.jsonl\"'");
    assert_ne!(code, 0, "the write that completes the bad line fails: {err}");
    assert!(err.contains("Invalid argument"), "{err}");
    assert_eq!(t.e.f.latest(), v);
    assert_eq!(t.listing(), ["x.jsonl", "x.jsonl.error"]);
    let note = fs::read_to_string(t.e.f.m("incoming/x.jsonl.error")).unwrap();
    assert!(note.contains("line 600") && note.contains("month"), "{note}");
    // A good file through the same redirection commits.
    t.e.ok("dash -c 'cat mar.jsonl > \"$M/incoming/x.jsonl\"'");
    t.added_mar_once(&[]);
}

#[test]
fn fsync_then_a_second_writer_each_commit_their_rows() {
    let t = idiom();
    let mar = fixture_bytes("flights-mar.jsonl");
    let l = lines(&mar);
    t.row_files(&l[..3]);
    let script = r#"
import os, subprocess, sys
p = sys.argv[1] + "/incoming/fs.jsonl"
fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, open("r1", "rb").read())
os.fsync(fd)
subprocess.run(["sh", "-c", 'cat r2 > "$0"', p], check=True)
os.write(fd, open("r3", "rb").read())
os.close(fd)
"#;
    t.python_ok(script);
    assert_eq!(t.added_rows(), [l[0], l[1], l[2]]);
}

/// The opener of a new file closes it while it is still empty, but a child it forked keeps the
/// descriptor (so the kernel's `release` of that open comes only when the child exits); another
/// process then writes the file through an open that shares it (`1<>`, no truncate) and closes
/// it. The opener's close was its last: that handle writes no more, so the writer's close
/// commits at once. (A shortcut that answered a close of an empty file without asking `/proc`
/// whether it was the opener's last made this close wait 10 s, answer 0 and commit nothing.)
#[test]
fn a_writer_after_the_openers_empty_close_commits_while_a_child_keeps_the_descriptor() {
    let t = idiom();
    let mar = fixture_bytes("flights-mar.jsonl");
    let row = lines(&mar)[0].to_vec();
    t.row_files(&[&row]);
    let out = t.e.in_shell(
        "bash",
        r#"exec 3> "$M/incoming/shared.jsonl"
sleep 30 > /dev/null 2>&1 &
child=$!
exec 3>&-
sleep 0.3
cat r1 1<> "$M/incoming/shared.jsonl"
status=$?
kill $child
exit $status"#,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        t.added_rows(),
        [row],
        "the writer's close returned 0: its row is committed, once"
    );
}

/// `rm` of a committed name forgets it: the same process saving that name again within the 5 s
/// it would have stayed reachable makes a new file (an APPEND that keeps the first rows), not a
/// re-save that replaces them.
#[test]
fn rm_of_a_committed_name_then_a_new_save_keeps_the_first_rows() {
    let t = idiom();
    let mar = fixture_bytes("flights-mar.jsonl");
    let l = lines(&mar);
    t.row_files(&l[..2]);
    let script = r#"
import os, sys
p = sys.argv[1] + "/incoming/again.jsonl"
for rows in ("r1", "r2"):
    with open(p, "wb") as f:
        f.write(open(rows, "rb").read())
    if rows == "r1":
        os.remove(p)
"#;
    t.python_ok(script);
    assert_eq!(t.added_rows(), [l[0], l[1]], "both saves' rows are in the table");
}

#[test]
fn racing_cps_on_one_name_each_commit() {
    let t = idiom();
    let mar = fixture_bytes("flights-mar.jsonl");
    fs::write(t.e.f.dir.path().join("one.jsonl"), [lines(&mar)[0], b"\n"].concat()).unwrap();
    // The first cp makes the name; from then on it stays reachable (committed names linger),
    // so every racer opens it with O_TRUNC and gets its own batch. (Two cps that both find the
    // name absent race on O_EXCL, and one gets EEXIST: that is the kernel's answer, as on ext4.)
    t.e.ok("cp one.jsonl \"$M/incoming/y.jsonl\"");
    let (code, err) = t.status(
        "pids=; for j in 1 2 3; do ( for i in $(seq 1 30); do cp one.jsonl \"$M/incoming/y.jsonl\" || exit 1; done ) & \
         pids=\"$pids $!\"; done; fail=0; for p in $pids; do wait $p || fail=1; done; exit $fail",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines(&t.rows()).len(), t.before + 91);
    assert!(t.listing().is_empty(), "{:?}", t.listing());
}

#[test]
fn mv_within_incoming_with_rename_noreplace() {
    let t = idiom();
    t.e.ok("cp mar.jsonl \"$M/incoming/.a.tmp\" && mv \"$M/incoming/.a.tmp\" \"$M/incoming/b.jsonl\"");
    t.added_mar_once(&[]);
    // RENAME_NOREPLACE onto an existing name: EEXIST, as on ext4.
    t.e.ok("cp mar.jsonl \"$M/incoming/.c.tmp\" && cp mar.jsonl \"$M/incoming/.d.tmp\"");
    let py = python(&["ctypes"]);
    let (code, err) = t.status(&format!(
        "{py} -c 'import ctypes, os, sys; l = ctypes.CDLL(None, use_errno=True); \
         r = l.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), 1); \
         sys.exit(ctypes.get_errno() if r else 0)' \"$M/incoming/.c.tmp\" \"$M/incoming/.d.tmp\""
    ));
    assert_eq!(code, libc_eexist(), "{err}");
}

fn libc_eexist() -> i32 {
    17
}

#[test]
fn chmod_by_the_owner_shows_and_incoming_is_private() {
    let t = idiom();
    t.e.ok("cp mar.jsonl \"$M/incoming/.s.jsonl\"");
    let out = t.e.text("stat -c '%a' \"$M/incoming\" \"$M/incoming/.s.jsonl\"");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["700", "600"]);
    t.e.ok("chmod 640 \"$M/incoming/.s.jsonl\"");
    assert_eq!(t.e.text("stat -c '%a' \"$M/incoming/.s.jsonl\"").trim(), "640");
    // On disk, staged files are 0600 in a 0700 folder.
    let staging = t.e.f.table.join("_staging");
    assert_eq!(t.e.text(&format!("stat -c '%a' '{}'", staging.display())).trim(), "700");
    let data = t.e.text(&format!("stat -c '%a' '{}'/*.data", staging.display()));
    assert_eq!(data.trim(), "600");
}

#[test]
fn fsync_through_a_read_only_descriptor_does_not_commit() {
    let t = idiom();
    let v = t.e.f.latest();
    let py = python(&[]);
    // A writer that has not closed yet (sleep keeps the redirection open).
    let script = format!(
        "(cat mar.jsonl; sleep 2) > \"$M/incoming/p.jsonl\" & \
         sleep 0.5; {py} -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.close(fd)' \"$M/incoming/p.jsonl\"; \
         echo $(ls \"$M/incoming\"); wait"
    );
    let out = t.e.text(&script);
    assert!(out.contains("p.jsonl"), "still listed after the reader's fsync: {out}");
    assert_ne!(t.e.f.latest(), v, "the writer's close committed");
    t.added_mar_once(&[]);
}

#[test]
fn disk_full_blocks_the_file_until_rewritten() {
    require_fuse();
    require_tool("mount");
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    fs::create_dir(&small).unwrap();
    ok(
        "mount",
        &["-t", "tmpfs", "-o", "size=3m", "tmpfs", &small.display().to_string()],
    );
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _u = Umount(small.clone());
    let table = small.join("t");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut args = vec!["create".to_string(), table.display().to_string()];
    args.extend(FLIGHTS.iter().map(|s| s.to_string()));
    ok(TD_BIN, &args);
    let f = Fixture {
        dir,
        table: table.clone(),
        mnt: mnt.clone(),
    };
    let _m = f.mount();
    // ~4 MB of rows: more than the 3 MB file system holds.
    let mut big = Vec::new();
    let mar = fixture_bytes("flights-mar.jsonl");
    while big.len() < 4 << 20 {
        big.extend_from_slice(&mar);
    }
    fs::write(f.dir.path().join("big.jsonl"), &big).unwrap();
    let out = sh(f.dir.path(), "cp big.jsonl \"$M/incoming/big.jsonl\"", &mnt, &table);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No space left"),
        "{out:?}"
    );
    let note = fs::read_to_string(f.m("incoming/big.jsonl.error")).unwrap();
    assert!(
        note.contains("No space left on device") && note.contains("rewritten from offset 0"),
        "{note}"
    );
    // A later touch does not commit the prefix, and says so.
    let out = sh(f.dir.path(), "touch \"$M/incoming/big.jsonl\"", &mnt, &table);
    assert!(!out.status.success(), "touch must not report success: {out:?}");
    assert_eq!(f.latest(), 0);
    // Rewritten from offset 0 with something that fits: committed.
    let out = sh(
        f.dir.path(),
        &format!(
            "cp '{}' \"$M/incoming/big.jsonl\"",
            fixture("flights-mar.jsonl").display()
        ),
        &mnt,
        &table,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(lines(&f.read_v(1)).len(), MAR_ROWS);
}

#[test]
fn max_line_bytes_and_share_incoming_options() {
    let f = Fixture::flights(&[]);
    let _m = f.mount_with(&["--max-line-bytes", "1000", "--share-incoming"]);
    let e = Env { f, _m };
    let mar = fixture_bytes("flights-mar.jsonl");
    let row = lines(&mar)[0];
    let long = format!(
        "{}\n{},\"pad\":\"{}\"}}\n",
        String::from_utf8_lossy(row),
        String::from_utf8_lossy(&row[..row.len() - 1]),
        "x".repeat(2000)
    );
    fs::write(e.f.dir.path().join("long.jsonl"), long).unwrap();
    let out = e.sh("cp long.jsonl \"$M/incoming/\"");
    assert!(!out.status.success());
    let note = fs::read_to_string(e.f.m("incoming/long.jsonl.error")).unwrap();
    assert!(
        note.contains("line 2") && note.contains("maximum of 1000 bytes"),
        "{note}"
    );
    assert!(note.len() < 400, "{note}");
    assert_eq!(e.f.latest(), 0);
    let modes = e.text("stat -c '%a' \"$M/incoming\" \"$M/incoming/long.jsonl\" \"$M/incoming/long.jsonl.error\"");
    assert_eq!(modes.lines().collect::<Vec<_>>(), ["755", "644", "444"]);
}

/// `--max-line-bytes` holds at the commit too, not only for bytes checked as they arrive: a file
/// written out of order is validated at its close, against the same limit (and a limit above
/// the CLI's 16 MiB default is the one applied there).
#[test]
fn max_line_bytes_holds_for_a_file_validated_at_its_close() {
    let f = Fixture::flights(&[]);
    let _m = f.mount_with(&["--max-line-bytes", "1000"]);
    let e = Env { f, _m };
    let mar = fixture_bytes("flights-mar.jsonl");
    let row = lines(&mar)[0];
    // Line 2 is a valid row but for its length: a 2000-byte tail number.
    let mut wide: serde_json::Value = serde_json::from_slice(row).unwrap();
    wide["tailnum"] = serde_json::Value::String("x".repeat(2000));
    let long = format!(
        "{}\n{wide}\n{}\n",
        String::from_utf8_lossy(row),
        String::from_utf8_lossy(row),
    );
    fs::write(e.f.dir.path().join("long.jsonl"), long).unwrap();
    // Second half first, then the first: the bytes are validated when the file is closed.
    let out = e.sh(
        "python3 -c \"import os; d=open('long.jsonl','rb').read(); h=len(d)//2; \
         fd=os.open(os.environ['M']+'/incoming/ooo.jsonl', os.O_WRONLY|os.O_CREAT, 0o644); \
         os.pwrite(fd, d[h:], h); os.pwrite(fd, d[:h], 0); os.close(fd)\"",
    );
    assert!(!out.status.success(), "the close must fail");
    assert_eq!(e.f.latest(), 0, "nothing committed");
    let note = fs::read_to_string(e.f.m("incoming/ooo.jsonl.error")).unwrap();
    assert!(
        note.contains("line 2") && note.contains("maximum of 1000 bytes"),
        "{note}"
    );
}

/// A committed name that a tool opens for writing and leaves without a byte (`touch`, `: >>`,
/// `truncate` below the committed bytes, which fails) is committed again as right after its
/// commit: not listed, `stat` and `cat` work (the committed bytes, as `stat` counts them), the mode and
/// times set by path are kept, and a later `>>` appends one more APPEND.
#[test]
fn a_committed_name_touched_again_behaves_as_right_after_its_commit() {
    let e = setup();
    let row = String::from_utf8(lines(&fixture_bytes("flights-mar.jsonl"))[0].to_vec()).unwrap();
    let put = |name: &str| e.ok(&format!("printf '%s\\n' '{row}' > \"$M/incoming/{name}\""));
    let listing = || e.text("ls -A \"$M/incoming\"");
    put("t.jsonl");
    assert_eq!(e.f.latest(), 3);
    e.ok("touch \"$M/incoming/t.jsonl\" && touch -d @1000000000 \"$M/incoming/t.jsonl\"");
    assert_eq!(listing(), "", "a touched committed name is listed again");
    assert_eq!(e.text("stat -c %Y \"$M/incoming/t.jsonl\"").trim(), "1000000000");
    let committed = format!("{row}\n").into_bytes();
    assert_eq!(
        e.ok("cat \"$M/incoming/t.jsonl\""),
        committed,
        "cat of a committed name"
    );
    put("a.jsonl");
    e.ok(": >> \"$M/incoming/a.jsonl\"");
    assert_eq!(listing(), "", "`: >>` onto a committed name left it listed");
    assert_eq!(e.ok("cat \"$M/incoming/a.jsonl\""), committed);
    put("c.jsonl");
    let out = e.sh("truncate -s 2 \"$M/incoming/c.jsonl\"");
    assert!(!out.status.success(), "truncate below committed bytes must fail");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{out:?}"
    );
    assert_eq!(listing(), "", "a failed truncate left the committed name listed");
    e.ok("chmod 640 \"$M/incoming/c.jsonl\"");
    assert_eq!(e.text("stat -c %a \"$M/incoming/c.jsonl\"").trim(), "640");
    assert_eq!(e.f.latest(), 5, "nothing more was committed");
    // A `>>` onto each afterwards: one more APPEND each, after the committed rows.
    for name in ["t.jsonl", "a.jsonl", "c.jsonl"] {
        e.ok(&format!("printf '%s\\n' '{row}' >> \"$M/incoming/{name}\""));
    }
    assert_eq!(e.f.latest(), 8);
    assert_eq!(lines(&e.f.read_v(8)).len(), 2800 + 6);
    assert_eq!(listing(), "");
}

/// For as long as a committed name lingers, `stat` and reads agree: the bytes committed under
/// it, as written (docs/MOUNT.md "After the commit the name lingers"): a non-canonical file (its
/// own bytes are not the table's rows), then `>>` onto it, then a verifying read by Python.
#[test]
fn a_lingering_name_reads_the_bytes_stat_counts() {
    let e = setup();
    // Keys out of schema order: the table stores canonical rows, not these bytes.
    let mut rows: Vec<serde_json::Value> = lines(&fixture_bytes("flights-mar.jsonl"))[..3]
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let written: Vec<u8> = rows
        .iter_mut()
        .flat_map(|r| {
            let m = r.as_object().unwrap();
            let mut keys: Vec<&String> = m.keys().collect();
            keys.reverse();
            let body: Vec<String> = keys.iter().map(|k| format!("{:?}: {}", k, m[*k])).collect();
            format!("{{ {} }}\n", body.join(", ")).into_bytes()
        })
        .collect();
    fs::write(e.f.dir.path().join("nc.jsonl"), &written).unwrap();
    e.ok("cp nc.jsonl \"$M/incoming/nc.jsonl\"");
    assert_eq!(e.f.latest(), 3);
    let size = |name: &str| fs::metadata(e.f.m(&format!("incoming/{name}"))).unwrap().len();
    assert_eq!(size("nc.jsonl"), written.len() as u64);
    assert_eq!(fs::read(e.f.m("incoming/nc.jsonl")).unwrap(), written);
    e.ok("cmp nc.jsonl \"$M/incoming/nc.jsonl\"");
    // One more APPEND through `>>`: the name reads both commits' bytes.
    let row = [lines(&fixture_bytes("flights-mar.jsonl"))[5], b"\n"].concat();
    fs::write(e.f.dir.path().join("one.jsonl"), &row).unwrap();
    e.ok("cat one.jsonl >> \"$M/incoming/nc.jsonl\"");
    assert_eq!(e.f.latest(), 4);
    let both = [written.as_slice(), row.as_slice()].concat();
    assert_eq!(size("nc.jsonl"), both.len() as u64);
    fs::write(e.f.dir.path().join("both.jsonl"), &both).unwrap();
    let py = python(&["hashlib"]);
    let digest = |path: &str| {
        e.ok(&format!(
            "{py} -c 'import hashlib,sys; b=open(sys.argv[1],\"rb\").read(); print(len(b), hashlib.sha256(b).hexdigest())' {path}"
        ))
    };
    let (out, want) = (digest("\"$M/incoming/nc.jsonl\""), digest("both.jsonl"));
    assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&want));
}

/// A commit whose durability is unknown (the fsync of `_delta_log/` after the publish failed,
/// `Error::NotDurable`; injected with the `after-link=error` failpoint): the close fails with
/// EIO, the rows are in the table once, `NAME.error` names the version and says not to send it
/// again, and a later `touch` of the name commits nothing more.
#[test]
fn a_commit_of_unknown_durability_fails_the_close_and_says_so() {
    let f = Fixture::flights(&["flights-jan.jsonl"]);
    let m = f.mount_with_env(&[], &[("TINYDELTA_FAILPOINT", "after-link=error")]);
    let e = Env { f, _m: m };
    fs::copy(fixture("flights-mar.jsonl"), e.f.dir.path().join("mar.jsonl")).unwrap();
    let before = e.f.latest();
    let out = e.sh("cp mar.jsonl \"$M/incoming/n.jsonl\"");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "cp exited 0 on a commit of unknown durability");
    assert!(err.contains("Input/output error"), "{err}");
    let v = e.f.latest();
    assert_eq!(v, before + 1, "the commit was published");
    let mar = fixture_bytes("flights-mar.jsonl");
    let rows = e.f.read_v(v);
    assert_eq!(lines(&rows).len(), lines(&e.f.read_v(before)).len() + lines(&mar).len());
    assert_eq!(e.text("ls -A \"$M/incoming\"").trim(), "n.jsonl.error");
    let note = e.text("cat \"$M/incoming/n.jsonl.error\"");
    assert!(
        note.starts_with(&format!("committed as version {v}; durability unknown"))
            && note.contains("do not send it again"),
        "{note}"
    );
    // Touching the name (nothing written) keeps the note, and commits nothing.
    e.ok("touch \"$M/incoming/n.jsonl\" && : >> \"$M/incoming/n.jsonl\"");
    assert_eq!(e.f.latest(), v);
    assert_eq!(e.text("ls -A \"$M/incoming\"").trim(), "n.jsonl.error");
    assert_eq!(e.text("cat \"$M/incoming/n.jsonl.error\""), note);
    // rm of the note clears it; touching the name afterwards commits nothing more.
    e.ok("rm \"$M/incoming/n.jsonl.error\"");
    assert_eq!(e.text("ls -A \"$M/incoming\"").trim(), "");
    e.ok("touch \"$M/incoming/n.jsonl\"");
    assert_eq!(e.f.latest(), v);
    assert_eq!(e.text("ls -A \"$M/incoming\"").trim(), "");
}

/// A writer killed by a signal: its close at exit is not a commit point (the kernel closes the
/// descriptors of a process killed by SIGKILL; /proc/PID/stat says so), so its bytes stay
/// listed, uncommitted.
#[test]
fn a_writer_killed_by_a_signal_commits_nothing() {
    let t = idiom();
    let v = t.e.f.latest();
    let (code, _) = t.status("sh -c 'exec 3>\"$M/incoming/k.jsonl\"; cat mar.jsonl >&3; kill -9 $$'");
    assert_eq!(code, 128 + 9, "the writer was killed by SIGKILL");
    assert_eq!(t.e.f.latest(), v, "a killed writer's close committed");
    assert_eq!(t.listing(), ["k.jsonl"]);
    // A plain close of the same bytes commits them.
    t.e.ok("cat \"$M/incoming/k.jsonl\" > k.jsonl && cat k.jsonl > \"$M/incoming/k.jsonl\"");
    t.added_mar_once(&[]);
}

/// A file whose rows are canonical as written becomes the version's data file itself (docs/MOUNT.md
/// "One pass over the bytes, written once"): what is written through the mount afterwards, by `>>`,
/// a truncating re-save, or the same descriptor after an fsync commit, goes to new staged files and
/// never changes the bytes a committed version names.
#[test]
fn writes_after_a_commit_leave_its_data_file_alone() {
    let e = setup();
    require_tool("head");
    let src = fixture("flights-mar.jsonl");
    e.ok(&format!("cp '{}' \"$M/incoming/w.jsonl\"", src.display()));
    assert_eq!(e.f.latest(), 3);
    let v3 = e.f.read_v(3);
    e.ok(&format!("head -n 5 '{}' >> \"$M/incoming/w.jsonl\"", src.display()));
    e.ok(&format!("head -n 7 '{}' > \"$M/incoming/w.jsonl\"", src.display()));
    // One descriptor: write, fsync (a commit), write more, close (a second commit).
    let py = python(&[]);
    e.ok(&format!(
        "{py} -c 'import os,sys; d=open(sys.argv[1],\"rb\").read().splitlines(True); f=os.open(sys.argv[2], os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o600); os.write(f, b\"\".join(d[:3])); os.fsync(f); os.write(f, b\"\".join(d[3:6])); os.close(f)' '{}' \"$M/incoming/p.jsonl\"",
        src.display()
    ));
    assert_eq!(e.f.latest(), 7);
    assert_eq!(e.f.read_v(3), v3, "version 3 reads as it was committed");
    assert_eq!(lines(&e.f.read_v(7)).len(), 2800 + 600 + 5 + 7 + 3 + 3);
    e.f.td(&["check", &e.f.t(), "--deep"]);
}

/// A data file the mount commits is readable like one `tinydelta append` writes (mode 0644),
/// whether the staged file itself was linked (canonical rows) or a canonical copy of it was:
/// another user reading the table with the CLI must not get EACCES.
#[test]
fn committed_data_files_have_the_cli_mode() {
    use std::os::unix::fs::PermissionsExt;
    let e = setup();
    let src = fixture("flights-mar.jsonl");
    e.ok(&format!("cp '{}' \"$M/incoming/canonical.jsonl\"", src.display()));
    // Spaces after the colons: not canonical, so a canonical copy is linked instead.
    e.ok(&format!(
        "sed 's/\":/\": /g' '{}' > \"$M/incoming/spaced.jsonl\"",
        src.display()
    ));
    assert_eq!(e.f.latest(), 4);
    let mut modes = Vec::new();
    for entry in fs::read_dir(&e.f.table).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("part-") && name.ends_with(".jsonl") {
            modes.push((entry.metadata().unwrap().permissions().mode() & 0o777, name));
        }
    }
    assert_eq!(modes.len(), 4, "two CLI appends and two commits through the mount");
    // The CLI's files and the mount's have one mode (0644 less the umask).
    assert!(modes.iter().all(|(m, _)| *m == modes[0].0), "modes differ: {modes:?}");
}
