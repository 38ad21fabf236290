//! Exact Kubernetes quantity arithmetic.
//!
//! A quantity string (`100m`, `1.5`, `2Gi`, `1e3`) is parsed exactly and
//! rounded up, as kube does, to an integer in the resource's canonical unit:
//! millicores for `cpu`, whole units (bytes, pods, devices) for everything
//! else. Formatting goes the other way and picks the shortest exact suffix.
//!
//! # One rule for values beyond `i64`
//!
//! Kubernetes keeps any quantity the syntax allows (`1E` cpu, `1e400`), so
//! Karpenter accepts them, e.g. as a NodePool limit meaning "unlimited".
//! dovetail represents every such value by saturating to [`i64::MAX`] (or
//! [`i64::MIN`]) in the canonical unit: a limit that large never binds, and a
//! request that large fits no instance type. `validate`, `plan`, `simulate`
//! and the controller all read quantities here, so all agree.

use std::fmt;

/// The resource measured in thousandths; everything else is whole units.
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// Why a quantity string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error(
        "invalid quantity {0:?}; a quantity is a number with an optional suffix, such as 500m, 2, 1.5Gi or 1e3"
    )]
    Invalid(String),
}

/// Is this resource counted in thousandths (millicores)?
pub fn is_milli(resource: &str) -> bool {
    resource == CPU
}

/// Parses a quantity for `resource` into its canonical integer unit,
/// rounding up like `Quantity.MilliValue()` / `Quantity.Value()`, and
/// saturating beyond `i64` (see the module documentation).
pub fn parse_quantity(resource: &str, s: &str) -> Result<i64, QuantityError> {
    let scale = if is_milli(resource) { 3 } else { 0 };
    parse_scaled(s, scale)
}

/// Significant digits kept exactly; further integer digits only scale the
/// value, further fraction digits only decide the rounding.
const DIGITS: u32 = 36;

/// Parses `s` and returns `ceil(value * 10^scale)` (towards zero for a
/// negative value), saturating at the bounds of `i64`.
pub fn parse_scaled(s: &str, scale: i32) -> Result<i64, QuantityError> {
    // The API server decodes a quantity from its JSON string and trims
    // blanks from it; characters JSON escapes (control characters, U+2028,
    // U+2029) reach the parser as escapes and are refused.
    let s = s.trim_matches(|c: char| {
        c.is_whitespace() && c >= ' ' && !matches!(c, '\u{2028}' | '\u{2029}')
    });
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let invalid = || QuantityError::Invalid(s.to_string());
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(num_end);
    // As `resource.ParseQuantity`, digits may be missing on either side of
    // the point, or altogether: `-`, `.` and `m` are zero.
    if number.matches('.').count() > 1 {
        return Err(invalid());
    }
    // value = mantissa * 10^exp10 (+ a dropped non-zero remainder)
    let mut mantissa: i128 = 0;
    let mut digits = 0u32;
    let mut exp10: i64 = 0;
    let mut remainder = false;
    let mut seen_dot = false;
    for c in number.chars() {
        if c == '.' {
            seen_dot = true;
            continue;
        }
        let d = i128::from(c as u8 - b'0');
        if digits < DIGITS {
            if mantissa > 0 || d > 0 {
                digits += 1;
            }
            mantissa = mantissa * 10 + d;
            if seen_dot {
                exp10 -= 1;
            }
        } else if seen_dot {
            remainder |= d > 0;
        } else {
            exp10 += 1;
            remainder |= d > 0;
        }
    }
    let (bin, dec): (u32, i64) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        e if e.starts_with(['e', 'E']) => {
            let exp = &e[1..];
            let digits_only = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits_only.is_empty() || !digits_only.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            // `resource.ParseQuantity` reads the exponent as an int32.
            let exp = exp.parse::<i32>().map_err(|_| invalid())?;
            (0, i64::from(exp))
        }
        _ => return Err(invalid()),
    };
    // Without a digit the number is zero, but Go reads it through its
    // fast path only: a decimal exponent below -9 or the suffix Pi or Ei
    // takes the slow path, which cannot read an empty number.
    if !number.bytes().any(|b| b.is_ascii_digit()) && (dec < -9 || bin >= 50) {
        return Err(invalid());
    }
    let saturated = if negative { i64::MIN } else { i64::MAX };
    if mantissa == 0 {
        return Ok(if remainder && !negative { 1 } else { 0 });
    }
    let exp10 = exp10 + dec + i64::from(scale);
    // The magnitude, rounded up.
    let magnitude: Option<i128> = if exp10 >= 0 {
        u32::try_from(exp10)
            .ok()
            .and_then(|e| 10i128.checked_pow(e))
            .and_then(|p| mantissa.checked_mul(p))
            .and_then(|v| v.checked_mul(1i128 << bin))
    } else {
        let num = mantissa.checked_mul(1i128 << bin);
        match (
            num,
            u32::try_from(-exp10)
                .ok()
                .and_then(|e| 10i128.checked_pow(e)),
        ) {
            (Some(num), Some(den)) => {
                let exact = num % den == 0 && !remainder;
                Some(num / den + i128::from(!exact && !negative))
            }
            // Below one unit: rounds up to 1, or towards zero if negative.
            (Some(_), None) => Some(i128::from(!negative)),
            (None, _) => None,
        }
    };
    let Some(magnitude) = magnitude else {
        return Ok(saturated);
    };
    // A dropped integer digit only matters for the rounding of exact values.
    let magnitude = if exp10 >= 0 && remainder && !negative {
        magnitude.saturating_add(1)
    } else {
        magnitude
    };
    let v = if negative { -magnitude } else { magnitude };
    Ok(i64::try_from(v).unwrap_or(saturated))
}

/// Formats a canonical integer of `resource` back to a quantity string.
pub fn format_quantity(resource: &str, v: i64) -> String {
    Formatted { resource, value: v }.to_string()
}

struct Formatted<'a> {
    resource: &'a str,
    value: i64,
}

impl fmt::Display for Formatted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.value;
        if is_milli(self.resource) {
            if v % 1000 == 0 {
                write!(f, "{}", v / 1000)
            } else {
                write!(f, "{v}m")
            }
        } else if v != 0 && (self.resource == MEMORY || self.resource == EPHEMERAL_STORAGE) {
            for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
                let unit = 1i64 << shift;
                if v % unit == 0 {
                    return write!(f, "{}{suffix}", v / unit);
                }
            }
            write!(f, "{v}")
        } else {
            write!(f, "{v}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_in_millicores() {
        assert_eq!(parse_quantity(CPU, "100m"), Ok(100));
        assert_eq!(parse_quantity(CPU, "1.5"), Ok(1500));
        assert_eq!(parse_quantity(CPU, "2"), Ok(2000));
        assert_eq!(parse_quantity(CPU, "1n"), Ok(1), "rounded up");
        assert_eq!(parse_quantity(CPU, "0.0001"), Ok(1));
        assert_eq!(parse_quantity(CPU, "1e3"), Ok(1_000_000));
    }

    #[test]
    fn parses_memory_in_bytes() {
        assert_eq!(parse_quantity(MEMORY, "2Gi"), Ok(2 << 30));
        assert_eq!(parse_quantity(MEMORY, "512Mi"), Ok(512 << 20));
        assert_eq!(parse_quantity(MEMORY, "1k"), Ok(1000));
        assert_eq!(parse_quantity(MEMORY, "1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_quantity(MEMORY, "2136997888"), Ok(2_136_997_888));
        assert_eq!(parse_quantity(MEMORY, "100m"), Ok(1), "rounded up");
        assert_eq!(
            parse_quantity(MEMORY, "10000000Gi"),
            Ok(10_000_000i64 << 30)
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_quantity(CPU, "").is_err());
        assert!(parse_quantity(CPU, "abc").is_err());
        assert!(parse_quantity(CPU, "1.2.3").is_err());
        assert!(parse_quantity(CPU, "1Qi").is_err());
        assert!(parse_quantity(CPU, "lots").is_err());
        assert!(parse_quantity(CPU, "1e").is_err());
        assert!(parse_quantity(CPU, "1ex").is_err());
    }

    /// One rule for every layer: values beyond i64 saturate ("unlimited" as
    /// a limit, "fits nowhere" as a request). Each was an error before, so
    /// `plan` exited 2 and the controller dropped a NodePool that
    /// `validate` accepted.
    #[test]
    fn values_beyond_i64_saturate() {
        for s in [
            "1E",
            "1e18",
            "9223372036854775807",
            "1e400",
            "99999999999Ei",
        ] {
            assert_eq!(parse_quantity(CPU, s), Ok(i64::MAX), "{s}");
        }
        // resource.ParseQuantity reads the exponent as an int32.
        assert!(parse_quantity(CPU, "1e2147483648").is_err());
        assert_eq!(parse_quantity(CPU, "1e2147483647"), Ok(i64::MAX));
        assert_eq!(parse_quantity(MEMORY, "9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_quantity(MEMORY, "9223372036854775808"), Ok(i64::MAX));
        assert_eq!(parse_quantity(MEMORY, "8Ei"), Ok(i64::MAX));
        assert_eq!(parse_quantity(MEMORY, "7Ei"), Ok(7i64 << 60));
        assert_eq!(
            parse_quantity(CPU, "9223372036854775m"),
            Ok(9_223_372_036_854_775)
        );
        assert_eq!(parse_quantity(CPU, "-1e400"), Ok(i64::MIN));
        // Tiny values still round up to one unit.
        assert_eq!(parse_quantity(CPU, "1e-400"), Ok(1));
        assert_eq!(
            parse_quantity(CPU, "0.000000000000000000000000000000000000000000001"),
            Ok(1)
        );
        assert_eq!(parse_quantity(CPU, "-1e-400"), Ok(0));
        assert_eq!(parse_quantity(CPU, "0"), Ok(0));
        assert_eq!(parse_quantity(CPU, "0e400"), Ok(0));
        // More digits than are kept exactly: still rounded up.
        assert_eq!(
            parse_quantity(MEMORY, "1.0000000000000000000000000000000000000001"),
            Ok(2)
        );
        assert_eq!(parse_quantity(MEMORY, "1.5e1"), Ok(15));
        assert_eq!(parse_quantity(MEMORY, "1e+3"), Ok(1000));
    }

    #[test]
    fn formats_with_the_shortest_exact_suffix() {
        assert_eq!(format_quantity(CPU, 1500), "1500m");
        assert_eq!(format_quantity(CPU, 2000), "2");
        assert_eq!(format_quantity(MEMORY, 2 << 30), "2Gi");
        assert_eq!(format_quantity(MEMORY, 1536 << 20), "1536Mi");
        assert_eq!(format_quantity(MEMORY, 1000), "1000");
        assert_eq!(format_quantity(PODS, 110), "110");
    }
}
