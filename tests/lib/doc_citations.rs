//! The docs' citations stay true. Code comments cite a section of the docs as a file name and a
//! heading in double quotes (`docs/<FILE>.md "<Heading>"`, or the same form naming the top-level
//! `README.md`), and the heading text must be exactly that of a `#` to `####` heading of the
//! file. Every relative link of `README.md` and `docs/*.md` must name a file that exists and,
//! after a `#`, one of its headings by GitHub's anchor rule.
//!
//! Every failure is reported at once, as `file:line: what is wrong`. A floor on the number of
//! citations found keeps a change of their form from making this pass without checking anything.

use std::collections::HashMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The fewest citations the scan must find in `src/`, `tests/` and `scripts/` (there were 189
/// when this test was written): fewer means it no longer recognises their form.
const MIN_CITATIONS: usize = 100;

/// The fewest relative links the scan must find in `README.md` and `docs/*.md`.
const MIN_LINKS: usize = 40;

/// The folders whose text files are searched for citations.
const CITING: [&str; 3] = ["src", "tests", "scripts"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `path` relative to the repository, for messages.
fn shown(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

/// Every file under `dir`, recursively, in name order.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            files_under(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

/// `path` with `.` and `..` resolved by name (the files named here are not symlinks).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c.as_os_str()),
        }
    }
    out
}

/// GitHub's anchor of a heading: lowercase, punctuation other than `-` and `_` removed, each
/// space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// Whether a line of markdown opens or closes a fenced code block.
fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// The headings of one markdown file.
struct Headings {
    /// The text of every `#` to `####` heading, as citations name it.
    texts: Vec<String>,
    /// The anchor of every heading, as links name it (a repeated one gets `-1`, `-2`, ...).
    anchors: Vec<String>,
}

fn headings(markdown: &str) -> Headings {
    let mut texts = Vec::new();
    let mut anchors = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if is_fence(line) {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let level = line.bytes().take_while(|&b| b == b'#').count();
        if level == 0 || level > 6 {
            continue;
        }
        let Some(text) = line[level..].strip_prefix(' ') else {
            continue;
        };
        let text = text.trim();
        if level <= 4 {
            texts.push(text.to_string());
        }
        let base = slug(text);
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.push(if *n == 0 { base } else { format!("{base}-{n}") });
        *n += 1;
    }
    Headings { texts, anchors }
}

/// The markdown files read so far, by normalized path; `None` for one that cannot be read.
#[derive(Default)]
struct Docs {
    read: HashMap<PathBuf, Option<Headings>>,
}

impl Docs {
    fn get(&mut self, path: &Path) -> Option<&Headings> {
        let key = normalize(path);
        self.read
            .entry(key.clone())
            .or_insert_with(|| fs::read_to_string(&key).ok().map(|t| headings(&t)))
            .as_ref()
    }
}

/// One citation found in a source file.
struct Citation {
    /// 1-based line of the file name.
    line: usize,
    /// The cited file, relative to the repository root.
    file: String,
    /// The heading between the quotes (its comment line breaks joined by one space), or why
    /// none was found.
    heading: Result<String, String>,
}

/// Whether `b` may be part of a path, so that a file name after it is part of a longer path.
fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"._/-".contains(&b)
}

/// Length of the cited file name at the start of `b`: `docs/` + a name + `.md`, or the
/// top-level readme.
fn cited_file_len(b: &[u8]) -> Option<usize> {
    if let Some(rest) = b.strip_prefix(b"docs/") {
        let name = rest
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'-')
            .count();
        (name > 0 && rest[name..].starts_with(b".md")).then_some(5 + name + 3)
    } else {
        b.starts_with(b"README.md").then_some(9)
    }
}

/// Every citation in `text`: a cited file name (not inside a longer path), an optional comma,
/// at least one space, then a heading in double quotes. A heading may run onto the next comment
/// lines: the line break, the comment marker (`//!`, `///`, `//` or `#`) and the spaces around
/// it count as one space.
fn citations(text: &str) -> Vec<Citation> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut line = 1;
    let mut counted = 0;
    let mut i = 0;
    while i < b.len() {
        let Some(len) = cited_file_len(&b[i..]).filter(|_| i == 0 || !is_path_byte(b[i - 1])) else {
            i += 1;
            continue;
        };
        let mut j = i + len;
        if b.get(j) == Some(&b',') {
            j += 1;
        }
        let spaces = b[j..].iter().take_while(|&&c| c == b' ').count();
        if spaces == 0 || b.get(j + spaces) != Some(&b'"') {
            i += 1;
            continue;
        }
        line += b[counted..i].iter().filter(|&&c| c == b'\n').count();
        counted = i;
        let file = text[i..i + len].to_string();
        let mut k = j + spaces + 1;
        let mut heading = String::new();
        let mut breaks = 0;
        let mut closed = false;
        while k < b.len() {
            match b[k] {
                b'"' => {
                    closed = true;
                    break;
                }
                b'\n' => {
                    breaks += 1;
                    if breaks > 3 {
                        break;
                    }
                    k += 1;
                    while k < b.len() && (b[k] == b' ' || b[k] == b'\t') {
                        k += 1;
                    }
                    for marker in ["//!", "///", "//", "#"] {
                        if b[k..].starts_with(marker.as_bytes()) {
                            k += marker.len();
                            break;
                        }
                    }
                    while k < b.len() && (b[k] == b' ' || b[k] == b'\t') {
                        k += 1;
                    }
                    heading.push(' ');
                }
                _ => {
                    let c = text[k..].chars().next().expect("k is at a char boundary");
                    heading.push(c);
                    k += c.len_utf8();
                }
            }
        }
        if closed {
            out.push(Citation {
                line,
                file,
                heading: Ok(heading),
            });
            i = k + 1;
        } else {
            out.push(Citation {
                line,
                file,
                heading: Err(format!("the quoted heading after it has no closing quote: {heading:?}")),
            });
            i = j;
        }
    }
    out
}

/// Every link target of `markdown` (`[text](target)`) outside fenced code, with its 1-based line.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in markdown.lines().enumerate() {
        if is_fence(line) {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(p) = rest.find("](") {
            let after = &rest[p + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, after[..end].to_string()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn doc_citations_name_existing_headings_and_links_resolve() {
    let mut docs = Docs::default();
    let mut failures = Vec::new();

    // Citations in the code, the tests and the scripts.
    let mut sources = Vec::new();
    for dir in CITING {
        files_under(&root().join(dir), &mut sources);
    }
    let mut found = 0;
    for path in &sources {
        // Only text files: anything that is not UTF-8 holds no citation.
        let Ok(text) = fs::read_to_string(path) else { continue };
        for c in citations(&text) {
            found += 1;
            let at = format!("{}:{}", shown(path), c.line);
            let heading = match c.heading {
                Ok(h) => h,
                Err(why) => {
                    failures.push(format!("{at}: cites {}, but {why}", c.file));
                    continue;
                }
            };
            match docs.get(&root().join(&c.file)) {
                None => failures.push(format!("{at}: cites {}, which does not exist", c.file)),
                Some(h) if !h.texts.contains(&heading) => failures.push(format!(
                    "{at}: cites {} \"{heading}\", but {} has no `#` to `####` heading with exactly that text",
                    c.file, c.file
                )),
                Some(_) => {}
            }
        }
    }

    // Relative links in the readme and the docs.
    let mut markdown = vec![root().join("README.md")];
    let mut in_docs = Vec::new();
    files_under(&root().join("docs"), &mut in_docs);
    markdown.extend(in_docs.into_iter().filter(|p| p.extension().is_some_and(|e| e == "md")));
    let mut linked = 0;
    for md in &markdown {
        let Ok(text) = fs::read_to_string(md) else {
            failures.push(format!("{}: cannot be read", shown(md)));
            continue;
        };
        let dir = md.parent().expect("a file has a folder");
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            linked += 1;
            let at = format!("{}:{line}", shown(md));
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                md.clone()
            } else {
                normalize(&dir.join(file))
            };
            if !path.exists() {
                failures.push(format!("{at}: link ({target}): {} does not exist", shown(&path)));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if path.extension().is_none_or(|e| e != "md") {
                continue;
            }
            match docs.get(&path) {
                None => failures.push(format!("{at}: link ({target}): {} cannot be read", shown(&path))),
                Some(h) if !h.anchors.iter().any(|a| a == anchor) => failures.push(format!(
                    "{at}: link ({target}): {} has no heading whose anchor is #{anchor}",
                    shown(&path)
                )),
                Some(_) => {}
            }
        }
    }

    assert!(
        failures.is_empty(),
        "{} broken doc citations or links:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        found >= MIN_CITATIONS,
        "only {found} doc citations found in {CITING:?} (at least {MIN_CITATIONS} expected): did their form change?"
    );
    assert!(
        linked >= MIN_LINKS,
        "only {linked} relative links found in README.md and docs/*.md (at least {MIN_LINKS} expected)"
    );
}

#[test]
fn the_scan_reads_citations_as_written() {
    let text = "/// see docs/MOUNT.md \"Re-saves\" and (docs/FORMAT.md, \"Log replay and\n    /// checkpoints\"), not ../docs/X.md \"No\" nor mydocs/Y.md \"No\"; README.md \"Install\".\n# docs/A.md \"open";
    let found: Vec<(usize, String, Result<String, String>)> = citations(text)
        .into_iter()
        .map(|c| (c.line, c.file, c.heading))
        .collect();
    assert_eq!(found.len(), 4, "{found:?}");
    assert_eq!(found[0], (1, "docs/MOUNT.md".to_string(), Ok("Re-saves".to_string())));
    assert_eq!(
        found[1],
        (
            1,
            "docs/FORMAT.md".to_string(),
            Ok("Log replay and checkpoints".to_string())
        )
    );
    assert_eq!(found[2], (2, "README.md".to_string(), Ok("Install".to_string())));
    assert_eq!(found[3].0, 3);
    assert!(found[3].2.is_err(), "{found:?}");
}

#[test]
fn anchors_follow_github() {
    assert_eq!(slug("Time travel by time: `at/`"), "time-travel-by-time-at");
    assert_eq!(slug("`v/<n>/parts/`"), "vnparts");
    assert_eq!(
        slug("Ingest through `incoming/`, as it was built"),
        "ingest-through-incoming-as-it-was-built"
    );
    assert_eq!(
        slug("Final full run: commit 3628b38 (2026-12-02)"),
        "final-full-run-commit-3628b38-2026-12-02"
    );
    let h = headings("# A\n\n```\n# not a heading\n```\n## A\n##### Deep\n#NoSpace\n");
    assert_eq!(h.texts, ["A", "A"]);
    assert_eq!(h.anchors, ["a", "a-1", "deep"]);
}
