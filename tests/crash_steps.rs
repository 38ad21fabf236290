//! Crash at every step: on the testbed's real control plane, the leading
//! `dovetail controller` is killed (`kill -9`) right after one kind of
//! write of a NodeClaim's life, found in the API server's audit log (no
//! hook in dovetail), and the standby, which takes the Lease, finishes the
//! work: no instance leaks, no NodeClaim is orphaned, nothing is launched
//! twice, and no pod waits longer than one launch. The table of the steps
//! is in docs/robustness.md ("Crash at every step").

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::real_cluster::{World, eventually, succeeded};

/// A write of a NodeClaim's life, as the audit log shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// `create nodeclaims`.
    Created,
    /// The status write that records the launch (`Launched` true, not
    /// registered yet).
    Launched,
    /// `Registered` true (not initialized yet).
    Registered,
    /// `Initialized` true.
    Initialized,
    /// The Node tainted `karpenter.sh/disrupted`.
    Tainted,
    /// `Drained` true.
    Drained,
    /// `InstanceTerminating` true: the instance was terminated.
    InstanceTerminated,
    /// The termination finalizer removed from a NodeClaim being deleted.
    FinalizerRemoved,
}

impl Step {
    /// Whether the step is one of a launch (else of a termination).
    fn launching(self) -> bool {
        matches!(
            self,
            Step::Created | Step::Launched | Step::Registered | Step::Initialized
        )
    }

    /// Whether the audit event `e` is this step's write.
    fn matches(self, e: &Value) -> bool {
        let verb = e["verb"].as_str().unwrap_or_default();
        let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
        let subresource = e["objectRef"]["subresource"].as_str();
        let ok = e["responseStatus"]["code"]
            .as_u64()
            .is_some_and(|c| (200..300).contains(&c));
        let writes = matches!(verb, "create" | "update" | "patch");
        if !ok || !writes {
            return false;
        }
        let object = &e["requestObject"];
        let condition = |type_: &str| {
            object["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        };
        let claim_status = resource == "nodeclaims" && subresource == Some("status");
        match self {
            Step::Created => verb == "create" && resource == "nodeclaims" && subresource.is_none(),
            Step::Launched => claim_status && condition("Launched") && !condition("Registered"),
            Step::Registered => {
                claim_status && condition("Registered") && !condition("Initialized")
            }
            Step::Initialized => claim_status && condition("Initialized"),
            Step::Tainted => {
                resource == "nodes" && object.to_string().contains("\"karpenter.sh/disrupted\"")
            }
            Step::Drained => claim_status && condition("Drained"),
            Step::InstanceTerminated => claim_status && condition("InstanceTerminating"),
            Step::FinalizerRemoved => {
                resource == "nodeclaims"
                    && subresource.is_none()
                    && !object["metadata"]["deletionTimestamp"].is_null()
                    && !object["metadata"]["finalizers"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|f| f == "karpenter.sh/termination")
            }
        }
    }
}

/// The audit log read as it grows.
struct AuditTail {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl AuditTail {
    /// From the log's end: only what is written from now on.
    fn new(path: PathBuf) -> AuditTail {
        let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        AuditTail {
            path,
            offset,
            partial: String::new(),
        }
    }

    /// The events written since the last call.
    fn read(&mut self) -> Vec<Value> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            // Rotated: the new file from its start.
            self.offset = 0;
        }
        let mut text = String::new();
        if file.seek(SeekFrom::Start(self.offset)).is_err()
            || file.read_to_string(&mut text).is_err()
        {
            return Vec::new();
        }
        self.offset += text.len() as u64;
        self.partial.push_str(&text);
        let complete = match self.partial.rfind('\n') {
            Some(i) => {
                let rest = self.partial.split_off(i + 1);
                std::mem::replace(&mut self.partial, rest)
            }
            None => return Vec::new(),
        };
        complete
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// Whether `e` is a request of the controller `identity` (its user agent
/// names it).
fn by(e: &Value, identity: &str) -> bool {
    e["userAgent"]
        .as_str()
        .is_some_and(|ua| ua.contains(&format!("({identity})")))
}

/// The names of the NodeClaims that exist.
fn claim_names(w: &World) -> BTreeSet<String> {
    w.nodeclaims()
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(String::from))
        .collect()
}

/// The longest a pod of `app` waited: from its creation to its Ready
/// condition, in seconds.
fn longest_wait(w: &World, app: &str) -> f64 {
    w.pods(app)
        .iter()
        .filter_map(|p| {
            let created = p["metadata"]["creationTimestamp"].as_str()?;
            let ready = p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready" && c["status"] == "True")?["lastTransitionTime"]
                .as_str()?;
            let seconds = |t: &str| {
                t.parse::<jiff::Timestamp>()
                    .ok()
                    .map(|t| t.as_millisecond())
            };
            Some((seconds(ready)? - seconds(created)?) as f64 / 1000.0)
        })
        .fold(0.0, f64::max)
}

/// The NodeClaims dovetail created, from the audit events of its
/// requests. A create whose client was killed mid-request is audited as a
/// timeout (504) although the API server goes on and stores the object,
/// so a NodeClaim counts as created when a create of it succeeded or when
/// any later write to it did (it existed).
fn claims_created(requests: &[Value]) -> BTreeSet<String> {
    let written: BTreeSet<&str> = requests
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "nodeclaims"
                && matches!(
                    e["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete")
                )
                && e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| (200..300).contains(&c))
        })
        .filter_map(|e| e["objectRef"]["name"].as_str())
        .collect();
    requests
        .iter()
        .filter(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "nodeclaims")
        .filter_map(|e| e["objectRef"]["name"].as_str())
        .filter(|name| written.contains(name))
        .map(String::from)
        .collect()
}

/// Pods of the Deployment: three of 1500m (an m5.large holds one, an
/// m5.xlarge two).
const PODS: usize = 3;

/// The CPU of a pod of the Deployment, in millicores.
const POD_MILLIS: u64 = 1500;

/// A CPU quantity (`"2"`, `"1930m"`) in millicores.
fn cpu_millis(quantity: &str) -> Option<u64> {
    match quantity.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => quantity.parse::<u64>().ok().map(|c| c * 1000),
    }
}

/// The Nodes the Deployment's pods would fit without: a node launched
/// for pods another NodeClaim already had. Each Node holds as many pods
/// as its allocatable CPU has room for (nothing else runs on them).
fn redundant_nodes(w: &World) -> Vec<String> {
    let room: Vec<(String, u64)> =
        w.tb.items(&["nodes"])
            .iter()
            .filter_map(|n| {
                let name = n["metadata"]["name"].as_str()?.to_string();
                let cpu = cpu_millis(n["status"]["allocatable"]["cpu"].as_str()?)?;
                Some((name, cpu / POD_MILLIS))
            })
            .collect();
    redundant(&room, PODS as u64)
}

/// Of nodes with room for so many pods each, those `pods` fit without.
fn redundant(room: &[(String, u64)], pods: u64) -> Vec<String> {
    let total: u64 = room.iter().map(|(_, n)| n).sum();
    room.iter()
        .filter(|(_, n)| total - n >= pods)
        .map(|(name, _)| name.clone())
        .collect()
}

/// Kills the leader right after `step`'s first write, and checks that the
/// standby finishes the work.
fn crash_after(step: Step) {
    let name = format!("{step:?}").to_lowercase();
    let mut w = World::new(&format!("crash-{name}"), false);
    w.start_controller("a", &[]);
    w.start_controller("b", &[]);
    let first = eventually("a leader", &w, Duration::from_secs(60), || w.leader());
    w.deployment("web", 0, "1500m", "");
    if !step.launching() {
        w.scale("web", PODS);
        w.wait_ready("web", PODS as u64, Duration::from_secs(240));
        w.wait_consistent(Duration::from_secs(60));
    }
    let before = claim_names(&w);
    let mut tail = AuditTail::new(w.tb.dir.path().join("audit.log"));
    let started = Instant::now();
    w.scale("web", if step.launching() { PODS } else { 0 });
    // The audit log is read every 10 ms: the leader is killed within
    // milliseconds of the write (the API server writes its audit event
    // as it answers).
    let deadline = Instant::now() + Duration::from_secs(240);
    let write = loop {
        if let Some(e) = tail
            .read()
            .into_iter()
            .find(|e| by(e, &first) && step.matches(e))
        {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "no {step:?} write by {first} within 240 s\n{}",
            w.logs()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    w.controller(&first).signal("-KILL");
    let killed = Instant::now();
    let at_kill = claim_names(&w);
    let second = eventually("the standby leading", &w, Duration::from_secs(60), || {
        w.leader().filter(|l| *l != first)
    });
    let takeover = killed.elapsed();
    if step.launching() {
        w.wait_ready("web", PODS as u64, Duration::from_secs(240));
    } else {
        eventually("every NodeClaim gone", &w, Duration::from_secs(240), || {
            w.nodeclaims().is_empty().then_some(())
        });
    }
    let done = started.elapsed();
    let live = w.wait_consistent(Duration::from_secs(90));

    // Nothing launched twice, nothing leaked: every instance ever launched
    // belongs to a NodeClaim dovetail created, and the live ones are
    // exactly the NodeClaims' and the Nodes' (wait_consistent).
    let requests = w.dovetail_requests();
    let created = claims_created(&requests);
    let instances = w.instances();
    let launched = instances.len();
    assert_eq!(
        launched,
        created.len(),
        "{step:?}: {launched} instances {instances:?} for the NodeClaims {created:?}\n{}",
        w.logs()
    );
    // The standby carried on with the NodeClaims there were: no new one
    // for the same pods (which would wait for a second launch).
    let by_standby: BTreeSet<String> = succeeded(&requests, "create", "nodeclaims", None)
        .iter()
        .filter(|e| by(e, &second))
        .filter_map(|e| e["objectRef"]["name"].as_str().map(String::from))
        .collect();
    if step.launching() {
        // The leader may die between the creates of one solve: the standby
        // then creates the rest, and only the rest.
        let spare = redundant_nodes(&w);
        assert!(
            spare.is_empty(),
            "{step:?}: the pods fit without {spare:?}: the standby created {by_standby:?} beside {at_kill:?}\n{}",
            w.logs()
        );
        assert_eq!(live.len(), created.len(), "{step:?}: live {live:?}");
    } else {
        assert!(by_standby.is_empty(), "{step:?}: created {by_standby:?}");
        assert!(live.is_empty(), "{step:?}: left {live:?}");
        assert_eq!(created.len(), before.len());
    }
    let wait = longest_wait(&w, "web");
    println!(
        "crash after {step:?}: killed {first} after {} {}, {second} led {:.1} s later; done {:.1} s after the scale; {} NodeClaims, {launched} instances; longest pod wait {wait:.1} s",
        write["verb"].as_str().unwrap_or_default(),
        write["requestURI"].as_str().unwrap_or_default(),
        takeover.as_secs_f64(),
        done.as_secs_f64(),
        created.len(),
    );
    w.assert_nothing_forbidden();
}

#[test]
fn a_node_is_redundant_when_the_pods_fit_on_the_others() {
    let room = |nodes: &[(&str, &str)]| -> Vec<(String, u64)> {
        nodes
            .iter()
            .map(|(name, cpu)| (name.to_string(), cpu_millis(cpu).expect(cpu) / POD_MILLIS))
            .collect()
    };
    // One solve's two NodeClaims, m5.xlarge and m5.large: neither spare.
    assert!(redundant(&room(&[("a", "3920m"), ("b", "1930m")]), 3).is_empty());
    assert!(redundant(&room(&[("a", "2"), ("b", "2"), ("c", "2")]), 3).is_empty());
    // A second m5.xlarge for pods the first already had: any one of the
    // three could go.
    assert_eq!(
        redundant(&room(&[("a", "3920m"), ("b", "1930m"), ("c", "3920m")]), 3),
        ["a", "b", "c"]
    );
    assert_eq!(cpu_millis("x"), None);
}

#[test]
fn the_leader_killed_after_creating_a_nodeclaim() {
    crash_after(Step::Created);
}

#[test]
fn the_leader_killed_after_recording_a_launch() {
    crash_after(Step::Launched);
}

#[test]
fn the_leader_killed_after_recording_a_registration() {
    crash_after(Step::Registered);
}

#[test]
fn the_leader_killed_after_recording_an_initialization() {
    crash_after(Step::Initialized);
}

#[test]
fn the_leader_killed_after_tainting_a_node_for_disruption() {
    crash_after(Step::Tainted);
}

#[test]
fn the_leader_killed_after_recording_a_drain() {
    crash_after(Step::Drained);
}

#[test]
fn the_leader_killed_after_terminating_an_instance() {
    crash_after(Step::InstanceTerminated);
}

#[test]
fn the_leader_killed_after_removing_a_finalizer() {
    crash_after(Step::FinalizerRemoved);
}

#[test]
fn a_create_audited_as_a_timeout_counts_once_the_nodeclaim_is_written_again() {
    let event = |verb: &str, name: &str, subresource: Option<&str>, code: u64| {
        serde_json::json!({
            "verb": verb,
            "objectRef": {"resource": "nodeclaims", "name": name, "subresource": subresource},
            "responseStatus": {"code": code},
        })
    };
    let requests = [
        event("create", "default-00001", None, 201),
        // The leader was killed while this create was in flight: the API
        // server stored it, and the standby launched it.
        event("create", "default-00002", None, 504),
        event("patch", "default-00002", Some("status"), 200),
        // Killed in flight, and never stored.
        event("create", "default-00003", None, 504),
        event("create", "default-00001", None, 409),
    ];
    let created: Vec<String> = claims_created(&requests).into_iter().collect();
    assert_eq!(created, ["default-00001", "default-00002"]);
}
