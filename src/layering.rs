//! The layering rule of docs/ARCHITECTURE.md, checked on the source: every `crate::` path in a
//! layer's code (comments and `mod tests` excluded) names its own layer or one below it, and the
//! modules form no import cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. `error` and `util` share the bottom.
const LAYERS: [(&str, u8); 9] = [
    ("error", 0),
    ("util", 0),
    ("sys", 1),
    ("format", 2),
    ("log", 3),
    ("table", 4),
    ("ops", 5),
    ("mount", 6),
    ("serve", 6),
];

/// Layers of one rank that must not import each other: the mount and the server are two
/// front ends beside each other (docs/ARCHITECTURE.md "Imports point one way").
const APART: [(&str, &str); 2] = [("mount", "serve"), ("serve", "mount")];

fn rank(layer: &str) -> Option<u8> {
    LAYERS.iter().find(|(n, _)| *n == layer).map(|(_, r)| *r)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code lines of `text`: comments dropped, and nothing from `#[cfg(test)]` on (test modules
/// sit at the end of a file).
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let code = match line.find("//") {
            // A `//` inside a string literal ("http://") is rare in this crate's imports; cut at
            // the first `//` that is not preceded by ':' (a URL).
            Some(i) if !line[..i].ends_with(':') => &line[..i],
            _ => line,
        };
        out.push((i + 1, code.to_string()));
    }
    out
}

/// `crate::a::b` paths in `code`: (a, b) with b possibly empty.
fn crate_paths(code: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = &rest[..i];
        rest = &rest[i + "crate::".len()..];
        if before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
            continue; // `$crate::`, `foo_crate::`, `x::crate::`
        }
        let ident = |s: &str| {
            s.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        };
        let a = ident(rest);
        let after = &rest[a.len()..];
        let b = after.strip_prefix("::").map(ident).unwrap_or_default();
        out.push((a, b));
    }
    out
}

#[test]
fn imports_point_down_the_layers_and_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    // module (layer/file stem) -> modules it names
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src");
        let parts: Vec<&str> = rel.iter().map(|c| c.to_str().expect("utf-8 path")).collect();
        let layer = parts[0].trim_end_matches(".rs");
        let Some(own) = rank(layer) else { continue }; // lib.rs, bin/, this file
        let module = match parts.get(1) {
            Some(m) => format!("{layer}::{}", m.trim_end_matches(".rs")),
            None => layer.to_string(),
        };
        let text = std::fs::read_to_string(f).expect("read a source file");
        for (line, code) in code_lines(&text) {
            for (a, b) in crate_paths(&code) {
                let Some(r) = rank(&a) else {
                    wrong.push(format!(
                        "{}:{line}: crate::{a} is not a layer (name the defining module, not the facade)",
                        rel.display()
                    ));
                    continue;
                };
                if APART.contains(&(layer, a.as_str())) {
                    wrong.push(format!(
                        "{}:{line}: {layer} imports crate::{a}, a layer beside it",
                        rel.display()
                    ));
                }
                if r > own {
                    wrong.push(format!(
                        "{}:{line}: {layer} (layer {own}) imports crate::{a} (layer {r})",
                        rel.display()
                    ));
                }
                let target = if b.is_empty() || b.starts_with(|c: char| c.is_uppercase()) || a == "error" {
                    a.clone()
                } else {
                    format!("{a}::{b}")
                };
                let target = if files.iter().any(|g| {
                    g.strip_prefix(&src).is_ok_and(|r| {
                        r == Path::new(&format!("{}.rs", target.replace("::", "/")))
                            || r == Path::new(&format!("{}/mod.rs", target.replace("::", "/")))
                    })
                }) {
                    target
                } else {
                    a.clone()
                };
                if target != module && !module.starts_with(&format!("{target}::")) {
                    graph.entry(module.clone()).or_default().insert(target);
                }
            }
            // Siblings by `super::x` inside a layer.
            if parts.len() > 2 || (parts.len() == 2 && parts[1] != "mod.rs") {
                let mut rest = code.as_str();
                while let Some(i) = rest.find("super::") {
                    rest = &rest[i + "super::".len()..];
                    let m: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    let sib = format!("{layer}::{m}");
                    if m.chars().next().is_some_and(|c| c.is_lowercase())
                        && sib != module
                        && files.iter().any(|g| {
                            g.strip_prefix(&src).is_ok_and(|r| {
                                r == Path::new(&format!("{layer}/{m}.rs"))
                                    || r == Path::new(&format!("{layer}/{m}/mod.rs"))
                            })
                        })
                    {
                        graph.entry(module.clone()).or_default().insert(sib);
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering of docs/ARCHITECTURE.md:\n{}",
        wrong.join("\n")
    );
    // No cycle: depth-first search with colours.
    fn visit<'a>(
        n: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let from = stack.iter().position(|s| *s == n).unwrap_or(0);
                let mut cycle: Vec<String> = stack[from..].iter().map(|s| s.to_string()).collect();
                cycle.push(n.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(n, 1);
        stack.push(n);
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n, 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if let Some(cycle) = visit(n, &graph, &mut state, &mut Vec::new()) {
            panic!("module import cycle: {}", cycle.join(" -> "));
        }
    }
    assert!(
        graph.len() > 20,
        "only {} modules found: did the layout change?",
        graph.len()
    );
}

#[test]
fn the_path_finder_finds_paths() {
    assert_eq!(
        crate_paths("use crate::log::files::{self, X}; $crate::y; crate::Table"),
        [("log".into(), "files".into()), ("Table".into(), String::new())]
    );
    assert_eq!(
        code_lines("a\n// b\nc // d\n#[cfg(test)]\ne"),
        [(1, "a".into()), (3, "c ".into())]
    );
}
