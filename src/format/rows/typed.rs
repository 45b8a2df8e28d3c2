//! Values of every column type as the general path checks and writes them (docs/FORMAT.md
//! "Column types"): the leaves (numbers, strings, dates, timestamps, decimals, binary) and,
//! recursively, arrays, maps, structs and `json` values. A value inside a struct is named by
//! its path (`user.name`), an element by its index from 0 (`tags[3]`), a map value by its key
//! (`m.key`).
//!
//! Nested values are parsed one level at a time from the raw text of their parent, so the work
//! per line is its length times the depth of the schema (at most [`crate::format::schema::MAX_TYPE_DEPTH`]); a `json`
//! value nested deeper than [`MAX_JSON_DEPTH`] is refused (serde_json skips a nested value
//! without a depth limit, so the line's first parse does not bound it).

#[allow(unused_imports)]
use super::*;

use crate::format::schema::{Column, Element};

/// A rejected value as a message shows it: whole up to 64 bytes, else its first 60 bytes and its
/// length, so that the reason after it survives the cut of a long message (a million-digit
/// number makes a short note that still says why).
fn shown(raw: &str) -> Cow<'_, str> {
    if raw.len() <= 64 {
        return Cow::Borrowed(raw);
    }
    let mut end = 60;
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}... ({} bytes in all)", &raw[..end], raw.len()))
}

/// A string value's text: borrowed from `raw` (a JSON string literal) when it has no escapes.
/// Errors: the reason (an invalid escape, a lone surrogate).
pub(crate) fn decode_str(raw: &str) -> std::result::Result<Cow<'_, str>, String> {
    if !raw.contains('\\') {
        return Ok(Cow::Borrowed(&raw[1..raw.len() - 1]));
    }
    serde_json::from_str::<String>(raw).map(Cow::Owned).map_err(|e| {
        lone_surrogate(raw).map_or_else(|| format!("invalid JSON string: {}", serde_message(&e)), |(_, r)| r)
    })
}

/// Write the string `s` decoded from `raw`: `raw` itself when it had no escapes (it is then its
/// canonical form), else `s` re-escaped as serde_json writes strings.
fn write_str(raw: &str, s: Cow<'_, str>, out: &mut Vec<u8>) {
    match s {
        Cow::Borrowed(_) => out.extend_from_slice(raw.as_bytes()),
        Cow::Owned(s) => {
            let _ = serde_json::to_writer(&mut *out, s.as_str());
        }
    }
}

/// Check the non-null leaf value `raw` (raw JSON text) of type `ty`, write its canonical form to
/// `out` and count it in `st`. Errors: the reason, naming the value, for the caller to place.
/// Nested types are not leaves: [`emit_typed`] takes them.
pub(super) fn emit_leaf(
    ty: &ColumnType,
    raw: &str,
    out: &mut Vec<u8>,
    st: Option<&mut ColumnStats>,
) -> std::result::Result<(), String> {
    let kind = json_kind(raw);
    let mismatch = || format!("expected {ty}, found {kind}");
    let expect = |want: &str| if kind == want { Ok(()) } else { Err(mismatch()) };
    match ty {
        ColumnType::Int => {
            expect("number")?;
            if raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                return Err(format!("{} has a fraction or exponent, but the column is int", shown(raw)));
            }
            let n: i64 = raw
                .parse()
                .map_err(|_| format!("{} is outside the 64-bit integer range", shown(raw)))?;
            // A JSON integer literal is canonical already, except for "-0".
            out.extend_from_slice(if raw == "-0" { b"0" } else { raw.as_bytes() });
            if let Some(st) = st {
                update_stat(st, StatValue::Int(n));
            }
        }
        ColumnType::Float => {
            expect("number")?;
            let f: f64 = raw.parse().map_err(|_| format!("{} is not a number", shown(raw)))?;
            if !f.is_finite() {
                return Err(format!("{} is outside the 64-bit float range", shown(raw)));
            }
            // serde_json prints floats with a fraction or exponent ("18.0", "1e300").
            let _ = serde_json::to_writer(&mut *out, &f);
            if let Some(st) = st {
                update_stat(st, StatValue::Float(if f == 0.0 { 0.0 } else { f }));
            }
        }
        ColumnType::Bool => {
            expect("boolean")?;
            // Delta keeps no min/max for booleans.
            out.extend_from_slice(raw.as_bytes());
        }
        ColumnType::Decimal { precision, scale } => {
            expect("number")?;
            let (unscaled, text) = decimal(raw, *precision, *scale)?;
            out.extend_from_slice(text.as_bytes());
            if let Some(st) = st {
                update_stat(st, StatValue::Decimal(unscaled, *scale));
            }
        }
        ColumnType::Str
        | ColumnType::Date
        | ColumnType::Timestamp
        | ColumnType::TimestampNtz
        | ColumnType::Binary => {
            expect("string")?;
            let s = decode_str(raw)?;
            match ty {
                ColumnType::Date => {
                    if !valid_date(&s) {
                        return Err(format!("{} is not a date (YYYY-MM-DD, years 0001-9999, Delta's date range)", shown(raw)));
                    }
                    if let Some(st) = st {
                        update_str_stat(st, s.as_bytes());
                    }
                }
                ColumnType::Timestamp => {
                    let us = timestamp_us(&s).map_err(|why| format!("{} {why}", shown(raw)))?;
                    if let Some(st) = st {
                        update_stat(st, StatValue::Instant(us));
                    }
                }
                ColumnType::TimestampNtz => {
                    let us = timestamp_ntz_us(&s).ok_or_else(|| {
                        format!("{} is not a timestamp without offset (YYYY-MM-DDTHH:MM:SS with 0-9 fraction digits, years 0001-9999)", shown(raw))
                    })?;
                    if let Some(st) = st {
                        update_stat(st, StatValue::LocalInstant(us));
                    }
                }
                ColumnType::Binary => {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD
                        .decode(s.as_bytes())
                        .map_err(|e| format!("{} is not base64 (standard alphabet, padded): {e}", shown(raw)))?;
                    // Delta keeps no min/max for binary; a null count only.
                }
                _ => {
                    if let Some(st) = st {
                        update_str_stat(st, s.as_bytes());
                    }
                }
            }
            write_str(raw, s, out);
        }
        ColumnType::Json | ColumnType::Array(_) | ColumnType::Map(_) | ColumnType::Struct(_) => {
            return Err(format!("internal: {ty} is not a leaf type"));
        }
    }
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SS` with an optional fraction of 1-9 digits and no offset, in the years
/// 0001-9999: µs since 1970-01-01T00:00:00 (the fraction beyond µs truncated), or `None`.
pub(crate) fn timestamp_ntz_us(s: &str) -> Option<i64> {
    use chrono::Datelike;
    let b = s.as_bytes();
    let shape = b.len() >= 19
        && b[..19].iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        })
        && match &b[19..] {
            [] => true,
            [b'.', frac @ ..] => (1..=9).contains(&frac.len()) && frac.iter().all(u8::is_ascii_digit),
            _ => false,
        };
    if !shape {
        return None;
    }
    let t = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").ok()?;
    let us = t.and_utc().timestamp_micros();
    // (A leap second at 9999-12-31T23:59:60 is in the year 10000.)
    ((1..=9999).contains(&t.year()) && us < YEAR_10000_US).then_some(us)
}

/// The decimal `raw` (a valid JSON number) as a `decimal(precision, scale)`: its unscaled value
/// and its canonical text, with exactly `scale` digits after the point (none and no point when
/// `scale` is 0). It is read as decimal text, never through a binary float; `1e2`, `1.50` and
/// `-0` are accepted. Errors: the reason when the value needs more than `scale` fraction digits
/// or more than `precision` digits in all.
pub(crate) fn decimal(raw: &str, precision: u8, scale: u8) -> std::result::Result<(i128, String), String> {
    let (neg, body) = match raw.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, raw),
    };
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], &body[i + 1..]),
        None => (body, "0"),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let bad = || format!("{} is not a decimal number", shown(raw));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    // digits × 10^shift is the unscaled value.
    let digits: String = int.chars().chain(frac.chars()).collect();
    let digits = digits.trim_start_matches('0');
    // The fraction holds at most `scale` digits here, so a value too long for `precision` has
    // too many digits before the point.
    let too_many = || {
        format!(
            "{} has more than {} digits before the point, more than decimal({precision},{scale}) holds",
            shown(raw),
            precision - scale
        )
    };
    let too_fine = || {
        format!(
            "{} has more than {scale} digits after the point, more than decimal({precision},{scale}) holds",
            shown(raw)
        )
    };
    let exp_digits = exp.trim_start_matches(['+', '-']);
    if exp_digits.is_empty() || !exp_digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let negative_exp = exp.starts_with('-');
    // An exponent beyond i64 with a digit other than 0 is out of any decimal's range: exact
    // arithmetic below is in i128, which holds every i64 exponent minus a line's length.
    let exp: i128 = match exp_digits.parse::<i64>() {
        Ok(e) => i128::from(if negative_exp { -e } else { e }),
        Err(_) if digits.is_empty() => 0,
        Err(_) if negative_exp => return Err(too_fine()),
        Err(_) => return Err(too_many()),
    };
    let shift: i128 = exp - frac.len() as i128 + i128::from(scale);
    let unscaled_digits: String = if digits.is_empty() {
        String::new()
    } else if shift >= 0 {
        if digits.len() as i128 + shift > i128::from(precision) {
            return Err(too_many());
        }
        let mut d = digits.to_string();
        d.extend(std::iter::repeat_n('0', shift as usize));
        d
    } else if -shift >= digits.len() as i128 {
        // Every digit is after the last one `scale` allows, and one of them is not 0.
        return Err(too_fine());
    } else {
        let keep = digits.len() - (-shift) as usize;
        if !digits[keep..].bytes().all(|c| c == b'0') {
            return Err(too_fine());
        }
        digits[..keep].to_string()
    };
    let unscaled_digits = unscaled_digits.trim_start_matches('0');
    if unscaled_digits.len() > usize::from(precision) {
        return Err(too_many());
    }
    // At most 38 digits: fits an i128 (10^38 < 2^127).
    let magnitude: i128 = if unscaled_digits.is_empty() {
        0
    } else {
        unscaled_digits.parse().map_err(|_| too_many())?
    };
    let unscaled = if neg { -magnitude } else { magnitude };
    Ok((unscaled, decimal_text(unscaled, scale)))
}

/// `unscaled / 10^scale` written with exactly `scale` fraction digits (`-1.50`, `0.05`, `7`).
pub(crate) fn decimal_text(unscaled: i128, scale: u8) -> String {
    let mag = unscaled.unsigned_abs().to_string();
    let scale = usize::from(scale);
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{mag}");
    }
    let padded = format!("{mag:0>width$}", width = scale + 1);
    let (i, f) = padded.split_at(padded.len() - scale);
    format!("{sign}{i}.{f}")
}

/// A JSON object's members in input order (a key named twice is refused), each key written as a
/// JSON string and its value by `value` with the path extended by `.key`: the canonical form of
/// a map and of a `json` object.
fn write_object(
    raw: &str,
    path: &mut String,
    out: &mut Vec<u8>,
    mut value: impl FnMut(&str, &mut String, &mut Vec<u8>) -> std::result::Result<(), Rejection>,
) -> std::result::Result<(), Rejection> {
    let fields: Fields = serde_json::from_str(raw).map_err(|e| {
        Rejection::Column(path.clone(), format!("invalid JSON object: {}", serde_message(&e)))
    })?;
    refuse_duplicate_keys(&fields, path)?;
    out.push(b'{');
    let len = path.len();
    for (i, (k, v)) in fields.0.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut *out, k.0.as_ref());
        out.push(b':');
        path.push('.');
        path.push_str(&excerpt_key(&k.0));
        value(v.get(), path, out)?;
        path.truncate(len);
    }
    out.push(b'}');
    Ok(())
}

/// A JSON array's elements in order, each written by `value` with the path extended by `[i]`.
fn write_array(
    raw: &str,
    path: &mut String,
    out: &mut Vec<u8>,
    mut value: impl FnMut(&str, &mut String, &mut Vec<u8>) -> std::result::Result<(), Rejection>,
) -> std::result::Result<(), Rejection> {
    let items: Vec<&RawValue> = serde_json::from_str(raw).map_err(|e| {
        Rejection::Column(path.clone(), format!("invalid JSON array: {}", serde_message(&e)))
    })?;
    out.push(b'[');
    let len = path.len();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        path.push_str(&format!("[{i}]"));
        value(item.get(), path, out)?;
        path.truncate(len);
    }
    out.push(b']');
    Ok(())
}

/// [`emit_typed`] for a reader outside the rows layer (export, docs/EXPORT.md "Table"): check the
/// value `raw` of the column `name`, write its canonical form to `out` and count it in `st`.
/// Errors: a sentence naming the column, or the path of the offending value inside it.
pub(crate) fn check_value(
    name: &str,
    ty: &ColumnType,
    nullable: bool,
    raw: &str,
    out: &mut Vec<u8>,
    st: Option<&mut ColumnStats>,
) -> std::result::Result<(), String> {
    let mut path = name.to_string();
    emit_typed(ty, nullable, raw, &mut path, out, st).map_err(|r| match r {
        Rejection::Column(p, why) => format!("column {}: {why}", crate::util::quote::json_quoted(&p)),
        Rejection::At(pos, why) => format!("column {}: {why} (byte {pos})", crate::util::quote::json_quoted(name)),
    })
}

/// Check the value `raw` of a column or field of type `ty` (any type; `nullable` says whether
/// null is allowed), write its canonical form to `out` and count it in `st` (`None` inside
/// arrays and maps, whose elements have no statistics). `path` names the value in messages and
/// is restored on return. Errors: [`Rejection::Column`] with the path of the offending value.
pub(super) fn emit_typed(
    ty: &ColumnType,
    nullable: bool,
    raw: &str,
    path: &mut String,
    out: &mut Vec<u8>,
    st: Option<&mut ColumnStats>,
) -> std::result::Result<(), Rejection> {
    let reject = |path: &str, reason: String| Rejection::Column(path.to_string(), reason);
    if raw == "null" {
        if !nullable {
            return Err(reject(path, "null value where the type says NOT NULL (!)".into()));
        }
        if let Some(st) = st {
            st.count_nulls(1);
        }
        out.extend_from_slice(b"null");
        return Ok(());
    }
    match ty {
        ColumnType::Json => {
            json_canonical(raw, path, out, 1)?;
        }
        ColumnType::Array(e) => {
            let Element { ty: et, nullable: en } = e.as_ref();
            if json_kind(raw) != "array" {
                return Err(reject(path, format!("expected {ty}, found {}", json_kind(raw))));
            }
            write_array(raw, path, out, |v, path, out| emit_typed(et, *en, v, path, out, None))?;
        }
        ColumnType::Map(m) => {
            if json_kind(raw) != "object" {
                return Err(reject(path, format!("expected {ty}, found {}", json_kind(raw))));
            }
            if m.key != ColumnType::Str {
                return Err(reject(path, format!("maps with {} keys are read, not written", m.key)));
            }
            write_object(raw, path, out, |v, path, out| {
                emit_typed(&m.value.ty, m.value.nullable, v, path, out, None)
            })?;
        }
        ColumnType::Struct(cols) => {
            if json_kind(raw) != "object" {
                return Err(reject(path, format!("expected {ty}, found {}", json_kind(raw))));
            }
            let fields: Fields = serde_json::from_str(raw)
                .map_err(|e| reject(path, format!("invalid JSON object: {}", serde_message(&e))))?;
            emit_struct(cols, &fields, path, out, st)?;
        }
        leaf => {
            emit_leaf(leaf, raw, out, st).map_err(|why| reject(path, why))?;
        }
    }
    Ok(())
}

/// A struct value from its fields: every field of `cols` in order, a missing nullable one as
/// null. Errors: an unknown or repeated key, a missing NOT NULL field, or a bad field value,
/// named by path.
fn emit_struct(
    cols: &[Column],
    fields: &Fields<'_>,
    path: &mut String,
    out: &mut Vec<u8>,
    mut st: Option<&mut ColumnStats>,
) -> std::result::Result<(), Rejection> {
    let mut slots: Vec<Option<usize>> = vec![None; cols.len()];
    let len = path.len();
    for (i, (k, _)) in fields.0.iter().enumerate() {
        let found = match cols.get(i).is_some_and(|c| c.name == k.0) {
            true => Some(i),
            false => cols.iter().position(|c| c.name == k.0),
        };
        path.push('.');
        path.push_str(&excerpt_key(&k.0));
        let Some(ci) = found else {
            return Err(Rejection::Column(
                path.clone(),
                "unknown field (not in the struct's type)".into(),
            ));
        };
        if slots[ci].replace(i).is_some() {
            return Err(Rejection::Column(path.clone(), "duplicate key".into()));
        }
        path.truncate(len);
    }
    out.push(b'{');
    for (ci, c) in cols.iter().enumerate() {
        if ci > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut *out, c.name.as_str());
        out.push(b':');
        path.push('.');
        path.push_str(&c.name);
        let raw = match slots[ci] {
            Some(i) => fields.0[i].1.get(),
            None if !c.nullable => {
                return Err(Rejection::Column(
                    path.clone(),
                    "missing value for a NOT NULL field".into(),
                ));
            }
            None => "null",
        };
        let child = st.as_deref_mut().and_then(|s| s.fields.get_mut(ci));
        emit_typed(&c.ty, c.nullable, raw, path, out, child)?;
        path.truncate(len);
    }
    out.push(b'}');
    Ok(())
}

/// A key as a path names it: at most 40 bytes.
fn excerpt_key(k: &str) -> Cow<'_, str> {
    if k.len() <= 40 {
        return Cow::Borrowed(k);
    }
    let mut end = 40;
    while !k.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}...", &k[..end]))
}

/// Refuse an object (a map or `json` value) that names a key twice: its canonical form would
/// not be one value (RFC 8259 section 4: names SHOULD be unique).
fn refuse_duplicate_keys(fields: &Fields<'_>, path: &str) -> std::result::Result<(), Rejection> {
    let mut seen = std::collections::HashSet::with_capacity(fields.0.len());
    for (k, _) in &fields.0 {
        if !seen.insert(k.0.as_ref()) {
            return Err(Rejection::Column(
                format!("{path}.{}", excerpt_key(&k.0)),
                "duplicate key".into(),
            ));
        }
    }
    Ok(())
}

/// Deepest nesting of objects and arrays in a `json` value (serde_json's own default limit):
/// the canonical form is written recursively, so the depth bounds the stack a line can use.
pub(crate) const MAX_JSON_DEPTH: usize = 128;

/// The canonical form of a `json` value: compact, object keys in input order (a key named twice
/// is refused), strings with serde_json's escapes, numbers, `true`, `false` and `null` as
/// written (docs/FORMAT.md "Column types").
fn json_canonical(raw: &str, path: &mut String, out: &mut Vec<u8>, depth: usize) -> std::result::Result<(), Rejection> {
    let reject = |path: &str, reason: String| Rejection::Column(path.to_string(), reason);
    if depth > MAX_JSON_DEPTH && matches!(json_kind(raw), "object" | "array") {
        return Err(reject(
            path,
            format!("the value nests objects and arrays deeper than {MAX_JSON_DEPTH} levels"),
        ));
    }
    match json_kind(raw) {
        "object" => write_object(raw, path, out, |v, path, out| json_canonical(v, path, out, depth + 1))?,
        "array" => write_array(raw, path, out, |v, path, out| json_canonical(v, path, out, depth + 1))?,
        "string" => {
            let s = decode_str(raw).map_err(|why| reject(path, why))?;
            write_str(raw, s, out);
        }
        // Numbers, booleans and null: already checked JSON (the line was parsed), canonical as
        // written.
        _ => out.extend_from_slice(raw.as_bytes()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        let ok = |raw: &str, p, s| decimal(raw, p, s).map(|(_, t)| t);
        assert_eq!(ok("1.5", 5, 2).unwrap(), "1.50");
        assert_eq!(ok("-0", 5, 2).unwrap(), "0.00");
        assert_eq!(ok("-0.001", 5, 2).unwrap_err(), "-0.001 has more than 2 digits after the point, more than decimal(5,2) holds");
        assert_eq!(ok("1e2", 5, 2).unwrap(), "100.00");
        assert_eq!(ok("1E-2", 5, 2).unwrap(), "0.01");
        assert_eq!(ok("12.3400e1", 5, 2).unwrap(), "123.40");
        assert_eq!(ok("1000", 5, 2).unwrap_err(), "1000 has more than 3 digits before the point, more than decimal(5,2) holds");
        assert_eq!(ok("999.99", 5, 2).unwrap(), "999.99");
        assert_eq!(ok("-999.99", 5, 2).unwrap(), "-999.99");
        assert_eq!(ok("0.1", 1, 1).unwrap(), "0.1");
        assert_eq!(ok("7", 1, 0).unwrap(), "7");
        let max = "9".repeat(38);
        assert_eq!(ok(&max, 38, 0).unwrap(), max);
        assert_eq!(decimal(&format!("-{max}"), 38, 0).unwrap().0, -(10i128.pow(38) - 1));
        assert!(ok(&format!("1{max}"), 38, 0).is_err());
        let small = format!("0.{}1", "0".repeat(36));
        assert_eq!(ok(&small, 38, 38).unwrap(), format!("0.{}10", "0".repeat(36)));
        assert!(ok("1e999999999999999999999", 38, 0).is_err());
        assert_eq!(ok("0e999999999999999999999", 38, 2).unwrap(), "0.00");
        assert!(ok("1e-999999999999999999999", 38, 2).is_err());
        assert_eq!(ok("100e-2", 3, 0).unwrap(), "1");
    }

    #[test]
    fn ntz_timestamps() {
        assert_eq!(timestamp_ntz_us("1970-01-01T00:00:01"), Some(1_000_000));
        assert_eq!(timestamp_ntz_us("1970-01-01T00:00:00.0000019"), Some(1));
        assert_eq!(timestamp_ntz_us("1970-01-01T00:00:00Z"), None);
        assert_eq!(timestamp_ntz_us("1970-01-01 00:00:00"), None);
        assert_eq!(timestamp_ntz_us("0000-01-01T00:00:00"), None);
        assert_eq!(timestamp_ntz_us("2021-02-29T00:00:00"), None);
    }
}
