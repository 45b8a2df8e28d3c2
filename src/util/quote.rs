//! Quoting input in messages: a name, key or value read from input is quoted only up to
//! [`QUOTED_BYTES`] bytes, so a 10 MB JSON key or column name makes a short error, not a 10 MB
//! one (docs/CLI.md "Input rules").

/// The most bytes of one input string a message quotes; a longer one is cut there (at a
/// character boundary), with `...` and its full length after the closing quote.
pub const QUOTED_BYTES: usize = 200;

/// `s` cut to at most [`QUOTED_BYTES`] bytes at a character boundary, and whether it was cut.
fn head(s: &str) -> (&str, bool) {
    if s.len() <= QUOTED_BYTES {
        return (s, false);
    }
    let mut end = QUOTED_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

fn cut(s: &str, quote: impl Fn(&str) -> String) -> String {
    match head(s) {
        (h, false) => quote(h),
        (h, true) => {
            let q = quote(h);
            let open = &q[..q.len() - 1];
            format!("{open}...\" ({} bytes in all)", s.len())
        }
    }
}

/// `s` quoted as Rust's `{:?}` does (`"a\nb"`), cut to [`QUOTED_BYTES`] bytes of `s`:
/// `"abc..." (10000000 bytes in all)`.
pub fn quoted(s: &str) -> String {
    cut(s, |h| format!("{h:?}"))
}

/// `s` unquoted (a JSON value as text, say), cut as [`quoted`] cuts: `abc... (10000000 bytes in all)`.
pub fn shortened(s: &str) -> String {
    match head(s) {
        (h, false) => h.to_string(),
        (h, true) => format!("{h}... ({} bytes in all)", s.len()),
    }
}

/// `s` quoted as a JSON string (`"a\nb"`), cut as [`quoted`] cuts.
pub fn json_quoted(s: &str) -> String {
    cut(s, |h| serde_json::to_string(h).unwrap_or_else(|_| format!("{h:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_input_is_cut_with_its_length() {
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
        assert_eq!(json_quoted("a\u{1}"), "\"a\\u0001\"");
        let long = "é".repeat(1000);
        let q = quoted(&long);
        assert!(q.starts_with("\"éé") && q.ends_with("...\" (2000 bytes in all)"), "{q}");
        assert_eq!(q.len(), 1 + QUOTED_BYTES + "...\" (2000 bytes in all)".len());
        let exact = "k".repeat(QUOTED_BYTES);
        assert_eq!(json_quoted(&exact), format!("\"{exact}\""));
        assert!(json_quoted(&format!("{exact}k")).ends_with("...\" (201 bytes in all)"));
        assert_eq!(shortened(&format!("{exact}k")), format!("{exact}... (201 bytes in all)"));
    }
}
