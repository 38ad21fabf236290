//! Incremental topology counts for spread, affinity and anti-affinity.
//!
//! A [`Counter`] counts, per topology domain, the pods matched by one
//! (topology key, namespaces, label selector) triple. Terms of many pods
//! share a counter. Hostname domains are indexed by target (existing node or
//! planned NodeClaim); other keys by an interned domain value. Counters with
//! `owner` set count the pods *owning* a required anti-affinity term, so that
//! newcomers matching the term are kept away (symmetric anti-affinity).

use std::collections::HashMap;

use super::types::Namespaces;
use crate::model::LabelSelector;

/// Which topology key a term or counter is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopoKey {
    Hostname,
    /// Index into the solver's interned topology keys.
    Key(usize),
}

/// The interned values of one topology key.
#[derive(Debug, Clone, Default)]
pub struct Domains {
    pub key: String,
    pub values: Vec<String>,
    index: HashMap<String, u32>,
}

impl Domains {
    pub fn new(key: &str, mut values: Vec<String>) -> Self {
        values.sort();
        values.dedup();
        let index = values
            .iter()
            .enumerate()
            .map(|(i, v)| (v.clone(), i as u32))
            .collect();
        Domains {
            key: key.to_string(),
            values,
            index,
        }
    }

    pub fn id(&self, v: &str) -> Option<u32> {
        self.index.get(v).copied()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }
}

#[derive(Debug, Clone)]
pub struct Counter {
    pub key: TopoKey,
    pub namespaces: Namespaces,
    pub selector: LabelSelector,
    pub owner: bool,
    by_target: Vec<u32>,
    by_value: Vec<u32>,
    pub total: u64,
    /// Number of targets with a non-zero count (hostname counters).
    pub nonzero_targets: u32,
}

impl Counter {
    pub fn new(key: TopoKey, namespaces: Namespaces, selector: LabelSelector, owner: bool) -> Self {
        Counter {
            key,
            namespaces,
            selector,
            owner,
            by_target: Vec::new(),
            by_value: Vec::new(),
            total: 0,
            nonzero_targets: 0,
        }
    }

    /// Does this counter count a pod in `namespace` with `labels`?
    pub fn selects(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        self.namespaces.contains(namespace) && self.selector.matches(labels)
    }

    pub fn at_target(&self, t: usize) -> u32 {
        self.by_target.get(t).copied().unwrap_or(0)
    }

    pub fn at_value(&self, v: u32) -> u32 {
        self.by_value.get(v as usize).copied().unwrap_or(0)
    }

    /// Records one pod on target `t` whose value for a non-hostname key is
    /// `value` (None: the target has no such label, not counted).
    pub fn record(&mut self, t: usize, value: Option<u32>) {
        match self.key {
            TopoKey::Hostname => {
                if self.by_target.len() <= t {
                    self.by_target.resize(t + 1, 0);
                }
                if self.by_target[t] == 0 {
                    self.nonzero_targets += 1;
                }
                self.by_target[t] += 1;
                self.total += 1;
            }
            TopoKey::Key(_) => {
                if let Some(v) = value {
                    let v = v as usize;
                    if self.by_value.len() <= v {
                        self.by_value.resize(v + 1, 0);
                    }
                    self.by_value[v] += 1;
                    self.total += 1;
                }
            }
        }
    }

    /// Removes one pod recorded on target `t` with `value` (the inverse of
    /// [`Counter::record`]).
    pub fn remove(&mut self, t: usize, value: Option<u32>) {
        match self.key {
            TopoKey::Hostname => self.unrecord(t),
            TopoKey::Key(_) => {
                if let Some(c) = value.and_then(|v| self.by_value.get_mut(v as usize))
                    && *c > 0
                {
                    *c -= 1;
                    self.total = self.total.saturating_sub(1);
                }
            }
        }
    }

    /// Removes one pod recorded on hostname target `t`.
    pub fn unrecord(&mut self, t: usize) {
        if let Some(c) = self.by_target.get_mut(t)
            && *c > 0
        {
            *c -= 1;
            self.total = self.total.saturating_sub(1);
            if *c == 0 {
                self.nonzero_targets = self.nonzero_targets.saturating_sub(1);
            }
        }
    }
}
