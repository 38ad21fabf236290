//! `ValidationSucceeded`, as Karpenter v1.14.1's nodeclass validation
//! (`pkg/controllers/nodeclass/validation.go`) decides it:
//!
//! 1. **Dependencies**: while `AMIsReady`, `InstanceProfileReady`,
//!    `SecurityGroupsReady` or `SubnetsReady` is False, validation is False
//!    with `DependenciesNotReady` (nothing is called).
//! 2. **Tags**: `spec.tags` may not hold a restricted key
//!    (`kubernetes.io/cluster/<name>`, `karpenter.sh/nodepool`,
//!    `eks:eks-cluster-name`, `karpenter.k8s.aws/ec2nodeclass`,
//!    `karpenter.sh/nodeclaim`): `TagValidationFailed`.
//! 3. **Authorization**: the launch a NodeClaim of the class would make
//!    (one instance type: `m5.large`, else `m6g.large`, else the cheapest
//!    type an image fits; on demand; the class's tags and dovetail's) is
//!    dry-run: `CreateLaunchTemplate`, then `CreateFleet` with an override
//!    per subnet, then `RunInstances` into each subnet until one is
//!    allowed. `UnauthorizedOperation` (or any access denied) makes the
//!    condition False with `CreateLaunchTemplateAuthCheckFailed`,
//!    `CreateFleetAuthCheckFailed` or `RunInstancesAuthCheckFailed` and
//!    the message `Controller isn't authorized to call ec2:<Action>: ...`.
//!    Throttling, server errors and anything unexpected are errors: the
//!    resolution fails and is tried again, nothing is decided.
//!
//! Decisions (allowed or denied) are cached for [`VALIDATION_TTL`] under a
//! hash of the resolved images, subnets, security groups and instance
//! profile, the spec, the annotations and the tags, so a class is
//! dry-run again only when one of those changes or the time is up.
//!
//! In the controller the launch template is created for real before the
//! fleet and instance dry-runs name it (as Karpenter does; the first launch
//! would create it anyway). `dovetail aws resolve` writes nothing: it
//! dry-runs the template too, and when the template does not exist yet
//! EC2 cannot check `CreateFleet` and `RunInstances` against it, which
//! the report says.

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::time::Duration;

use super::error::AwsError;
use crate::api::EC2NodeClass;
use crate::cloud::{NodeClassCondition, NodeClassProblem, NodeClassResolution, reasons};

/// How long a validation decision stands (Karpenter's `ValidationTTL`).
pub const VALIDATION_TTL: Duration = Duration::from_secs(30 * 60);

/// The instance types the dry-run launches, in order of preference
/// (Karpenter's fallback types: one per architecture).
pub const PREFERRED_TYPES: [&str; 2] = ["m5.large", "m6g.large"];

/// The message of `DependenciesNotReady`.
pub const DEPENDENCIES_MESSAGE: &str =
    "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution";

/// The tag keys `spec.tags` may not set: dovetail (and Karpenter) set
/// them on what they launch.
pub fn restricted_tag(key: &str) -> bool {
    if let Some(cluster) = key.strip_prefix("kubernetes.io/cluster/") {
        let mut chars = cluster.chars();
        return chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    }
    matches!(
        key,
        "karpenter.sh/nodepool"
            | "eks:eks-cluster-name"
            | "karpenter.k8s.aws/ec2nodeclass"
            | "karpenter.sh/nodeclaim"
    )
}

/// What validation can decide before calling EC2: the dependencies and
/// the tags. `None` when the dry-runs are next.
pub fn precheck(class: &EC2NodeClass, r: &NodeClassResolution) -> Option<NodeClassProblem> {
    let problem = |reason: &str, message: String| NodeClassProblem {
        condition: NodeClassCondition::ValidationSucceeded,
        reason: reason.to_string(),
        message,
    };
    if NodeClassCondition::VALIDATION_DEPENDS_ON
        .iter()
        .any(|c| r.fails(*c))
    {
        return Some(problem(
            reasons::DEPENDENCIES_NOT_READY,
            DEPENDENCIES_MESSAGE.to_string(),
        ));
    }
    let bad: Vec<String> = class
        .spec
        .tags
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| restricted_tag(k))
        .map(|k| format!("{k:?}"))
        .collect();
    if !bad.is_empty() {
        return Some(problem(
            reasons::TAG_VALIDATION_FAILED,
            format!("tags failed validation requirements: {}", bad.join(", ")),
        ));
    }
    None
}

/// The action a dry-run checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DryRun {
    CreateLaunchTemplate,
    CreateFleet,
    RunInstances,
}

impl DryRun {
    pub fn action(self) -> &'static str {
        match self {
            DryRun::CreateLaunchTemplate => "ec2:CreateLaunchTemplate",
            DryRun::CreateFleet => "ec2:CreateFleet",
            DryRun::RunInstances => "ec2:RunInstances",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            DryRun::CreateLaunchTemplate => reasons::CREATE_LAUNCH_TEMPLATE_AUTH_FAILED,
            DryRun::CreateFleet => reasons::CREATE_FLEET_AUTH_FAILED,
            DryRun::RunInstances => reasons::RUN_INSTANCES_AUTH_FAILED,
        }
    }
}

/// What a dry-run's answer means.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// `DryRunOperation`: the call would have been allowed.
    Allowed,
    /// The caller may not make the call: the condition's problem.
    Denied(NodeClassProblem),
    /// EC2 could not check it: the launch template it names does not
    /// exist yet (only without writes: `dovetail aws resolve`).
    Unchecked(String),
    /// Nothing decided (throttled, a server error, an unexpected answer).
    Error(AwsError),
}

/// Reads a dry-run's answer (pure: the decision Karpenter's validation
/// makes from `DryRunOperation`, `UnauthorizedOperation` and the rest).
pub fn verdict<T>(check: DryRun, answer: Result<T, AwsError>) -> Verdict {
    let e = match answer {
        // A dry-run that EC2 carried out: it would have been allowed.
        Ok(_) => return Verdict::Allowed,
        Err(e) => e,
    };
    match &e {
        AwsError::Service { code, .. } if code == "DryRunOperation" => Verdict::Allowed,
        AwsError::AccessDenied { code, message, .. } => {
            let detail = if message.is_empty() {
                code.clone()
            } else {
                format!("{code}: {message}")
            };
            Verdict::Denied(NodeClassProblem {
                condition: NodeClassCondition::ValidationSucceeded,
                reason: check.reason().to_string(),
                message: format!(
                    "Controller isn't authorized to call {}: {detail}",
                    check.action()
                ),
            })
        }
        AwsError::Service { code, message, .. }
            if check == DryRun::CreateLaunchTemplate
                && code == "InvalidUserData.Malformed"
                && message.contains("User data is limited to") =>
        {
            Verdict::Denied(NodeClassProblem {
                condition: NodeClassCondition::ValidationSucceeded,
                reason: reasons::USER_DATA_TOO_LARGE.to_string(),
                message: "ec2:CreateLaunchTemplate rejected the rendered user data as too large: Rendered user data exceeds the EC2 user data size limit".to_string(),
            })
        }
        AwsError::Service { code, .. } if super::launch::is_template_not_found(code) => {
            Verdict::Unchecked(format!(
                "{} was not dry-run: its launch template does not exist yet (the controller creates it)",
                check.action()
            ))
        }
        _ => Verdict::Error(e),
    }
}

/// The key of a cached decision (see the module documentation).
pub fn cache_key(
    class: &EC2NodeClass,
    r: &NodeClassResolution,
    tags: &BTreeMap<String, String>,
) -> String {
    let mut h = fnv::FnvHasher::default();
    let parts = [
        serde_json::to_string(&r.amis).unwrap_or_default(),
        serde_json::to_string(&r.subnets).unwrap_or_default(),
        serde_json::to_string(&r.security_groups).unwrap_or_default(),
        serde_json::to_string(&r.instance_profile).unwrap_or_default(),
        serde_json::to_string(&class.spec).unwrap_or_default(),
        serde_json::to_string(&class.metadata.annotations).unwrap_or_default(),
        serde_json::to_string(tags).unwrap_or_default(),
    ];
    for p in parts {
        h.write(p.as_bytes());
        h.write(&[0]);
    }
    format!(
        "{}:{:016x}",
        class.metadata.name.as_deref().unwrap_or_default(),
        h.finish()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ec2nodeclass::{Ami, SecurityGroup, Subnet};

    fn class() -> EC2NodeClass {
        let mut c = EC2NodeClass::test("default");
        c.spec.tags = Some(BTreeMap::from([("team".to_string(), "a".to_string())]));
        c
    }

    fn ready() -> NodeClassResolution {
        NodeClassResolution {
            amis: vec![Ami {
                id: "ami-1".into(),
                name: None,
                deprecated: None,
                requirements: Vec::new(),
            }],
            subnets: vec![Subnet {
                id: "subnet-1".into(),
                zone: "us-east-1a".into(),
                zone_id: None,
            }],
            security_groups: vec![SecurityGroup {
                id: "sg-1".into(),
                name: None,
            }],
            instance_profile: Some("p".into()),
            capacity_reservations: Vec::new(),
            problems: Vec::new(),
        }
    }

    #[test]
    fn restricted_tag_keys_are_karpenters() {
        for key in [
            "kubernetes.io/cluster/prod",
            "kubernetes.io/cluster/my_cluster-1",
            "karpenter.sh/nodepool",
            "eks:eks-cluster-name",
            "karpenter.k8s.aws/ec2nodeclass",
            "karpenter.sh/nodeclaim",
        ] {
            assert!(restricted_tag(key), "{key}");
        }
        for key in [
            "kubernetes.io/cluster/",
            "kubernetes.io/cluster/-x",
            "kubernetes.io/cluster/a.b",
            "karpenter.sh/nodepool-x",
            "team",
            "Name",
        ] {
            assert!(!restricted_tag(key), "{key}");
        }
    }

    #[test]
    fn validation_waits_for_its_dependencies_then_checks_tags() {
        let c = class();
        assert_eq!(precheck(&c, &ready()), None);

        let mut r = ready();
        r.problem(
            NodeClassCondition::SubnetsReady,
            reasons::SUBNETS_NOT_FOUND,
            "none",
        );
        let p = precheck(&c, &r).expect("waits");
        assert_eq!(p.reason, "DependenciesNotReady");
        assert_eq!(p.condition, NodeClassCondition::ValidationSucceeded);

        // A problem of a condition validation does not wait for (a
        // placement group) leaves it to the dry-runs.
        let mut r = ready();
        r.problem(
            NodeClassCondition::PlacementGroupReady,
            "PlacementGroupNotFound",
            "x",
        );
        assert_eq!(precheck(&c, &r), None);

        let mut c = class();
        c.spec
            .tags
            .as_mut()
            .unwrap()
            .insert("karpenter.sh/nodepool".into(), "x".into());
        c.spec
            .tags
            .as_mut()
            .unwrap()
            .insert("kubernetes.io/cluster/other".into(), "owned".into());
        let p = precheck(&c, &ready()).expect("tags");
        assert_eq!(p.reason, "TagValidationFailed");
        assert_eq!(
            p.message,
            r#"tags failed validation requirements: "karpenter.sh/nodepool", "kubernetes.io/cluster/other""#
        );
    }

    #[test]
    fn dry_run_answers_decide_the_condition() {
        let service = |code: &str, message: &str| AwsError::Service {
            action: "ec2:CreateFleet",
            code: code.into(),
            message: message.into(),
        };
        assert_eq!(
            verdict::<()>(
                DryRun::CreateFleet,
                Err(service("DryRunOperation", "would succeed"))
            ),
            Verdict::Allowed
        );
        let denied = AwsError::AccessDenied {
            action: "ec2:CreateFleet",
            code: "UnauthorizedOperation".into(),
            message: "You are not authorized to perform this operation.".into(),
        };
        match verdict::<()>(DryRun::CreateFleet, Err(denied)) {
            Verdict::Denied(p) => {
                assert_eq!(p.reason, "CreateFleetAuthCheckFailed");
                assert_eq!(
                    p.message,
                    "Controller isn't authorized to call ec2:CreateFleet: UnauthorizedOperation: You are not authorized to perform this operation."
                );
            }
            other => panic!("{other:?}"),
        }
        let denied = AwsError::AccessDenied {
            action: "ec2:RunInstances",
            code: "UnauthorizedOperation".into(),
            message: String::new(),
        };
        assert!(matches!(
            verdict::<()>(DryRun::RunInstances, Err(denied)),
            Verdict::Denied(p) if p.reason == "RunInstancesAuthCheckFailed"
        ));
        assert!(matches!(
            verdict::<()>(
                DryRun::RunInstances,
                Err(service("InvalidLaunchTemplateName.NotFoundException", "no such template"))
            ),
            Verdict::Unchecked(m) if m.starts_with("ec2:RunInstances was not dry-run")
        ));
        let throttled = AwsError::Throttled {
            action: "ec2:CreateFleet",
            attempts: 6,
        };
        assert!(matches!(
            verdict::<()>(DryRun::CreateFleet, Err(throttled)),
            Verdict::Error(_)
        ));
        assert!(matches!(
            verdict::<()>(
                DryRun::CreateFleet,
                Err(service("InvalidParameterValue", "bad"))
            ),
            Verdict::Error(_)
        ));
    }

    #[test]
    fn the_cache_key_follows_what_the_dry_runs_depend_on() {
        let c = class();
        let tags = BTreeMap::from([("a".to_string(), "b".to_string())]);
        let key = cache_key(&c, &ready(), &tags);
        assert!(key.starts_with("default:"));
        assert_eq!(key, cache_key(&c, &ready(), &tags));
        let mut other = ready();
        other.subnets[0].id = "subnet-2".into();
        assert_ne!(key, cache_key(&c, &other, &tags));
        let mut annotated = class();
        annotated.metadata.annotations = Some(BTreeMap::from([("x".into(), "y".into())]));
        assert_ne!(key, cache_key(&annotated, &ready(), &tags));
        assert_ne!(key, cache_key(&c, &ready(), &BTreeMap::new()));
    }
}
