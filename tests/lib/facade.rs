//! The library as another program uses it: only the names the facade exports (`tinydelta::Table`,
//! `tinydelta::check`, ...), never a layer's module path. A name this test needs that the facade
//! does not export fails to compile here.

use tinydelta::check::{CheckOptions, check};
use tinydelta::optimize::{OptimizeOptions, optimize};
use tinydelta::vacuum::{VacuumOptions, vacuum};
use tinydelta::{Error, ErrorKind, Schema, Table, WriteOptions};

fn schema() -> Schema {
    Schema::parse_cli(&["id:int!".to_string(), "name:str".to_string()]).expect("schema")
}

fn rows(t: &Table, version: u64) -> String {
    let snap = t.snapshot(version).expect("snapshot");
    let mut out = Vec::new();
    t.write_rows(&snap, &mut out).expect("rows");
    String::from_utf8(out).expect("utf-8 rows")
}

#[test]
fn a_program_creates_writes_time_travels_and_maintains_a_table_through_the_facade() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("t");
    let t = Table::create(&root, &schema()).expect("create");
    let opts = WriteOptions::default();
    let v1 = t
        .append("api", "{\"id\":1,\"name\":\"a\"}\n{\"id\":2}\n".as_bytes(), &opts)
        .expect("append");
    assert_eq!(v1, Some(1));
    let v2 = t
        .overwrite("api", "{\"id\":3,\"name\":\"c\"}\n".as_bytes(), &opts)
        .expect("overwrite");
    assert_eq!(v2, 2);
    assert_eq!(rows(&t, 1), "{\"id\":1,\"name\":\"a\"}\n{\"id\":2,\"name\":null}\n");
    assert_eq!(rows(&t, 2), "{\"id\":3,\"name\":\"c\"}\n");
    assert_eq!(t.restore(1, &opts).expect("restore"), 3);
    assert_eq!(rows(&t, 3), rows(&t, 1));
    // Another handle sees every version.
    let again = Table::open(&root).expect("open");
    assert_eq!(again.latest_version().expect("latest"), 3);
    let ops: Vec<String> = again
        .history()
        .expect("history")
        .into_iter()
        .map(|h| h.commit_info.operation)
        .collect();
    assert_eq!(ops, ["CREATE TABLE", "WRITE", "WRITE", "RESTORE"]);

    // Small files compact into one OPTIMIZE commit with the same rows.
    for id in 4..8 {
        t.append("api", format!("{{\"id\":{id}}}\n").as_bytes(), &opts)
            .expect("append");
    }
    let before = rows(&t, t.latest_version().expect("latest"));
    let report = optimize(&t, &OptimizeOptions::default()).expect("optimize");
    let v = report.version.expect("an OPTIMIZE commit");
    assert_eq!(report.files_after, 1);
    assert_eq!(rows(&t, v), before);

    let whole = check(
        &t,
        &CheckOptions {
            deep: true,
            repair: false,
        },
    )
    .expect("check");
    assert!(whole.is_whole(), "{:?}", whole.problems);
    let dry = vacuum(
        &t,
        &VacuumOptions {
            dry_run: true,
            ..VacuumOptions::default()
        },
    )
    .expect("vacuum --dry-run");
    assert!(dry.deleted.is_empty(), "nothing is old enough: {:?}", dry.deleted);
}

#[test]
fn errors_say_what_kind_of_failure_they_are() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = Table::open(dir.path().join("nope")).expect_err("no table there");
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");

    let t = Table::create(dir.path().join("t"), &schema()).expect("create");
    let bad = t
        .append("api", "{\"id\":\"one\"}\n".as_bytes(), &WriteOptions::default())
        .expect_err("a string in an int column");
    assert_eq!(bad.kind(), ErrorKind::BadInput, "{bad}");
    assert!(matches!(bad, Error::BadInput { .. }), "{bad:?}");
    assert_eq!(t.latest_version().expect("latest"), 0, "nothing was committed");

    let stale = WriteOptions {
        expect_version: Some(7),
        ..WriteOptions::default()
    };
    let conflict = t
        .append("api", "{\"id\":1}\n".as_bytes(), &stale)
        .expect_err("expect_version 7 does not hold");
    assert_eq!(conflict.kind(), ErrorKind::Conflict, "{conflict}");
    // Error is #[non_exhaustive]: another crate's match needs a wildcard arm.
    let said = match &conflict {
        Error::ConcurrentWrite { read_version, .. } => format!("lost against version {read_version}"),
        other => other.to_string(),
    };
    assert_eq!(said, "lost against version 7");
}
