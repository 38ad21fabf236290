//! The structural check: every document against the JSON Schema generated
//! from dovetail's API types (`schemas/`), strictly, so unknown fields are
//! errors. Each schema error becomes a finding at the most specific path,
//! with a readable message.

use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::Value;

use crate::api::{self, ApiKind};
use crate::diag::JsonPath;

/// One schema violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub path: JsonPath,
    pub message: String,
    pub hint: Option<String>,
    /// The JSON Schema keyword that failed (`pattern`, `required`, ...).
    pub keyword: &'static str,
}

impl Finding {
    /// Whether the API server withholds the CRD's CEL rules when the
    /// schema fails this way: a wrong type, a value outside its enum, a
    /// missing required field, or too long or too many, where the rules
    /// could not evaluate. Other failures (a pattern, a bound) leave the
    /// rules checked and reported with them.
    pub fn blocks_rules(&self) -> bool {
        matches!(
            self.keyword,
            "type" | "enum" | "required" | "maxLength" | "maxItems" | "maxProperties"
        )
    }
}

struct Compiled {
    schema: Value,
    validator: jsonschema::Validator,
}

fn compiled(kind: ApiKind) -> &'static Compiled {
    static CACHE: OnceLock<Vec<(ApiKind, Compiled)>> = OnceLock::new();
    let all = CACHE.get_or_init(|| {
        ApiKind::ALL
            .into_iter()
            .map(|k| {
                let schema = api::validation_schema(k);
                let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| {
                    panic!("generated schema for {} does not compile: {e}", k.kind())
                });
                (k, Compiled { schema, validator })
            })
            .collect()
    });
    &all.iter()
        .find(|(k, _)| *k == kind)
        .expect("every ApiKind has a schema")
        .1
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

fn type_name(t: &TypeKind) -> String {
    match t {
        TypeKind::Single(t) => format!("{t:?}").to_lowercase(),
        TypeKind::Multiple(ts) => {
            let names: Vec<String> = ts.iter().map(|t| format!("{t:?}").to_lowercase()).collect();
            names.join(" or ")
        }
    }
}

/// The `properties` names allowed next to an `additionalProperties: false`
/// keyword at `schema_path`, for "did you mean" hints.
fn sibling_properties<'a>(schema: &'a Value, schema_path: &str) -> Vec<&'a str> {
    let parent = schema_path.trim_end_matches("/additionalProperties");
    schema
        .pointer(parent)
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    candidates
        .iter()
        .copied()
        .map(|c| {
            (
                crate::diag::edit_distance(&lower, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!("{}…", &s[..s.floor_char_boundary(57)])
    } else {
        s
    }
}

/// A schema bound as written: `100`, not `100.0`.
fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

/// Validates `doc` against the schema of `kind`.
pub fn check(kind: ApiKind, doc: &Value) -> Vec<Finding> {
    check_with(compiled(kind), Some(kind), doc)
}

fn check_with(c: &Compiled, kind: Option<ApiKind>, doc: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    for err in c.validator.iter_errors(doc) {
        let path = JsonPath::from_pointer(err.instance_path().as_str());
        let keyword = err.kind().keyword();
        let keyword: &'static str = match keyword {
            "additionalProperties" => "additionalProperties",
            "required" => "required",
            "type" => "type",
            "enum" => "enum",
            "pattern" => "pattern",
            "format" => "format",
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => "range",
            "minLength" => "minLength",
            "maxLength" => "maxLength",
            "minItems" => "minItems",
            "maxItems" => "maxItems",
            "minProperties" => "minProperties",
            "maxProperties" => "maxProperties",
            // The int-or-string fields: a value of neither type.
            "anyOf" => "type",
            _ => "schema",
        };
        match err.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let allowed = sibling_properties(&c.schema, err.schema_path().as_str());
                for name in unexpected {
                    let hint = closest(name, &allowed).map(|c| format!("did you mean `{c}`?"));
                    out.push(Finding {
                        path: path.key(name.clone()),
                        message: format!("unknown field `{name}`"),
                        hint,
                        keyword,
                    });
                }
            }
            ValidationErrorKind::Required { property } => {
                let property = property.as_str().unwrap_or_default();
                out.push(Finding {
                    message: format!("missing required field `{property}`"),
                    hint: kind.and_then(|kind| required_hint(kind, &path, property)),
                    path,
                    keyword,
                });
            }
            ValidationErrorKind::Type { kind } => out.push(Finding {
                message: match err.instance().as_ref() {
                    Value::Null => format!("expected {}, found null", type_name(kind)),
                    v => format!(
                        "expected {}, found {} {}",
                        type_name(kind),
                        json_type(v),
                        short(v)
                    ),
                },
                path,
                hint: None,
                keyword,
            }),
            ValidationErrorKind::Enum { options } => {
                let opts: Vec<String> = options
                    .as_array()
                    .map(|a| a.iter().map(short).collect())
                    .unwrap_or_default();
                out.push(Finding {
                    message: format!(
                        "{} is not one of {}",
                        short(err.instance()),
                        opts.join(", ")
                    ),
                    path,
                    hint: None,
                    keyword,
                })
            }
            ValidationErrorKind::Minimum { limit } | ValidationErrorKind::Maximum { limit } => {
                let (word, limit) = (
                    if matches!(err.kind(), ValidationErrorKind::Minimum { .. }) {
                        "less than the minimum"
                    } else {
                        "greater than the maximum"
                    },
                    number(limit),
                );
                out.push(Finding {
                    message: format!("{} is {word} of {limit}", short(err.instance())),
                    path,
                    hint: None,
                    keyword,
                })
            }
            ValidationErrorKind::Pattern { pattern } => out.push(Finding {
                message: format!("{} does not match `{pattern}`", short(err.instance())),
                path,
                hint: None,
                keyword,
            }),
            _ => out.push(Finding {
                message: err.to_string(),
                path,
                hint: None,
                keyword,
            }),
        }
    }
    out
}

/// A hint for a required field that older manifests leave out.
fn required_hint(kind: ApiKind, path: &JsonPath, property: &str) -> Option<String> {
    // karpenter.sh/v1 requires consolidateAfter once spec.disruption is
    // written; v1beta1 manifests and many blog posts omit it.
    (kind == ApiKind::NodePool
        && property == "consolidateAfter"
        && path.to_string() == "spec.disruption")
        .then(|| {
            "karpenter.sh/v1 requires consolidateAfter here; \"0s\" keeps the v1beta1 behaviour"
                .to_string()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_finds_typos() {
        assert_eq!(
            closest("requirement", &["requirements", "taints"]),
            Some("requirements")
        );
        assert_eq!(closest("zzz", &["requirements", "taints"]), None);
    }
}
