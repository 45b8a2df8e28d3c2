//! Per-file statistics of canonical rows: `numRecords`, `minValues`, `maxValues`, `nullCount`
//! (Delta PROTOCOL "Per-file Statistics").

#[allow(unused_imports)]
use super::*;

/// Longest string prefix kept in `minValues` (Delta writers truncate string stats to 32 chars).
pub(super) const STRING_STAT_PREFIX: usize = 32;

/// What [`canonicalize`] learned about the rows it wrote.
#[derive(Debug, Clone, Default)]
pub struct FileStats {
    /// Rows written.
    pub num_records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Per-column statistics, in schema order.
    pub(super) columns: Vec<ColumnStats>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ColumnStats {
    pub(super) null_count: u64,
    pub(super) min: Option<StatValue>,
    pub(super) max: Option<StatValue>,
    /// A string longer than the stat prefix was seen, so `max` cannot be stated.
    pub(super) max_unknown: bool,
    /// A struct column's fields, in schema order (Delta keeps the statistics of a struct per
    /// leaf field, nested as the struct is); empty for other types.
    pub(super) fields: Vec<ColumnStats>,
}

impl ColumnStats {
    /// Empty statistics shaped for a column of type `ty`.
    pub(crate) fn for_type(ty: &ColumnType) -> ColumnStats {
        ColumnStats {
            fields: match ty {
                ColumnType::Struct(cols) => cols.iter().map(|c| ColumnStats::for_type(&c.ty)).collect(),
                _ => Vec::new(),
            },
            ..ColumnStats::default()
        }
    }

    /// Empty statistics for every column of `schema`, in schema order.
    pub(super) fn for_schema(schema: &Schema) -> Vec<ColumnStats> {
        schema.columns.iter().map(|c| ColumnStats::for_type(&c.ty)).collect()
    }

    /// Count `n` null values: a null struct makes every leaf field below it null.
    pub(crate) fn count_nulls(&mut self, n: u64) {
        if self.fields.is_empty() {
            self.null_count += n;
        } else {
            self.fields.iter_mut().for_each(|f| f.count_nulls(n));
        }
    }
}

#[derive(Debug, Clone, PartialEq, PartialOrd)]
pub(crate) enum StatValue {
    Int(i64),
    Float(f64),
    /// Strings and dates compare as strings.
    Str(String),
    /// Timestamps compare as instants (µs since epoch), reported in UTC.
    Instant(i64),
    /// `timestamp_ntz`: µs since 1970-01-01T00:00:00 of the local calendar, reported without
    /// an offset.
    LocalInstant(i64),
    /// A decimal's unscaled value and scale (the same scale within a column).
    Decimal(i128, u8),
}

impl StatValue {
    /// The stat as JSON, or `None` when it cannot be written validly: a non-finite float, or a
    /// timestamp outside years 0000-9999 (RFC 3339 has four-digit years): the column's stat
    /// is then left out, as Delta allows (docs/FORMAT.md, "Statistics").
    /// Decimals are written as exact JSON numbers (PROTOCOL "Per-file Statistics"), so the
    /// result is JSON text.
    pub(super) fn to_json(&self) -> Option<String> {
        use chrono::Datelike;
        let instant = |us: i64, fmt: &str| {
            chrono::DateTime::from_timestamp_micros(us)
                .filter(|t| (0..=9999).contains(&t.year()))
                .map(|t| serde_json::Value::from(t.format(fmt).to_string()).to_string())
        };
        match self {
            StatValue::Int(i) => Some(i.to_string()),
            StatValue::Float(f) => serde_json::Number::from_f64(*f).map(|n| n.to_string()),
            StatValue::Str(s) => serde_json::to_string(s).ok(),
            StatValue::Instant(us) => instant(*us, "%Y-%m-%dT%H:%M:%S%.6fZ"),
            StatValue::LocalInstant(us) => instant(*us, "%Y-%m-%dT%H:%M:%S%.6f"),
            StatValue::Decimal(v, scale) => Some(super::typed::decimal_text(*v, *scale)),
        }
    }
}

/// Which of the three statistics maps [`write_stats`] writes.
#[derive(Clone, Copy, PartialEq)]
enum StatsMap {
    Min,
    Max,
    Nulls,
}

/// Write the members of one statistics map for `cols` (`"name":value,...`, without braces) to
/// `out`: a struct as a nested object of its fields, a column without that statistic left out
/// (an empty nested object too, except in `nullCount`, which names every column). Returns
/// whether anything was written.
fn write_stats(cols: &[crate::format::schema::Column], stats: &[ColumnStats], map: StatsMap, out: &mut String) -> bool {
    let mut any = false;
    for (col, st) in cols.iter().zip(stats) {
        let value = match &col.ty {
            ColumnType::Struct(fields) => {
                let mut inner = String::new();
                if !write_stats(fields, &st.fields, map, &mut inner) && map != StatsMap::Nulls {
                    continue;
                }
                Some(format!("{{{inner}}}"))
            }
            _ => match map {
                StatsMap::Nulls => Some(st.null_count.to_string()),
                StatsMap::Min => st.min.as_ref().and_then(StatValue::to_json),
                StatsMap::Max if st.max_unknown => None,
                StatsMap::Max => st.max.as_ref().and_then(StatValue::to_json),
            },
        };
        let Some(value) = value else { continue };
        if any {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(&col.name).unwrap_or_default());
        out.push(':');
        out.push_str(&value);
        any = true;
    }
    any
}

impl FileStats {
    /// The `add.stats` JSON string: `numRecords`, `minValues`, `maxValues`, `nullCount`.
    /// Nested as the schema is: a struct's statistics are an object of its fields'; arrays,
    /// maps, binary, booleans and `json` have a null count only.
    pub fn to_stats_json(&self, schema: &Schema) -> String {
        let mut s = format!("{{\"numRecords\":{},\"minValues\":{{", self.num_records);
        write_stats(&schema.columns, &self.columns, StatsMap::Min, &mut s);
        s.push_str("},\"maxValues\":{");
        write_stats(&schema.columns, &self.columns, StatsMap::Max, &mut s);
        s.push_str("},\"nullCount\":{");
        write_stats(&schema.columns, &self.columns, StatsMap::Nulls, &mut s);
        s.push_str("}}");
        s
    }

    /// [`FileStats::to_stats_json`] of `num_records` rows whose columns (of `schema`, in its
    /// order) have the statistics `columns`.
    pub(crate) fn stats_json(schema: &Schema, num_records: u64, columns: Vec<ColumnStats>) -> String {
        FileStats {
            num_records,
            bytes: 0,
            columns,
        }
        .to_stats_json(schema)
    }
}


#[inline]
pub(crate) fn update_stat(st: &mut ColumnStats, v: StatValue) {
    match (&mut st.min, &mut st.max, &v) {
        (Some(StatValue::Int(lo)), Some(StatValue::Int(hi)), StatValue::Int(n)) => {
            *lo = (*lo).min(*n);
            *hi = (*hi).max(*n);
        }
        (Some(StatValue::Instant(lo)), Some(StatValue::Instant(hi)), StatValue::Instant(n)) => {
            *lo = (*lo).min(*n);
            *hi = (*hi).max(*n);
        }
        _ => {
            if st.min.as_ref().is_none_or(|m| v < *m) {
                st.min = Some(v.clone());
            }
            if st.max.as_ref().is_none_or(|m| v > *m) {
                st.max = Some(v);
            }
        }
    }
}

/// Min/max for strings and dates without allocating unless a bound moves. Strings longer than
/// the stat prefix keep a truncated `min` and make `max` unknown (a prefix is a lower bound,
/// never an upper one).
///
/// `s` is a string value's UTF-8 bytes (checked by the caller; compared as bytes, which orders
/// UTF-8 as its characters), converted to a `String` only when a bound moves.
pub(crate) fn update_str_stat(st: &mut ColumnStats, s: &[u8]) {
    // At most STRING_STAT_PREFIX bytes is at most that many characters: no need to count them.
    let cut = match s.len() <= STRING_STAT_PREFIX {
        true => None,
        // The start of character number STRING_STAT_PREFIX: the bytes that are not UTF-8
        // continuation bytes (0b10xx_xxxx) start characters.
        false => s
            .iter()
            .enumerate()
            .filter(|(_, c)| (**c as i8) >= -0x40)
            .nth(STRING_STAT_PREFIX)
            .map(|(i, _)| i),
    };
    let (s, long) = match cut {
        Some(cut) => (&s[..cut], true),
        None => (s, false),
    };
    st.max_unknown |= long;
    if !matches!(&st.min, Some(StatValue::Str(m)) if short_cmp(m.as_bytes(), s).is_le()) {
        st.min = Some(StatValue::Str(String::from_utf8_lossy(s).into_owned()));
    }
    if !long && !matches!(&st.max, Some(StatValue::Str(m)) if short_cmp(m.as_bytes(), s).is_ge()) {
        st.max = Some(StatValue::Str(String::from_utf8_lossy(s).into_owned()));
    }
}

/// `a.cmp(b)`, without a `memcmp` call for strings of at most 8 bytes (codes, ids: most string
/// columns): both zero-padded into a big-endian u64, then the shorter first on a tie (a string
/// is less than any longer one it is a prefix of, and padding only adds zeros).
#[inline]
pub(super) fn short_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if a.len() > 8 || b.len() > 8 {
        return a.cmp(b);
    }
    // Byte by byte: a copy into an array costs a memcpy call and a stalled load.
    let word = |s: &[u8]| {
        let w = s.iter().fold(0u64, |w, &c| (w << 8) | u64::from(c));
        w.checked_shl(8 * (8 - s.len() as u32)).unwrap_or(0)
    };
    word(a).cmp(&word(b)).then(a.len().cmp(&b.len()))
}

impl ColumnStats {
    pub(super) fn merge(&mut self, o: &ColumnStats) {
        for (a, b) in self.fields.iter_mut().zip(&o.fields) {
            a.merge(b);
        }
        self.null_count += o.null_count;
        self.max_unknown |= o.max_unknown;
        if let Some(m) = &o.min
            && self.min.as_ref().is_none_or(|s| m < s)
        {
            self.min = Some(m.clone());
        }
        if let Some(m) = &o.max
            && self.max.as_ref().is_none_or(|s| m > s)
        {
            self.max = Some(m.clone());
        }
    }
}

impl FileStats {
    pub(super) fn merge(&mut self, o: &FileStats) {
        self.num_records += o.num_records;
        self.bytes += o.bytes;
        for (a, b) in self.columns.iter_mut().zip(&o.columns) {
            a.merge(b);
        }
    }
}
