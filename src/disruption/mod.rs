//! Disruption decisions: which nodes to take away, and what to launch in
//! their place. Pure: the controller describes the cluster
//! ([`Candidate`]s, budgets, a [`Removals`] over the cluster) and carries
//! out the [`Command`] returned; nothing here reads the clock or the
//! cluster.
//!
//! Expiration is not one of them: as in the reference's v1, an expired
//! NodeClaim is deleted outright, outside budgets ([`expires_at`]), and its
//! pods get new capacity like any pending pod.
//!
//! Methods run in order, the first that decides something wins a pass:
//! 1. **emptiness**: consolidatable nodes with no pod to move, within the
//!    `Empty` budgets;
//! 2. **static drift**: drifted nodes of static NodePools ([`statics`]),
//!    each replaced by a NodeClaim of its pool's template, within the
//!    `Drifted` budgets and `limits.nodes`, once a scale-down is done;
//! 3. **drift**: drifted nodes within the `Drifted` budgets; empty ones are
//!    deleted together, otherwise the cheapest to disrupt whose pods can be
//!    placed is replaced by whatever they need;
//! 4. **multi-node consolidation**: the largest prefix of the consolidatable
//!    candidates (cheapest to disrupt first, within the `Underutilized`
//!    budgets) whose pods fit the remaining nodes plus at most one strictly
//!    cheaper NodeClaim, found by binary search over the prefix length;
//! 5. **single-node consolidation**: every candidate is tried (never a
//!    timeout); the one saving most per hour wins.
//!
//! Nodes of static NodePools are never consolidated (emptiness included)
//! and drift only through static drift, as in the reference.
//!
//! What blocks a candidate depends on the method, as in the reference:
//! a node's own `karpenter.sh/do-not-disrupt` or a pending pod nominated
//! to it blocks everything; a pod's protection (its `do-not-disrupt`, see
//! [`pods`], or a PodDisruptionBudget) blocks consolidation always, and
//! drift only when the NodeClaim has no `terminationGracePeriod` to bound
//! the wait for those pods.
//!
//! A plan whose pods would land on a node or NodeClaim that is not yet
//! initialized is no plan: the pods would wait for it (the reference's
//! "uninitialized node" rule). Only the plan's own replacement may be new.
//!
//! A replacement is strictly cheaper than what it replaces: its instance
//! types are limited to those whose cheapest allowed offering costs less,
//! so the same type at the same price is never launched again. Multi-node
//! consolidation also keeps a candidate's own instance type only where it
//! is cheaper than that candidate (the reference's
//! `filterOutSameInstanceType`): merging two nodes into one of the same
//! type is a delete of one of them, which moves fewer pods. A spot node
//! is replaced by spot capacity only with spot-to-spot consolidation
//! enabled (off by default, as the reference's `SpotToSpotConsolidation`
//! feature gate) and at least [`MIN_SPOT_TO_SPOT_TYPES`] cheaper types to
//! choose from; the list is then cut to those cheapest types, as the
//! reference does, so consolidation does not chase the spot market.
//!
//! A `Candidate` carries its price, how many pods would move, its disruption
//! cost, its drift reasons, whether its `consolidateAfter` has passed, and
//! what blocks it. `budgets` says how many nodes each reason may disrupt now
//! (counts, percentages, reasons, cron windows). `revalidate` checks a
//! consolidation again on the cluster as it is after the delay before it is
//! carried out.

pub mod budgets;
pub mod pods;
pub mod repair;
pub mod statics;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::api::CAPACITY_TYPE_SPOT;
use crate::clock::Timestamp;
use crate::drift::DriftReason;
use crate::model::labels::INSTANCE_TYPE;
use crate::model::{Requirement, Requirements};
use crate::scheduling::removal::{Floor, Removal, Removals};
use crate::scheduling::{NewNodeClaim, NodePoolSpec};

pub use budgets::Allowed;

/// A spot node is replaced by spot capacity only when at least this many
/// cheaper instance types can hold its pods (the reference's rule).
pub const MIN_SPOT_TO_SPOT_TYPES: usize = 15;
/// Prices closer than this are equal.
const EPS: f64 = 1e-9;

/// Why a node is disrupted, spelled as the reference spells it (Events,
/// metric labels and the simulation report share these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Reason {
    Empty,
    Underutilized,
    Drifted,
    Expired,
    Interrupted,
}

impl Reason {
    /// The reasons governed by budgets.
    pub const VOLUNTARY: [Reason; 3] = [Reason::Empty, Reason::Underutilized, Reason::Drifted];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Underutilized => "Underutilized",
            Reason::Drifted => "Drifted",
            Reason::Expired => "Expired",
            Reason::Interrupted => "Interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        [
            Reason::Empty,
            Reason::Underutilized,
            Reason::Drifted,
            Reason::Expired,
            Reason::Interrupted,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The method that decided a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Expiration,
    Emptiness,
    StaticDrift,
    Drift,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
}

impl Method {
    /// The `consolidation_type` label of the reference's decision metric:
    /// `empty`, `multi` or `single`; empty for other methods.
    pub fn consolidation_type(self) -> &'static str {
        match self {
            Method::Emptiness => "empty",
            Method::MultiNodeConsolidation => "multi",
            Method::SingleNodeConsolidation => "single",
            Method::Expiration | Method::StaticDrift | Method::Drift => "",
        }
    }

    /// Whether the decision is validated again after a delay before it is
    /// carried out (consolidation, as the reference does).
    pub fn is_consolidation(self) -> bool {
        !self.consolidation_type().is_empty()
    }
}

/// A node that may be disrupted, as the controller sees it. Its names are
/// shared with the controller's view of the node: every pass makes a
/// candidate of each node of the fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub node: Arc<str>,
    pub nodeclaim: Arc<str>,
    pub nodepool: Arc<str>,
    pub instance_type: Arc<str>,
    pub zone: Arc<str>,
    pub capacity_type: Arc<str>,
    /// USD per hour of its offering; 0 when unknown.
    pub price: f64,
    /// Pods that would have to move: not DaemonSet or mirror pods, not
    /// pods that tolerate the disrupted taint, not finished.
    pub pods: usize,
    /// Virtual pods of CapacityBuffers the last provisioning solve put on
    /// it: such a node is not empty (the reference's `HasBufferPods`), and
    /// a consolidation of it must find them room as well (they are among
    /// the scheduling input's pods that may move).
    pub buffer_pods: usize,
    /// How costly disrupting it is (pod priorities and deletion costs, pod
    /// count, remaining lifetime): the cheapest go first.
    pub disruption_cost: f64,
    /// Why it drifted; empty when it did not.
    pub drift: Vec<DriftReason>,
    /// Its NodePool's `consolidateAfter` has passed since its last pod
    /// event (never with `Never`).
    pub consolidatable: bool,
    /// Its NodePool consolidates underused nodes (`WhenEmptyOrUnderutilized`).
    pub underutilized: bool,
    /// Why no voluntary disruption may touch it: the node's own
    /// `do-not-disrupt`, pending pods nominated to it.
    pub blocked: Option<String>,
    /// Why its pods may not be evicted now: a pod's active
    /// `do-not-disrupt`, a PodDisruptionBudget. Blocks consolidation, and
    /// drift unless `termination_grace_period`.
    pub pods_blocked: Option<String>,
    /// Its NodeClaim has a `terminationGracePeriod`: a drain ends by then
    /// whatever its pods ask, so drift may take it despite `pods_blocked`.
    pub termination_grace_period: bool,
    /// Its NodePool is static (`spec.replicas`): never consolidated, and
    /// replaced one for one when drifted.
    pub static_pool: bool,
}

impl Candidate {
    /// No pod to move and no buffer's room to keep: emptiness may delete it.
    pub fn is_empty(&self) -> bool {
        self.pods == 0 && self.buffer_pods == 0
    }

    /// A consolidatable, unblocked candidate for tests: one pod, on-demand
    /// in `us-east-1a`, NodeClaim `<node>-claim` of NodePool `general`.
    #[cfg(test)]
    pub(crate) fn test(node: &str, instance_type: &str, price: f64) -> Candidate {
        Candidate {
            node: node.into(),
            nodeclaim: format!("{node}-claim").into(),
            nodepool: "general".into(),
            instance_type: instance_type.into(),
            zone: "us-east-1a".into(),
            capacity_type: "on-demand".into(),
            price,
            pods: 1,
            buffer_pods: 0,
            disruption_cost: 1.0,
            drift: Vec::new(),
            consolidatable: true,
            underutilized: true,
            blocked: None,
            pods_blocked: None,
            termination_grace_period: false,
            static_pool: false,
        }
    }

    /// Why consolidation (emptiness, multi- and single-node) may not take
    /// it.
    pub fn blocked_for_consolidation(&self) -> Option<&str> {
        self.blocked.as_deref().or(self.pods_blocked.as_deref())
    }

    /// Why drift may not take it: the reference's eventual disruption
    /// ignores pods' protections when a terminationGracePeriod bounds the
    /// drain.
    pub fn blocked_for_drift(&self) -> Option<&str> {
        self.blocked
            .as_deref()
            .or(if self.termination_grace_period {
                None
            } else {
                self.pods_blocked.as_deref()
            })
    }
}

/// When a NodeClaim created at `created` with `expireAfter` expires; `None`
/// for `Never`. The default is the reference's 720h.
pub fn expires_at(expire_after: Option<Duration>, created: Timestamp) -> Option<Timestamp> {
    expire_after.and_then(|d| created.checked_add(d).ok())
}

/// What to do with which nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub method: Method,
    pub reason: Reason,
    /// The nodes taken away, cheapest to disrupt first.
    pub candidates: Vec<Candidate>,
    /// NodeClaims to launch (and see initialized) before the candidates are
    /// drained; empty for a delete.
    pub replacements: Vec<NewNodeClaim>,
    /// The candidates' hourly price minus the replacements'.
    pub savings: f64,
}

impl Command {
    /// `delete` or `replace`, as the reference's decision metric labels.
    pub fn decision(&self) -> &'static str {
        if self.replacements.is_empty() {
            "delete"
        } else {
            "replace"
        }
    }

    /// A one-line description for Events and the simulation report.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.candidates.iter().map(|c| &*c.node).collect();
        let mut s = format!(
            "{} {} node(s) ({}): {}, saving ${:.4}/h",
            self.decision(),
            self.candidates.len(),
            names.join(", "),
            self.reason,
            self.savings
        );
        if !self.replacements.is_empty() {
            let types: Vec<String> = self
                .replacements
                .iter()
                .map(|r| {
                    if r.instance_types.is_empty() {
                        return format!("NodePool {}'s template", r.nodepool);
                    }
                    let shown: Vec<&str> = r
                        .instance_types
                        .iter()
                        .take(3)
                        .map(String::as_str)
                        .collect();
                    let more = r.instance_types.len().saturating_sub(3);
                    if more > 0 {
                        format!("{} (+{more} more)", shown.join("|"))
                    } else {
                        shown.join("|")
                    }
                })
                .collect();
            s.push_str(&format!("; replacement(s): {}", types.join(", ")));
        }
        s
    }
}

/// Switches of the decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Whether a spot node may be replaced by spot capacity.
    pub spot_to_spot: bool,
}

impl Default for Options {
    /// The reference's defaults: `SpotToSpotConsolidation=false`.
    fn default() -> Self {
        Options {
            spot_to_spot: false,
        }
    }
}

/// Everything a pass decides from.
pub struct Pass<'a> {
    pub candidates: &'a [Candidate],
    /// Per NodePool, what its budgets allow now.
    pub budgets: BTreeMap<String, Allowed>,
    /// Whether consolidation may run (no pods waiting for capacity).
    pub consolidation: bool,
    /// The NodePools, with their instance types, for pricing replacements.
    pub pools: &'a [NodePoolSpec],
    pub options: Options,
    /// Nodes and NodeClaims (by the scheduling input's names) not yet
    /// initialized: a plan may not rely on them.
    pub uninitialized: BTreeSet<String>,
    /// The static NodePools, counted.
    pub statics: BTreeMap<String, statics::StaticPool>,
    /// The candidates (by node) whose pods the removal trials hold when
    /// that is not every one of [`movers`]: see [`first_movers`]. `None`:
    /// all of them.
    pub prepared: Option<BTreeSet<String>>,
}

/// What a pass found, and how much it looked at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub command: Option<Command>,
    /// Removal trials run (each a placement of a candidate set's pods).
    pub trials: usize,
    /// Candidates considered by consolidation.
    pub evaluated: usize,
    /// Why single-node consolidation could not take a candidate it tried,
    /// as `(NodeClaim, message)` (the reference's `Unconsolidatable`
    /// Events, in its words).
    pub unconsolidatable: Vec<(String, String)>,
    /// The pass stopped at a candidate whose pods the trials do not hold
    /// ([`Pass::prepared`]): it decided nothing, and is to be decided
    /// again with every mover's pods.
    pub unprepared: bool,
}

/// Decides one pass. `removals` is prepared over the cluster with the
/// pods of every one of [`movers`] (or of those [`Pass::prepared`] names).
pub fn decide(pass: &Pass<'_>, removals: &mut Removals<'_>) -> Outcome {
    let mut out = Outcome::default();
    let sorted = by_cost(pass.candidates);
    out.command = emptiness(pass, &sorted)
        .or_else(|| static_drift(pass, &sorted))
        .or_else(|| drift(pass, &sorted, removals, &mut out));
    if out.command.is_none() && pass.consolidation && !out.unprepared {
        out.command = multi_node(pass, &sorted, removals, &mut out)
            .or_else(|| single_node(pass, &sorted, removals, &mut out));
    }
    out
}

/// A node a voluntary disruption wants (drifted, or an underutilized
/// consolidation candidate) but may not take now, and what holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Blocked {
    pub nodeclaim: String,
    pub node: String,
    pub nodepool: String,
    pub reason: Reason,
    /// What blocks it: the node's or a pod's `do-not-disrupt`, a
    /// PodDisruptionBudget (named), or the NodePool's disruption budget
    /// (standing, or a schedule's window).
    pub blocker: String,
}

/// The candidates of a pass that a method wants but that the candidate's
/// own blockers (as [`Candidate::blocked_for_drift`] and
/// [`Candidate::blocked_for_consolidation`] say) or a NodePool budget that
/// allows none of the reason now keep from it. Nodes that only wait their
/// turn under a budget that allows some are not listed.
pub fn blocked(pass: &Pass<'_>) -> Vec<Blocked> {
    let mut out = Vec::new();
    for c in pass.candidates {
        let mut wants = Vec::new();
        if !c.drift.is_empty() {
            wants.push((Reason::Drifted, c.blocked_for_drift()));
        }
        if !c.static_pool && c.consolidatable && c.underutilized && c.pods > 0 {
            wants.push((Reason::Underutilized, c.blocked_for_consolidation()));
        }
        for (reason, own) in wants {
            let blocker = own.map(str::to_string).or_else(|| {
                let allowed = pass.budgets.get(&*c.nodepool)?;
                (allowed.limit.get(&reason).copied().flatten() == Some(0)).then(|| {
                    if allowed.scheduled.contains(&reason) {
                        format!(
                            "NodePool {}'s disruption budget schedule window allows no {reason} disruption now",
                            c.nodepool
                        )
                    } else {
                        format!(
                            "NodePool {}'s disruption budget allows no {reason} disruption",
                            c.nodepool
                        )
                    }
                })
            });
            if let Some(blocker) = blocker {
                out.push(Blocked {
                    nodeclaim: c.nodeclaim.to_string(),
                    node: c.node.to_string(),
                    nodepool: c.nodepool.to_string(),
                    reason,
                    blocker,
                });
            }
        }
    }
    out
}

/// Candidates in the order every method takes them: cheapest to disrupt
/// first, then by node name.
fn by_cost(candidates: &[Candidate]) -> Vec<&Candidate> {
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by(|a, b| {
        a.disruption_cost
            .total_cmp(&b.disruption_cost)
            .then_with(|| a.node.cmp(&b.node))
    });
    sorted
}

/// The candidates whose pods a pass's removal trials may move: the drifted
/// nodes drift may take within its budgets and, when consolidation may run,
/// the consolidation candidates within theirs, each with pods; and the
/// candidates on `pending` nodes (a consolidation to revalidate). [`decide`]
/// and [`revalidate`] trial no other node, so the scheduling input needs
/// only these nodes' pods as pods that may move: during a rollout, the one
/// or two nodes the budget has room for, not the whole fleet's pods. Empty
/// when the pass can decide from the candidates alone (emptiness, empty
/// drifted nodes, budgets taken), so its caller can skip the input.
pub fn movers<'c>(
    candidates: &'c [Candidate],
    budgets: &BTreeMap<String, Allowed>,
    consolidation: bool,
    pending: &BTreeSet<&str>,
) -> Vec<&'c Candidate> {
    let sorted = by_cost(candidates);
    let mut movers = drifted(budgets, &sorted);
    if consolidation {
        movers.extend(underutilized(budgets, &sorted));
    }
    movers.extend(
        sorted
            .iter()
            .copied()
            .filter(|c| pending.contains(&*c.node)),
    );
    movers.retain(|c| c.pods > 0);
    let mut seen = BTreeSet::new();
    movers.retain(|c| seen.insert(&*c.node));
    movers
}

/// The [`movers`] whose pods a pass prepares first. While consolidation
/// may not run and no consolidation is revalidated (`pending`), only drift
/// trials removals: one drifted node at a time, in the movers' order, until
/// one can be replaced, which is nearly always the first. A rollout's
/// trials then hold that node's pods, not those of every node its budget
/// has room for; [`decide`] over them says when it reaches another
/// ([`Outcome::unprepared`]), and is run again over all.
pub fn first_movers<'m, 'c>(
    movers: &'m [&'c Candidate],
    consolidation: bool,
    pending: &BTreeSet<&str>,
) -> &'m [&'c Candidate] {
    if consolidation || !pending.is_empty() {
        movers
    } else {
        &movers[..movers.len().min(1)]
    }
}

/// A consolidation decided a delay ago, checked on the cluster as it is
/// now: the same candidates must still be candidates for it (not blocked,
/// consolidatable, within budget), and their removal must still be a
/// valid consolidation. Returns the command to carry out, with fresh
/// replacements, or `None`. Other commands are returned unchanged.
pub fn revalidate(pass: &Pass<'_>, cmd: &Command, removals: &mut Removals<'_>) -> Option<Command> {
    if !cmd.method.is_consolidation() {
        return Some(cmd.clone());
    }
    if !pass.consolidation {
        return None;
    }
    let current: Vec<&Candidate> = cmd
        .candidates
        .iter()
        .map(|c| {
            pass.candidates
                .iter()
                .find(|x| x.nodeclaim == c.nodeclaim && x.node == c.node)
        })
        .collect::<Option<_>>()?;
    let eligible = |c: &&Candidate| {
        !c.static_pool
            && c.consolidatable
            && c.blocked_for_consolidation().is_none()
            && match cmd.method {
                Method::Emptiness => c.is_empty(),
                _ => c.underutilized && c.pods > 0,
            }
    };
    if !current.iter().all(eligible)
        || within_budget(&pass.budgets, cmd.reason, current.iter().copied()).len() != current.len()
    {
        return None;
    }
    if cmd.method == Method::Emptiness {
        return Some(Command {
            savings: price_of(&current),
            candidates: current.into_iter().cloned().collect(),
            ..cmd.clone()
        });
    }
    let mut out = Outcome::default();
    let (removal, needed) = consolidation_trial(pass, removals, &current, &mut out);
    consolidation(pass, cmd.method, &current, removal, needed).ok()
}

fn names(cs: &[&Candidate]) -> Vec<String> {
    cs.iter().map(|c| c.node.to_string()).collect()
}

fn trial(
    pass: &Pass<'_>,
    removals: &mut Removals<'_>,
    cs: &[&Candidate],
    out: &mut Outcome,
) -> Removal {
    out.trials += 1;
    let nodes = names(cs);
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    not_on_uninitialized(pass, removals.remove(&refs))
}

/// A removal whose pods would wait for a node that is not initialized is
/// infeasible: those pods become unschedulable, naming the node.
fn not_on_uninitialized(pass: &Pass<'_>, mut removal: Removal) -> Removal {
    if pass.uninitialized.is_empty() {
        return removal;
    }
    let mut kept = Vec::with_capacity(removal.placements.len());
    for p in std::mem::take(&mut removal.placements) {
        if pass.uninitialized.contains(&p.node) {
            removal.unschedulable.extend(p.pods.iter().map(|pod| {
                crate::scheduling::Unschedulable {
                    pod: pod.clone(),
                    reason: format!("would wait for {}, which is not initialized", p.node),
                }
            }));
        } else {
            kept.push(p);
        }
    }
    removal.placements = kept;
    removal
}

/// A removal trial for consolidation: the pods must fit the remaining
/// nodes plus at most one NodeClaim. When a free placement needs more, the
/// pods are placed again with one claim allowed, which then grows to hold
/// them all if any type can.
/// A removal trial of `cs` allowing at most one replacement, and how many
/// NodeClaims the pods would need without that limit.
fn consolidation_trial(
    pass: &Pass<'_>,
    removals: &mut Removals<'_>,
    cs: &[&Candidate],
    out: &mut Outcome,
) -> (Removal, usize) {
    let removal = trial(pass, removals, cs, out);
    let needed = removal.nodeclaims.len();
    if needed <= 1 {
        return (removal, needed);
    }
    out.trials += 1;
    let nodes = names(cs);
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    (
        not_on_uninitialized(pass, removals.remove_with(&refs, Some(1))),
        needed,
    )
}

fn price_of(cs: &[&Candidate]) -> f64 {
    cs.iter().map(|c| c.price).sum()
}

/// Takes candidates in order while their pool's budget for `reason` has
/// room.
fn within_budget<'c>(
    budgets: &BTreeMap<String, Allowed>,
    reason: Reason,
    cs: impl IntoIterator<Item = &'c Candidate>,
) -> Vec<&'c Candidate> {
    let mut used: BTreeMap<&str, usize> = BTreeMap::new();
    cs.into_iter()
        .filter(|c| {
            let room = budgets
                .get(&*c.nodepool)
                .map_or(usize::MAX, |b| b.remaining(reason));
            let n = used.entry(&*c.nodepool).or_default();
            if *n < room {
                *n += 1;
                true
            } else {
                false
            }
        })
        .collect()
}

fn emptiness(pass: &Pass<'_>, sorted: &[&Candidate]) -> Option<Command> {
    if !pass.consolidation {
        return None;
    }
    let empty = within_budget(
        &pass.budgets,
        Reason::Empty,
        sorted.iter().copied().filter(|c| {
            !c.static_pool
                && c.is_empty()
                && c.consolidatable
                && c.blocked_for_consolidation().is_none()
        }),
    );
    if empty.is_empty() {
        return None;
    }
    Some(Command {
        method: Method::Emptiness,
        reason: Reason::Empty,
        savings: price_of(&empty),
        candidates: empty.into_iter().cloned().collect(),
        replacements: Vec::new(),
    })
}

fn drift(
    pass: &Pass<'_>,
    sorted: &[&Candidate],
    removals: &mut Removals<'_>,
    out: &mut Outcome,
) -> Option<Command> {
    let drifted = drifted(&pass.budgets, sorted);
    let empty: Vec<&Candidate> = drifted.iter().copied().filter(|c| c.pods == 0).collect();
    if !empty.is_empty() {
        return Some(Command {
            method: Method::Drift,
            reason: Reason::Drifted,
            savings: price_of(&empty),
            candidates: empty.into_iter().cloned().collect(),
            replacements: Vec::new(),
        });
    }
    for c in drifted {
        if pass
            .prepared
            .as_ref()
            .is_some_and(|p| !p.contains(&*c.node))
        {
            out.unprepared = true;
            return None;
        }
        let removal = trial(pass, removals, &[c], out);
        if removal.is_feasible() {
            return Some(Command {
                method: Method::Drift,
                reason: Reason::Drifted,
                savings: c.price - removal.price(),
                candidates: vec![c.clone()],
                replacements: removal.nodeclaims,
            });
        }
    }
    None
}

/// Static drift: per static NodePool, its drifted nodes (cheapest to
/// disrupt first) up to what its `Drifted` budget and `limits.nodes` allow,
/// each replaced by a NodeClaim of the pool's template; nothing while the
/// pool is above `replicas` (its scale-down goes first).
fn static_drift(pass: &Pass<'_>, sorted: &[&Candidate]) -> Option<Command> {
    let mut by_pool: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in sorted
        .iter()
        .copied()
        .filter(|c| c.static_pool && !c.drift.is_empty() && c.blocked_for_drift().is_none())
    {
        by_pool.entry(&*c.nodepool).or_default().push(c);
    }
    let mut candidates = Vec::new();
    let mut replacements = Vec::new();
    for (pool, cs) in by_pool {
        let (Some(state), Some(spec)) = (
            pass.statics.get(pool),
            pass.pools.iter().find(|p| p.name == pool),
        ) else {
            continue;
        };
        let budget = pass
            .budgets
            .get(pool)
            .map_or(usize::MAX, |b| b.remaining(Reason::Drifted));
        if budget == 0 || !state.may_drift() {
            continue;
        }
        let wanted = i64::try_from(budget.min(cs.len())).unwrap_or(i64::MAX);
        let granted = usize::try_from(state.reserve(wanted)).unwrap_or(0);
        for c in cs.into_iter().take(granted) {
            candidates.push(c.clone());
            replacements.push(statics::template_claim(spec));
        }
    }
    if candidates.is_empty() {
        return None;
    }
    let savings = candidates.iter().map(|c| c.price).sum::<f64>()
        - replacements.iter().map(|r| r.price).sum::<f64>();
    Some(Command {
        method: Method::StaticDrift,
        reason: Reason::Drifted,
        candidates,
        replacements,
        savings,
    })
}

/// Drift's candidates: drifted, not blocked, not of a static pool (static
/// drift replaces those), within the `Drifted` budgets.
fn drifted<'c>(
    budgets: &BTreeMap<String, Allowed>,
    sorted: &[&'c Candidate],
) -> Vec<&'c Candidate> {
    within_budget(
        budgets,
        Reason::Drifted,
        sorted
            .iter()
            .copied()
            .filter(|c| !c.static_pool && !c.drift.is_empty() && c.blocked_for_drift().is_none()),
    )
}

/// Consolidation candidates: consolidatable, not blocked, in pools that
/// consolidate underused nodes, within the `Underutilized` budgets.
fn underutilized<'c>(
    budgets: &BTreeMap<String, Allowed>,
    sorted: &[&'c Candidate],
) -> Vec<&'c Candidate> {
    within_budget(
        budgets,
        Reason::Underutilized,
        sorted.iter().copied().filter(|c| {
            !c.static_pool
                && c.consolidatable
                && c.underutilized
                && c.blocked_for_consolidation().is_none()
                && c.pods > 0
        }),
    )
}

/// A consolidation of `cs` from a removal trial: a delete when the pods fit
/// the remaining nodes, a replace when they need exactly one NodeClaim that
/// can be made strictly cheaper than `cs`.
/// The command that removes `cs` as `removal` found, or why there is none
/// (in the reference's words): pods that fit nowhere, more than one
/// replacement (`needed` without the limit of one), none cheaper.
fn consolidation(
    pass: &Pass<'_>,
    method: Method,
    cs: &[&Candidate],
    removal: Removal,
    needed: usize,
) -> Result<Command, String> {
    if needed > 1 && (!removal.is_feasible() || removal.nodeclaims.len() > 1) {
        return Err(format!("Can't remove without creating {needed} candidates"));
    }
    if !removal.is_feasible() {
        let shown: Vec<String> = removal
            .unschedulable
            .iter()
            .take(3)
            .map(|u| format!("pod {}: {}", u.pod, u.reason))
            .collect();
        let more = removal.unschedulable.len().saturating_sub(shown.len());
        return Err(if more > 0 {
            format!("{} and {more} more", shown.join("; "))
        } else {
            shown.join("; ")
        });
    }
    if removal.nodeclaims.len() > 1 {
        return Err(format!(
            "Can't remove without creating {} candidates",
            removal.nodeclaims.len()
        ));
    }
    let total = price_of(cs);
    let candidates: Vec<Candidate> = cs.iter().map(|c| (*c).clone()).collect();
    match removal.nodeclaims.into_iter().next() {
        None => Ok(Command {
            method,
            reason: Reason::Underutilized,
            candidates,
            replacements: Vec::new(),
            savings: total,
        }),
        Some(claim) => {
            let all_spot = cs.iter().all(|c| &*c.capacity_type == CAPACITY_TYPE_SPOT);
            let cap = if method == Method::MultiNodeConsolidation {
                total.min(same_type_cap(&claim, cs))
            } else {
                total
            };
            let only_spot = claim.capacity_types.iter().all(|c| c == CAPACITY_TYPE_SPOT);
            let Some(cheaper) = cheaper_replacement(pass, claim, cap, all_spot) else {
                return Err(if all_spot && only_spot && !pass.options.spot_to_spot {
                    "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
                        .to_string()
                } else {
                    NOT_CHEAPER.to_string()
                });
            };
            Ok(Command {
                method,
                reason: Reason::Underutilized,
                candidates,
                savings: total - cheaper.price,
                replacements: vec![cheaper],
            })
        }
    }
}

/// The reference's `filterOutSameInstanceType`: when the replacement may
/// be of a type that some candidates already are, it must cost less than
/// the cheapest of those candidates; otherwise keeping that candidate and
/// deleting the others is the same outcome with fewer pods moved.
fn same_type_cap(claim: &NewNodeClaim, cs: &[&Candidate]) -> f64 {
    cs.iter()
        .filter(|c| c.price > 0.0 && claim.instance_types.iter().any(|t| *t == *c.instance_type))
        .map(|c| c.price)
        .fold(f64::INFINITY, f64::min)
}

fn multi_node(
    pass: &Pass<'_>,
    sorted: &[&Candidate],
    removals: &mut Removals<'_>,
    out: &mut Outcome,
) -> Option<Command> {
    let cs = underutilized(&pass.budgets, sorted);
    if cs.len() < 2 {
        return None;
    }
    out.evaluated = out.evaluated.max(cs.len());
    // The largest prefix that consolidates, by binary search over its
    // length, as the reference does (without its cap of 100 candidates).
    let (mut lo, mut hi) = (2usize, cs.len());
    let mut best: Option<Command> = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        let (removal, needed) = consolidation_trial(pass, removals, &cs[..mid], out);
        match consolidation(
            pass,
            Method::MultiNodeConsolidation,
            &cs[..mid],
            removal,
            needed,
        )
        .ok()
        {
            Some(cmd) => {
                best = Some(cmd);
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    best
}

fn single_node(
    pass: &Pass<'_>,
    sorted: &[&Candidate],
    removals: &mut Removals<'_>,
    out: &mut Outcome,
) -> Option<Command> {
    let cs = underutilized(&pass.budgets, sorted);
    out.evaluated = out.evaluated.max(cs.len());
    let mut best: Option<Command> = None;
    for c in cs {
        // Pods that fit no other node need a new NodeClaim costing at least
        // the floor: not cheaper than the node itself, no trial needed.
        if let Floor::NewCapacity(floor) = removals.floor(&c.node)
            && floor >= c.price - EPS
        {
            out.unconsolidatable
                .push((c.nodeclaim.to_string(), NOT_CHEAPER.to_string()));
            continue;
        }
        let (removal, needed) = consolidation_trial(pass, removals, &[c], out);
        match consolidation(pass, Method::SingleNodeConsolidation, &[c], removal, needed) {
            Ok(cmd) => {
                if best.as_ref().is_none_or(|b| cmd.savings > b.savings + EPS) {
                    best = Some(cmd);
                }
            }
            Err(why) => out.unconsolidatable.push((c.nodeclaim.to_string(), why)),
        }
    }
    best
}

/// The reference's words when no replacement is cheaper.
const NOT_CHEAPER: &str = "Can't replace with a cheaper node";

/// The replacement limited to instance types strictly cheaper than
/// `price`, cheapest first; `None` when none is, or when the spot rules
/// forbid it.
fn cheaper_replacement(
    pass: &Pass<'_>,
    mut claim: NewNodeClaim,
    price: f64,
    all_spot: bool,
) -> Option<NewNodeClaim> {
    let pool = pass.pools.iter().find(|p| p.name == claim.nodepool)?;
    let spot_allowed = claim.capacity_types.iter().any(|c| c == CAPACITY_TYPE_SPOT);
    // A spot node is replaced by spot capacity only with spot-to-spot
    // consolidation; without it, only by on-demand capacity.
    let mut capacity_types = claim.capacity_types.clone();
    if all_spot && spot_allowed && !pass.options.spot_to_spot {
        capacity_types.retain(|c| c != CAPACITY_TYPE_SPOT);
    }
    let offer = |name: &str| -> Option<(f64, bool)> {
        let it = pool.instance_types.iter().find(|t| t.name == name)?;
        it.offerings
            .iter()
            .filter(|o| o.available && claim.zones.contains(&o.zone))
            .filter(|o| capacity_types.contains(&o.capacity_type))
            .map(|o| (o.price, o.capacity_type == CAPACITY_TYPE_SPOT))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    };
    let mut kept: Vec<(f64, bool, String)> = claim
        .instance_types
        .iter()
        .filter_map(|t| offer(t).map(|(p, spot)| (p, spot, t.clone())))
        .filter(|(p, _, _)| *p < price - EPS)
        .collect();
    kept.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
    let launches_spot = kept.first().is_some_and(|k| k.1);
    if all_spot && launches_spot {
        if kept.len() < MIN_SPOT_TO_SPOT_TYPES {
            return None;
        }
        kept.truncate(MIN_SPOT_TO_SPOT_TYPES);
    }
    let first = kept.first()?;
    claim.price = first.0;
    claim.instance_types = kept.iter().map(|k| k.2.clone()).collect();
    claim.capacity_types = capacity_types.clone();
    let mut reqs: Requirements = claim.requirements.clone();
    reqs.add(
        INSTANCE_TYPE,
        Requirement::in_values(claim.instance_types.iter().cloned()),
    );
    reqs.0.insert(
        crate::model::labels::CAPACITY_TYPE.to_string(),
        Requirement::in_values(capacity_types),
    );
    claim.requirements = reqs;
    Some(claim)
}

#[cfg(test)]
mod tests;
