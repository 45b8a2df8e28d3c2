//! Time: the one parser of time expressions for `read --as-of TIME` and the mount's
//! `at/<TIME>` (docs/MOUNT.md "Time travel by time: `at/`"), the one RFC 3339 formatter, and the
//! clock.
//!
//! Accepted forms:
//! - RFC 3339 with a zone: `2026-11-30T19:52:27Z`, `2026-11-30T20:52:27.5+01:00` (a space may
//!   replace the `T`);
//! - a date or date-time without a zone, read in the process's local time zone (`TZ`, else
//!   `/etc/localtime`, looked up at each use, as `date -d` does): `2026-11-30` (midnight),
//!   `2026-11-30 19:52`, `2026-11-30T19:52:27.250`. A local time that a daylight-saving change
//!   skips is an error; one it repeats means its first occurrence;
//! - relative: `now`, `N<unit> ago` with unit `s`, `m`, `h`, `d`, `w` (or `sec`, `min`, `hour(s)`,
//!   `day(s)`, `week(s)`; a space before the unit is allowed): `30m ago`, `2h ago`, `1d ago`.

use chrono::{DateTime, Local, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};
use crate::util::quote::quoted;

/// Wall-clock ms since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A commit time as the change feed, `ls mnt/at`, `history` and `describe` show it: RFC 3339 in
/// UTC with milliseconds, always 24 bytes (`2026-11-30T19:52:27.123Z`). `None` for a time
/// outside the years 0000-9999, which that form cannot represent.
pub fn rfc3339_ms(ms: i64) -> Option<String> {
    let s = chrono::DateTime::from_timestamp_millis(ms)?
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string();
    (s.len() == 24).then_some(s)
}

/// [`rfc3339_ms`], or the bare number of ms for a time it cannot represent (a foreign
/// writer's timestamp far outside the years 0000-9999): what messages and listings print.
pub fn shown_ms(ms: i64) -> String {
    rfc3339_ms(ms).unwrap_or_else(|| ms.to_string())
}

/// The accepted forms, for error messages.
pub const ACCEPTED: &str = "accepted: RFC 3339 with a zone (2026-11-30T19:52:27Z, 2026-11-30T20:52:27+01:00), \
a date or date-time in the local time zone (2026-11-30, 2026-11-30 19:52, 2026-11-30 19:52:27.5), \
or a relative time (now, 30m ago, 2h ago, 1d ago)";

/// Parse `s` into ms since the epoch; `now_ms` is the present (for relative forms). Errors: one
/// sentence saying what is wrong, followed by [`ACCEPTED`].
pub fn parse(s: &str, now_ms: i64) -> Result<i64, String> {
    parse_inner(s.trim(), now_ms).map_err(|why| format!("{} is not a time: {why}; {ACCEPTED}", quoted(s)))
}

fn parse_inner(s: &str, now_ms: i64) -> Result<i64, String> {
    if s.is_empty() {
        return Err("it is empty".into());
    }
    if s.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if let Some(rel) = s.strip_suffix(" ago") {
        return relative(rel.trim(), now_ms);
    }
    if !s.as_bytes()[0].is_ascii_digit() {
        return Err("it starts with neither a date nor a number".into());
    }
    // Date part.
    let date_len = s.find(['T', 't', ' ']).unwrap_or(s.len());
    let date = NaiveDate::parse_from_str(&s[..date_len], "%Y-%m-%d")
        .map_err(|e| format!("the date {} is not YYYY-MM-DD ({e})", quoted(&s[..date_len])))?;
    if date_len == s.len() {
        return local(date.and_time(NaiveTime::MIN), s);
    }
    let rest = &s[date_len + 1..];
    // The zone: Z, or +HH:MM / -HH:MM after the time.
    let zone_at = rest
        .rfind(['Z', 'z', '+', '-'])
        .filter(|i| *i >= 5 || rest[*i..].eq_ignore_ascii_case("z"));
    let (time, zone) = match zone_at {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest.trim_end(), None),
    };
    let t = ["%H:%M:%S%.f", "%H:%M"]
        .iter()
        .find_map(|f| NaiveTime::parse_from_str(time.trim_end(), f).ok())
        .ok_or_else(|| format!("the time of day {} is not HH:MM, HH:MM:SS or HH:MM:SS.fff", quoted(time)))?;
    let naive = date.and_time(t);
    match zone {
        None => local(naive, s),
        Some(z) if z.eq_ignore_ascii_case("z") => Ok(naive.and_utc().timestamp_millis()),
        Some(z) => {
            let full = format!("{}T{}{z}", date.format("%Y-%m-%d"), t.format("%H:%M:%S%.f"));
            DateTime::parse_from_rfc3339(&full)
                .map(|d| d.timestamp_millis())
                .map_err(|_| format!("the zone {} is not Z or +HH:MM / -HH:MM", quoted(z)))
        }
    }
}

fn local(naive: NaiveDateTime, s: &str) -> Result<i64, String> {
    match Local.from_local_datetime(&naive) {
        LocalResult::Single(t) => Ok(t.timestamp_millis()),
        // A time repeated by a daylight-saving change: its first occurrence, the earlier instant.
        // Compared here: chrono 0.4's `Local` gives the two in either order (so `earliest()`
        // can be the later one).
        LocalResult::Ambiguous(a, b) => Ok(a.timestamp_millis().min(b.timestamp_millis())),
        LocalResult::None => Err(format!(
            "{s} does not exist in the local time zone (a daylight-saving change skips it)"
        )),
    }
}

fn relative(rel: &str, now_ms: i64) -> Result<i64, String> {
    let digits = rel.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(format!("{} before \"ago\" does not start with a number", quoted(rel)));
    }
    let n: i64 = rel[..digits]
        .parse()
        .map_err(|_| format!("{} is too large", quoted(&rel[..digits])))?;
    let unit = rel[digits..].trim();
    let ms: i64 = match unit {
        "s" | "sec" | "secs" | "second" | "seconds" => 1000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "w" | "week" | "weeks" => 604_800_000,
        _ => return Err(format!("the unit {} is not s, m, h, d or w", quoted(unit))),
    };
    n.checked_mul(ms)
        .and_then(|d| now_ms.checked_sub(d))
        .ok_or_else(|| format!("{rel} ago is too far back"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_000_000_000;

    #[test]
    fn forms() {
        let z = parse("2026-11-30T19:52:27Z", NOW).unwrap();
        assert_eq!(z, 1_796_068_347_000);
        assert_eq!(parse("2026-11-30 19:52:27Z", NOW).unwrap(), z);
        assert_eq!(parse("2026-11-30T20:52:27+01:00", NOW).unwrap(), z);
        assert_eq!(parse("2026-11-30T19:52:27.250Z", NOW).unwrap(), z + 250);
        assert_eq!(parse("2026-11-30T14:52:27-05:00", NOW).unwrap(), z);
        assert_eq!(parse("30m ago", NOW).unwrap(), NOW - 1_800_000);
        assert_eq!(parse("2h ago", NOW).unwrap(), NOW - 7_200_000);
        assert_eq!(parse("1d ago", NOW).unwrap(), NOW - 86_400_000);
        assert_eq!(parse("3 days ago", NOW).unwrap(), NOW - 3 * 86_400_000);
        assert_eq!(parse("now", NOW).unwrap(), NOW);
        // No zone: the local zone, as date -d reads it.
        let local = Local
            .from_local_datetime(
                &NaiveDate::from_ymd_opt(2026, 11, 30)
                    .unwrap()
                    .and_hms_opt(19, 52, 27)
                    .unwrap(),
            )
            .earliest()
            .unwrap()
            .timestamp_millis();
        assert_eq!(parse("2026-11-30 19:52:27", NOW).unwrap(), local);
        assert_eq!(parse("2026-11-30T19:52:27", NOW).unwrap(), local);
        assert_eq!(parse("2026-11-30 19:52", NOW).unwrap(), local - 27_000);
        let midnight = Local
            .from_local_datetime(
                &NaiveDate::from_ymd_opt(2026, 11, 30)
                    .unwrap()
                    .and_hms_opt(0, 0, 0)
                    .unwrap(),
            )
            .earliest()
            .unwrap()
            .timestamp_millis();
        assert_eq!(parse("2026-11-30", NOW).unwrap(), midnight);
    }

    #[test]
    fn errors_say_what_and_list_the_forms() {
        for (s, what) in [
            ("", "empty"),
            ("yesterday", "neither a date"),
            ("2026-13-01", "not YYYY-MM-DD"),
            ("2026-11-30 25:00", "time of day"),
            ("2026-11-30T19:52:27+1", "zone"),
            ("5 fortnights ago", "unit"),
            ("x ago", "number"),
        ] {
            let e = parse(s, NOW).unwrap_err();
            assert!(
                e.contains(what) && e.contains("accepted: RFC 3339") && e.contains("30m ago"),
                "{s}: {e}"
            );
        }
    }
}
