//! Label selectors: `meta/v1` `LabelSelector` compiled once and matched many
//! times, with the semantics of apimachinery's `LabelSelectorAsSelector`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A `LabelSelector` that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{key}: operator {operator:?} is not one of In, NotIn, Exists, DoesNotExist")]
    UnknownOperator { key: String, operator: String },
    #[error("{key}: values must be non-empty for operator {operator}")]
    MissingValues { key: String, operator: &'static str },
    #[error("{key}: values must be empty for operator {operator}")]
    UnexpectedValues { key: String, operator: &'static str },
}

/// One condition on a label.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

fn with_values(
    key: &str,
    values: BTreeSet<String>,
    operator: &'static str,
) -> Result<BTreeSet<String>, SelectorError> {
    if values.is_empty() {
        return Err(SelectorError::MissingValues {
            key: key.to_string(),
            operator,
        });
    }
    Ok(values)
}

fn without_values(
    key: &str,
    values: &BTreeSet<String>,
    operator: &'static str,
) -> Result<(), SelectorError> {
    if !values.is_empty() {
        return Err(SelectorError::UnexpectedValues {
            key: key.to_string(),
            operator,
        });
    }
    Ok(())
}

/// A compiled label selector.
///
/// As in Kubernetes, an absent selector selects nothing and an empty one
/// selects everything; see [`Selector::from_optional`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// `None` selects nothing; otherwise all requirements must hold.
    requirements: Option<Vec<Requirement>>,
}

impl Default for Selector {
    fn default() -> Self {
        Selector::everything()
    }
}

impl Selector {
    /// Selects every object.
    pub fn everything() -> Self {
        Selector {
            requirements: Some(Vec::new()),
        }
    }

    /// Selects no object.
    pub fn nothing() -> Self {
        Selector { requirements: None }
    }

    /// Selects objects carrying all of these labels (`a=b,c=d`).
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Selector {
            requirements: Some(
                labels
                    .into_iter()
                    .map(|(k, v)| Requirement::In(k.to_string(), BTreeSet::from([v.to_string()])))
                    .collect(),
            ),
        }
    }

    /// Compiles a `LabelSelector`: `matchLabels` are equality requirements,
    /// `matchExpressions` are set-based ones; all must hold.
    pub fn new(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::In(k.clone(), BTreeSet::from([v.clone()])));
        }
        for expr in selector.match_expressions.iter().flatten() {
            let key = expr.key.clone();
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            let requirement = match expr.operator.as_str() {
                "In" => Requirement::In(key, with_values(&expr.key, values, "In")?),
                "NotIn" => Requirement::NotIn(key, with_values(&expr.key, values, "NotIn")?),
                "Exists" => {
                    without_values(&expr.key, &values, "Exists")?;
                    Requirement::Exists(key)
                }
                "DoesNotExist" => {
                    without_values(&expr.key, &values, "DoesNotExist")?;
                    Requirement::DoesNotExist(key)
                }
                other => {
                    return Err(SelectorError::UnknownOperator {
                        key,
                        operator: other.to_string(),
                    });
                }
            };
            requirements.push(requirement);
        }
        Ok(Selector {
            requirements: Some(requirements),
        })
    }

    /// Compiles an optional selector the way PodDisruptionBudgets and
    /// workload controllers do: `None` selects nothing.
    pub fn from_optional(selector: Option<&LabelSelector>) -> Result<Self, SelectorError> {
        selector.map_or(Ok(Selector::nothing()), Selector::new)
    }

    /// Whether this selector selects every object.
    pub fn is_everything(&self) -> bool {
        self.requirements.as_ref().is_some_and(Vec::is_empty)
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .as_ref()
            .is_some_and(|rs| rs.iter().all(|r| r.matches(labels)))
    }

    /// [`Selector::matches`] for an object's optional `metadata.labels`.
    pub fn matches_opt(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        match labels {
            Some(labels) => self.matches(labels),
            None => self.matches(&BTreeMap::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.to_string(),
                operator: operator.to_string(),
                values: if values.is_empty() {
                    None
                } else {
                    Some(values.iter().map(|v| v.to_string()).collect())
                },
            }]),
            match_labels: None,
        }
    }

    fn compiled(key: &str, operator: &str, values: &[&str]) -> Selector {
        Selector::new(&expr(key, operator, values)).expect("valid selector")
    }

    #[test]
    fn match_labels_is_equality_on_every_pair() {
        let s = Selector::new(&LabelSelector {
            match_labels: Some(labels(&[("app", "web"), ("tier", "fe")])),
            match_expressions: None,
        })
        .expect("valid");
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "be")])));
        assert_eq!(s, Selector::from_labels([("app", "web"), ("tier", "fe")]));
    }

    #[test]
    fn in_requires_the_key_with_one_of_the_values() {
        let s = compiled("zone", "In", &["a", "b"]);
        assert!(s.matches(&labels(&[("zone", "a")])));
        assert!(!s.matches(&labels(&[("zone", "c")])));
        assert!(!s.matches(&labels(&[])));
    }

    #[test]
    fn not_in_matches_absent_keys() {
        let s = compiled("zone", "NotIn", &["a"]);
        assert!(s.matches(&labels(&[("zone", "b")])));
        assert!(s.matches(&labels(&[])));
        assert!(!s.matches(&labels(&[("zone", "a")])));
    }

    #[test]
    fn exists_and_does_not_exist_ignore_values() {
        let exists = compiled("gpu", "Exists", &[]);
        let absent = compiled("gpu", "DoesNotExist", &[]);
        let with = labels(&[("gpu", "")]);
        let without = labels(&[("cpu", "x")]);
        assert!(exists.matches(&with) && !exists.matches(&without));
        assert!(absent.matches(&without) && !absent.matches(&with));
    }

    #[test]
    fn malformed_expressions_are_rejected() {
        assert!(matches!(
            Selector::new(&expr("k", "In", &[])),
            Err(SelectorError::MissingValues { .. })
        ));
        assert!(matches!(
            Selector::new(&expr("k", "Exists", &["v"])),
            Err(SelectorError::UnexpectedValues { .. })
        ));
        assert!(matches!(
            Selector::new(&expr("k", "Gt", &["1"])),
            Err(SelectorError::UnknownOperator { .. })
        ));
    }

    #[test]
    fn empty_selects_everything_and_absent_selects_nothing() {
        let empty = Selector::from_optional(Some(&LabelSelector::default())).expect("valid");
        assert!(empty.is_everything());
        assert!(empty.matches_opt(None));
        let absent = Selector::from_optional(None).expect("valid");
        assert!(!absent.is_everything());
        assert!(!absent.matches(&labels(&[("a", "b")])));
        assert!(!absent.matches_opt(None));
    }
}
