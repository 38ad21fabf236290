//! Time syntax of the Karpenter API: Go-style durations (`consolidateAfter`,
//! `expireAfter`, `terminationGracePeriod`, budget `duration`) and disruption
//! budget schedules (standard 5-field cron, evaluated in UTC).
//!
//! Validation and the disruption logic share these parsers, so what `validate`
//! accepts is exactly what the controller can act on.

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
            .map_err(|_| format!("invalid duration {s:?}: number too large"))?;
        let unit = bytes[i];
        units.push(unit);
        let secs = match unit {
            b'h' => n.checked_mul(3600),
            b'm' => n.checked_mul(60),
            _ => Some(n),
        };
        total = secs
            .and_then(|x| total.checked_add(x))
            .ok_or_else(|| format!("invalid duration {s:?}: too large"))?;
        i += 1;
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
/// Returns nanoseconds, negative for a negative duration.
pub fn parse_go_duration(s: &str) -> Result<i128, String> {
    let err =
        || format!("invalid duration {s:?}: use a number with a unit such as 90s, 1.5h or 2h45m");
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if body == "0" {
        return Ok(0);
    }
    if body.is_empty() {
        return Err(err());
    }
    let mut total: f64 = 0.0;
    let mut rest = body;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let num = &rest[..num_len];
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(err());
        }
        let value: f64 = num.parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(err()),
        };
        total += value * nanos_per;
        rest = &rest[unit_len..];
    }
    // Go's limit: about 292 years.
    if total > i64::MAX as f64 {
        return Err(format!("invalid duration {s:?}: too large"));
    }
    let nanos = total.round() as i128;
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
    /// Parses a schedule as the reference does: five fields (minute, hour,
    /// day of month, month, day of week) with names, ranges, steps and lists,
    /// or one of the `@` descriptors. Seconds, years, `@every`, and the `L`,
    /// `W`, `#` and `?` extensions are rejected.
    pub fn parse(s: &str) -> Result<Schedule, String> {
        let trimmed = s.trim();
        let expanded = if trimmed.starts_with('@') {
            DESCRIPTORS
                .iter()
                .find(|(d, _)| d.eq_ignore_ascii_case(trimmed))
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
        for (field, name) in fields.iter().zip(FIELD_NAMES) {
            if let Some(c) = field
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '*' | '/' | ',' | '-')))
            {
                return Err(format!(
                    "invalid schedule {s:?}: character {c:?} in the {name} field is not supported"
                ));
            }
            if field.chars().any(|c| c.is_ascii_alphabetic())
                && !matches!(name, "month" | "day-of-week")
            {
                return Err(format!(
                    "invalid schedule {s:?}: names are only allowed in the month and day-of-week fields"
                ));
            }
        }
        // `L` and `W` are letters, so they pass the character check above;
        // reject them unless they are part of a month or weekday name.
        for (field, name) in fields.iter().zip(FIELD_NAMES).skip(3) {
            for token in field.split([',', '-', '/']) {
                let alpha = token.chars().any(|c| c.is_ascii_alphabetic());
                if alpha && !is_name(token, name) {
                    return Err(format!(
                        "invalid schedule {s:?}: {token:?} is not a valid {name} name"
                    ));
                }
            }
        }
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(expanded)
            .map_err(|e| format!("invalid schedule {s:?}: {e}"))?;
        Ok(Schedule { cron })
    }

    /// The underlying cron pattern.
    pub fn cron(&self) -> &croner::Cron {
        &self.cron
    }
}

const FIELD_NAMES: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];

fn is_name(token: &str, field: &str) -> bool {
    const MONTHS: [&str; 12] = [
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ];
    const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    let names: &[&str] = if field == "month" { &MONTHS } else { &DAYS };
    names.iter().any(|n| n.eq_ignore_ascii_case(token))
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
        ];
        for (s, n) in ok {
            assert_eq!(parse_go_duration(s), Ok(n), "{s}");
        }
        for bad in ["", "true", "1", "1d", "h", "1h-2m", "1..5s", "Never", " 1h"] {
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
        ] {
            assert!(
                Schedule::parse(ok).is_ok(),
                "{ok}: {:?}",
                Schedule::parse(ok)
            );
        }
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
            "0 0 ? * MON",
            "0 0 * * 5L",
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
