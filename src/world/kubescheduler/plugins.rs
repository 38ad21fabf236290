//! The default profile's filters and scores over the index: the static
//! filters and scores cached per constraint set, the first failing filter
//! of each node for the message, and the weighted, normalised scores that
//! choose among the feasible nodes.

use super::*;

impl State {
    pub(super) fn statics(&mut self, spec: &PodSpec) -> Arc<StaticEval> {
        let key = StaticKey::of(spec);
        if let Some(s) = self.statics.get(&key) {
            return s.clone();
        }
        let tolerates = |t: &Taint| key.tolerations.iter().any(|tol| tol.tolerates(t));
        let unschedulable_taint = Taint::new(TAINT_UNSCHEDULABLE, "", Effect::NoSchedule);
        let prefer_tolerations: Vec<&Toleration> = key
            .tolerations
            .iter()
            .filter(|t| t.effect.is_none_or(|e| e == Effect::PreferNoSchedule))
            .collect();
        let n = self.nodes.len();
        let mut eval = StaticEval {
            verdict: Vec::with_capacity(n),
            affinity_match: Vec::with_capacity(n),
            taints_tolerated: Vec::with_capacity(n),
            taint_score: Vec::with_capacity(n),
            node_affinity_score: Vec::with_capacity(n),
        };
        for node in &self.nodes {
            let untolerated = node.taints.iter().copied().find(|id| {
                let t = &self.taints[*id as usize];
                t.effect != Effect::PreferNoSchedule && !tolerates(t)
            });
            let affinity = key.node_selector.matches_labels(&node.labels).is_ok()
                && (key.required_terms.is_empty()
                    || key
                        .required_terms
                        .iter()
                        .any(|t| t.matches_labels(&node.labels).is_ok()));
            let verdict = if node.unschedulable && !tolerates(&unschedulable_taint) {
                Verdict::Unschedulable
            } else if let Some(id) = untolerated {
                Verdict::Taint(id)
            } else if !affinity {
                Verdict::NodeAffinity
            } else {
                Verdict::Fits
            };
            eval.verdict.push(verdict);
            eval.affinity_match.push(affinity);
            eval.taints_tolerated.push(untolerated.is_none());
            let prefer = node
                .taints
                .iter()
                .map(|id| &self.taints[*id as usize])
                .filter(|t| t.effect == Effect::PreferNoSchedule)
                .filter(|t| !prefer_tolerations.iter().any(|tol| tol.tolerates(t)))
                .count();
            eval.taint_score
                .push(i64::try_from(prefer).unwrap_or(i64::MAX));
            eval.node_affinity_score.push(
                key.preferred_terms
                    .iter()
                    .filter(|(_, t)| t.matches_labels(&node.labels).is_ok())
                    .map(|(w, _)| i64::from(*w))
                    .sum(),
            );
        }
        let eval = Arc::new(eval);
        self.statics.insert(key, eval.clone());
        eval
    }

    /// Filters and scores every node for the pod: the best node, or
    /// kube-scheduler's message.
    pub(super) fn place(&mut self, info: &PodInfo) -> Result<usize, String> {
        if self.nodes.is_empty() {
            return Err("no nodes available to schedule pods".to_string());
        }
        let spec = &info.spec;
        let statics = self.statics(spec);
        let own_namespace = || Namespaces::Names([spec.namespace.clone()].into_iter().collect());

        // PreFilter: topology spread (DoNotSchedule).
        let hard: Vec<_> = spec
            .spread
            .iter()
            .filter(|c| c.when_unsatisfiable == Unsatisfiable::DoNotSchedule)
            .collect();
        for c in &spec.spread {
            self.topology(&c.topology_key);
        }
        let has_keys = |state: &State, n: usize, keys: &[&str]| {
            keys.iter().all(|k| state.domain(k, n) != NO_DOMAIN)
        };
        let hard_keys: Vec<&str> = hard.iter().map(|c| c.topology_key.as_str()).collect();
        struct HardSpread {
            key: String,
            max_skew: i64,
            self_match: i64,
            counts: Vec<i64>,
            min: i64,
        }
        let mut hard_spread = Vec::with_capacity(hard.len());
        for c in &hard {
            let counter = (!c.selector.is_empty()).then(|| {
                self.counter(CounterKey {
                    terms: vec![(own_namespace(), c.selector.clone())],
                    skip_terminating: true,
                })
            });
            let eligible = |n: usize| {
                (!c.honor_node_affinity || statics.affinity_match[n])
                    && (!c.honor_node_taints || statics.taints_tolerated[n])
                    && has_keys(self, n, &hard_keys)
            };
            let (counts, present) = match counter {
                Some(i) => self.domain_counts(i, &c.topology_key, eligible),
                None => {
                    let topo_domains = self.topo(&c.topology_key).map_or(0, |t| t.domains);
                    let mut present = vec![false; topo_domains];
                    for n in 0..self.nodes.len() {
                        let d = self.domain(&c.topology_key, n);
                        if d != NO_DOMAIN && eligible(n) {
                            present[d as usize] = true;
                        }
                    }
                    (vec![0; topo_domains], present)
                }
            };
            let domains = present.iter().filter(|p| **p).count();
            let mut min = counts
                .iter()
                .zip(&present)
                .filter(|(_, p)| **p)
                .map(|(c, _)| *c)
                .min()
                .unwrap_or(0);
            if c.min_domains
                .is_some_and(|m| domains < usize::try_from(m).unwrap_or(usize::MAX))
            {
                min = 0;
            }
            hard_spread.push(HardSpread {
                key: c.topology_key.clone(),
                max_skew: i64::from(c.max_skew),
                self_match: i64::from(!c.selector.is_empty() && c.selector.matches(&spec.labels)),
                counts,
                min,
            });
        }

        // PreFilter: inter-pod affinity.
        for t in spec
            .affinity
            .iter()
            .chain(&spec.anti_affinity)
            .chain(spec.preferred_affinity.iter().map(|(_, t)| t))
            .chain(spec.preferred_anti_affinity.iter().map(|(_, t)| t))
        {
            self.topology(&t.topology_key);
        }
        let existing_keys: Vec<String> = self
            .existing_anti
            .groups
            .iter()
            .chain(&self.existing_preferred.groups)
            .map(|(t, _, _)| t.topology_key.clone())
            .collect();
        for k in &existing_keys {
            self.topology(k);
        }
        let mut affinity_counts: Vec<(String, Vec<i64>)> = Vec::new();
        let mut affinity_any = false;
        if !spec.affinity.is_empty() {
            let all = self.counter(CounterKey {
                terms: spec
                    .affinity
                    .iter()
                    .map(|t| (t.namespaces.clone(), t.selector.clone()))
                    .collect(),
                skip_terminating: false,
            });
            for t in &spec.affinity {
                let (counts, _) = self.domain_counts(all, &t.topology_key, |_| true);
                affinity_any |= counts.iter().any(|c| *c > 0);
                affinity_counts.push((t.topology_key.clone(), counts));
            }
        }
        let affinity_self = spec.affinity.iter().all(|t| term_matches(t, spec));
        let mut anti_blocked: Vec<(String, Vec<bool>)> = Vec::new();
        for t in &spec.anti_affinity {
            let i = self.counter(CounterKey {
                terms: vec![(t.namespaces.clone(), t.selector.clone())],
                skip_terminating: false,
            });
            let (counts, _) = self.domain_counts(i, &t.topology_key, |_| true);
            anti_blocked.push((
                t.topology_key.clone(),
                counts.iter().map(|c| *c > 0).collect(),
            ));
        }
        let mut existing_blocked: Vec<(String, Vec<bool>)> = Vec::new();
        for (t, _, per_node) in &self.existing_anti.groups {
            if !term_matches(t, spec) {
                continue;
            }
            let Some(topo) = self.topo(&t.topology_key) else {
                continue;
            };
            let mut blocked = vec![false; topo.domains];
            for (n, c) in per_node.iter().enumerate() {
                let d = topo.node_domain[n];
                if *c > 0 && d != NO_DOMAIN {
                    blocked[d as usize] = true;
                }
            }
            existing_blocked.push((t.topology_key.clone(), blocked));
        }

        // Filter.
        let mut feasible = Vec::new();
        let mut reasons: BTreeMap<Reason, u32> = BTreeMap::new();
        let mut note = |r| *reasons.entry(r).or_insert(0) += 1;
        for (n, node) in self.nodes.iter().enumerate() {
            match statics.verdict[n] {
                Verdict::Fits => {}
                Verdict::Unschedulable => {
                    note(Reason::Unschedulable);
                    continue;
                }
                Verdict::Taint(id) => {
                    note(Reason::Taint(id));
                    continue;
                }
                Verdict::NodeAffinity => {
                    note(Reason::NodeAffinity);
                    continue;
                }
            }
            if spec
                .host_ports
                .iter()
                .any(|p| node.ports.iter().any(|q| p.conflicts(q)))
            {
                note(Reason::Ports);
                continue;
            }
            let mut insufficient = false;
            if node.pod_count + 1 > node.alloc_pods {
                note(Reason::TooManyPods);
                insufficient = true;
            }
            for (i, name) in [CPU, MEMORY, EPHEMERAL_STORAGE].iter().enumerate() {
                let want = info.dense[i];
                if want > 0 && want > node.alloc[i] - node.requested[i] {
                    note(Reason::Insufficient(name));
                    insufficient = true;
                }
            }
            for (name, want) in &info.extended {
                let free = node.alloc_extended.get(name).copied().unwrap_or(0)
                    - node.requested_extended.get(name).copied().unwrap_or(0);
                if *want > free {
                    note(Reason::Insufficient(name));
                    insufficient = true;
                }
            }
            if insufficient {
                continue;
            }
            if !hard_spread.is_empty() {
                if !has_keys(self, n, &hard_keys) {
                    note(Reason::SpreadMissingLabel);
                    continue;
                }
                let skewed = hard_spread.iter().any(|c| {
                    let d = self.domain(&c.key, n) as usize;
                    let count = c.counts.get(d).copied().unwrap_or(0);
                    count + c.self_match - c.min > c.max_skew
                });
                if skewed {
                    note(Reason::Spread);
                    continue;
                }
            }
            if !spec.affinity.is_empty() {
                let mut keys_present = true;
                let mut pods_exist = true;
                for (key, counts) in &affinity_counts {
                    let d = self.domain(key, n);
                    if d == NO_DOMAIN {
                        keys_present = false;
                    } else if counts.get(d as usize).copied().unwrap_or(0) <= 0 {
                        pods_exist = false;
                    }
                }
                let ok = keys_present && (pods_exist || (!affinity_any && affinity_self));
                if !ok {
                    note(Reason::PodAffinity);
                    continue;
                }
            }
            let blocked = |sets: &[(String, Vec<bool>)]| {
                sets.iter().any(|(key, blocked)| {
                    let d = self.domain(key, n);
                    d != NO_DOMAIN && blocked.get(d as usize).copied().unwrap_or(false)
                })
            };
            if blocked(&anti_blocked) {
                note(Reason::PodAntiAffinity);
                continue;
            }
            if blocked(&existing_blocked) {
                note(Reason::ExistingAntiAffinity);
                continue;
            }
            feasible.push(n);
        }
        if feasible.is_empty() {
            return Err(self.message(&reasons));
        }
        if feasible.len() == 1 {
            return Ok(feasible[0]);
        }
        let scores = self.score(info, &statics, &feasible);
        let best = feasible
            .iter()
            .zip(&scores)
            .max_by(|(a, sa), (b, sb)| sa.cmp(sb).then_with(|| b.cmp(a)))
            .map(|(n, _)| *n)
            .unwrap_or(feasible[0]);
        Ok(best)
    }

    /// kube-scheduler's `FitError` message.
    pub(super) fn message(&self, reasons: &BTreeMap<Reason<'_>, u32>) -> String {
        let mut parts: Vec<String> = reasons
            .iter()
            .map(|(reason, count)| {
                let text = match reason {
                    Reason::Unschedulable => "node(s) were unschedulable".to_string(),
                    Reason::Taint(id) => {
                        let t = &self.taints[*id as usize];
                        format!("node(s) had untolerated taint {{{}: {}}}", t.key, t.value)
                    }
                    Reason::NodeAffinity => "node(s) didn't match Pod's node affinity/selector".to_string(),
                    Reason::Ports => "node(s) didn't have free ports for the requested pod ports".to_string(),
                    Reason::TooManyPods => "Too many pods".to_string(),
                    Reason::Insufficient(r) => format!("Insufficient {r}"),
                    Reason::SpreadMissingLabel => {
                        "node(s) didn't match pod topology spread constraints (missing required label)".to_string()
                    }
                    Reason::Spread => "node(s) didn't match pod topology spread constraints".to_string(),
                    Reason::PodAffinity => "node(s) didn't match pod affinity rules".to_string(),
                    Reason::PodAntiAffinity => "node(s) didn't match pod anti-affinity rules".to_string(),
                    Reason::ExistingAntiAffinity => {
                        "node(s) didn't satisfy existing pods anti-affinity rules".to_string()
                    }
                };
                format!("{count} {text}")
            })
            .collect();
        // Go's sort.Strings: byte order, so "10 x" sorts before "2 y".
        parts.sort();
        format!(
            "0/{} nodes are available: {}.",
            self.nodes.len(),
            parts.join(", ")
        )
    }

    /// Weighted, normalised scores of the feasible nodes.
    pub(super) fn score(
        &mut self,
        info: &PodInfo,
        statics: &StaticEval,
        feasible: &[usize],
    ) -> Vec<i64> {
        let spec = &info.spec;
        let mut total = vec![0i64; feasible.len()];
        let best_effort = info.dense[0] == 0 && info.dense[1] == 0;
        for (i, n) in feasible.iter().enumerate() {
            let node = &self.nodes[*n];
            // NodeResourcesFit, LeastAllocated on cpu and memory.
            let mut sum = 0;
            let mut weights = 0;
            for r in 0..2 {
                let alloc = node.alloc[r];
                if alloc == 0 {
                    continue;
                }
                let requested = node.non_zero[r] + info.non_zero[r];
                sum += if requested > alloc {
                    0
                } else {
                    (alloc - requested) * MAX_NODE_SCORE / alloc
                };
                weights += 1;
            }
            if weights > 0 {
                total[i] += WEIGHT_FIT * (sum / weights);
            }
            // NodeResourcesBalancedAllocation on cpu and memory.
            if !best_effort {
                let fractions: Vec<f64> = (0..2)
                    .filter(|r| node.alloc[*r] != 0)
                    .map(|r| {
                        let requested = node.requested[r] + info.dense[r];
                        (requested as f64 / node.alloc[r] as f64).min(1.0)
                    })
                    .collect();
                let std = if fractions.len() == 2 {
                    ((fractions[0] - fractions[1]) / 2.0).abs()
                } else {
                    0.0
                };
                total[i] += WEIGHT_BALANCED * ((1.0 - std) * MAX_NODE_SCORE as f64) as i64;
            }
        }
        // TaintToleration (reversed) and NodeAffinity.
        let taint: Vec<i64> = feasible.iter().map(|n| statics.taint_score[*n]).collect();
        for (t, s) in total.iter_mut().zip(default_normalize(&taint, true)) {
            *t += WEIGHT_TAINT * s;
        }
        let affinity: Vec<i64> = feasible
            .iter()
            .map(|n| statics.node_affinity_score[*n])
            .collect();
        for (t, s) in total.iter_mut().zip(default_normalize(&affinity, false)) {
            *t += WEIGHT_NODE_AFFINITY * s;
        }
        for (t, s) in total.iter_mut().zip(self.inter_pod_scores(spec, feasible)) {
            *t += WEIGHT_INTER_POD_AFFINITY * s;
        }
        for (t, s) in total
            .iter_mut()
            .zip(self.spread_scores(spec, statics, feasible))
        {
            *t += WEIGHT_SPREAD * s;
        }
        total
    }

    /// InterPodAffinity: preferred terms of the pod, and terms of bound pods
    /// that match it, summed per topology domain; min-max normalised.
    pub(super) fn inter_pod_scores(&mut self, spec: &PodSpec, feasible: &[usize]) -> Vec<i64> {
        // (topology key, per-domain score)
        let mut contributions: Vec<(String, Vec<i64>)> = Vec::new();
        let own: Vec<(i64, PodAffinityTerm)> = spec
            .preferred_affinity
            .iter()
            .map(|(w, t)| (i64::from(*w), t.clone()))
            .chain(
                spec.preferred_anti_affinity
                    .iter()
                    .map(|(w, t)| (-i64::from(*w), t.clone())),
            )
            .collect();
        for (w, t) in own {
            let i = self.counter(CounterKey {
                terms: vec![(t.namespaces.clone(), t.selector.clone())],
                skip_terminating: false,
            });
            let (counts, _) = self.domain_counts(i, &t.topology_key, |_| true);
            contributions.push((t.topology_key, counts.iter().map(|c| c * w).collect()));
        }
        for (t, w, per_node) in &self.existing_preferred.groups {
            if !term_matches(t, spec) {
                continue;
            }
            let Some(topo) = self.topo(&t.topology_key) else {
                continue;
            };
            let mut counts = vec![0i64; topo.domains];
            for (n, c) in per_node.iter().enumerate() {
                let d = topo.node_domain[n];
                if d != NO_DOMAIN {
                    counts[d as usize] += i64::from(*c) * w;
                }
            }
            contributions.push((t.topology_key.clone(), counts));
        }
        if contributions.is_empty() {
            return vec![0; feasible.len()];
        }
        let raw: Vec<i64> = feasible
            .iter()
            .map(|n| {
                contributions
                    .iter()
                    .map(|(key, counts)| {
                        let d = self.domain(key, *n);
                        if d == NO_DOMAIN {
                            0
                        } else {
                            counts.get(d as usize).copied().unwrap_or(0)
                        }
                    })
                    .sum()
            })
            .collect();
        let min = raw.iter().copied().min().unwrap_or(0);
        let max = raw.iter().copied().max().unwrap_or(0);
        raw.iter()
            .map(|s| {
                if max > min {
                    (MAX_NODE_SCORE as f64 * ((s - min) as f64 / (max - min) as f64)) as i64
                } else {
                    0
                }
            })
            .collect()
    }

    /// PodTopologySpread for `ScheduleAnyway` constraints.
    pub(super) fn spread_scores(
        &mut self,
        spec: &PodSpec,
        statics: &StaticEval,
        feasible: &[usize],
    ) -> Vec<i64> {
        let soft: Vec<_> = spec
            .spread
            .iter()
            .filter(|c| c.when_unsatisfiable == Unsatisfiable::ScheduleAnyway)
            .collect();
        if soft.is_empty() {
            return vec![0; feasible.len()];
        }
        let keys: Vec<&str> = soft.iter().map(|c| c.topology_key.as_str()).collect();
        let has_all =
            |state: &State, n: usize| keys.iter().all(|k| state.domain(k, n) != NO_DOMAIN);
        let ignored: Vec<bool> = feasible.iter().map(|n| !has_all(self, *n)).collect();
        let scored = ignored.iter().filter(|i| !**i).count();
        let mut raw_f = vec![0f64; feasible.len()];
        for c in &soft {
            let counter = (!c.selector.is_empty()).then(|| {
                self.counter(CounterKey {
                    terms: vec![(
                        Namespaces::Names([spec.namespace.clone()].into_iter().collect()),
                        c.selector.clone(),
                    )],
                    skip_terminating: true,
                })
            });
            let hostname = c.topology_key == crate::model::labels::HOSTNAME;
            let per_node = |n: usize| -> i64 {
                counter.map_or(0, |i| i64::from(self.counters[i].per_node[n]))
            };
            let (counts, size) = if hostname {
                (Vec::new(), scored)
            } else {
                let domains = self.topo(&c.topology_key).map_or(0, |t| t.domains);
                let mut candidate = vec![false; domains];
                for (i, n) in feasible.iter().enumerate() {
                    let d = self.domain(&c.topology_key, *n);
                    if !ignored[i] && d != NO_DOMAIN {
                        candidate[d as usize] = true;
                    }
                }
                let mut counts = vec![0i64; domains];
                for n in 0..self.nodes.len() {
                    let d = self.domain(&c.topology_key, n);
                    if d == NO_DOMAIN
                        || !candidate[d as usize]
                        || !has_all(self, n)
                        || (c.honor_node_affinity && !statics.affinity_match[n])
                        || (c.honor_node_taints && !statics.taints_tolerated[n])
                    {
                        continue;
                    }
                    counts[d as usize] += per_node(n);
                }
                let size = candidate.iter().filter(|c| **c).count();
                (counts, size)
            };
            let weight = ((size + 2) as f64).ln();
            for (i, n) in feasible.iter().enumerate() {
                if ignored[i] {
                    continue;
                }
                let count = if hostname {
                    per_node(*n)
                } else {
                    let d = self.domain(&c.topology_key, *n);
                    counts.get(d as usize).copied().unwrap_or(0)
                };
                raw_f[i] += count as f64 * weight + f64::from(c.max_skew) - 1.0;
            }
        }
        let raw: Vec<i64> = raw_f.iter().map(|s| s.round() as i64).collect();
        let (mut min, mut max) = (i64::MAX, 0i64);
        for (i, s) in raw.iter().enumerate() {
            if !ignored[i] {
                min = min.min(*s);
                max = max.max(*s);
            }
        }
        raw.iter()
            .enumerate()
            .map(|(i, s)| {
                if ignored[i] {
                    0
                } else if max == 0 {
                    MAX_NODE_SCORE
                } else {
                    MAX_NODE_SCORE * (max + min - s) / max
                }
            })
            .collect()
    }
}

/// `helper.DefaultNormalizeScore`: scale to 0..=100 by the maximum,
/// optionally reversed.
fn default_normalize(scores: &[i64], reverse: bool) -> Vec<i64> {
    let max = scores.iter().copied().max().unwrap_or(0).max(0);
    scores
        .iter()
        .map(|s| {
            if max == 0 {
                if reverse { MAX_NODE_SCORE } else { 0 }
            } else {
                let v = MAX_NODE_SCORE * s / max;
                if reverse { MAX_NODE_SCORE - v } else { v }
            }
        })
        .collect()
}
