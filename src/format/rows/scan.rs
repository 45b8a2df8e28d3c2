//! A scanner for flat JSON objects (no nesting, no escapes), the fast path's parser.

#[allow(unused_imports)]
use super::*;

/// Scan `text` as one flat JSON object whose keys and string values contain no escapes or
/// control characters and whose values are strings, numbers, `true`, `false` or `null`,
/// pushing `(key, raw value)` pairs. Returns `false` for anything else, valid JSON or not;
/// the caller then parses with serde_json. Accepts exactly what RFC 8259 accepts within that
/// subset.
pub(super) fn scan_flat<'a>(text: &'a str, fields: &mut Vec<(&'a str, &'a str)>) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    let ws = |i: &mut usize| {
        while *i < b.len() && matches!(b[*i], b' ' | b'\t' | b'\n' | b'\r') {
            *i += 1;
        }
    };
    // A string starting at b[i] == '"'; returns the index after the closing quote.
    let string = |i: usize| -> Option<usize> {
        let mut j = i + 1;
        while j < b.len() {
            match b[j] {
                b'"' => return Some(j + 1),
                b'\\' | 0..=0x1f => return None,
                _ => j += 1,
            }
        }
        None
    };
    let digits = |i: &mut usize| -> bool {
        let s = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > s
    };
    ws(&mut i);
    if b.get(i) != Some(&b'{') {
        return false;
    }
    i += 1;
    ws(&mut i);
    if b.get(i) == Some(&b'}') {
        i += 1;
        ws(&mut i);
        return i == b.len();
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return false;
        }
        let Some(kend) = string(i) else { return false };
        let key = &text[i + 1..kend - 1];
        i = kend;
        ws(&mut i);
        if b.get(i) != Some(&b':') {
            return false;
        }
        i += 1;
        ws(&mut i);
        let vstart = i;
        match b.get(i) {
            Some(b'"') => match string(i) {
                Some(e) => i = e,
                None => return false,
            },
            Some(b'-' | b'0'..=b'9') => {
                if b[i] == b'-' {
                    i += 1;
                }
                match b.get(i) {
                    Some(b'0') => i += 1,
                    Some(b'1'..=b'9') => {
                        digits(&mut i);
                    }
                    _ => return false,
                }
                if b.get(i) == Some(&b'.') {
                    i += 1;
                    if !digits(&mut i) {
                        return false;
                    }
                }
                if matches!(b.get(i), Some(b'e' | b'E')) {
                    i += 1;
                    if matches!(b.get(i), Some(b'+' | b'-')) {
                        i += 1;
                    }
                    if !digits(&mut i) {
                        return false;
                    }
                }
            }
            _ => {
                let lit = [&b"true"[..], b"false", b"null"]
                    .into_iter()
                    .find(|l| b[i..].starts_with(l));
                match lit {
                    Some(l) => i += l.len(),
                    None => return false,
                }
            }
        }
        fields.push((key, &text[vstart..i]));
        ws(&mut i);
        match b.get(i) {
            Some(b',') => {
                i += 1;
                ws(&mut i);
            }
            Some(b'}') => {
                i += 1;
                ws(&mut i);
                return i == b.len();
            }
            _ => return false,
        }
    }
}
