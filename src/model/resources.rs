//! Resource lists: a map from resource name to an exact integer amount in
//! the resource's canonical unit (see [`super::quantity`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::quantity::{QuantityError, format_quantity, parse_quantity};

/// A list of resources such as requests, allocatable or capacity.
/// Missing entries are zero.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resources(pub BTreeMap<String, i64>);

impl Resources {
    pub fn new() -> Self {
        Resources::default()
    }

    /// Builds a list from `(name, quantity string)` pairs.
    pub fn parse<'a>(
        items: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, (String, QuantityError)> {
        let mut r = Resources::new();
        for (name, q) in items {
            let v = parse_quantity(name, q).map_err(|e| (name.to_string(), e))?;
            r.0.insert(name.to_string(), v);
        }
        Ok(r)
    }

    /// Builds a list from a Kubernetes `ResourceList`.
    pub fn from_k8s(list: &BTreeMap<String, Quantity>) -> Result<Self, (String, QuantityError)> {
        Self::parse(list.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))
    }

    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    pub fn set(&mut self, name: &str, v: i64) {
        self.0.insert(name.to_string(), v);
    }

    /// Takes `name` out of the list.
    pub fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    pub fn with(mut self, name: &str, v: i64) -> Self {
        self.set(name, v);
        self
    }

    /// Adds `other` to `self`, saturating.
    pub fn add(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            self.merge(k, 0, |e| e.saturating_add(*v));
        }
    }

    /// Subtracts `other` from `self`, saturating (results may be negative).
    pub fn sub(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            self.merge(k, 0, |e| e.saturating_sub(*v));
        }
    }

    /// Component-wise maximum.
    pub fn max_with(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            self.merge(k, *v, |e| e.max(*v));
        }
    }

    /// Adds one of `name`.
    pub fn add_one(&mut self, name: &str) {
        self.merge(name, 0, |e| e.saturating_add(1));
    }

    /// Sets `name` to `f` of its amount (`missing` when it has none),
    /// allocating the key only when it is new: a sum over many lists of
    /// the same resources then allocates once per resource.
    fn merge(&mut self, name: &str, missing: i64, f: impl FnOnce(i64) -> i64) {
        match self.0.get_mut(name) {
            Some(e) => *e = f(*e),
            None => {
                self.0.insert(name.to_string(), f(missing));
            }
        }
    }

    /// Does every requested amount fit within `available`?
    pub fn fits_in(&self, available: &Resources) -> bool {
        self.0.iter().all(|(k, v)| *v <= available.get(k))
    }

    /// The first resource of `self` that does not fit within `available`.
    pub fn first_exceeding<'a>(&'a self, available: &Resources) -> Option<(&'a str, i64)> {
        self.0
            .iter()
            .find(|(k, v)| **v > available.get(k))
            .map(|(k, v)| (k.as_str(), *v))
    }

    /// Quantity strings for output, skipping zero entries.
    pub fn to_strings(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter(|(_, v)| **v != 0)
            .map(|(k, v)| (k.clone(), format_quantity(k, *v)))
            .collect()
    }

    /// [`Resources::to_strings`] as the API's quantities, for a capacity,
    /// an allocatable or a request list.
    pub fn to_quantities(&self) -> BTreeMap<String, Quantity> {
        self.to_strings()
            .into_iter()
            .map(|(k, v)| (k, Quantity(v)))
            .collect()
    }

    pub fn is_zero(&self) -> bool {
        self.0.values().all(|v| *v == 0)
    }
}

/// `name=quantity` for messages.
pub fn describe(name: &str, v: i64) -> String {
    format!("{name}={}", format_quantity(name, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_exact() {
        let mut a = Resources::parse([("cpu", "1.5"), ("memory", "1Gi")]).unwrap();
        let b = Resources::parse([("cpu", "500m"), ("nvidia.com/gpu", "1")]).unwrap();
        a.add(&b);
        assert_eq!(a.get("cpu"), 2000);
        assert_eq!(a.get("nvidia.com/gpu"), 1);
        a.sub(&b);
        assert_eq!(a.get("cpu"), 1500);
        assert_eq!(a.to_strings()["memory"], "1Gi");
        assert!(!a.to_strings().contains_key("nvidia.com/gpu"));
    }

    #[test]
    fn fits_reports_the_first_shortfall() {
        let req = Resources::parse([("cpu", "2"), ("memory", "1Gi")]).unwrap();
        let alloc = Resources::parse([("cpu", "1930m"), ("memory", "7Gi")]).unwrap();
        assert!(!req.fits_in(&alloc));
        assert_eq!(req.first_exceeding(&alloc), Some(("cpu", 2000)));
        let big = Resources::parse([("cpu", "4"), ("memory", "8Gi")]).unwrap();
        assert!(req.fits_in(&big));
    }
}
