//! What a request's query string asks for: label and field selectors in
//! the API server's syntax, list paging, watch and write options.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::cluster::{ApiError, Selector};

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        message: message.into(),
    }
}

/// The query parameters, decoded (`%XX` and `+`).
#[derive(Debug, Default, Clone)]
pub struct Query {
    params: BTreeMap<String, String>,
}

impl Query {
    pub fn parse(query: Option<&str>) -> Query {
        let mut params = BTreeMap::new();
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            params.insert(decode(k), decode(v));
        }
        Query { params }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }

    /// A boolean parameter: `true`/`1` as Go's `strconv.ParseBool` reads
    /// them.
    pub fn flag(&self, key: &str) -> Result<bool, ApiError> {
        match self.get(key) {
            None | Some("") => Ok(false),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(v) => Err(bad(format!("invalid boolean value {v:?} for {key}"))),
        }
    }

    pub fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.get(key).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| bad(format!("invalid value {v:?} for {key}: not an integer"))),
        }
    }

    /// `dryRun=All`; any other value is refused as the API server does.
    pub fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(v) => Err(ApiError::BadRequest {
                message: format!("Invalid dry run value: {v:?}: supported values: \"All\""),
            }),
        }
    }

    pub fn labels(&self) -> Result<Selector, ApiError> {
        parse_labels(self.get("labelSelector").unwrap_or_default())
    }

    pub fn fields(&self) -> Result<FieldSelector, ApiError> {
        FieldSelector::parse(self.get("fieldSelector").unwrap_or_default())
    }
}

/// Percent-decoding of a query component (`+` is a space).
pub fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a label selector as `labels.Parse` does ([`Selector::parse`]).
pub fn parse_labels(s: &str) -> Result<Selector, ApiError> {
    Selector::parse(s).map_err(bad)
}

/// A field selector: `field=value`, `field==value`, `field!=value`,
/// joined by commas.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses a field selector as `fields.ParseSelector` does: terms split
    /// at commas not escaped by a backslash, each split at its first `!=`,
    /// `==` or `=`; in a value `\\`, `\,` and `\=` stand for the character
    /// and an unescaped `,` or `=` is refused. Nothing is trimmed.
    pub fn parse(s: &str) -> Result<FieldSelector, ApiError> {
        let mut parts = split_escaped_terms(s);
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts.into_iter().filter(|t| !t.is_empty()) {
            let Some((field, equal, value)) = split_field_term(part) else {
                return Err(bad(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let value = unescape_field_value(value)?;
            // A term without field and value selects everything
            // (`Transform`).
            if !(field.is_empty() && value.is_empty()) {
                terms.push((field.to_string(), equal, value));
            }
        }
        Ok(FieldSelector { terms })
    }

    /// Each term: the field, whether it asks for equality, and the value.
    pub fn terms(&self) -> &[(String, bool, String)] {
        &self.terms
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Refuses fields the kind does not index, with the API server's
    /// message.
    pub fn check(&self, kind: &str) -> Result<(), ApiError> {
        for (field, _, _) in &self.terms {
            if !supported(kind, field) {
                return Err(bad(format!(
                    "\"{field}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"{}",
                    extra_fields(kind)
                        .iter()
                        .map(|f| format!(", \"{f}\""))
                        .collect::<String>()
                )));
            }
        }
        Ok(())
    }

    /// Whether the object (as served JSON) matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|(field, equal, value)| {
            let actual = field_value(obj, field);
            (actual == *value) == *equal
        })
    }

    /// Whether only metadata fields are selected, so the object's JSON is
    /// not needed.
    pub fn only_metadata(&self) -> bool {
        self.terms
            .iter()
            .all(|(f, _, _)| f == "metadata.name" || f == "metadata.namespace")
    }

    /// Whether a stored object matches: from its metadata when only
    /// metadata fields are selected, else from its JSON.
    pub fn matches_object(&self, o: &dyn super::kinds::AnyObject) -> bool {
        if self.is_empty() {
            true
        } else if self.only_metadata() {
            let m = o.meta();
            self.matches_meta(
                m.name.as_deref().unwrap_or_default(),
                m.namespace.as_deref().unwrap_or_default(),
            )
        } else {
            self.matches(&o.to_json())
        }
    }

    pub fn matches_meta(&self, name: &str, namespace: &str) -> bool {
        self.terms.iter().all(|(field, equal, value)| {
            let actual = if field == "metadata.name" {
                name
            } else {
                namespace
            };
            (actual == value) == *equal
        })
    }
}

/// Splits at commas, except one after a backslash.
fn split_escaped_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
}

/// A term at its first operator: `!=`, `==` or `=`, tried in that order at
/// each position.
fn split_field_term(term: &str) -> Option<(&str, bool, &str)> {
    (0..term.len())
        .filter(|&i| term.is_char_boundary(i))
        .find_map(|i| {
            let rest = &term[i..];
            [("!=", false), ("==", true), ("=", true)]
                .into_iter()
                .find(|(op, _)| rest.starts_with(op))
                .map(|(op, equal)| (&term[..i], equal, &rest[op.len()..]))
        })
}

/// `fields.UnescapeValue`.
fn unescape_field_value(s: &str) -> Result<String, ApiError> {
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(bad(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                )));
            }
            out.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            ',' | '=' => {
                return Err(bad(format!(
                    "invalid field selector: unescaped character {c:?}"
                )));
            }
            c => out.push(c),
        }
    }
    if escaped {
        return Err(bad("invalid field selector: invalid escape sequence: \\"));
    }
    Ok(out)
}

/// The fields beyond `metadata.name` and `metadata.namespace` each kind's
/// registry indexes for field selectors.
fn extra_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "Node" => &["spec.unschedulable"],
        "Namespace" => &["status.phase"],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "ReplicaSet" | "Job" => &["status.replicas"],
        _ => &[],
    }
}

fn supported(kind: &str, field: &str) -> bool {
    field == "metadata.name" || field == "metadata.namespace" || extra_fields(kind).contains(&field)
}

/// A field's value as the registry's field set renders it: strings as
/// they are, booleans and numbers in Go's formatting, absent as empty.
fn field_value(obj: &Value, field: &str) -> String {
    let pointer = match field {
        "source" => "/source/component".to_string(),
        f => format!("/{}", f.replace('.', "/")),
    };
    match obj.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        None if field == "spec.unschedulable" || field == "spec.hostNetwork" => "false".into(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selectors_parse_as_the_api_server_parses_them() {
        let s = parse_labels("app=web,tier!=db,env in (prod, staging),!canary,zone").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("env", "prod"), ("zone", "a")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "dev"), ("zone", "a")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("env", "prod"),
            ("zone", "a"),
            ("canary", "1")
        ])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "prod")])));
        let notin = parse_labels("env notin (prod)").unwrap();
        assert!(notin.matches(&labels(&[])));
        assert!(!notin.matches(&labels(&[("env", "prod")])));
        assert!(parse_labels("").unwrap().is_everything());
        assert!(parse_labels("env in prod").is_err());
        let gt = parse_labels("a > 3").unwrap();
        assert!(gt.matches(&labels(&[("a", "5")])));
        assert!(!gt.matches(&labels(&[("a", "3")])));
        assert!(!gt.matches(&labels(&[("a", "x")])));
        assert!(parse_labels("a > x").is_err());
        // Both requirements hold, as labels.Parse keeps both.
        assert!(
            !parse_labels("a=b,a=c")
                .unwrap()
                .matches(&labels(&[("a", "c")]))
        );
    }

    #[test]
    fn field_selectors_match_indexed_fields_only() {
        let f = FieldSelector::parse("spec.nodeName=n1,status.phase!=Succeeded").unwrap();
        f.check("Pod").unwrap();
        assert!(f.matches(&json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})));
        assert!(!f.matches(&json!({"spec": {"nodeName": "n2"}, "status": {"phase": "Running"}})));
        let err = FieldSelector::parse("spec.nodeName=n1")
            .unwrap()
            .check("Node")
            .unwrap_err();
        assert_eq!(err.code(), 400);
        let unsched = FieldSelector::parse("spec.unschedulable=false").unwrap();
        assert!(unsched.matches(&json!({"spec": {}})));
        assert!(FieldSelector::parse("nonsense").is_err());
    }

    #[test]
    fn queries_decode_and_refuse_bad_values() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Cenv+in+%28a%29&watch=1&limit=500&dryRun=All",
        ));
        assert_eq!(q.get("labelSelector"), Some("app=web,env in (a)"));
        assert!(q.flag("watch").unwrap());
        assert_eq!(q.int("limit").unwrap(), Some(500));
        assert!(q.dry_run().unwrap());
        assert!(Query::parse(Some("dryRun=Some")).dry_run().is_err());
        assert!(Query::parse(Some("watch=maybe")).flag("watch").is_err());
    }
}
