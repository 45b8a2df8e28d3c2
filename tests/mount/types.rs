//! Nested and exact types through a real mount (docs/FORMAT.md "Column types", docs/MOUNT.md):
//! `latest/data.jsonl` and `schema.json` of a table with struct, array, map, decimal, binary,
//! `timestamp_ntz` and `json` columns, a commit of such rows by `cp` into `incoming/`, and a
//! refused file whose note names the nested path of the bad value.

use std::fs;
use std::process::Command;

use crate::support::mount::Fixture;

const COLUMNS: &[&str] = &[
    "id:int!",
    "user:struct<id:int!,name:str>",
    "tags:array<str>",
    "price:decimal(8,2)",
    "doc:json",
    "b:binary",
    "n:timestamp_ntz",
    "m:map<str,int>",
];

#[test]
fn nested_rows_commit_through_incoming_and_read_back_through_the_mount() {
    let f = Fixture::empty(COLUMNS);
    let _m = f.mount();
    let work = f.dir.path().join("rows.jsonl");
    fs::write(
        &work,
        "{\"id\":1,\"user\":{\"name\":\"a\",\"id\":7},\"tags\":[\"x\"],\"price\":2.5,\"doc\":{\"coordinates\":[[1.5,2],[3,4]]},\"b\":\"AAE=\",\"n\":\"2024-03-01T12:00:00\",\"m\":{\"k\":1}}\n\
         {\"id\":2,\"doc\":\"just a string\",\"tags\":[]}\n",
    )
    .unwrap();
    let cp = Command::new("cp")
        .arg(&work)
        .arg(f.m("incoming/rows.jsonl"))
        .output()
        .unwrap();
    assert!(cp.status.success(), "cp: {}", String::from_utf8_lossy(&cp.stderr));
    assert_eq!(f.latest(), 1);
    let expected = "{\"id\":1,\"user\":{\"id\":7,\"name\":\"a\"},\"tags\":[\"x\"],\"price\":2.50,\"doc\":{\"coordinates\":[[1.5,2],[3,4]]},\"b\":\"AAE=\",\"n\":\"2024-03-01T12:00:00\",\"m\":{\"k\":1}}\n\
                    {\"id\":2,\"user\":null,\"tags\":[],\"price\":null,\"doc\":\"just a string\",\"b\":null,\"n\":null,\"m\":null}\n";
    assert_eq!(fs::read_to_string(f.m("latest/data.jsonl")).unwrap(), expected);
    assert_eq!(fs::read_to_string(f.m("v/1/data.jsonl")).unwrap(), expected);
    assert_eq!(String::from_utf8(f.read_v(1)).unwrap(), expected);
    let schema: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(f.m("latest/schema.json")).unwrap()).unwrap();
    assert_eq!(schema["columns"][1]["type"], "struct<id:int!,name:str>");
    assert_eq!(schema["columns"][1]["deltaType"]["fields"][0]["name"], "id");
    assert_eq!(schema["columns"][3]["deltaType"], "decimal(8,2)");
    assert_eq!(schema["columns"][4]["deltaType"], "variant");

    // A bad nested value: the copy fails, the note names the path, nothing is committed.
    fs::write(&work, "{\"id\":3,\"user\":{\"id\":1,\"name\":[1]}}\n").unwrap();
    let cp = Command::new("cp")
        .arg(&work)
        .arg(f.m("incoming/bad.jsonl"))
        .output()
        .unwrap();
    assert!(!cp.status.success(), "cp of a bad file must fail");
    let note = fs::read_to_string(f.m("incoming/bad.jsonl.error")).unwrap();
    assert!(
        note.starts_with("incoming/bad.jsonl: line 1, column \"user.name\": expected str, found array"),
        "{note}"
    );
    assert_eq!(f.latest(), 1);
}
