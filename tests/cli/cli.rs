//! The CLI's messages, hints, `--rejects`, completions and man pages (docs/CLI.md "Usage" and
//! docs/CLI.md "Errors that teach"). Each message and hint is checked by its exact first sentence.
//! The tests of these messages that need a mount are in `tests/mount/cli_mount.rs`.

use std::fs;
use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::support::mount::TD_BIN;

/// A table `id:int! region:str year:int amount:float` in a temporary folder.
struct T {
    dir: tempfile::TempDir,
}

impl T {
    fn new() -> T {
        let t = T {
            dir: tempfile::tempdir().unwrap(),
        };
        let out = t.td(&["create", "t", "id:int!", "region:str", "year:int", "amount:float"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        t
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }

    /// Run tinydelta in the folder (so inputs are named as given).
    fn td(&self, args: &[&str]) -> Output {
        self.td_stdin(args, None)
    }

    fn td_stdin(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut child = Command::new(TD_BIN)
            .args(args)
            .current_dir(self.dir.path())
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(data) = stdin {
            let mut w = child.stdin.take().unwrap();
            w.write_all(data).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        fs::write(self.path(name), bytes).unwrap();
    }

    /// `append t --file NAME` with `extra`; (exit code, stdout, stderr lines).
    fn append(&self, name: &str, extra: &[&str]) -> (i32, String, Vec<String>) {
        let mut args = vec!["append", "t", "--file", name];
        args.extend_from_slice(extra);
        split(self.td(&args))
    }

    fn latest(&self) -> u64 {
        let out = self.td(&["describe", "t", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["version"].as_u64().unwrap()
    }

    fn read(&self) -> String {
        String::from_utf8(self.td(&["read", "t"]).stdout).unwrap()
    }
}

fn split(out: Output) -> (i32, String, Vec<String>) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// The first sentence of a message: up to the first ". " (not the one of "e.g. ") or the end.
fn first_sentence(s: &str) -> &str {
    let mut from = 0;
    while let Some(i) = s[from..].find(". ") {
        let end = from + i;
        if !s[..end].ends_with("e.g") {
            return &s[..end];
        }
        from = end + 2;
    }
    s
}

#[test]
fn every_bad_line_is_listed_with_the_total() {
    let t = T::new();
    t.write(
        "three.jsonl",
        b"{\"id\":1}\n{\"id\":\"2\"}\n{\"id\":3}\n{\"id\":4,}\n\n{\"id\":null}\n{\"id\":6}\n",
    );
    let (code, out, err) = t.append("three.jsonl", &[]);
    assert_eq!(code, 5, "{err:?}");
    assert_eq!(out, "");
    assert_eq!(
        err,
        [
            "tinydelta: three.jsonl: line 2, column \"id\": expected int, found string",
            "tinydelta: three.jsonl: line 4, column 9: invalid JSON: trailing comma",
            "tinydelta: three.jsonl: line 6, column \"id\": null value for a NOT NULL column",
            "tinydelta: three.jsonl: 3 bad lines; nothing was committed",
        ]
    );
    assert_eq!(t.latest(), 0, "nothing committed");
    // --max-errors N lists N and still counts them all.
    let (code, _, err) = t.append("three.jsonl", &["--max-errors", "1"]);
    assert_eq!(code, 5);
    assert_eq!(
        err,
        [
            "tinydelta: three.jsonl: line 2, column \"id\": expected int, found string",
            "tinydelta: three.jsonl: 3 bad lines (the first 1 listed; --max-errors N lists more); nothing was committed",
        ]
    );
    // The default lists 10 of 25.
    let many: String = (0..25).map(|_| "{\"id\":1.5}\n").collect();
    t.write("many.jsonl", many.as_bytes());
    let (code, _, err) = t.append("many.jsonl", &[]);
    assert_eq!(code, 5);
    assert_eq!(err.len(), 11, "{err:?}");
    assert_eq!(
        err[10],
        "tinydelta: many.jsonl: 25 bad lines (the first 10 listed; --max-errors N lists more); nothing was committed"
    );
    // One bad line: one sentence, as before.
    let (code, _, err) = t.append("missing.jsonl", &[]);
    assert_eq!(code, 2, "a missing file is a usage error: {err:?}");
    t.write("one.jsonl", b"{\"id\":1}\n{\"id\":2,\"year\":\"2025\"}\n");
    let (code, _, err) = t.append("one.jsonl", &[]);
    assert_eq!(code, 5);
    assert_eq!(
        err,
        ["tinydelta: one.jsonl: line 2, column \"year\": expected int, found string"]
    );
}

#[test]
fn stdin_from_a_pipe_lists_every_bad_line_too() {
    let t = T::new();
    let input = b"{\"id\":\"a\"}\n{\"id\":1}\n{\"id\":\"b\"}\n";
    let (code, _, err) = split(t.td_stdin(&["append", "t"], Some(input)));
    assert_eq!(code, 5);
    assert_eq!(
        err,
        [
            "tinydelta: <stdin>: line 1, column \"id\": expected int, found string",
            "tinydelta: <stdin>: line 3, column \"id\": expected int, found string",
            "tinydelta: <stdin>: 2 bad lines; nothing was committed",
        ]
    );
    // And a good pipe commits, counted in the right number.
    let (code, out, _) = split(t.td_stdin(&["append", "t"], Some(b"{\"id\":1}\n")));
    assert_eq!(code, 0);
    assert_eq!(out, "appended 1 row to t as version 1\n");
}

#[test]
fn hints_for_the_common_wrong_inputs() {
    let t = T::new();
    let cases: &[(&str, &[u8], &str)] = &[
        (
            "orders.csv",
            b"id,region,year\n1,EU,2024\n",
            "tinydelta: hint: line 1 looks like a CSV header (column names separated by commas), but tinydelta reads JSON Lines (one object per line): convert it first, e.g. `duckdb -c \"COPY (FROM read_csv('orders.csv')) TO '/dev/stdout' (FORMAT json)\" | tinydelta append TABLE` (the `duckdb` command from `pip install duckdb-cli`, which then runs offline).",
        ),
        (
            "orders.tsv",
            b"id\tregion\tyear\n1\tEU\t2024\n",
            "tinydelta: hint: line 1 looks like a TSV header (column names separated by tabs), but tinydelta reads JSON Lines (one object per line): convert it first, e.g. `duckdb -c \"COPY (FROM read_csv('orders.tsv')) TO '/dev/stdout' (FORMAT json)\" | tinydelta append TABLE` (the `duckdb` command from `pip install duckdb-cli`, which then runs offline).",
        ),
        (
            "orders.json",
            b"[\n  {\"id\": 1},\n  {\"id\": 2}\n]\n",
            "tinydelta: hint: the input looks like one JSON array of objects, but tinydelta reads JSON Lines (one object per line): convert it with `jq -c '.[]' orders.json > orders.jsonl`.",
        ),
        (
            "nan.jsonl",
            b"{\"id\":1,\"amount\":NaN}\n{\"id\":2,\"amount\":Infinity}\n",
            "tinydelta: hint: JSON has no NaN or Infinity (Python's json.dumps writes them unless allow_nan=False): write null for a missing number instead.",
        ),
        (
            "latin.jsonl",
            b"{\"id\":1,\"region\":\"M\xfcnchen\"}\n",
            "tinydelta: hint: byte 0xFC on line 1 is not UTF-8 (in Windows-1252 or Latin-1 it is '\u{fc}'): convert the input with `iconv -f WINDOWS-1252 -t UTF-8 latin.jsonl > latin.jsonl.utf8`.",
        ),
        (
            "utf16.jsonl",
            b"\xff\xfe{\x00\"\x00i\x00d\x00\"\x00:\x001\x00}\x00\n\x00",
            "tinydelta: hint: the input looks like UTF-16, not UTF-8: convert it with `iconv -f UTF-16 -t UTF-8 utf16.jsonl > utf16.jsonl.utf8`.",
        ),
    ];
    for (name, bytes, hint) in cases {
        t.write(name, bytes);
        let (code, _, err) = t.append(name, &[]);
        assert_eq!(code, 5, "{name}: {err:?}");
        let hints: Vec<&String> = err.iter().filter(|l| l.starts_with("tinydelta: hint: ")).collect();
        assert_eq!(hints.len(), 1, "{name}: one hint: {err:?}");
        assert_eq!(first_sentence(hints[0]), first_sentence(hint), "{name}");
        assert_eq!(hints[0], hint, "{name}");
    }
    // NaN and Infinity are named in the error itself.
    let (_, _, err) = t.append("nan.jsonl", &[]);
    assert_eq!(
        err[..2],
        [
            "tinydelta: nan.jsonl: line 1, column 18: invalid JSON: NaN is not a JSON number",
            "tinydelta: nan.jsonl: line 2, column 18: invalid JSON: Infinity is not a JSON number",
        ]
    );
    // A good file earns no hint; a CSV-looking line that is not the first is no header.
    t.write("late.jsonl", b"{\"id\":1}\nid,region\n");
    let (_, _, err) = t.append("late.jsonl", &[]);
    assert!(err.iter().all(|l| !l.contains("hint")), "{err:?}");
    assert_eq!(t.latest(), 0);
}

#[test]
fn a_bom_at_the_start_of_any_line_is_skipped() {
    let t = T::new();
    // Two files, each with a BOM, concatenated with cat.
    t.write(
        "cat.jsonl",
        b"\xef\xbb\xbf{\"id\":1}\n{\"id\":2}\n\xef\xbb\xbf{\"id\":3}\r\n{\"id\":4}",
    );
    let (code, out, err) = t.append("cat.jsonl", &[]);
    assert_eq!(code, 0, "{err:?}");
    assert_eq!(out, "appended 4 rows to t as version 1\n");
    let ids: Vec<String> = t
        .read()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].to_string())
        .collect();
    assert_eq!(ids, ["1", "2", "3", "4"]);
}

#[test]
fn rejects_round_trip() {
    let t = T::new();
    // Bad lines of every kind, one with CRLF and a BOM, the last without its newline.
    let good = [
        &b"{\"id\":1,\"region\":\"EU\"}\n"[..],
        b"{\"id\":2,\"year\":2024}\r\n",
        b"\n",
        b"{\"id\":3,\"amount\":1}\n",
    ];
    let bad = [
        &b"{\"id\":\"x\"}\r\n"[..],
        b"\xef\xbb\xbf{\"id\":1,}\n",
        b"{\"id\":1,\"region\":\"caf\xe9\"}\n",
        b"{\"id\":1,\"zz\":2}",
    ];
    let input: Vec<u8> = [good[0], bad[0], good[1], bad[1], good[2], bad[2], good[3], bad[3]].concat();
    t.write("in.jsonl", &input);
    let (code, out, err) = t.append("in.jsonl", &["--rejects", "bad.jsonl"]);
    assert_eq!(code, 0, "{err:?}");
    assert_eq!(out, "appended 3 rows to t as version 1\n");
    assert!(
        err.contains(
            &"tinydelta: in.jsonl: rejected 4 bad lines into bad.jsonl (their errors in bad.jsonl.errors); the good rows were committed as version 1"
                .to_string()
        ),
        "{err:?}"
    );
    // The bad lines, byte for byte.
    assert_eq!(fs::read(t.path("bad.jsonl")).unwrap(), bad.concat());
    // One JSON object per bad line.
    let errors: Vec<serde_json::Value> = fs::read_to_string(t.path("bad.jsonl.errors"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lines: Vec<u64> = errors.iter().map(|e| e["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, [2, 4, 6, 8]);
    assert_eq!(errors[0]["column"], "id");
    assert_eq!(errors[0]["error"], "expected int, found string");
    assert_eq!(errors[1]["column"], 9);
    assert_eq!(
        errors[3]["error"],
        "unknown column (not in the table's schema; `append --merge-schema` or `alter add-column` adds it)"
    );
    // The good rows, committed; the rejected count recorded in the commit.
    let rows: Vec<serde_json::Value> = t.read().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3]);
    let h: serde_json::Value = serde_json::from_slice(&t.td(&["history", "t", "--json"]).stdout).unwrap();
    assert_eq!(h[1]["operationParameters"]["rejectedLines"], "4");
    assert_eq!(h[1]["operationParameters"]["rejectsFile"], "bad.jsonl");
    assert_eq!(h[1]["rows"], 3);

    // An existing FILE is never overwritten: exit 2, nothing committed, FILE unchanged.
    let (code, _, err) = t.append("in.jsonl", &["--rejects", "bad.jsonl"]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        [
            "tinydelta: --rejects: bad.jsonl already exists; tinydelta never overwrites it (remove it or name another file)"
        ]
    );
    assert_eq!(fs::read(t.path("bad.jsonl")).unwrap(), bad.concat());
    assert_eq!(t.latest(), 1);
    t.write("taken.errors", b"mine");
    let (code, _, _) = t.append("in.jsonl", &["--rejects", "taken"]);
    assert_eq!(code, 2);
    assert!(!t.path("taken").exists(), "FILE is not left behind");
    assert_eq!(fs::read(t.path("taken.errors")).unwrap(), b"mine");

    // Every line bad: nothing committed, exit 5.
    t.write("allbad.jsonl", b"{\"id\":\"a\"}\n{\"id\":\"b\"}\n");
    let (code, out, err) = t.append("allbad.jsonl", &["--rejects", "all.jsonl"]);
    assert_eq!(code, 5);
    assert_eq!(out, "");
    assert_eq!(
        err.last().unwrap(),
        "tinydelta: allbad.jsonl: every line is bad (2 bad lines, written to all.jsonl, their errors to all.jsonl.errors); nothing was committed"
    );
    assert_eq!(t.latest(), 1);

    // Overwrite, from a pipe.
    let (code, out, _) = split(t.td_stdin(
        &["overwrite", "t", "--rejects", "ow.jsonl"],
        Some(b"{\"id\":7}\n{\"id\":true}\n"),
    ));
    assert_eq!(code, 0);
    assert_eq!(out, "overwrote t with 1 row as version 2\n");
    assert_eq!(fs::read(t.path("ow.jsonl")).unwrap(), b"{\"id\":true}\n");
    assert_eq!(t.read(), "{\"id\":7,\"region\":null,\"year\":null,\"amount\":null}\n");

    // A write that fails (here a conflict) commits nothing and leaves no rejects behind.
    let (code, _, err) = t.append("in.jsonl", &["--rejects", "conflict.jsonl", "--expect-version", "0"]);
    assert_eq!(code, 3, "{err:?}");
    assert!(!t.path("conflict.jsonl").exists() && !t.path("conflict.jsonl.errors").exists());
    assert_eq!(t.latest(), 2);
}

#[test]
fn usage_errors_say_what_is_valid() {
    let t = T::new();
    let (code, _, err) = split(t.td(&["vacuum", "t", "--older-than", "banana"]));
    assert_eq!(code, 2);
    assert_eq!(
        first_sentence(&err[0]),
        "tinydelta: --older-than \"banana\" is not a duration: write a number and a unit, e.g. 0s, 30m, 1h, 7d or 2weeks (expected number at 0)"
    );
}

#[test]
fn json_output() {
    let t = T::new();
    t.write("a.jsonl", b"{\"id\":1}\n");
    assert_eq!(t.append("a.jsonl", &[]).0, 0);
    t.write("b.jsonl", b"{\"id\":2}\n");
    assert!(t.td(&["overwrite", "t", "--file", "b.jsonl"]).status.success());
    let out = t.td(&["vacuum", "t", "--retain", "0s", "--force", "--dry-run", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["dryRun"], true);
    assert_eq!(v["numFiles"], 1);
    assert_eq!(v["numExpiredDataFiles"], 1);
    assert_eq!(v["files"].as_array().unwrap().len(), 1);
    assert!(v["files"][0]["size"].as_u64().unwrap() > 0);
    assert_eq!(v["sizeBytes"], v["files"][0]["size"]);
    for cmd in [&["describe", "t", "--json"][..], &["history", "t", "--json"]] {
        let out = t.td(cmd);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    }
    // Nothing drawn on a pipe: stderr stays empty.
    let out = t.td(&["vacuum", "t", "--dry-run"]);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("would delete 0 files (0 bytes)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn completions_and_man_pages_are_generated() {
    let t = T::new();
    let cases = [
        ("bash", "tinydelta", "complete -F _tinydelta"),
        ("zsh", "tinydelta", "#compdef tinydelta"),
        ("fish", "tinydelta", "complete -c tinydelta"),
        ("bash", "tinydelta-mount", "complete -F _tinydelta__mount"),
        ("zsh", "tinydelta-mount", "#compdef tinydelta-mount"),
        ("fish", "tinydelta-mount", "complete -c tinydelta-mount"),
    ];
    for (shell, bin, marker) in cases {
        let out = t.td(&["completions", shell, "--bin", bin]);
        assert!(out.status.success(), "{shell} {bin}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(marker), "{shell} {bin}: no {marker:?}");
        for word in ["append", "rejects", "max-errors", "vacuum", "completions"] {
            assert!(bin != "tinydelta" || text.contains(word), "{shell}: {word} missing");
        }
        if shell == "bash" {
            let f = t.path(&format!("{bin}.bash"));
            fs::write(&f, &text).unwrap();
            let st = Command::new("bash").arg("-n").arg(&f).status().unwrap();
            assert!(st.success(), "{bin}.bash is not valid bash");
        }
    }
    let out = t.td(&["man", "man1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for page in [
        "tinydelta",
        "tinydelta-append",
        "tinydelta-alter-add-column",
        "tinydelta-mount",
    ] {
        let text = fs::read_to_string(t.path(&format!("man1/{page}.1"))).unwrap_or_else(|e| panic!("{page}.1: {e}"));
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{page}.1 is no man page"
        );
        assert!(text.contains(&format!(".TH {page} 1")), "{page}.1 title");
    }
    // `alter drop-column` only explains why it is refused (exit 2): no man page, no help line.
    assert!(
        !t.path("man1/tinydelta-alter-drop-column.1").exists(),
        "a man page for alter drop-column"
    );
    let alter = fs::read_to_string(t.path("man1/tinydelta-alter.1")).unwrap();
    assert!(!alter.contains("drop\\-column"), "tinydelta-alter.1 lists drop-column");
    let append = fs::read_to_string(t.path("man1/tinydelta-append.1")).unwrap();
    assert!(append.contains("rejects"), "tinydelta-append.1 documents --rejects");
    let mount = fs::read_to_string(t.path("man1/tinydelta-mount.1")).unwrap();
    assert!(
        mount.contains("share\\-incoming"),
        "tinydelta-mount.1 documents its flags"
    );
}

/// Durations in words, singular and plural counts, aligned `history` columns, and a lone
/// surrogate escape named at the file's line.
#[test]
fn messages_read_as_sentences() {
    let t = T::new();
    t.write("a.jsonl", b"{\"id\":1}\n");
    assert_eq!(t.append("a.jsonl", &[]).0, 0);
    assert_eq!(split(t.td(&["overwrite", "t", "--file", "a.jsonl"])).0, 0);
    // vacuum: "7 days", not "7days".
    let (code, _, err) = split(t.td(&["vacuum", "t", "--retain", "1h"]));
    assert_eq!(code, 2, "{err:?}");
    assert!(
        err[0].starts_with(
            "tinydelta: --retain 1 hour is below the table's retention of removed files (7 days, delta.deletedFileRetentionDuration)"
        ),
        "{err:?}"
    );
    let (code, out, err) = split(t.td(&["vacuum", "t", "--retain", "0s", "--force"]));
    assert_eq!(code, 0, "{err:?}");
    assert!(out.contains("removed more than 0 seconds ago"), "{out}");
    // history: ROWS and TABLE_ROWS right-aligned in the same columns on every line.
    let (code, out, _) = split(t.td(&["history", "t"]));
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.iter().any(|l| l.contains("VACUUM START")), "{out}");
    // The last byte of "ROWS" (the first "ROWS" of the header is the ROWS column).
    let header_rows_end = lines[0].find("ROWS").unwrap() + 3;
    let header_end = lines[0].find("TABLE_ROWS").unwrap() + "TABLE_ROWS".len();
    for l in &lines[1..] {
        let b = l.as_bytes();
        assert!(
            b[header_rows_end].is_ascii_digit() && b[header_rows_end + 1] == b' ',
            "ROWS: {l:?}\n{out}"
        );
        assert!(b[header_end - 1].is_ascii_digit(), "TABLE_ROWS: {l:?}\n{out}");
        assert!(b.get(header_end).is_none_or(|c| *c == b' '), "TABLE_ROWS: {l:?}\n{out}");
    }
    // check: one missing version checksum is "1 version".
    fs::remove_file(t.path("t/_delta_log/00000000000000000002.crc")).unwrap();
    let (_, out, err) = split(t.td(&["check", "t"]));
    let all = format!("{out}{}", err.join("\n"));
    assert!(all.contains("1 version (2) has no version checksum (.crc)"), "{all}");
    // A lone surrogate on line 7: the file's line, the column, and what is wrong.
    let mut rows = "{\"id\":1}\n".repeat(6);
    rows.push_str("{\"id\":7,\"region\":\"\\ud800\"}\n");
    t.write("s.jsonl", rows.as_bytes());
    let (code, _, err) = t.append("s.jsonl", &[]);
    assert_eq!(code, 5);
    assert_eq!(
        first_sentence(&err[0]),
        "tinydelta: s.jsonl: line 7, column \"region\": invalid JSON string escape: a lone surrogate \\ud800",
        "{err:?}"
    );
}

/// `append --file` of a regular file copies it and checks the copy when its rows are canonical
/// already (docs/BENCHMARKS.md "What each figure measures", figure 6), and otherwise reads it as
/// before: either way the outcome is the one of the same bytes through a pipe (exit code, messages
/// with their line and column, rows, statistics), stdin redirected from the file too, and no data
/// file is left behind.
#[test]
fn append_file_commits_what_a_pipe_of_the_same_bytes_commits() {
    let row = |i: usize| {
        format!(
            "{{\"id\":{i},\"region\":\"r{}\",\"year\":{},\"amount\":{}.5}}\n",
            i % 7,
            2000 + i % 30,
            i % 100
        )
    };
    let canonical: String = (0..40_000).map(row).collect();
    assert!(canonical.len() > 2 << 20, "several segments of the copy check");
    let bad_in_the_middle = canonical.replacen("{\"id\":20000,", "{\"id\":\"20000\",", 1);
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("canonical", canonical.clone().into_bytes()),
        ("one canonical row", row(1).into_bytes()),
        ("no newline at the end", canonical.trim_end().as_bytes().to_vec()),
        ("CRLF", canonical.replace('\n', "\r\n").into_bytes()),
        (
            "another spelling of the first row",
            canonical.replacen(".5}", ".50}", 1).into_bytes(),
        ),
        ("a blank line at the end", format!("{canonical}\n").into_bytes()),
        ("a bad row in the middle", bad_in_the_middle.into_bytes()),
        ("empty", Vec::new()),
        ("blank lines only", b"\n\n".to_vec()),
    ];
    let adds = |t: &T| -> Vec<serde_json::Value> {
        let log = t.path("t/_delta_log/00000000000000000001.json");
        fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["add"]
                    .as_object()
                    .cloned()
            })
            .map(|mut a| {
                a.remove("path");
                a.remove("modificationTime");
                serde_json::Value::Object(a)
            })
            .collect()
    };
    let parts = |t: &T| {
        fs::read_dir(t.path("t"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("part-"))
            .count()
    };
    for (what, bytes) in &inputs {
        let piped = T::new();
        let (code, out, err) = split(piped.td_stdin(&["append", "t"], Some(bytes)));
        let out = out.replace("<stdin>", "in.jsonl");
        let err: Vec<String> = err.iter().map(|l| l.replace("<stdin>", "in.jsonl")).collect();
        let from_file = T::new();
        from_file.write("in.jsonl", bytes);
        let redirected = T::new();
        redirected.write("in.jsonl", bytes);
        let stdin_file = fs::File::open(redirected.path("in.jsonl")).unwrap();
        let out_redirected = Command::new(TD_BIN)
            .args(["append", "t"])
            .current_dir(redirected.dir.path())
            .stdin(stdin_file)
            .output()
            .unwrap();
        let (rcode, rout, rerr) = split(out_redirected);
        let rerr: Vec<String> = rerr.iter().map(|l| l.replace("<stdin>", "in.jsonl")).collect();
        for (how, t, (c, o, e)) in [
            ("--file", &from_file, from_file.append("in.jsonl", &[])),
            (
                "< file",
                &redirected,
                (rcode, rout.replace("<stdin>", "in.jsonl"), rerr),
            ),
        ] {
            assert_eq!((c, &o, &e), (code, &out, &err), "{what}, {how}");
            assert_eq!(t.read(), piped.read(), "{what}, {how}");
            assert_eq!(adds(t), adds(&piped), "{what}, {how}");
            assert_eq!(parts(t), parts(&piped), "{what}, {how}: data files in the table");
        }
        if *what == "canonical" {
            assert_eq!(code, 0, "{err:?}");
            let part = fs::read_dir(from_file.path("t"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("part-"))
                .unwrap();
            assert_eq!(
                fs::read(part).unwrap(),
                *bytes,
                "the data file is the input, byte for byte"
            );
        }
        if *what == "a bad row in the middle" {
            assert_eq!(code, 5);
            assert_eq!(
                err,
                ["tinydelta: in.jsonl: line 20001, column \"id\": expected int, found string"]
            );
        }
    }
}

/// `append --file` of a file checked in parallel (the copy's 1 MiB segments on every core, the
/// general path's 256 KiB chunks) refuses a bad row wherever it sits: the first row of a segment
/// or chunk, or a row that starts in one and ends in the next, on one thread
/// (`TINYDELTA_THREADS=1`, docs/CLI.md "Environment") and on several. The error names the row's
/// line and column, and nothing is committed; the same file without the bad row commits byte for
/// byte with either thread count.
#[test]
fn append_file_refuses_a_bad_row_at_a_piece_boundary_on_any_thread_count() {
    // Rows of one length (ids of 7 digits, amounts of 2), so that a boundary's row is known.
    let row = |i: usize| {
        format!(
            "{{\"id\":{},\"region\":\"r{}\",\"year\":{},\"amount\":{}.5}}\n",
            1_000_000 + i,
            i % 7,
            2000 + i % 30,
            10 + i % 90
        )
    };
    let len = row(0).len();
    let n = (3 << 20) / len;
    let rows: Vec<String> = (0..n).map(row).collect();
    assert!(rows.iter().all(|r| r.len() == len));
    let run = |bytes: &[u8], threads: &str| {
        let t = T::new();
        t.write("in.jsonl", bytes);
        let out = Command::new(TD_BIN)
            .args(["append", "t", "--file", "in.jsonl"])
            .current_dir(t.dir.path())
            .env("TINYDELTA_THREADS", threads)
            .output()
            .unwrap();
        (t, split(out))
    };
    let good = rows.concat();
    for threads in ["1", "2", "4"] {
        let (t, (code, _, err)) = run(good.as_bytes(), threads);
        assert_eq!(code, 0, "{threads} threads: {err:?}");
        let part = fs::read_dir(t.path("t"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("part-"))
            .unwrap();
        assert_eq!(fs::read(part).unwrap(), good.as_bytes(), "{threads} threads");
    }
    for boundary in [256usize << 10, 1 << 20, 2 << 20] {
        assert_ne!(boundary % len, 0, "a row must straddle the boundary");
        // The row that starts first at or after the boundary, and the one across it (0-based).
        for (what, k) in [("first after", boundary.div_ceil(len)), ("across", boundary / len)] {
            let mut bad = rows.clone();
            let id = format!("{}", 1_000_000 + k);
            bad[k] = bad[k].replacen(&format!("\"id\":{id}"), &format!("\"id\":\"{}\"", &id[..5]), 1);
            assert_eq!(bad[k].len(), len);
            let bad = bad.concat();
            for threads in ["1", "2", "4"] {
                let (t, (code, out, err)) = run(bad.as_bytes(), threads);
                assert_eq!(code, 5, "{what} {boundary}, {threads} threads: {out} {err:?}");
                assert_eq!(
                    err,
                    [format!(
                        "tinydelta: in.jsonl: line {}, column \"id\": expected int, found string",
                        k + 1
                    )],
                    "the row {what} byte {boundary}, {threads} threads"
                );
                assert_eq!(t.latest(), 0);
                let parts = fs::read_dir(t.path("t"))
                    .unwrap()
                    .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("part-"))
                    .count();
                assert_eq!(parts, 0, "no data file left behind");
            }
        }
    }
}

/// `append --file FIFO` reads the FIFO once, as a pipe on stdin: valid rows commit, a bad line
/// fails with its line (it used to hang, opening the FIFO again for the second pass, or to fail
/// because a FIFO's times change as it is written), and `--rejects` keeps every bad line.
#[test]
fn append_file_from_a_fifo_reads_it_once_like_a_pipe() {
    let cases: [(&str, &[&str], i32); 3] = [
        ("{\"id\":1}\n{\"id\":2,\"region\":\"b\"}\n", &[], 0),
        ("{\"id\":3}\n{\"id\":\"x\"}\n", &[], 5),
        (
            "{\"id\":4}\n{\"id\":\"x\"}\n{\"id\":\"y\"}\n",
            &["--rejects", "rej.jsonl"],
            0,
        ),
    ];
    for (input, extra, want) in cases {
        let t = T::new();
        let piped = T::new();
        let (pcode, pout, perr) = {
            let mut args = vec!["append", "t"];
            args.extend_from_slice(extra);
            split(piped.td_stdin(&args, Some(input.as_bytes())))
        };
        let fifo = t.path("in.fifo");
        let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", fifo.display());
        let bytes = input.as_bytes().to_vec();
        let writer = std::thread::spawn(move || {
            // Blocks until tinydelta opens the FIFO for reading.
            fs::write(&fifo, bytes).expect("write to the FIFO");
        });
        let mut args = vec!["append", "t", "--file", "in.fifo"];
        args.extend_from_slice(extra);
        let mut child = Command::new(TD_BIN)
            .args(&args)
            .current_dir(t.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > std::time::Duration::from_secs(30) {
                let _ = child.kill();
                panic!("append --file FIFO ({input:?}) did not exit within 30 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let (code, out, err) = split(child.wait_with_output().unwrap());
        writer.join().unwrap();
        assert_eq!(code, want, "{input:?}: {err:?}");
        let norm = |s: &str| s.replace("<stdin>", "in.fifo");
        assert_eq!(code, pcode, "{input:?}");
        assert_eq!(norm(&pout), out, "{input:?}");
        assert_eq!(perr.iter().map(|l| norm(l)).collect::<Vec<_>>(), err, "{input:?}");
        assert_eq!(t.read(), piped.read(), "{input:?}");
    }
}

/// `append`, `overwrite` and `restore --json` print the outcome; `describe --json` says `rows`
/// and `bytes` as its text does (with `numRecords`/`sizeBytes` kept as aliases).
#[test]
fn writes_print_their_outcome_as_json_and_describe_json_says_rows() {
    let t = T::new();
    t.write("a.jsonl", b"{\"id\":1}\n{\"id\":2}\n");
    let out = t.td(&["append", "t", "--file", "a.jsonl", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (a["committed"].clone(), a["version"].clone(), a["rows"].clone()),
        (true.into(), 1.into(), 2.into())
    );
    assert_eq!(
        (a["files"].as_u64(), a["tableRows"].as_u64(), a["tableFiles"].as_u64()),
        (Some(1), Some(2), Some(1))
    );
    assert_eq!(a["operation"], "APPEND");
    let part = t.path("t").join(
        fs::read_dir(t.path("t"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n.starts_with("part-"))
            .unwrap(),
    );
    assert_eq!(a["bytes"].as_u64(), Some(fs::metadata(&part).unwrap().len()));
    t.write("b.jsonl", b"{\"id\":3}\n");
    let out = t.td(&["overwrite", "t", "--file", "b.jsonl", "--json"]);
    let o: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            o["version"].as_u64(),
            o["rows"].as_u64(),
            o["removedFiles"].as_u64(),
            o["tableRows"].as_u64()
        ),
        (Some(2), Some(1), Some(1), Some(1))
    );
    let out = t.td(&["restore", "t", "--version", "1", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            r["version"].as_u64(),
            r["restoredVersion"].as_u64(),
            r["tableRows"].as_u64(),
            r["rows"].as_u64(),
            r["files"].as_u64()
        ),
        (Some(3), Some(1), Some(2), Some(2), Some(1))
    );
    t.write("empty.jsonl", b"");
    let out = t.td(&["append", "t", "--file", "empty.jsonl", "--json"]);
    assert!(out.status.success());
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (e["committed"].clone(), e["reason"].clone()),
        (false.into(), "noRows".into())
    );
    // describe: the JSON's rows and bytes are the text's rows: and bytes:.
    let d: serde_json::Value = serde_json::from_slice(&t.td(&["describe", "t", "--json"]).stdout).unwrap();
    let text = String::from_utf8(t.td(&["describe", "t"]).stdout).unwrap();
    assert!(text.contains(&format!("rows:    {}\n", d["rows"])), "{text}");
    assert!(text.contains(&format!("bytes:   {}\n", d["bytes"])), "{text}");
    assert_eq!(
        (d["rows"].clone(), d["bytes"].clone()),
        (d["numRecords"].clone(), d["sizeBytes"].clone())
    );
}

/// The longest line is one documented, configurable limit: 16 MiB by default for `append` and
/// `overwrite` (as for the mount), `--max-line-bytes` to change it, either way.
#[test]
fn the_line_limit_is_16_mib_and_max_line_bytes_changes_it() {
    let t = T::new();
    // One 50 MB line (a canonical row: the one-pass path would copy it).
    let mut big = b"{\"id\":1,\"region\":\"".to_vec();
    big.resize(big.len() + 50_000_000, b'x');
    big.extend_from_slice(b"\",\"year\":null,\"amount\":null}\n");
    t.write("big.jsonl", &big);
    let (code, _, err) = t.append("big.jsonl", &[]);
    assert_eq!(code, 5, "{err:?}");
    assert!(err[0].contains("line 1") && err[0].contains("16777216"), "{err:?}");
    assert_eq!(t.latest(), 0);
    let (code, out, err) = t.append("big.jsonl", &["--max-line-bytes", "67108864"]);
    assert_eq!(code, 0, "{err:?}");
    assert!(out.contains("appended 1 row"), "{out}");
    assert_eq!(t.read().len(), big.len());
    let out = t.td(&["overwrite", "t", "--file", "big.jsonl", "--max-line-bytes", "67108864"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A lower limit holds for a canonical row too (which the one-pass path would copy).
    t.write(
        "small.jsonl",
        b"{\"id\":1,\"region\":\"abcdefghij\",\"year\":null,\"amount\":null}\n",
    );
    let (code, _, err) = t.append("small.jsonl", &["--max-line-bytes", "20"]);
    assert_eq!(code, 5, "{err:?}");
    assert!(err[0].contains("maximum of 20 bytes"), "{err:?}");
    let out = t.td_stdin(
        &["overwrite", "t", "--max-line-bytes", "20"],
        Some(b"{\"id\":1,\"region\":\"abcdefghij\"}\n"),
    );
    assert_eq!(out.status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(t.latest(), 2);
}

/// A 10 MB key, an unknown column, is quoted only up to about 200 bytes, with its length: the
/// error on stderr and the `--rejects` errors file stay short (docs/CLI.md "Input rules").
#[test]
fn a_huge_key_is_quoted_short() {
    let t = T::new();
    let key = "k".repeat(10_000_000);
    let row = format!("{{\"id\":1,\"{key}\":1}}\n");
    fs::write(t.path("in.jsonl"), &row).unwrap();
    let out = t.td(&["append", "t", "--file", "in.jsonl", "--rejects", "rej.jsonl"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{}", &err[..err.len().min(500)]);
    let quoted = format!("column \"{}...\" (10000000 bytes in all)", &key[..200]);
    assert!(err.contains(&quoted), "{}", &err[..err.len().min(500)]);
    assert!(err.len() < 2000, "stderr is {} bytes", err.len());
    let errors = fs::read(t.path("rej.jsonl.errors")).unwrap_or_default();
    assert!(errors.len() < 2000, "the errors file is {} bytes", errors.len());
    // The rejected line itself is kept whole in the rejects file.
    assert_eq!(fs::read(t.path("rej.jsonl")).unwrap(), row.as_bytes());
}

/// `--rejects` with one line, and that line bad: the bad line and "every line is bad", exit 5
/// (it was an index out of bounds, exit 101, when the report had no count line to replace).
#[test]
fn rejects_of_a_single_bad_line() {
    let t = T::new();
    fs::write(t.path("in.jsonl"), "{\"x\":1}\n").unwrap();
    let out = t.td(&["append", "t", "--file", "in.jsonl", "--rejects", "rej.jsonl"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("in.jsonl: line 1, column \"x\": unknown column"), "{err}");
    assert!(
        err.contains("in.jsonl: every line is bad (1 bad line, written to rej.jsonl"),
        "{err}"
    );
    assert_eq!(fs::read(t.path("rej.jsonl")).unwrap(), b"{\"x\":1}\n");
}

/// The CSV hint's command, as printed, converts the file with the `duckdb` of the pip package
/// `duckdb-cli` (scripts/test.sh puts it beside TINYDELTA_DELTA_PYTHON) with no network at all
/// (`unshare -n`), and its output appends the rows the CSV holds.
#[test]
fn the_csv_hints_command_runs_offline_and_appends_the_rows() {
    // Names the shell would expand inside double quotes, and a quote for SQL: the pasted
    // command reads the file and runs nothing else.
    for (i, name) in [
        "orders.csv",
        "$(touch PWNED) o'k.csv",
        "`touch PWNED`.csv",
        "a\\b\"c!.csv",
    ]
    .iter()
    .enumerate()
    {
        let t = T::new();
        t.write(name, b"id,region,year,amount\n1,EU,2024,1.5\n2,US,2025,\n");
        let (code, _, err) = t.append(name, &[]);
        assert_eq!(code, 5, "{err:?}");
        let hint = err.iter().find(|l| l.starts_with("tinydelta: hint: ")).expect("a hint");
        assert!(hint.contains("pip install duckdb-cli"), "{hint}");
        let cmd = hint
            .split_once("e.g. `")
            .and_then(|(_, rest)| rest.rsplit_once("` (the `duckdb`"))
            .map(|(cmd, _)| cmd.replace("tinydelta append TABLE", "tinydelta append t"))
            .expect("the hint quotes a command");
        let bin_dir = std::path::Path::new(&crate::support::mount::delta_python())
            .parent()
            .expect("the venv's bin folder")
            .to_path_buf();
        assert!(
            bin_dir.join("duckdb").exists(),
            "no duckdb in {} (scripts/test.sh installs duckdb-cli there)",
            bin_dir.display()
        );
        let td_dir = std::path::Path::new(TD_BIN).parent().expect("the binary's folder");
        let path = format!(
            "{}:{}:{}",
            bin_dir.display(),
            td_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("unshare")
            .args(["-n", "sh", "-c", &format!("set -e; {cmd}")])
            .env("PATH", path)
            .env("HOME", t.path(""))
            .current_dir(t.path(""))
            .output()
            .expect("run unshare");
        assert!(
            out.status.success(),
            "case {i}: `{cmd}` offline: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !t.path("PWNED").exists(),
            "case {i}: `{cmd}` ran a command from the file name"
        );
        let read = t.td(&["read", "t"]);
        assert!(read.status.success());
        assert_eq!(
            String::from_utf8_lossy(&read.stdout),
            "{\"id\":1,\"region\":\"EU\",\"year\":2024,\"amount\":1.5}\n{\"id\":2,\"region\":\"US\",\"year\":2025,\"amount\":null}\n",
            "case {i}: `{cmd}`"
        );
    }
}
