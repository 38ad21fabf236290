//! Exact Kubernetes quantity arithmetic.
//!
//! A quantity string (`100m`, `1.5`, `2Gi`, `1e3`) is parsed exactly and
//! rounded up, as kube does, to an integer in the resource's canonical unit:
//! millicores for `cpu`, whole units (bytes, pods, devices) for everything
//! else. Formatting goes the other way and picks the shortest exact suffix.

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
    #[error("invalid quantity {0:?}")]
    Invalid(String),
    #[error("quantity {0:?} is out of range")]
    OutOfRange(String),
}

/// Is this resource counted in thousandths (millicores)?
pub fn is_milli(resource: &str) -> bool {
    resource == CPU
}

/// Parses a quantity for `resource` into its canonical integer unit,
/// rounding up like `Quantity.MilliValue()` / `Quantity.Value()`.
pub fn parse_quantity(resource: &str, s: &str) -> Result<i64, QuantityError> {
    let scale = if is_milli(resource) { 3 } else { 0 };
    parse_scaled(s, scale)
}

/// Parses `s` and returns `ceil(value * 10^scale)`.
pub fn parse_scaled(s: &str, scale: i32) -> Result<i64, QuantityError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let invalid = || QuantityError::Invalid(s.to_string());
    let range = || QuantityError::OutOfRange(s.to_string());
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(invalid());
    }
    // mantissa / 10^frac_digits
    let mut mantissa: i128 = 0;
    let mut frac_digits: i32 = 0;
    let mut seen_dot = false;
    for c in number.chars() {
        if c == '.' {
            seen_dot = true;
            continue;
        }
        let d = i128::from(c as u8 - b'0');
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(d))
            .ok_or_else(range)?;
        if seen_dot {
            frac_digits += 1;
        }
    }
    // value = mantissa * 2^bin * 10^dec / 10^frac_digits
    let (bin, dec): (u32, i32) = match suffix {
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
            let exp: i32 = e[1..].parse().map_err(|_| invalid())?;
            if !(-30..=30).contains(&exp) {
                return Err(range());
            }
            (0, exp)
        }
        _ => return Err(invalid()),
    };
    let mut num = mantissa.checked_shl(bin).ok_or_else(range)?;
    if bin > 0 && num >> bin != mantissa {
        return Err(range());
    }
    let exp10 = dec + scale - frac_digits;
    let mut den: i128 = 1;
    if exp10 >= 0 {
        num = num
            .checked_mul(pow10(exp10).ok_or_else(range)?)
            .ok_or_else(range)?;
    } else {
        den = pow10(-exp10).ok_or_else(range)?;
    }
    let mut v = num / den;
    if num % den != 0 {
        v += 1; // round up, like kube
    }
    if negative {
        // Rounding "up" of a negative number goes toward zero.
        v = -(num / den);
    }
    i64::try_from(v).map_err(|_| range())
}

fn pow10(e: i32) -> Option<i128> {
    10i128.checked_pow(u32::try_from(e).ok()?)
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
        assert!(parse_quantity(MEMORY, "99999999999Ei").is_err());
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
