//! Kubernetes name syntax: qualified names (label and taint keys), label
//! values and DNS subdomains, with the messages apimachinery gives.

const QUALIFIED_NAME_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const LABEL_VALUE_MAX: usize = 63;

fn is_alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// A lower-case RFC 1123 subdomain: dot-separated labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS1123_SUBDOMAIN_MAX
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_lowercase() | b[0].is_ascii_digit()
                && b[b.len() - 1].is_ascii_lowercase() | b[b.len() - 1].is_ascii_digit()
                && b.iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        })
}

/// Checks a qualified name (`prefix/name` or `name`), as label and taint keys
/// must be. Returns the problems, empty when valid.
pub fn qualified_name_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if key.matches('/').count() > 1 {
        errs.push(format!(
            "{key:?}: a qualified name must consist of an optional DNS subdomain prefix and a name, separated by a single '/'"
        ));
        return errs;
    }
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push(format!("{key:?}: prefix part must be non-empty"));
        } else if !is_dns1123_subdomain(p) {
            errs.push(format!(
                "{key:?}: prefix part must be a lowercase RFC 1123 subdomain (at most {DNS1123_SUBDOMAIN_MAX} characters of a-z, 0-9, '-' and '.', starting and ending with an alphanumeric character)"
            ));
        }
    }
    if name.is_empty() {
        errs.push(format!("{key:?}: name part must be non-empty"));
    } else {
        if name.len() > QUALIFIED_NAME_MAX {
            errs.push(format!(
                "{key:?}: name part must be no more than {QUALIFIED_NAME_MAX} characters"
            ));
        }
        if !is_name_part(name) {
            errs.push(format!(
                "{key:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
            ));
        }
    }
    errs
}

/// Checks a label value (may be empty). Returns the problems, empty when valid.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.is_empty() {
        return errs;
    }
    if value.len() > LABEL_VALUE_MAX {
        errs.push(format!(
            "{value:?}: a label value must be no more than {LABEL_VALUE_MAX} characters"
        ));
    }
    if !is_name_part(value) {
        errs.push(format!(
            "{value:?}: a label value must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for ok in [
            "app",
            "example.com/app",
            "a_b.c-d",
            "karpenter.sh/capacity-type",
            "A1",
        ] {
            assert!(qualified_name_errors(ok).is_empty(), "{ok}");
        }
        for bad in [
            "",
            "/app",
            "Example.com/app",
            "a/b/c",
            "-app",
            "app-",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(!qualified_name_errors(bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn label_values() {
        for ok in ["", "v1", "a.b_c-d", &"x".repeat(63)] {
            assert!(label_value_errors(ok).is_empty(), "{ok}");
        }
        for bad in ["-a", "a-", "a b", "a/b", &"x".repeat(64)] {
            assert!(!label_value_errors(bad).is_empty(), "{bad}");
        }
    }

    #[test]
    fn subdomains() {
        assert!(is_dns1123_subdomain("karpenter.k8s.aws"));
        assert!(!is_dns1123_subdomain("Karpenter.sh"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain(""));
    }
}
