//! The reference CRDs' CEL rules (`x-kubernetes-validations`) that do not use
//! `oldSelf`, checked natively.
//!
//! Each check mirrors one rule's expression, including its quirks (an empty
//! list fails `!self.all(...)`; a missing field inside an expression is an
//! evaluation error, which rejects), and reports at the most specific node
//! that makes it false. The property test in `tests/` proves agreement with
//! the reference rules evaluated by kube-cel. Rules are only evaluated where
//! the schema's types hold; a type mismatch is the schema check's to report.

use serde_json::{Map, Value};

use crate::api::{ALLOWED_KARPENTER_AWS_LABELS, ALLOWED_KARPENTER_LABELS};
use crate::diag::JsonPath;

/// One failed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub path: JsonPath,
    pub message: String,
}

type Out = Vec<Finding>;

fn fail(out: &mut Out, path: JsonPath, message: impl Into<String>) {
    out.push(Finding {
        path,
        message: message.into(),
    });
}

fn obj(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object)
}

fn arr(v: Option<&Value>) -> Option<&Vec<Value>> {
    v.and_then(Value::as_array)
}

/// CEL's `has(x.f)`: the field is present (a JSON null counts as absent).
fn has(v: &Value, field: &str) -> bool {
    v.get(field).is_some_and(|f| !f.is_null())
}

/// The part of a label key that CEL's `find("^([^/]+)")` returns: everything
/// before the first `/`, or the empty string when the key starts with `/`.
fn cel_domain(key: &str) -> &str {
    key.split('/').next().unwrap_or("")
}

/// The four label-key rules shared by template labels and requirement keys.
fn label_key_rules(out: &mut Out, path: JsonPath, key: &str) {
    let domain = cel_domain(key);
    if !ALLOWED_KARPENTER_LABELS.contains(&key) && domain.ends_with("karpenter.sh") {
        fail(
            out,
            path.clone(),
            "label domain \"karpenter.sh\" is restricted",
        );
    }
    if key == "karpenter.sh/nodepool" {
        fail(
            out,
            path.clone(),
            "label \"karpenter.sh/nodepool\" is restricted",
        );
    }
    if key == "kubernetes.io/hostname" {
        fail(
            out,
            path.clone(),
            "label \"kubernetes.io/hostname\" is restricted",
        );
    }
    if !ALLOWED_KARPENTER_AWS_LABELS.contains(&key) && domain.ends_with("karpenter.k8s.aws") {
        fail(
            out,
            path,
            "label domain \"karpenter.k8s.aws\" is restricted",
        );
    }
}

/// CEL `int(s)` on a string: a base-10 64-bit integer with an optional sign.
fn cel_int(s: &str) -> Option<i64> {
    s.parse::<i64>().ok()
}

pub fn nodepool(doc: &Value) -> Out {
    let mut out = Vec::new();
    let Some(spec) = obj(doc.get("spec")) else {
        return out;
    };
    let sp = JsonPath::root().key("spec");
    let spec_v = doc.get("spec").expect("spec checked above");

    // spec: static NodePools.
    if has(spec_v, "replicas") {
        if let Some(limits) = obj(spec.get("limits")) {
            let ok = limits.is_empty() || (limits.len() == 1 && limits.contains_key("nodes"));
            if !ok {
                let path = match limits.keys().find(|k| *k != "nodes") {
                    Some(k) => sp.key("limits").key(k.clone()),
                    None => sp.key("limits"),
                };
                fail(
                    &mut out,
                    path,
                    "only 'limits.nodes' is supported on static NodePools",
                );
            }
        }
        if has(spec_v, "weight") {
            fail(
                &mut out,
                sp.key("weight"),
                "'weight' is not supported on static NodePools",
            );
        }
    }

    // spec.disruption.budgets
    if let Some(budgets) = arr(obj(spec.get("disruption")).and_then(|d| d.get("budgets"))) {
        let bp = sp.key("disruption").key("budgets");
        for (i, b) in budgets.iter().enumerate() {
            if b.is_object() && has(b, "schedule") != has(b, "duration") {
                let field = if has(b, "schedule") {
                    "schedule"
                } else {
                    "duration"
                };
                fail(
                    &mut out,
                    bp.index(i).key(field),
                    "'schedule' must be set with 'duration'",
                );
            }
        }
    }

    let Some(template) = obj(spec.get("template")) else {
        return out;
    };
    let tp = sp.key("template");

    // spec.template.metadata.labels
    if let Some(labels) = obj(obj(template.get("metadata")).and_then(|m| m.get("labels"))) {
        let lp = tp.key("metadata").key("labels");
        for key in labels.keys() {
            label_key_rules(&mut out, lp.key(key.clone()), key);
        }
    }

    let Some(tspec) = obj(template.get("spec")) else {
        return out;
    };
    let tsp = tp.key("spec");

    // spec.template.spec.nodeClassRef.{group,kind,name}
    if let Some(r) = obj(tspec.get("nodeClassRef")) {
        for (field, msg) in [
            ("group", "group may not be empty"),
            ("kind", "kind may not be empty"),
            ("name", "name may not be empty"),
        ] {
            if r.get(field).and_then(Value::as_str) == Some("") {
                fail(&mut out, tsp.key("nodeClassRef").key(field), msg);
            }
        }
    }

    // spec.template.spec.requirements
    if let Some(reqs) = arr(tspec.get("requirements")) {
        let rp = tsp.key("requirements");
        for (i, r) in reqs.iter().enumerate() {
            let Some(r) = r.as_object() else { continue };
            let ip = rp.index(i);
            if let Some(key) = r.get("key").and_then(Value::as_str) {
                label_key_rules(&mut out, ip.key("key"), key);
            }
            let op = r.get("operator").and_then(Value::as_str);
            let values = r.get("values").filter(|v| !v.is_null());
            let values_arr = values.and_then(Value::as_array);
            // A missing `values` makes `x.values.size()` an evaluation error.
            let missing_values = || values.is_none();
            match op {
                Some("In") => {
                    if missing_values() {
                        fail(
                            &mut out,
                            ip.clone(),
                            "requirements with operator 'In' must have a value defined",
                        );
                    } else if values_arr.is_some_and(Vec::is_empty) {
                        fail(
                            &mut out,
                            ip.key("values"),
                            "requirements with operator 'In' must have a value defined",
                        );
                    }
                }
                Some("Gt" | "Lt" | "Gte" | "Lte") => {
                    const MSG: &str = "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value";
                    match values_arr {
                        None if missing_values() => fail(&mut out, ip.clone(), MSG),
                        Some(vs) if vs.len() != 1 => fail(&mut out, ip.key("values"), MSG),
                        Some(vs) => {
                            let n = vs[0].as_str().and_then(cel_int);
                            if vs[0].is_string() && n.is_none_or(|n| n < 0) {
                                fail(&mut out, ip.key("values").index(0), MSG);
                            }
                        }
                        None => {}
                    }
                }
                _ => {}
            }
            if op == Some("In")
                && let (Some(vs), Some(min)) =
                    (values_arr, r.get("minValues").and_then(Value::as_i64))
                && (vs.len() as i64) < min
            {
                fail(
                    &mut out,
                    ip.key("minValues"),
                    "requirements with 'minValues' must have at least that many values specified in the 'values' field",
                );
            }
        }
    }
    out
}

const AMI_FAMILIES: [(&str, &str); 6] = [
    ("al2", "AL2"),
    ("al2023", "AL2023"),
    ("bottlerocket", "Bottlerocket"),
    ("windows2019", "Windows2019"),
    ("windows2022", "Windows2022"),
    ("windows2025", "Windows2025"),
];

const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

const RESERVED_KEYS: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];

/// `self.all(k, k != '' && self[k] != '')` on a tag map.
fn nonempty_tags(out: &mut Out, path: JsonPath, tags: Option<&Value>) {
    if let Some(tags) = obj(tags) {
        for (k, v) in tags {
            if k.is_empty() || v.as_str() == Some("") {
                fail(
                    out,
                    path.key(k.clone()),
                    "empty tag keys or values aren't supported",
                );
            }
        }
    }
}

/// The alias's family as `alias.find('^[^@]+')` gives it.
fn alias_family(alias: &str) -> &str {
    alias.split('@').next().unwrap_or("")
}

fn terms_rules(out: &mut Out, sp: &JsonPath, spec: &Map<String, Value>) {
    // amiSelectorTerms
    if let Some(terms) = arr(spec.get("amiSelectorTerms")) {
        let p = sp.key("amiSelectorTerms");
        for (i, t) in terms.iter().enumerate() {
            if !t.is_object() {
                continue;
            }
            if !["tags", "id", "name", "alias", "ssmParameter"]
                .iter()
                .any(|f| has(t, f))
            {
                fail(
                    out,
                    p.index(i),
                    "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
                );
            }
            if has(t, "id") && ["alias", "tags", "name", "owner"].iter().any(|f| has(t, f)) {
                fail(
                    out,
                    p.index(i).key("id"),
                    "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
                );
            }
            if has(t, "alias") && ["id", "tags", "name", "owner"].iter().any(|f| has(t, f)) {
                fail(
                    out,
                    p.index(i).key("alias"),
                    "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
                );
            }
            if let Some(alias) = t.get("alias").and_then(Value::as_str) {
                let ap = p.index(i).key("alias");
                let (fam, version) = match alias.split_once('@') {
                    Some((f, v)) => (f, Some(v.split('@').next().unwrap_or(""))),
                    None => (alias, None),
                };
                let well_formed = !fam.is_empty()
                    && fam.bytes().all(|b| b.is_ascii_alphanumeric())
                    && alias.len() > fam.len() + 1;
                if !well_formed {
                    fail(
                        out,
                        ap.clone(),
                        "'alias' is improperly formatted, must match the format 'family@version'",
                    );
                }
                if !AMI_FAMILIES.iter().any(|(f, _)| *f == fam) {
                    fail(
                        out,
                        ap.clone(),
                        "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
                    );
                }
                if fam.starts_with("windows")
                    && AMI_FAMILIES.iter().any(|(f, _)| *f == fam)
                    && version != Some("latest")
                {
                    fail(
                        out,
                        ap,
                        "windows families may only specify version 'latest'",
                    );
                }
            }
            nonempty_tags(out, p.index(i).key("tags"), t.get("tags"));
        }
        let alias_at = terms.iter().position(|t| has(t, "alias"));
        if let Some(i) = alias_at
            && terms.len() != 1
        {
            fail(
                out,
                p.index(i).key("alias"),
                "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            );
        }
    }

    // securityGroupSelectorTerms and subnetSelectorTerms
    for (field, fields, exclusives) in [
        (
            "securityGroupSelectorTerms",
            &["tags", "id", "name"][..],
            &[
                (
                    "id",
                    &["tags", "name"][..],
                    "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
                ),
                (
                    "name",
                    &["tags", "id"][..],
                    "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
                ),
            ][..],
        ),
        (
            "subnetSelectorTerms",
            &["tags", "id"][..],
            &[(
                "id",
                &["tags"][..],
                "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
            )][..],
        ),
    ] {
        let Some(terms) = arr(spec.get(field)) else {
            continue;
        };
        let p = sp.key(field);
        if terms.is_empty() {
            fail(out, p.clone(), format!("{field} cannot be empty"));
        }
        for (i, t) in terms.iter().enumerate() {
            if t.is_object() && !fields.iter().any(|f| has(t, f)) {
                fail(
                    out,
                    p.index(i),
                    format!("expected at least one, got none, [{}]", quoted(fields)),
                );
            }
            nonempty_tags(out, p.index(i).key("tags"), t.get("tags"));
        }
        // `!self.all(x, has(x.id) && ...)`: fails only when every term does
        // it, and so also for an empty list, where `all` holds.
        for (f, others, msg) in exclusives {
            if terms
                .iter()
                .all(|t| has(t, f) && others.iter().any(|o| has(t, o)))
            {
                let at = if terms.is_empty() {
                    p.clone()
                } else {
                    p.index(0).key(*f)
                };
                fail(out, at, *msg);
            }
        }
    }

    // capacityReservationSelectorTerms
    if let Some(terms) = arr(spec.get("capacityReservationSelectorTerms")) {
        let p = sp.key("capacityReservationSelectorTerms");
        for (i, t) in terms.iter().enumerate() {
            if t.is_object()
                && !["tags", "id", "instanceMatchCriteria"]
                    .iter()
                    .any(|f| has(t, f))
            {
                fail(
                    out,
                    p.index(i),
                    "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
                );
            }
            nonempty_tags(out, p.index(i).key("tags"), t.get("tags"));
        }
        let all_exclusive = terms.iter().all(|t| {
            has(t, "id")
                && ["tags", "ownerID", "instanceMatchCriteria"]
                    .iter()
                    .any(|o| has(t, o))
        });
        if all_exclusive {
            if terms.is_empty() {
                // The reference rejects an empty list through this rule.
                fail(
                    out,
                    p,
                    "capacityReservationSelectorTerms cannot be an empty list; remove the field instead",
                );
            } else {
                fail(
                    out,
                    p.index(0).key("id"),
                    "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
                );
            }
        }
    }
}

fn quoted(fields: &[&str]) -> String {
    fields
        .iter()
        .map(|f| format!("'{f}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn kubelet_rules(out: &mut Out, kp: JsonPath, k: &Value) {
    let high = k.get("imageGCHighThresholdPercent").and_then(Value::as_i64);
    let low = k.get("imageGCLowThresholdPercent").and_then(Value::as_i64);
    if let (Some(h), Some(l)) = (high, low)
        && h <= l
    {
        fail(
            out,
            kp.key("imageGCHighThresholdPercent"),
            "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        );
    }
    let soft = obj(k.get("evictionSoft"));
    let grace = obj(k.get("evictionSoftGracePeriod"));
    if let Some(soft) = soft {
        for key in soft.keys() {
            if !grace.is_some_and(|g| g.contains_key(key)) {
                fail(
                    out,
                    kp.key("evictionSoft").key(key.clone()),
                    "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
                );
            }
        }
    }
    if let Some(grace) = grace {
        for key in grace.keys() {
            if !soft.is_some_and(|s| s.contains_key(key)) {
                fail(
                    out,
                    kp.key("evictionSoftGracePeriod").key(key.clone()),
                    "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
                );
            }
        }
    }
    for field in ["evictionHard", "evictionSoft", "evictionSoftGracePeriod"] {
        if let Some(m) = obj(k.get(field)) {
            for key in m.keys() {
                if !EVICTION_SIGNALS.contains(&key.as_str()) {
                    fail(
                        out,
                        kp.key(field).key(key.clone()),
                        format!(
                            "valid keys for {field} are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']"
                        ),
                    );
                }
            }
        }
    }
    for field in ["kubeReserved", "systemReserved"] {
        if let Some(m) = obj(k.get(field)) {
            for (key, v) in m {
                if !RESERVED_KEYS.contains(&key.as_str()) {
                    fail(
                        out,
                        kp.key(field).key(key.clone()),
                        format!(
                            "valid keys for {field} are ['cpu','memory','ephemeral-storage','pid']"
                        ),
                    );
                }
                if v.as_str().is_some_and(|s| s.starts_with('-')) {
                    fail(
                        out,
                        kp.key(field).key(key.clone()),
                        format!("{field} value cannot be a negative resource quantity"),
                    );
                }
            }
        }
    }
}

pub fn ec2nodeclass(doc: &Value) -> Out {
    let mut out = Vec::new();
    let Some(spec_v) = doc.get("spec").filter(|s| s.is_object()) else {
        return out;
    };
    let spec = spec_v.as_object().expect("checked");
    let sp = JsonPath::root().key("spec");

    // spec: role xor instanceProfile.
    if has(spec_v, "role") == has(spec_v, "instanceProfile") {
        let at = if has(spec_v, "role") {
            sp.key("instanceProfile")
        } else {
            sp.clone()
        };
        fail(
            &mut out,
            at,
            "must specify exactly one of ['role', 'instanceProfile']",
        );
    }
    for (field, msg) in [
        ("role", "role cannot be empty"),
        ("instanceProfile", "instanceProfile cannot be empty"),
    ] {
        if spec.get(field).and_then(Value::as_str) == Some("") {
            fail(&mut out, sp.key(field), msg);
        }
    }

    // spec: amiFamily against the alias, and required without one.
    let terms = arr(spec.get("amiSelectorTerms"));
    let alias_families: Vec<&str> = terms
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t.get("alias").and_then(Value::as_str))
                .map(alias_family)
                .collect()
        })
        .unwrap_or_default();
    let has_alias = terms.is_some_and(|ts| ts.iter().any(|t| has(t, "alias")));
    if let Some(family) = spec.get("amiFamily").and_then(Value::as_str) {
        for (alias, canonical) in AMI_FAMILIES {
            if alias_families.contains(&alias) && family != "Custom" && family != canonical {
                let pretty = match alias {
                    "al2" => "an AL2",
                    "al2023" => "an AL2023",
                    "bottlerocket" => "a Bottlerocket",
                    "windows2019" => "a Windows2019",
                    "windows2022" => "a Windows2022",
                    _ => "a Windows2025",
                };
                fail(
                    &mut out,
                    sp.key("amiFamily"),
                    format!(
                        "if set, amiFamily must be '{canonical}' or 'Custom' when using {pretty} alias"
                    ),
                );
            }
        }
    } else if terms.is_some() && !has_alias {
        fail(
            &mut out,
            sp.key("amiSelectorTerms"),
            "must specify amiFamily if amiSelectorTerms does not contain an alias",
        );
    }

    terms_rules(&mut out, &sp, spec);

    // blockDeviceMappings
    if let Some(bdms) = arr(spec.get("blockDeviceMappings")) {
        let p = sp.key("blockDeviceMappings");
        let roots: Vec<usize> = bdms
            .iter()
            .enumerate()
            .filter(|(_, b)| b.get("rootVolume").and_then(Value::as_bool) == Some(true))
            .map(|(i, _)| i)
            .collect();
        if roots.len() > 1 {
            fail(
                &mut out,
                p.index(roots[1]).key("rootVolume"),
                "must have only one blockDeviceMappings with rootVolume",
            );
        }
        for (i, b) in bdms.iter().enumerate() {
            let Some(ebs) = b.get("ebs").filter(|e| e.is_object()) else {
                continue;
            };
            let ep = p.index(i).key("ebs");
            if !has(ebs, "snapshotID") && !has(ebs, "volumeSize") {
                fail(
                    &mut out,
                    ep.clone(),
                    "snapshotID or volumeSize must be defined",
                );
            }
            if has(ebs, "volumeInitializationRate")
                && !(has(ebs, "snapshotID")
                    && ebs.get("snapshotID").and_then(Value::as_str) != Some(""))
            {
                fail(
                    &mut out,
                    ep.key("volumeInitializationRate"),
                    "snapshotID must be set when volumeInitializationRate is set",
                );
            }
        }
    }

    // connectionTracking
    if let Some(ct) = spec.get("connectionTracking").filter(|c| c.is_object())
        && !["tcpEstablishedTimeout", "udpStreamTimeout", "udpTimeout"]
            .iter()
            .any(|f| has(ct, f))
    {
        fail(
            &mut out,
            sp.key("connectionTracking"),
            "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
        );
    }

    // kubelet
    if let Some(k) = spec.get("kubelet").filter(|k| k.is_object()) {
        kubelet_rules(&mut out, sp.key("kubelet"), k);
    }

    // networkInterfaces
    if let Some(nis) = arr(spec.get("networkInterfaces")) {
        let p = sp.key("networkInterfaces");
        let int = |x: &Value, f: &str| x.get(f).and_then(Value::as_i64);
        let is_primary = |x: &Value| {
            int(x, "deviceIndex") == Some(0)
                && int(x, "networkCardIndex") == Some(0)
                && x.get("interfaceType").and_then(Value::as_str) == Some("interface")
        };
        if !nis.is_empty() && !nis.iter().any(is_primary) {
            fail(
                &mut out,
                p.clone(),
                "networkInterfaces must include a primary interface with interfaceType='interface'",
            );
        }
        for (i, x) in nis.iter().enumerate() {
            let same_slot = nis
                .iter()
                .filter(|y| {
                    int(x, "networkCardIndex") == int(y, "networkCardIndex")
                        && int(x, "deviceIndex") == int(y, "deviceIndex")
                })
                .count();
            let efa_on_card = nis
                .iter()
                .filter(|y| {
                    int(x, "networkCardIndex") == int(y, "networkCardIndex")
                        && y.get("interfaceType").and_then(Value::as_str) == Some("efa-only")
                })
                .count();
            let is_efa = x.get("interfaceType").and_then(Value::as_str) == Some("efa-only");
            if same_slot != 1 || (is_efa && efa_on_card != 1) {
                fail(
                    &mut out,
                    p.index(i),
                    "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
                );
                break;
            }
        }
    }

    // placementGroupSelector
    if let Some(pg) = spec.get("placementGroupSelector").filter(|p| p.is_object()) {
        let p = sp.key("placementGroupSelector");
        if !has(pg, "name") && !has(pg, "id") {
            fail(
                &mut out,
                p.clone(),
                "expected at least one, got none, ['name', 'id']",
            );
        }
        if has(pg, "name") && has(pg, "id") {
            fail(
                &mut out,
                p.key("id"),
                "'name' and 'id' are mutually exclusive",
            );
        }
    }

    // spec.tags
    if let Some(tags) = obj(spec.get("tags")) {
        let p = sp.key("tags");
        for k in tags.keys() {
            let kp = p.key(k.clone());
            if k.is_empty() {
                fail(&mut out, kp.clone(), "empty tag keys aren't supported");
            }
            for restricted in [
                "eks:eks-cluster-name",
                "karpenter.sh/nodepool",
                "karpenter.sh/nodeclaim",
                "karpenter.k8s.aws/ec2nodeclass",
            ] {
                if k == restricted {
                    fail(
                        &mut out,
                        kp.clone(),
                        format!("tag contains a restricted tag matching {restricted}"),
                    );
                }
            }
            if k.starts_with("kubernetes.io/cluster") {
                fail(
                    &mut out,
                    kp,
                    "tag contains a restricted tag matching kubernetes.io/cluster/",
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(out: &[Finding]) -> Vec<String> {
        out.iter().map(|f| f.path.to_string()).collect()
    }

    fn np(spec: Value) -> Value {
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "a"}, "spec": spec})
    }

    #[test]
    fn requirement_rules_point_at_the_offending_node() {
        let doc = np(json!({"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
        "requirements": [
            {"key": "a", "operator": "In", "values": []},
            {"key": "b", "operator": "Gt", "values": ["x"]},
            {"key": "c", "operator": "In", "values": ["1"], "minValues": 2},
            {"key": "karpenter.sh/foo", "operator": "Exists"},
            {"key": "d", "operator": "Lt"}
        ]}}}));
        assert_eq!(
            paths(&nodepool(&doc)),
            [
                "spec.template.spec.requirements[0].values",
                "spec.template.spec.requirements[1].values[0]",
                "spec.template.spec.requirements[2].minValues",
                "spec.template.spec.requirements[3].key",
                "spec.template.spec.requirements[4]",
            ]
        );
    }

    #[test]
    fn label_domain_rules_follow_cel_find() {
        let mut out = Vec::new();
        label_key_rules(&mut out, JsonPath::root(), "karpenter.sh/capacity-type");
        label_key_rules(&mut out, JsonPath::root(), "example.com/karpenter.sh");
        assert!(out.is_empty());
        label_key_rules(&mut out, JsonPath::root(), "sub.karpenter.sh/x");
        label_key_rules(&mut out, JsonPath::root(), "karpenter.k8s.aws/instance-foo");
        label_key_rules(&mut out, JsonPath::root(), "karpenter.sh");
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn static_nodepools_reject_weight_and_other_limits() {
        let doc = np(json!({"replicas": 3, "weight": 10, "limits": {"cpu": "10"}}));
        assert_eq!(paths(&nodepool(&doc)), ["spec.limits.cpu", "spec.weight"]);
        let ok = np(json!({"replicas": 3, "limits": {"nodes": "5"}}));
        assert!(nodepool(&ok).is_empty());
    }

    #[test]
    fn budgets_need_schedule_and_duration_together() {
        let doc = np(
            json!({"disruption": {"budgets": [{"nodes": "1", "schedule": "@daily"}, {"nodes": "1"}]}}),
        );
        assert_eq!(
            paths(&nodepool(&doc)),
            ["spec.disruption.budgets[0].schedule"]
        );
    }

    #[test]
    fn ami_family_and_alias_rules() {
        let ok = json!({"spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}});
        assert!(ec2nodeclass(&ok).is_empty(), "{:?}", ec2nodeclass(&ok));
        let bad = json!({"spec": {"role": "r", "amiFamily": "Bottlerocket",
            "amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}],
            "subnetSelectorTerms": [], "securityGroupSelectorTerms": [{"id": "sg-1", "name": "x"}]}});
        let got = paths(&ec2nodeclass(&bad));
        assert_eq!(
            got,
            [
                "spec.amiFamily",
                "spec.amiSelectorTerms[0].alias",
                "spec.securityGroupSelectorTerms[0].id",
                "spec.securityGroupSelectorTerms[0].name",
                "spec.subnetSelectorTerms",
                "spec.subnetSelectorTerms",
            ]
        );
        let no_family =
            json!({"spec": {"instanceProfile": "p", "amiSelectorTerms": [{"id": "ami-1"}]}});
        assert_eq!(paths(&ec2nodeclass(&no_family)), ["spec.amiSelectorTerms"]);
        let windows =
            json!({"spec": {"role": "r", "amiSelectorTerms": [{"alias": "windows2022@v1"}]}});
        assert_eq!(
            ec2nodeclass(&windows)[0].message,
            "windows families may only specify version 'latest'"
        );
    }

    /// `!self.all(x, has(x.id) && has(x.tags))` holds for an empty list,
    /// so the reference CRD refuses an empty selector list with each
    /// exclusive-field message as well as "cannot be empty", at the list
    /// (found against a real API server, tests/differential).
    #[test]
    fn an_empty_selector_list_also_fails_the_exclusive_field_rules() {
        let doc = json!({"spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [], "securityGroupSelectorTerms": []}});
        let mut got: Vec<(String, String)> = ec2nodeclass(&doc)
            .into_iter()
            .map(|f| (f.path.to_string(), f.message))
            .collect();
        got.sort();
        let sg = "spec.securityGroupSelectorTerms".to_string();
        let subnets = "spec.subnetSelectorTerms".to_string();
        assert_eq!(
            got,
            [
                (sg.clone(), "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term".to_string()),
                (sg.clone(), "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term".to_string()),
                (sg, "securityGroupSelectorTerms cannot be empty".to_string()),
                (subnets.clone(), "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term".to_string()),
                (subnets, "subnetSelectorTerms cannot be empty".to_string()),
            ]
        );
    }

    #[test]
    fn kubelet_and_tag_rules() {
        let doc = json!({"spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60,
                        "evictionSoft": {"memory.available": "5%"}, "kubeReserved": {"gpu": "1", "cpu": "-1"}},
            "tags": {"kubernetes.io/cluster/x": "owned", "": "v"}}});
        let got = paths(&ec2nodeclass(&doc));
        assert!(got.contains(&"spec.kubelet.imageGCHighThresholdPercent".to_string()));
        assert!(got.contains(&"spec.kubelet.evictionSoft[\"memory.available\"]".to_string()));
        assert!(got.contains(&"spec.kubelet.kubeReserved.gpu".to_string()));
        assert!(got.contains(&"spec.kubelet.kubeReserved.cpu".to_string()));
        assert!(got.contains(&"spec.tags[\"kubernetes.io/cluster/x\"]".to_string()));
        assert!(got.contains(&"spec.tags[\"\"]".to_string()));
    }
}
