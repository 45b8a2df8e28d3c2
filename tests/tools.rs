//! Unmodified Unix tools against a real mount, one test per tool (issue 3, item 5).
//!
//! Every test builds a flights table (v1 = January slice, v2 = + February slice), mounts it,
//! runs the tool through `sh -c` with `$M` = mount point and `$T` = table, and checks the
//! result against `tinydelta read`.

#[path = "common/mount.rs"]
mod mount;

use std::fs;
use std::process::Output;

use mount::*;

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
    let out = e.sh("echo x >> \"$M/latest/data.jsonl\"");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
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
    assert!(data.starts_with("-r--r--r--"), "{data}");
    assert!(data.split_whitespace().any(|w| w == size), "true size {size} in {data}");
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
            "0 directory 755".into()
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
    // at/ entries are named by commit times (tests/changes.rs checks them).
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
        "./v/0/schema.json",
        "./v/1",
        "./v/1/commit.json",
        "./v/1/data.jsonl",
        "./v/1/schema.json",
        "./v/2",
        "./v/2/commit.json",
        "./v/2/data.jsonl",
        "./v/2/schema.json",
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), expected);
    let big = e.text("find \"$M/v\" -name data.jsonl -size +100k | sort");
    assert_eq!(big.lines().count(), 2);
    // -L follows the latest symlink.
    let via_latest = e.text("find -L \"$M/latest\" -type f | wc -l");
    assert_eq!(via_latest.trim(), "3");
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
