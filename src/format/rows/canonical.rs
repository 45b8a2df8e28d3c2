//! The canonicaliser: one JSON line in, one canonical row out (every schema column, in schema
//! order, compact), with its statistics; a fast path for flat lines and serde_json for the rest.

#[allow(unused_imports)]
use super::*;

/// A JSON object key, borrowed from the line when it has no escapes.
pub(crate) struct Key<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct KV;
        impl<'de> Visitor<'de> for KV {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KV)
    }
}

/// One row's fields in input order, values as raw JSON text. Duplicates are kept so the caller
/// can name them.
pub(crate) struct Fields<'a>(pub(crate) Vec<(Key<'a>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct FV;
        impl<'de> Visitor<'de> for FV {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<Fields<'de>, A::Error> {
                let mut v = Vec::with_capacity(m.size_hint().unwrap_or(16));
                while let Some(k) = m.next_key::<Key<'de>>()? {
                    let val: &'de RawValue = m.next_value()?;
                    v.push((k, val));
                }
                Ok(Fields(v))
            }
        }
        d.deserialize_map(FV)
    }
}

/// Validates and canonicalises rows against one schema; reusable across lines.
pub(super) struct Canonicalizer<'s> {
    pub(super) schema: &'s Schema,
    /// `"name":` per column, already JSON-escaped.
    pub(super) key_prefix: Vec<Vec<u8>>,
    /// For each column, the field index in the current line (reset per line).
    pub(super) slots: Vec<Option<usize>>,
    /// Column index by name, built at the first row out of schema order (one hash lookup per
    /// key instead of a scan of the schema: linear in the columns, docs/FORMAT.md "Schema evolution").
    pub(super) by_name: Option<std::collections::HashMap<&'s str, usize>>,
    /// Per timestamp column: the last raw value seen and its instant (µs), to skip re-parsing
    /// repeated values.
    pub(super) ts_cache: Vec<Option<(String, i64)>>,
    /// Per column, what [`Canonicalizer::canonical`] expects: its key with the delimiter before
    /// it, its type.
    pub(super) fast: Vec<FastCol>,
    /// Per column, the min/max [`Canonicalizer::canonical`] saw, not yet in `stats`.
    pub(super) acc: Vec<FastAcc>,
    /// Per timestamp or date column, the last value [`Canonicalizer::canonical`] accepted.
    pub(super) last: Vec<LastValue>,
    /// The null columns of the row [`Canonicalizer::canonical`] is checking.
    pub(super) row_nulls: Vec<usize>,
    /// The value of a string with escapes that [`Canonicalizer::canonical`] is checking.
    pub(super) unescaped: Vec<u8>,
    pub(super) stats: FileStats,
    /// Line ends (`\n`) the last [`Canonicalizer::chunk_into`] went through.
    pub(super) lines: u64,
    /// The longest line accepted, bytes without its `\n`.
    pub(super) max_line: usize,
}

/// One column as [`Canonicalizer::canonical`] checks it.
#[derive(Debug, Clone)]
pub(super) struct FastCol {
    /// `{"name":` for the first column, `,"name":` for the others (the name JSON-escaped).
    pub(super) lit: Vec<u8>,
    pub(super) ty: ColumnType,
    pub(super) nullable: bool,
}

/// Statistics of one column's canonical rows, kept in plain numbers while rows are checked
/// ([`Canonicalizer::fold_fast`] moves them into [`ColumnStats`]). Strings and dates of more
/// than 8 bytes go to [`update_str_stat`] directly.
#[derive(Debug, Clone, Copy)]
pub(super) struct FastAcc {
    pub(super) nulls: u64,
    /// A value was seen (for strings: a value of at most 8 bytes).
    pub(super) any: bool,
    /// Ints; timestamps as µs since the epoch.
    pub(super) lo: i64,
    pub(super) hi: i64,
    pub(super) flo: f64,
    pub(super) fhi: f64,
    /// Strings and dates of at most 8 bytes as (big-endian word of their bytes padded with
    /// zeros, length): ordered as their bytes are ([`short_cmp`]).
    pub(super) slo: (u64, u8),
    pub(super) shi: (u64, u8),
}

impl Default for FastAcc {
    fn default() -> Self {
        FastAcc {
            nulls: 0,
            any: false,
            lo: i64::MAX,
            hi: i64::MIN,
            flo: 0.0,
            fhi: 0.0,
            slo: (0, 0),
            shi: (0, 0),
        }
    }
}

/// The last timestamp or date value of a column [`Canonicalizer::canonical`] accepted, so a
/// repeated value is compared, not parsed again.
#[derive(Debug, Clone, Default)]
pub(super) struct LastValue {
    pub(super) raw: Vec<u8>,
    /// The timestamp's instant (µs since the epoch).
    pub(super) us: i64,
    pub(super) ok: bool,
}

pub(super) enum Rejection {
    /// A column-specific problem.
    Column(String, String),
    /// A position-specific problem (1-based byte column).
    At(usize, String),
}

impl<'s> Canonicalizer<'s> {
    pub(super) fn new(schema: &'s Schema) -> Self {
        Self::with_max_line(schema, DEFAULT_MAX_LINE_BYTES)
    }

    /// [`Canonicalizer::new`] accepting lines of at most `max_line` bytes (without the `\n`).
    pub(super) fn with_max_line(schema: &'s Schema, max_line: usize) -> Self {
        let key_prefix: Vec<Vec<u8>> = schema
            .columns
            .iter()
            .map(|c| {
                let mut k = serde_json::to_vec(&c.name).unwrap_or_default();
                k.push(b':');
                k
            })
            .collect();
        let fast = schema
            .columns
            .iter()
            .zip(&key_prefix)
            .enumerate()
            .map(|(ci, (c, k))| FastCol {
                lit: [if ci == 0 { &b"{"[..] } else { b"," }, k].concat(),
                ty: c.ty.clone(),
                nullable: c.nullable,
            })
            .collect();
        let n = schema.columns.len();
        Canonicalizer {
            schema,
            key_prefix,
            slots: vec![None; n],
            by_name: None,
            ts_cache: vec![None; n],
            fast,
            acc: vec![FastAcc::default(); n],
            last: vec![LastValue::default(); n],
            row_nulls: Vec::with_capacity(n),
            unescaped: Vec::new(),
            stats: FileStats {
                columns: ColumnStats::for_schema(schema),
                ..FileStats::default()
            },
            lines: 0,
            max_line,
        }
    }

    /// Canonicalise one non-blank line into `out` (appending), or say why not.
    ///
    /// Flat objects without escapes take a hand-written scanner; anything else (escapes, nested
    /// values, malformed JSON) goes through serde_json, which also words the syntax errors.
    pub(super) fn line(&mut self, text: &str, out: &mut Vec<u8>) -> std::result::Result<(), Rejection> {
        if self.canonical(text.as_bytes()) {
            out.extend_from_slice(text.as_bytes());
            out.push(b'\n');
            return Ok(());
        }
        let mut flat: Vec<(&str, &str)> = Vec::with_capacity(self.schema.columns.len());
        if scan_flat(text, &mut flat) {
            return self.emit(&flat, out);
        }
        let fields: Fields = serde_json::from_str(text).map_err(|e| {
            if let Some((at, reason)) = lone_surrogate(text) {
                return Rejection::At(at + 1, reason);
            }
            let msg = serde_message(&e);
            let reason = if e.is_data() {
                format!("not a JSON object ({msg})")
            } else {
                format!("invalid JSON: {msg}")
            };
            Rejection::At(e.column().max(1), reason)
        })?;
        let fields: Vec<(&str, &str)> = fields.0.iter().map(|(k, v)| (k.0.as_ref(), v.get())).collect();
        self.emit(&fields, out)
    }

    /// Whether `text` is a canonical row already (every column's key in schema order, no
    /// whitespace, each value valid for its column and written as [`Canonicalizer::emit`]
    /// writes it), counting its statistics if it is. Checks every value in full, as `emit`
    /// does; anything else, valid or not, is `false` and its row is not counted: the caller
    /// takes the general path, which canonicalises it or words the error. This is the common
    /// case of rows written by tinydelta or by a tool that prints the schema's columns in order,
    /// and it costs one pass over the line with no copy but the row's own.
    ///
    /// It takes bytes not yet known to be UTF-8: every byte outside a string value must match
    /// an ASCII key, delimiter, literal or digit, and each string value is checked as UTF-8, so
    /// a line it accepts is valid UTF-8 (the line is not checked a second time).
    ///
    /// Statistics: a row's null count and `numRecords` are counted when the whole row is
    /// accepted; each value's min/max goes into [`Canonicalizer::fast`] as soon as the value
    /// is checked, also when a later value of the row is not canonical. That is exact, because
    /// such a row either gets the same values from the general path (min/max are idempotent)
    /// or is refused, and a refusal discards the whole [`Canonicalizer`] (no caller merges the
    /// statistics of a chunk that failed). [`Canonicalizer::fold_fast`] moves them into
    /// `stats`.
    pub(super) fn canonical(&mut self, b: &[u8]) -> bool {
        self.canonical_row(b, false).is_some()
    }

    /// [`Canonicalizer::canonical`] for the row at the start of `b`: without `newline`, `b` is
    /// the row (the result is `b.len()`); with it, the row must be followed by `\n` in `b` (the
    /// result is the index of that `\n`, and `b` may go on with the next lines: no line end is
    /// looked for first, since a canonical row holds no control character).
    #[inline]
    pub(super) fn canonical_row(&mut self, b: &[u8], newline: bool) -> Option<usize> {
        if self.fast.is_empty() {
            return None;
        }
        self.row_nulls.clear();
        let end = self.canonical_values(b)?;
        let ends = match newline {
            true => b.get(end) == Some(&b'\n'),
            false => end == b.len(),
        };
        if !ends {
            return None;
        }
        for &ci in &self.row_nulls {
            self.acc[ci].nulls += 1;
        }
        self.stats.num_records += 1;
        Some(end)
    }

    /// [`Canonicalizer::canonical`]'s scan: one pass, the columns in schema order, each
    /// checked against its key (with the delimiter before it) and its type. The index after
    /// the row's closing `}`.
    #[inline]
    pub(super) fn canonical_values(&mut self, b: &[u8]) -> Option<usize> {
        let mut i = 0;
        for (ci, col) in self.fast.iter().enumerate() {
            if !literal_at(b, i, &col.lit) {
                return None;
            }
            i += col.lit.len();
            let &c = b.get(i)?;
            let acc = &mut self.acc[ci];
            if c == b'n' {
                if !col.nullable || !literal_at(b, i, b"null") {
                    return None;
                }
                i += 4;
                self.row_nulls.push(ci);
                continue;
            }
            match col.ty {
                ColumnType::Int => {
                    let (v, end) = canonical_int(b, i)?;
                    i = end;
                    acc.lo = acc.lo.min(v);
                    acc.hi = acc.hi.max(v);
                    acc.any = true;
                }
                ColumnType::Str | ColumnType::Date | ColumnType::Timestamp => {
                    if c != b'"' {
                        return None;
                    }
                    let s = i + 1;
                    let Some(e) = string_end(b, s) else {
                        // A string with escapes is canonical when each is the one serde_json
                        // writes (docs/CLI.md "Input rules"); no date or timestamp holds one.
                        if col.ty != ColumnType::Str {
                            return None;
                        }
                        let e = escaped_string_end(b, s, &mut self.unescaped)?;
                        update_str_stat(&mut self.stats.columns[ci], &self.unescaped);
                        i = e + 1;
                        continue;
                    };
                    i = e + 1;
                    let sb = &b[s..e];
                    match col.ty {
                        ColumnType::Timestamp => {
                            let last = &mut self.last[ci];
                            let us = if last.ok && sb.len() == last.raw.len() && starts_with(sb, &last.raw) {
                                last.us
                            } else {
                                // (string_end proved the bytes UTF-8.)
                                let us = simple_timestamp_us(sb)
                                    .or_else(|| std::str::from_utf8(sb).ok().and_then(|s| timestamp_us(s).ok()))?;
                                last.raw.clear();
                                last.raw.extend_from_slice(sb);
                                last.us = us;
                                last.ok = true;
                                us
                            };
                            acc.lo = acc.lo.min(us);
                            acc.hi = acc.hi.max(us);
                            acc.any = true;
                        }
                        ColumnType::Date => {
                            let last = &mut self.last[ci];
                            if !(last.ok && sb.len() == last.raw.len() && starts_with(sb, &last.raw)) {
                                if !std::str::from_utf8(sb).is_ok_and(valid_date) {
                                    return None;
                                }
                                last.raw.clear();
                                last.raw.extend_from_slice(sb);
                                last.ok = true;
                            }
                            string_stat(acc, &mut self.stats.columns[ci], b, s, e);
                        }
                        _ => string_stat(acc, &mut self.stats.columns[ci], b, s, e),
                    }
                }
                ColumnType::Float => {
                    if !matches!(c, b'-' | b'0'..=b'9') {
                        return None;
                    }
                    let end = b[i..]
                        .iter()
                        .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                        .map_or(b.len(), |p| i + p);
                    // Only the ASCII bytes of a number: UTF-8.
                    let Ok(raw) = std::str::from_utf8(&b[i..end]) else {
                        return None;
                    };
                    let Ok(f) = raw.parse::<f64>() else { return None };
                    // Canonical only when written as emit writes it (which also proves it a
                    // JSON number: "1.", "+1", "01" never come out of the formatter).
                    if !f.is_finite() || !float_written_as(f, raw.as_bytes()) {
                        return None;
                    }
                    i = end;
                    let f = if f == 0.0 { 0.0 } else { f };
                    if !acc.any || f < acc.flo {
                        acc.flo = f;
                    }
                    if !acc.any || f > acc.fhi {
                        acc.fhi = f;
                    }
                    acc.any = true;
                }
                ColumnType::Bool => {
                    if literal_at(b, i, b"true") {
                        i += 4;
                    } else if literal_at(b, i, b"false") {
                        i += 5;
                    } else {
                        return None;
                    }
                }
                // The other types take the general path.
                _ => return None,
            }
        }
        (b.get(i) == Some(&b'}')).then_some(i + 1)
    }

    /// Move the min/max gathered by [`Canonicalizer::canonical`] into `stats` (before they are
    /// read).
    pub(super) fn fold_fast(&mut self) {
        for ((acc, st), col) in self.acc.iter_mut().zip(&mut self.stats.columns).zip(&self.fast) {
            st.count_nulls(acc.nulls);
            if acc.any {
                match col.ty {
                    ColumnType::Int => {
                        update_stat(st, StatValue::Int(acc.lo));
                        update_stat(st, StatValue::Int(acc.hi));
                    }
                    ColumnType::Timestamp => {
                        update_stat(st, StatValue::Instant(acc.lo));
                        update_stat(st, StatValue::Instant(acc.hi));
                    }
                    ColumnType::Float => {
                        update_stat(st, StatValue::Float(acc.flo));
                        update_stat(st, StatValue::Float(acc.fhi));
                    }
                    ColumnType::Str | ColumnType::Date => {
                        update_str_stat(st, &short_bytes(acc.slo));
                        update_str_stat(st, &short_bytes(acc.shi));
                    }
                    _ => {}
                }
            }
            *acc = FastAcc::default();
        }
    }

    /// Write one row from its `(key, raw JSON value)` fields, in input order.
    pub(super) fn emit(&mut self, fields: &[(&str, &str)], out: &mut Vec<u8>) -> std::result::Result<(), Rejection> {
        self.slots.iter_mut().for_each(|s| *s = None);
        for (i, (k, _)) in fields.iter().enumerate() {
            // Rows usually come in schema order: try the same position first.
            let same = self.schema.columns.get(i).is_some_and(|c| c.name == *k);
            let found = if same {
                Some(i)
            } else {
                let schema = self.schema;
                self.by_name
                    .get_or_insert_with(|| {
                        let mut m = std::collections::HashMap::with_capacity(schema.columns.len());
                        for (ci, c) in schema.columns.iter().enumerate() {
                            m.entry(c.name.as_str()).or_insert(ci);
                        }
                        m
                    })
                    .get(k)
                    .copied()
            };
            let Some(ci) = found else {
                return Err(Rejection::Column(
                    k.to_string(),
                    "unknown column (not in the table's schema)".into(),
                ));
            };
            if self.slots[ci].is_some() {
                return Err(Rejection::Column(k.to_string(), "duplicate key".into()));
            }
            self.slots[ci] = Some(i);
        }
        let start = out.len();
        let res = self.emit_values(fields, out);
        if res.is_err() {
            out.truncate(start);
        }
        res
    }

    pub(super) fn emit_values(&mut self, fields: &[(&str, &str)], out: &mut Vec<u8>) -> std::result::Result<(), Rejection> {
        out.push(b'{');
        for ci in 0..self.schema.columns.len() {
            if ci > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.key_prefix[ci]);
            let col = &self.schema.columns[ci];
            let raw = self.slots[ci].map(|i| fields[i].1).unwrap_or("null");
            let st = &mut self.stats.columns[ci];
            let reject = |reason: String| Rejection::Column(col.name.clone(), reason);
            if raw == "null" {
                if !col.nullable {
                    let why = if self.slots[ci].is_some() { "null" } else { "missing" };
                    return Err(reject(format!("{why} value for a NOT NULL column")));
                }
                st.count_nulls(1);
                out.extend_from_slice(b"null");
                continue;
            }
            match &col.ty {
                // Timestamps keep the last value's instant: a column of one repeated time is
                // parsed once.
                ColumnType::Timestamp if json_kind(raw) == "string" => {
                    let s = decode_str(raw).map_err(reject)?;
                    let us = match &self.ts_cache[ci] {
                        Some((last, us)) if last == s.as_ref() => *us,
                        _ => {
                            let us = timestamp_us(&s).map_err(|why| reject(format!("{raw} {why}")))?;
                            self.ts_cache[ci] = Some((s.to_string(), us));
                            us
                        }
                    };
                    update_stat(st, StatValue::Instant(us));
                    match s {
                        Cow::Borrowed(_) => out.extend_from_slice(raw.as_bytes()),
                        Cow::Owned(s) => {
                            let _ = serde_json::to_writer(&mut *out, &s);
                        }
                    }
                }
                ty if ty.is_nested() => {
                    let mut path = col.name.clone();
                    emit_typed(ty, col.nullable, raw, &mut path, out, Some(st))?;
                }
                ty => emit_leaf(ty, raw, out, Some(st)).map_err(reject)?,
            }
        }
        out.extend_from_slice(b"}\n");
        self.stats.num_records += 1;
        Ok(())
    }

    /// Canonicalise every line of `chunk` (whole lines; the last may lack its `\n` only at the
    /// end of input) into `out`; `first_line` is the 1-based number of its first line. With
    /// `defer`, a chunk that is its own canonical form (every
    /// line canonical and ending in `\n`, no blank line, BOM or CR) is validated and counted but
    /// not copied: the result is `true` and `out` is untouched, so the caller writes `chunk`
    /// itself (the data is written once, never copied through a second buffer).
    pub(super) fn chunk_into(
        &mut self,
        chunk: &[u8],
        first_line: u64,
        out: &mut Vec<u8>,
        defer: bool,
    ) -> std::result::Result<bool, LineError> {
        let mut line_no = first_line;
        let mut rest = chunk;
        let mut deferred = defer;
        let max = self.max_line;
        while !rest.is_empty() {
            // The common case: a canonical row and its `\n`, found in one pass.
            if let Some(end) = self.canonical_row(rest, true)
                && end <= max
            {
                if !deferred {
                    out.extend_from_slice(&rest[..=end]);
                }
                rest = &rest[end + 1..];
                line_no += 1;
                continue;
            }
            let start = chunk.len() - rest.len();
            let (mut bytes, next, ended) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], &rest[i + 1..], true),
                None => (rest, &rest[rest.len()..], false),
            };
            rest = next;
            let whole = bytes.len();
            if bytes.len() > max {
                return Err((
                    line_no,
                    "1".into(),
                    format!(
                        "the line is {} bytes, longer than the maximum of {max} bytes",
                        bytes.len()
                    ),
                ));
            }
            // A UTF-8 BOM is skipped at the start of any line (files concatenated with `cat`).
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            let blank = bytes.iter().all(u8::is_ascii_whitespace);
            if deferred {
                // `canonical` counts the row's statistics when it says yes (and proves the
                // line UTF-8, so the common case checks it once).
                let canonical = !blank && self.canonical(bytes);
                if canonical && ended && bytes.len() == whole {
                    line_no += 1;
                    continue;
                }
                out.extend_from_slice(&chunk[..start]);
                deferred = false;
                if canonical {
                    out.extend_from_slice(bytes);
                    out.push(b'\n');
                    line_no += 1;
                    continue;
                }
            }
            let text = match std::str::from_utf8(bytes) {
                Ok(t) => t,
                Err(e) => {
                    let col = String::from_utf8_lossy(&bytes[..e.valid_up_to()]).chars().count() + 1;
                    return Err((line_no, col.to_string(), "invalid UTF-8".into()));
                }
            };
            if !blank {
                match self.line(text, out) {
                    Ok(()) => {}
                    // A schema column is quoted ("year"); a bare number is a character position.
                    Err(Rejection::Column(col, reason)) => {
                        let quoted = crate::util::quote::json_quoted(&col);
                        return Err((line_no, quoted, excerpt(&reason)));
                    }
                    Err(Rejection::At(pos, reason)) => {
                        // serde_json reports a 1-based byte column; report characters.
                        let mut end = (pos - 1).min(text.len());
                        while !text.is_char_boundary(end) {
                            end -= 1;
                        }
                        let col = text[..end].chars().count() + 1;
                        return Err((line_no, col.to_string(), excerpt(&reason)));
                    }
                }
            }
            line_no += 1;
        }
        self.fold_fast();
        // (A last line without `\n` was counted as a line above.)
        self.lines = line_no - first_line - u64::from(!chunk.is_empty() && !chunk.ends_with(b"\n"));
        Ok(deferred)
    }
}
