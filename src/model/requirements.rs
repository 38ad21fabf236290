//! The requirement-set algebra over label keys.
//!
//! A [`Requirement`] is a set of allowed values for one key, written as
//! either a finite set (`In`, `DoesNotExist` = empty set) or a complement
//! (`NotIn`, `Exists` = complement of nothing), optionally bounded by
//! integer `Gt`/`Lt` limits (`Gte n` is `Gt n-1`, `Lte n` is `Lt n+1`).
//! [`Requirements`] is a conjunction over keys. Intersection and
//! compatibility follow the reference autoscaler's semantics.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::labels::{is_well_known, normalize_key};

/// A node selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    pub fn parse(s: &str) -> Option<Operator> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return None,
        })
    }
}

/// Why a requirement could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("unknown operator {0:?}")]
    UnknownOperator(String),
    #[error("operator {op} on {key:?} needs exactly one integer value")]
    BadBound { key: String, op: String },
}

/// The allowed values of one label key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub complement: bool,
    pub values: BTreeSet<String>,
    /// Values must be integers greater than this.
    pub greater_than: Option<i64>,
    /// Values must be integers less than this.
    pub less_than: Option<i64>,
    /// The NodePool's `minValues`: at least this many distinct values must
    /// remain among a NodeClaim's instance types.
    pub min_values: Option<usize>,
}

impl Requirement {
    /// Any value, and the label must exist.
    pub fn exists() -> Self {
        Requirement {
            complement: true,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// The label must not exist.
    pub fn does_not_exist() -> Self {
        Requirement {
            complement: false,
            ..Self::exists()
        }
    }

    pub fn in_values<S: Into<String>>(values: impl IntoIterator<Item = S>) -> Self {
        Requirement {
            complement: false,
            values: values.into_iter().map(Into::into).collect(),
            ..Self::exists()
        }
    }

    pub fn not_in<S: Into<String>>(values: impl IntoIterator<Item = S>) -> Self {
        Requirement {
            complement: true,
            values: values.into_iter().map(Into::into).collect(),
            ..Self::exists()
        }
    }

    /// Builds a requirement from an operator and its values.
    pub fn new(key: &str, op: Operator, values: &[String]) -> Result<Self, RequirementError> {
        let bound = |shift: i64| -> Result<Option<i64>, RequirementError> {
            match values {
                [v] => v
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .and_then(|n| n.checked_add(shift))
                    .map(Some)
                    .ok_or_else(|| RequirementError::BadBound {
                        key: key.to_string(),
                        op: format!("{op:?}"),
                    }),
                _ => Err(RequirementError::BadBound {
                    key: key.to_string(),
                    op: format!("{op:?}"),
                }),
            }
        };
        Ok(match op {
            Operator::In => Self::in_values(values.iter().cloned()),
            Operator::NotIn => Self::not_in(values.iter().cloned()),
            Operator::Exists => Self::exists(),
            Operator::DoesNotExist => Self::does_not_exist(),
            Operator::Gt => Requirement {
                greater_than: bound(0)?,
                ..Self::exists()
            },
            Operator::Gte => Requirement {
                greater_than: bound(-1)?,
                ..Self::exists()
            },
            Operator::Lt => Requirement {
                less_than: bound(0)?,
                ..Self::exists()
            },
            Operator::Lte => Requirement {
                less_than: bound(1)?,
                ..Self::exists()
            },
        })
    }

    fn within_bounds(&self, v: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        let Ok(n) = v.parse::<i64>() else {
            return false;
        };
        self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
    }

    /// Does the requirement allow this label value?
    pub fn has(&self, v: &str) -> bool {
        let listed = self.values.contains(v);
        (listed != self.complement) && self.within_bounds(v)
    }

    /// Is no value allowed (the label must be absent)?
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// Number of allowed values; `usize::MAX` for complements.
    pub fn len(&self) -> usize {
        if self.complement {
            usize::MAX
        } else {
            self.values.len()
        }
    }

    /// The operator this requirement is equivalent to.
    pub fn operator(&self) -> Operator {
        if self.complement {
            if !self.values.is_empty() {
                Operator::NotIn
            } else if self.greater_than.is_some() {
                Operator::Gt
            } else if self.less_than.is_some() {
                Operator::Lt
            } else {
                Operator::Exists
            }
        } else if self.values.is_empty() {
            Operator::DoesNotExist
        } else {
            Operator::In
        }
    }

    /// May a node without this label satisfy the requirement?
    pub fn allows_absent(&self) -> bool {
        matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
    }

    /// The values allowed by both requirements.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        let min_values = max_opt_usize(self.min_values, other.min_values);
        let (complement, values): (bool, BTreeSet<String>) =
            match (self.complement, other.complement) {
                (true, true) => (true, self.values.union(&other.values).cloned().collect()),
                (true, false) => (
                    false,
                    other
                        .values
                        .iter()
                        .filter(|v| !self.values.contains(*v))
                        .cloned()
                        .collect(),
                ),
                (false, true) => (
                    false,
                    self.values
                        .iter()
                        .filter(|v| !other.values.contains(*v))
                        .cloned()
                        .collect(),
                ),
                (false, false) => (
                    false,
                    self.values.intersection(&other.values).cloned().collect(),
                ),
            };
        let mut r = Requirement {
            complement,
            values,
            greater_than,
            less_than,
            min_values,
        };
        if !r.complement {
            let bounded = r.clone();
            r.values.retain(|v| bounded.within_bounds(v));
        } else if let (Some(g), Some(l)) = (greater_than, less_than)
            && l.saturating_sub(g) <= 1
        {
            // No integer lies strictly between the bounds.
            r = Requirement {
                min_values,
                ..Requirement::does_not_exist()
            };
        }
        r
    }
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) | (None, x) => x,
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) | (None, x) => x,
    }
}

fn max_opt_usize(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) | (None, x) => x,
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vals = || self.values.iter().cloned().collect::<Vec<_>>().join(",");
        match self.operator() {
            Operator::In => write!(f, "In [{}]", vals()),
            Operator::NotIn => write!(f, "NotIn [{}]", vals()),
            Operator::Exists => f.write_str("Exists"),
            Operator::DoesNotExist => f.write_str("DoesNotExist"),
            _ => {
                f.write_str("Exists")?;
                if let Some(g) = self.greater_than {
                    write!(f, " >{g}")?;
                }
                if let Some(l) = self.less_than {
                    write!(f, " <{l}")?;
                }
                Ok(())
            }
        }
    }
}

/// A conjunction of requirements, one per (normalised) label key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements(pub BTreeMap<String, Requirement>);

/// A requirement incompatibility, for reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub key: String,
    pub detail: String,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.detail)
    }
}

impl Requirements {
    pub fn new() -> Self {
        Requirements::default()
    }

    /// Adds a requirement, intersecting with any existing one on the key.
    pub fn add(&mut self, key: &str, req: Requirement) {
        let key = normalize_key(key);
        match self.0.get_mut(key) {
            Some(existing) => *existing = existing.intersection(&req),
            None => {
                self.0.insert(key.to_string(), req);
            }
        }
    }

    /// Adds `key In [value]` for each label.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut r = Requirements::new();
        for (k, v) in labels {
            r.add(k, Requirement::in_values([v.clone()]));
        }
        r
    }

    /// Builds requirements from `NodeSelectorRequirement`s.
    pub fn from_node_selector(
        reqs: &[k8s_openapi::api::core::v1::NodeSelectorRequirement],
    ) -> Result<Self, RequirementError> {
        let mut r = Requirements::new();
        for e in reqs {
            let op = Operator::parse(&e.operator)
                .ok_or_else(|| RequirementError::UnknownOperator(e.operator.clone()))?;
            let values = e.values.clone().unwrap_or_default();
            r.add(&e.key, Requirement::new(&e.key, op, &values)?);
        }
        Ok(r)
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    /// Intersects every requirement of `other` into `self`.
    pub fn intersect_with(&mut self, other: &Requirements) {
        for (k, r) in &other.0 {
            self.add(k, r.clone());
        }
    }

    /// Checks that `incoming` (e.g. a pod's requirements) can be met by a node
    /// with these requirements. Keys `incoming` requires that `self` does not
    /// define are allowed only for `NotIn`/`DoesNotExist`, or when
    /// `allow_undefined` accepts the key (well-known labels).
    pub fn compatible(
        &self,
        incoming: &Requirements,
        allow_undefined: fn(&str) -> bool,
    ) -> Result<(), Conflict> {
        for (key, inc) in &incoming.0 {
            match self.0.get(key) {
                None => {
                    if !inc.allows_absent() && !allow_undefined(key) {
                        return Err(Conflict {
                            key: key.clone(),
                            detail: format!("requires {inc}, but the label has no known values"),
                        });
                    }
                }
                Some(existing) => {
                    if existing.intersection(inc).is_empty()
                        && !(inc.allows_absent() && existing.allows_absent())
                    {
                        return Err(Conflict {
                            key: key.clone(),
                            detail: format!("requires {inc}, but only {existing} is allowed"),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Do node labels satisfy every requirement?
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> Result<(), Conflict> {
        for (key, r) in &self.0 {
            let ok = match labels.get(key) {
                Some(v) => r.has(v),
                None => r.allows_absent(),
            };
            if !ok {
                return Err(Conflict {
                    key: key.clone(),
                    detail: match labels.get(key) {
                        Some(v) => format!("requires {r}, node has {v:?}"),
                        None => format!("requires {r}, node has no such label"),
                    },
                });
            }
        }
        Ok(())
    }

    /// The single allowed value of a key, if it has exactly one.
    pub fn single_value(&self, key: &str) -> Option<&str> {
        let r = self.0.get(key)?;
        if !r.complement && r.values.len() == 1 {
            r.values.iter().next().map(String::as_str)
        } else {
            None
        }
    }

    /// Labels implied by single-valued `In` requirements.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.0
            .keys()
            .filter_map(|k| self.single_value(k).map(|v| (k.clone(), v.to_string())))
            .collect()
    }
}

/// Accepts well-known labels as undefined-but-allowed.
pub fn allow_well_known(key: &str) -> bool {
    is_well_known(key)
}

/// Accepts no undefined label.
pub fn allow_none(_: &str) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(op: Operator, vals: &[&str]) -> Requirement {
        let v: Vec<String> = vals.iter().map(|s| s.to_string()).collect();
        Requirement::new("k", op, &v).unwrap()
    }

    #[test]
    fn in_and_not_in_intersect() {
        let a = req(Operator::In, &["a", "b", "c"]);
        let b = req(Operator::NotIn, &["b"]);
        let i = a.intersection(&b);
        assert_eq!(i.operator(), Operator::In);
        assert!(i.has("a") && !i.has("b") && i.has("c"));
    }

    #[test]
    fn bounds_filter_values() {
        let a = req(Operator::In, &["1", "4", "8", "x"]);
        let b = req(Operator::Gte, &["4"]);
        let i = a.intersection(&b);
        assert_eq!(i.values.len(), 2);
        assert!(i.has("4") && i.has("8"));
        let c = req(Operator::Lt, &["5"]).intersection(&req(Operator::Gt, &["4"]));
        assert!(c.is_empty());
        assert!(req(Operator::Lte, &["4"]).has("4"));
        assert!(!req(Operator::Lt, &["4"]).has("4"));
    }

    #[test]
    fn undefined_well_known_labels_are_allowed() {
        let node = Requirements::new();
        let mut pod = Requirements::new();
        pod.add("topology.kubernetes.io/zone", Requirement::in_values(["a"]));
        assert!(node.compatible(&pod, allow_well_known).is_ok());
        assert!(node.compatible(&pod, allow_none).is_err());
        let mut custom = Requirements::new();
        custom.add("team", Requirement::in_values(["x"]));
        assert!(node.compatible(&custom, allow_well_known).is_err());
        let mut absent = Requirements::new();
        absent.add("team", Requirement::does_not_exist());
        assert!(node.compatible(&absent, allow_none).is_ok());
    }

    #[test]
    fn beta_keys_merge_with_ga_keys() {
        let mut r = Requirements::new();
        r.add(
            "beta.kubernetes.io/arch",
            Requirement::in_values(["amd64", "arm64"]),
        );
        r.add("kubernetes.io/arch", Requirement::in_values(["arm64"]));
        assert_eq!(r.single_value("kubernetes.io/arch"), Some("arm64"));
    }

    fn arb_req() -> impl Strategy<Value = Requirement> {
        let vals = proptest::collection::vec(prop_oneof!["1", "2", "3", "a", "b"], 0..4);
        (0usize..8, vals, -1i64..5).prop_map(|(op, vals, n)| match op {
            0 => Requirement::in_values(vals),
            1 => Requirement::not_in(vals),
            2 => Requirement::exists(),
            3 => Requirement::does_not_exist(),
            4 => Requirement::new("k", Operator::Gt, &[n.to_string()]).unwrap(),
            5 => Requirement::new("k", Operator::Lt, &[n.to_string()]).unwrap(),
            6 => Requirement::new("k", Operator::Gte, &[n.to_string()]).unwrap(),
            _ => Requirement::new("k", Operator::Lte, &[n.to_string()]).unwrap(),
        })
    }

    proptest! {
        /// The intersection allows exactly the values both sides allow.
        #[test]
        fn intersection_is_set_intersection(a in arb_req(), b in arb_req()) {
            let i = a.intersection(&b);
            for v in ["-1", "0", "1", "2", "3", "4", "5", "a", "b", "z"] {
                prop_assert_eq!(i.has(v), a.has(v) && b.has(v), "value {}", v);
            }
            let j = b.intersection(&a);
            for v in ["0", "1", "3", "a", "z"] {
                prop_assert_eq!(i.has(v), j.has(v));
            }
        }
    }
}
