//! Scalar checks and helpers: integers, floats as written, strings, dates, timestamps, JSON
//! kinds and error excerpts.

#[allow(unused_imports)]
use super::*;

/// `hay` starts with `needle`, compared eight bytes at a time: keys and timestamps are short, and
/// a `memcmp` call per key cost more than the comparison (a profile of the one-pass check).
#[inline]
pub(super) fn starts_with(hay: &[u8], needle: &[u8]) -> bool {
    if hay.len() < needle.len() {
        return false;
    }
    let (mut h, mut n) = (&hay[..needle.len()], needle);
    while let (Some((hw, hr)), Some((nw, nr))) = (h.split_first_chunk::<8>(), n.split_first_chunk::<8>()) {
        if hw != nw {
            return false;
        }
        (h, n) = (hr, nr);
    }
    h.iter().zip(n).all(|(a, b)| a == b)
}

/// Whether `raw` is `f` as [`Canonicalizer::emit`] writes a float column's value (serde_json's
/// formatting), formatted into a buffer on the stack.
pub(super) fn float_written_as(f: f64, raw: &[u8]) -> bool {
    let mut buf = [0u8; 40];
    let mut w: &mut [u8] = &mut buf;
    if serde_json::to_writer(&mut w, &f).is_err() {
        return false;
    }
    let n = 40 - w.len();
    &buf[..n] == raw
}

/// `b[i..]` starts with `lit`.
#[inline]
pub(super) fn literal_at(b: &[u8], i: usize, lit: &[u8]) -> bool {
    b.get(i..).is_some_and(|h| starts_with(h, lit))
}

/// The canonical JSON integer at `b[i..]` (no leading zero, no `-0`, no fraction or exponent:
/// the caller checks the byte after it), its value and the index after it.
#[inline]
pub(super) fn canonical_int(b: &[u8], mut i: usize) -> Option<(i64, usize)> {
    let neg = b.get(i) == Some(&b'-');
    if neg {
        i += 1;
    }
    // One pass: at most 19 digits fit a u64 (< 1.9e19), checked against the i64 range below.
    let first = i;
    let mut m: u64 = 0;
    while let Some(&c) = b.get(i) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        if i - first == 19 {
            return None;
        }
        m = m * 10 + u64::from(d);
        i += 1;
    }
    let digits = i - first;
    if digits == 0 || (b[first] == b'0' && (digits > 1 || neg)) {
        return None;
    }
    let v = match (neg, i64::try_from(m)) {
        (false, Ok(v)) => v,
        (true, Ok(v)) => -v,
        (true, Err(_)) if m == 1 << 63 => i64::MIN,
        _ => return None,
    };
    Some((v, i))
}

/// The index of the `"` that ends the string value whose bytes start at `b[s]` (just after its
/// opening quote), when the value has no escape or control character and is valid UTF-8;
/// `None` otherwise (the general path decides). ASCII is scanned eight bytes at a time: a word
/// without a quote, backslash, control or non-ASCII byte is skipped whole; a value with a
/// non-ASCII byte is checked as UTF-8 in full.
#[inline]
pub(super) fn string_end(b: &[u8], s: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let special = |c: u8| c == b'"' || c == b'\\' || c < 0x20;
    let mut j = s;
    while let Some(w) = b.get(j..j + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        let w = u64::from_le_bytes(word);
        let q = w ^ (ONES * u64::from(b'"'));
        let bs = w ^ (ONES * u64::from(b'\\'));
        // The high bit of each byte that is a quote, a backslash, below 0x20 or non-ASCII (the
        // borrows of the subtractions can also mark a byte after a marked one: only the first
        // mark counts, and it is exact).
        let marks =
            ((q.wrapping_sub(ONES) & !q) | (bs.wrapping_sub(ONES) & !bs) | (w.wrapping_sub(ONES * 0x20) & !w) | w)
                & HIGH;
        if marks != 0 {
            j += (marks.trailing_zeros() / 8) as usize;
            break;
        }
        j += 8;
    }
    while let Some(&c) = b.get(j) {
        if special(c) || c >= 0x80 {
            break;
        }
        j += 1;
    }
    match *b.get(j)? {
        b'"' => Some(j),
        c if c >= 0x80 => {
            let end = j + b[j..].iter().position(|&c| special(c))?;
            (b[end] == b'"' && std::str::from_utf8(&b[s..end]).is_ok()).then_some(end)
        }
        _ => None,
    }
}

/// The index of the `"` that ends the string value whose bytes start at `b[s]` (just after its
/// opening quote) when it is written as serde_json writes it: valid UTF-8, no control
/// character, and each escape the one serde_json chooses (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`,
/// `\t`, `\u00xx` in lowercase hex for the other control characters, nothing else escaped).
/// Its value goes to `value`. `None` for any other spelling (the general path decides).
pub(super) fn escaped_string_end(b: &[u8], s: usize, value: &mut Vec<u8>) -> Option<usize> {
    let hex = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    value.clear();
    let mut j = s;
    loop {
        let plain = b.get(j..)?.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        value.extend_from_slice(&b[j..j + plain]);
        j += plain;
        match b[j] {
            b'"' => break,
            b'\\' => {
                let (c, len) = match *b.get(j + 1)? {
                    e @ (b'"' | b'\\') => (e, 2),
                    b'b' => (0x08, 2),
                    b't' => (b'\t', 2),
                    b'n' => (b'\n', 2),
                    b'f' => (0x0c, 2),
                    b'r' => (b'\r', 2),
                    b'u' => match b.get(j + 2..j + 6)? {
                        [b'0', b'0', h @ (b'0' | b'1'), l] => {
                            let c = (hex(*h)? << 4) | hex(*l)?;
                            if matches!(c, 0x08 | b'\t' | b'\n' | 0x0c | b'\r') {
                                return None;
                            }
                            (c, 6)
                        }
                        _ => return None,
                    },
                    _ => return None,
                };
                value.push(c);
                j += len;
            }
            _ => return None,
        }
    }
    std::str::from_utf8(value).is_ok().then_some(j)
}

/// Count the string (or date) value `b[s..e]` (UTF-8, checked) in a column's statistics: at
/// most 8 bytes in `acc` as a word, longer ones in `st` ([`update_str_stat`]).
#[inline]
pub(super) fn string_stat(acc: &mut FastAcc, st: &mut ColumnStats, b: &[u8], s: usize, e: usize) {
    let len = e - s;
    if len > 8 {
        update_str_stat(st, &b[s..e]);
        return;
    }
    // The first byte most significant, zeros after the last: as short_cmp orders them.
    let word = match b.get(s..s + 8) {
        Some(w) => {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            u64::from_be_bytes(word) & !u64::MAX.checked_shr(8 * len as u32).unwrap_or(0)
        }
        None => b[s..e]
            .iter()
            .fold(0u64, |w, &c| (w << 8) | u64::from(c))
            .checked_shl(8 * (8 - len as u32))
            .unwrap_or(0),
    };
    let key = (word, len as u8);
    if !acc.any || key < acc.slo {
        acc.slo = key;
    }
    if !acc.any || key > acc.shi {
        acc.shi = key;
    }
    acc.any = true;
}

/// The bytes of a string kept by [`string_stat`] as (word, length).
pub(super) fn short_bytes((word, len): (u64, u8)) -> Vec<u8> {
    word.to_be_bytes()[..usize::from(len).min(8)].to_vec()
}

pub(super) fn json_kind(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'"') => "string",
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

/// serde_json's message without its " at line L column C" (positions within one value or line,
/// not the file's: the caller names the file's line and column).
pub(super) fn serde_message(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    msg.rsplit_once(" at line ").map(|(m, _)| m.to_string()).unwrap_or(msg)
}

/// The first `\uXXXX` escape in `text` that is a UTF-16 surrogate without its pair (JSON text
/// must encode a Unicode scalar value, RFC 8259 section 7 and RFC 3629): its byte offset and the
/// sentence `invalid JSON string escape: a lone surrogate \ud800`.
pub(super) fn lone_surrogate(text: &str) -> Option<(usize, String)> {
    let b = text.as_bytes();
    let unit = |i: usize| -> Option<u16> {
        (b.get(i) == Some(&b'\\') && b.get(i + 1) == Some(&b'u'))
            .then(|| text.get(i + 2..i + 6).and_then(|h| u16::from_str_radix(h, 16).ok()))
            .flatten()
    };
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit(i) {
            Some(0xD800..=0xDBFF) if !unit(i + 6).is_some_and(|l| (0xDC00..=0xDFFF).contains(&l)) => {
                return Some((
                    i,
                    format!("invalid JSON string escape: a lone surrogate {}", &text[i..i + 6]),
                ));
            }
            Some(0xD800..=0xDBFF) => i += 12,
            Some(0xDC00..=0xDFFF) => {
                return Some((
                    i,
                    format!("invalid JSON string escape: a lone surrogate {}", &text[i..i + 6]),
                ));
            }
            Some(_) => i += 6,
            None => i += 2,
        }
    }
    None
}

/// `YYYY-MM-DD`, exactly ten characters, a real calendar day in the years 0001-9999 (Delta's
/// date range, PROTOCOL "Primitive Types"; Parquet readers refuse year 0).
pub(super) fn valid_date(s: &str) -> bool {
    // Digits where `YYYY-MM-DD` has them: chrono's parser also takes a sign or padding spaces
    // ("+020-01-01", "2020- 1-01"), which are not this form (review finding).
    s.len() == 10
        && s.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
        && !s.starts_with("0000")
        && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
}

/// 10000-01-01T00:00:00Z, µs since the epoch: the first instant after Delta's range.
pub(super) const YEAR_10000_US: i64 = 253_402_300_800_000_000;

/// An RFC 3339 timestamp's instant, µs since the epoch, when it is in the years 0001-9999 in
/// UTC (Delta's timestamp range, PROTOCOL "Primitive Types"). A leap second (`:60`) is taken
/// as chrono reads it (docs/CLI.md "Input rules"). Errors: the reason, to follow the raw value.
pub(crate) fn timestamp_us(s: &str) -> std::result::Result<i64, &'static str> {
    use chrono::Datelike;
    let t = chrono::DateTime::parse_from_rfc3339(s).map_err(|_| "is not an RFC 3339 timestamp")?;
    // A leap second at 9999-12-31T23:59:60Z is an instant in the year 10000.
    let us = t.timestamp_micros();
    if !(1..=9999).contains(&t.naive_utc().year()) || us >= YEAR_10000_US {
        return Err("is outside the years 0001-9999 in UTC (Delta's timestamp range)");
    }
    Ok(us)
}

/// [`timestamp_us`] of the common form `YYYY-MM-DDTHH:MM:SSZ` (seconds 00-59), computed from
/// its digits; `None` for any other form or an impossible date or time (the caller then asks
/// [`timestamp_us`], which decides).
pub(super) fn simple_timestamp_us(s: &[u8]) -> Option<i64> {
    if s.len() != 20 || s[4] != b'-' || s[7] != b'-' || s[10] != b'T' || s[13] != b':' || s[16] != b':' || s[19] != b'Z'
    {
        return None;
    }
    let num = |a: usize, n: usize| {
        s[a..a + n].iter().try_fold(0u32, |v, &c| {
            let d = c.wrapping_sub(b'0');
            (d <= 9).then_some(v * 10 + u32::from(d))
        })
    };
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if y == 0 || sec > 59 {
        return None;
    }
    let t = chrono::NaiveDate::from_ymd_opt(i32::try_from(y).ok()?, mo, d)?.and_hms_opt(h, mi, sec)?;
    Some(t.and_utc().timestamp_micros())
}
