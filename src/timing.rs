//! Time syntax of the Karpenter API: Go-style durations (`consolidateAfter`,
//! `expireAfter`, `terminationGracePeriod`, budget `duration`) and disruption
//! budget schedules (standard 5-field cron, evaluated in UTC).
//!
//! Validation and the disruption logic share these parsers, so what `validate`
//! accepts is exactly what the controller can act on.
//!
//! Cron schedules are parsed and evaluated with the `croner` crate.

use std::time::Duration;

use croner::parser::{CronParser, Seconds, Year};

/// Which duration syntax a field accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationSyntax {
    /// `([0-9]+(s|m|h))+` or `Never` (`consolidateAfter`, `expireAfter`).
    HmsOrNever,
    /// `([0-9]+(s|m|h))+` (`terminationGracePeriod`).
    Hms,
    /// Hours and minutes only, optionally followed by `0s` (budget `duration`).
    HoursMinutes,
}

/// A parsed duration field: a finite duration, or `Never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NillableDuration {
    After(Duration),
    Never,
}

/// Why a duration beyond Go's `time.Duration` (int64 nanoseconds) is
/// refused.
const TOO_LONG: &str = "longer than 2562047h47m16s, the most a Go duration holds";

/// Parses a duration in the given syntax. The error is a complete sentence
/// that names the accepted forms.
pub fn parse_duration(s: &str, syntax: DurationSyntax) -> Result<NillableDuration, String> {
    if s == "Never" {
        return match syntax {
            DurationSyntax::HmsOrNever => Ok(NillableDuration::Never),
            _ => Err(format!(
                "invalid duration {s:?}: `Never` is not allowed here"
            )),
        };
    }
    let allowed: &[u8] = match syntax {
        DurationSyntax::HoursMinutes => b"hm",
        _ => b"hms",
    };
    let describe = || match syntax {
        DurationSyntax::HmsOrNever => {
            "use hours, minutes and seconds such as 720h, 1h30m or 30s, or Never"
        }
        DurationSyntax::Hms => "use hours, minutes and seconds such as 24h, 1h30m or 30s",
        DurationSyntax::HoursMinutes => "use hours and minutes such as 8h, 30m or 1h30m",
    };
    let body = match syntax {
        // The reference accepts a trailing `0s` on budget durations (Go's
        // time.Duration.String() prints `8h0m0s`).
        DurationSyntax::HoursMinutes => s.strip_suffix("0s").unwrap_or(s),
        _ => s,
    };
    let bytes = body.as_bytes();
    if bytes.is_empty() {
        return Err(format!("invalid duration {s:?}: {}", describe()));
    }
    let mut total: u64 = 0;
    let mut units = Vec::with_capacity(3);
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start || i == bytes.len() || !allowed.contains(&bytes[i]) {
            return Err(format!("invalid duration {s:?}: {}", describe()));
        }
        let n: u64 = body[start..i]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: {TOO_LONG}"))?;
        let unit = bytes[i];
        units.push(unit);
        let secs = match unit {
            b'h' => n.checked_mul(3600),
            b'm' => n.checked_mul(60),
            _ => Some(n),
        };
        total = secs
            .and_then(|x| total.checked_add(x))
            .ok_or_else(|| format!("invalid duration {s:?}: {TOO_LONG}"))?;
        i += 1;
    }
    // Karpenter reads the field with `time.ParseDuration`, which refuses
    // more than an int64 of nanoseconds (about 292 years).
    if total > i64::MAX as u64 / 1_000_000_000 {
        return Err(format!("invalid duration {s:?}: {TOO_LONG}"));
    }
    // Budget durations are `Nh`, `Nm` or `NhMm`: one of each, hours first.
    if syntax == DurationSyntax::HoursMinutes && !(units == b"h" || units == b"m" || units == b"hm")
    {
        return Err(format!("invalid duration {s:?}: {}", describe()));
    }
    Ok(NillableDuration::After(Duration::from_secs(total)))
}

/// Parses a duration as Go's `time.ParseDuration` does (the pod annotation
/// `karpenter.sh/do-not-disrupt: "1h30m"` is read with it): an optional
/// sign, then decimal numbers each with a unit (`ns`, `us`, `µs`, `ms`,
/// `s`, `m`, `h`), such as `300ms`, `1.5h` or `2h45m`; `0` alone is zero.
/// Returns nanoseconds, negative for a negative duration. Integer parts are
/// exact and a fraction is truncated to the nanosecond, as Go computes
/// them, and anything beyond an `int64` of nanoseconds is refused.
pub fn parse_go_duration(s: &str) -> Result<i128, String> {
    const LIMIT: u64 = 1 << 63;
    let err =
        || format!("invalid duration {s:?}: use a number with a unit such as 90s, 1.5h or 2h45m");
    let too_large = || format!("invalid duration {s:?}: {TOO_LONG}");
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(err());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = |r: &str| r.bytes().take_while(u8::is_ascii_digit).count();
        if !rest.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(err());
        }
        // The integer part, exact; more than 2^63 is refused.
        let int_len = digits(rest);
        let mut v: u64 = 0;
        for b in rest[..int_len].bytes() {
            if v > LIMIT / 10 {
                return Err(too_large());
            }
            v = v * 10 + u64::from(b - b'0');
            if v > LIMIT {
                return Err(too_large());
            }
        }
        rest = &rest[int_len..];
        // The fraction: digits stop counting once they would overflow.
        let (mut f, mut scale, mut frac_len) = (0u64, 1f64, 0);
        if let Some(r) = rest.strip_prefix('.') {
            frac_len = digits(r);
            let mut overflow = false;
            for b in r[..frac_len].bytes() {
                if overflow || f > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(b - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            rest = &r[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return Err(err());
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit: u64 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(err()),
        };
        rest = &rest[unit_len..];
        if v > LIMIT / unit {
            return Err(too_large());
        }
        v *= unit;
        if f > 0 {
            // As Go: a float64 product, truncated.
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(too_large());
            }
        }
        // Go adds in uint64 and wraps: 2^63ns twice is 0 there (the
        // fuzz run found the overflow; the oracle says 0).
        total = total.wrapping_add(v);
        if total > LIMIT {
            return Err(too_large());
        }
    }
    if !neg && total > LIMIT - 1 {
        return Err(too_large());
    }
    let nanos = i128::from(total);
    Ok(if neg { -nanos } else { nanos })
}

/// A parsed disruption-budget schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: croner::Cron,
}

const DESCRIPTORS: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

impl Schedule {
    /// Parses a schedule as Karpenter does (`cron.ParseStandard` of
    /// robfig/cron, in UTC): five fields (minute, hour, day of month, month,
    /// day of week) of comma-separated ranges, each `*` or `?`, `N`, `N-M`
    /// or a name (months and weekdays, three letters, any case), with an
    /// optional `/step` (`N/step` runs to the field's maximum), or one of
    /// the `@` descriptors in lower case. Day of week is 0-6 (Sunday 0).
    /// Seconds, years, `@every`, and the `L`, `W` and `#` extensions are
    /// rejected.
    pub fn parse(s: &str) -> Result<Schedule, String> {
        let trimmed = s.trim();
        let expanded = if trimmed.starts_with('@') {
            DESCRIPTORS
                .iter()
                .find(|(d, _)| *d == trimmed)
                .map(|(_, p)| *p)
                .ok_or_else(|| {
                    format!(
                        "invalid schedule {s:?}: unknown descriptor; use a 5-field cron expression or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
                    )
                })?
        } else {
            trimmed
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "invalid schedule {s:?}: expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            ));
        }
        let normalized = fields
            .iter()
            .zip(FIELDS)
            .map(|(field, spec)| normalize_field(field, &spec))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("invalid schedule {s:?}: {e}"))?
            .join(" ");
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(&normalized)
            .map_err(|e| format!("invalid schedule {s:?}: {e}"))?;
        Ok(Schedule { cron })
    }

    /// The underlying cron pattern.
    pub fn cron(&self) -> &croner::Cron {
        &self.cron
    }

    /// The first time the schedule fires strictly after `t` (UTC), as
    /// robfig/cron's `Schedule.Next`.
    pub fn next_after(&self, t: crate::clock::Timestamp) -> Option<crate::clock::Timestamp> {
        self.cron
            .find_next_occurrence(&t.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC), false)
            .ok()
            .map(|z| z.timestamp())
    }
}

/// One cron field: its name, bounds and the names it accepts.
struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const FIELDS: [FieldSpec; 5] = [
    FieldSpec {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    FieldSpec {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    FieldSpec {
        name: "day-of-month",
        min: 1,
        max: 31,
        names: &[],
    },
    FieldSpec {
        name: "month",
        min: 1,
        max: 12,
        names: &[
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ],
    },
    FieldSpec {
        name: "day-of-week",
        min: 0,
        max: 6,
        names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
    },
];

/// A field rewritten as numeric ranges croner reads the same way
/// robfig/cron reads the original: `*` (or `?`, or `*/1`) stays a
/// wildcard, which decides how day of month and day of week combine;
/// everything else becomes `start-end/step`.
fn normalize_field(field: &str, spec: &FieldSpec) -> Result<String, String> {
    let name = spec.name;
    let number = |text: &str| -> Result<u32, String> {
        if let Some(i) = spec.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
            return Ok(spec.min + i as u32);
        }
        // strconv.Atoi: an optional sign and decimal digits.
        match text.parse::<i64>() {
            Ok(n) if n < 0 => Err(format!("negative number {text:?} in the {name} field")),
            Ok(n) => u32::try_from(n)
                .map_err(|_| format!("{text:?} is out of range in the {name} field")),
            Err(_) => Err(format!(
                "{text:?} is not a number or name in the {name} field"
            )),
        }
    };
    if let Some(c) = field
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '*' | '?' | '/' | ',' | '-' | '+')))
    {
        return Err(format!(
            "character {c:?} in the {name} field is not supported"
        ));
    }
    let mut parts = Vec::new();
    // strings.FieldsFunc: empty elements (`1,,2`) are skipped.
    for expr in field.split(',').filter(|e| !e.is_empty()) {
        let range_and_step: Vec<&str> = expr.split('/').collect();
        let low_high: Vec<&str> = range_and_step[0].split('-').collect();
        let star = matches!(low_high[0], "*" | "?");
        let (start, mut end) = if star {
            (spec.min, spec.max)
        } else {
            let start = number(low_high[0])?;
            match low_high.len() {
                1 => (start, start),
                2 => (start, number(low_high[1])?),
                _ => return Err(format!("too many hyphens in {expr:?} ({name} field)")),
            }
        };
        let step = match range_and_step.len() {
            1 => 1,
            2 => {
                let step = number(range_and_step[1])?;
                if low_high.len() == 1 {
                    end = spec.max;
                }
                step
            }
            _ => return Err(format!("too many slashes in {expr:?} ({name} field)")),
        };
        if start < spec.min {
            return Err(format!(
                "{start} is below the {name} field's minimum {}",
                spec.min
            ));
        }
        if end > spec.max {
            return Err(format!(
                "{end} is above the {name} field's maximum {}",
                spec.max
            ));
        }
        if start > end {
            return Err(format!(
                "the range {expr:?} starts after it ends ({name} field)"
            ));
        }
        if step == 0 {
            return Err(format!(
                "the step of {expr:?} must be positive ({name} field)"
            ));
        }
        parts.push(if star && step == 1 {
            "*".to_string()
        } else {
            format!("{start}-{end}/{step}")
        });
    }
    if parts.is_empty() {
        return Err(format!("the {name} field is empty"));
    }
    // A wildcard anywhere makes the whole field one, as robfig/cron ORs
    // its star bit into the field.
    if parts.iter().any(|p| p == "*") {
        return Ok("*".into());
    }
    Ok(parts.join(","))
}

#[cfg(test)]
mod tests {

    #[test]
    fn go_durations_parse_as_go_does() {
        let ok = [
            ("1h", 3_600_000_000_000i128),
            ("1h30m", 5_400_000_000_000),
            ("1.5h", 5_400_000_000_000),
            ("300ms", 300_000_000),
            ("2h45m10s", 9_910_000_000_000),
            ("10\u{b5}s", 10_000),
            ("-5m", -300_000_000_000),
            ("0", 0),
            (".5s", 500_000_000),
            // Go sums in uint64 and wraps (found by the fuzz run).
            ("9223372036854775808ns9223372036854775808ns", 0),
            ("9223372036854775808ns9223372036854775808ns1ns", 1),
        ];
        for (s, n) in ok {
            assert_eq!(parse_go_duration(s), Ok(n), "{s}");
        }
        for bad in [
            "",
            "true",
            "1",
            "1d",
            "h",
            "1h-2m",
            "1..5s",
            "Never",
            " 1h",
            "9223372036854775807ns9223372036854775807ns",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
    use super::*;

    fn secs(n: u64) -> Result<NillableDuration, String> {
        Ok(NillableDuration::After(Duration::from_secs(n)))
    }

    #[test]
    fn durations_follow_the_reference_syntax() {
        use DurationSyntax::*;
        assert_eq!(parse_duration("720h", HmsOrNever), secs(720 * 3600));
        assert_eq!(parse_duration("1h30m15s", Hms), secs(5415));
        assert_eq!(parse_duration("0s", HmsOrNever), secs(0));
        assert_eq!(
            parse_duration("Never", HmsOrNever),
            Ok(NillableDuration::Never)
        );
        assert!(parse_duration("Never", Hms).is_err());
        for bad in ["", "5d", "1.5h", "h", "10", "-1h", "1H", " 1h"] {
            assert!(parse_duration(bad, HmsOrNever).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("8h", HoursMinutes), secs(8 * 3600));
        assert_eq!(parse_duration("1h30m", HoursMinutes), secs(5400));
        assert_eq!(parse_duration("8h0m0s", HoursMinutes), secs(8 * 3600));
        for bad in ["30s", "1m1h", "1h1h", "0s"] {
            assert!(parse_duration(bad, HoursMinutes).is_err(), "{bad}");
        }
    }

    #[test]
    fn schedules_accept_standard_cron() {
        for ok in [
            "0 9 * * MON-FRI",
            "0 9 * * mon-fri",
            "*/15 0-6 1,15 JAN-MAR *",
            "@daily",
            "@midnight",
            "@annually",
            "0 0 * * 0",
            // robfig/cron's forms: `?` for `*`, `N/step`, empty list items.
            "0 0 ? * MON",
            "0 0 * * 1/2",
            "1,,2 * * * *",
        ] {
            assert!(
                Schedule::parse(ok).is_ok(),
                "{ok}: {:?}",
                Schedule::parse(ok)
            );
        }
    }

    #[test]
    fn schedules_fire_as_robfig_cron_does() {
        let fires = |s: &str, n: usize| {
            let schedule = Schedule::parse(s).expect(s);
            // 2026-01-01T00:00:00Z, a Thursday.
            let mut t = crate::clock::Timestamp::from_second(1_767_225_600).expect("time");
            (0..n)
                .map(|_| {
                    t = schedule.next_after(t).expect("fires");
                    t.to_string()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            fires("5/20 * * * *", 3),
            [
                "2026-01-01T00:05:00Z",
                "2026-01-01T00:25:00Z",
                "2026-01-01T00:45:00Z"
            ]
        );
        // Day of week `1/2` is Monday, Wednesday and Friday.
        assert_eq!(
            fires("0 0 * * 1/2", 3),
            [
                "2026-01-02T00:00:00Z",
                "2026-01-05T00:00:00Z",
                "2026-01-07T00:00:00Z"
            ]
        );
        // Day of month and day of week both restricted: either one.
        assert_eq!(
            fires("0 0 2 * 0", 2),
            ["2026-01-02T00:00:00Z", "2026-01-04T00:00:00Z"]
        );
    }

    #[test]
    fn schedules_reject_extensions() {
        for bad in [
            "0 0 9 * * MON-FRI",
            "@every 1h",
            "@reboot",
            "0 0 L * *",
            "0 0 15W * *",
            "0 0 * * 5#3",
            "0 0 * * 5L",
            "0 0 * * 7",
            "*/0 * * * *",
            "@DAILY",
            "60 * * * *",
            "0 24 * * *",
            "0 0 * * * 2026",
            "0 9 * * FUNDAY",
            "* JAN * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad} should be rejected");
        }
    }
}
