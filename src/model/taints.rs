//! Taints and tolerations.

use std::fmt;

/// A taint effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Effect {
    pub fn parse(s: &str) -> Option<Effect> {
        Some(match s {
            "NoSchedule" => Effect::NoSchedule,
            "PreferNoSchedule" => Effect::PreferNoSchedule,
            "NoExecute" => Effect::NoExecute,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: Effect,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

impl Taint {
    pub fn new(key: &str, value: &str, effect: Effect) -> Self {
        Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect,
        }
    }

    /// Converts a Kubernetes taint.
    pub fn from_k8s(t: &k8s_openapi::api::core::v1::Taint) -> Result<Self, String> {
        let effect = Effect::parse(&t.effect)
            .ok_or_else(|| format!("unknown taint effect {:?}", t.effect))?;
        Ok(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect,
        })
    }

    /// Whether this is a taint a new node carries until it is initialised
    /// ([`is_known_ephemeral`]); the scheduler ignores them on new capacity.
    pub fn is_ephemeral(&self) -> bool {
        is_known_ephemeral(&self.key, self.effect.as_str())
    }
}

/// The taints expected on a node while it initialises, as (key, effect),
/// matched as Kubernetes matches taints (key and effect, not the value):
/// the reference's `KnownEphemeralTaints`. A node is not initialised while
/// it carries one, and capacity still initialising is planned without
/// them.
pub const KNOWN_EPHEMERAL_TAINTS: [(&str, &str); 5] = [
    ("node.kubernetes.io/not-ready", "NoSchedule"),
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoSchedule"),
    (
        "node.cloudprovider.kubernetes.io/uninitialized",
        "NoSchedule",
    ),
    ("karpenter.sh/unregistered", "NoExecute"),
];

/// Key prefixes of ephemeral taint families whose suffix a controller
/// chooses (the Node Readiness Controller's `readiness.k8s.io/<rule>`).
pub const EPHEMERAL_TAINT_KEY_PREFIXES: [&str; 1] = ["readiness.k8s.io/"];

/// Whether a taint of `key` and `effect` is one of the
/// [`KNOWN_EPHEMERAL_TAINTS`] or of a family of
/// [`EPHEMERAL_TAINT_KEY_PREFIXES`].
pub fn is_known_ephemeral(key: &str, effect: &str) -> bool {
    KNOWN_EPHEMERAL_TAINTS
        .iter()
        .any(|&(k, e)| k == key && e == effect)
        || EPHEMERAL_TAINT_KEY_PREFIXES
            .iter()
            .any(|p| key.starts_with(p))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TolerationOp {
    Equal,
    Exists,
}

/// A pod toleration. An empty key with `Exists` tolerates everything; a
/// missing effect matches every effect.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Toleration {
    pub key: String,
    pub operator: TolerationOp,
    pub value: String,
    pub effect: Option<Effect>,
}

impl Toleration {
    pub fn from_k8s(t: &k8s_openapi::api::core::v1::Toleration) -> Result<Self, String> {
        let operator = match t.operator.as_deref() {
            None | Some("") | Some("Equal") => TolerationOp::Equal,
            Some("Exists") => TolerationOp::Exists,
            Some(other) => return Err(format!("unknown toleration operator {other:?}")),
        };
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(Effect::parse(e).ok_or_else(|| format!("unknown taint effect {e:?}"))?),
        };
        Ok(Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator,
            value: t.value.clone().unwrap_or_default(),
            effect,
        })
    }

    /// Tolerates everything with the given effect (or all effects).
    pub fn any(effect: Option<Effect>) -> Self {
        Toleration {
            key: String::new(),
            operator: TolerationOp::Exists,
            value: String::new(),
            effect,
        }
    }

    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.operator == TolerationOp::Exists;
        }
        if self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOp::Exists => true,
            TolerationOp::Equal => self.value == taint.value,
        }
    }
}

/// The first taint that blocks scheduling and is not tolerated.
/// `PreferNoSchedule` taints block unless `soft_ok`.
pub fn first_untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    soft_ok: bool,
) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        let soft = soft_ok && t.effect == Effect::PreferNoSchedule;
        !soft && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerations_match_by_key_value_and_effect() {
        let gpu = Taint::new("nvidia.com/gpu", "true", Effect::NoSchedule);
        let eq = Toleration {
            key: "nvidia.com/gpu".into(),
            operator: TolerationOp::Equal,
            value: "true".into(),
            effect: None,
        };
        assert!(eq.tolerates(&gpu));
        let wrong = Toleration {
            value: "false".into(),
            ..eq.clone()
        };
        assert!(!wrong.tolerates(&gpu));
        assert!(Toleration::any(None).tolerates(&gpu));
        assert!(!Toleration::any(Some(Effect::NoExecute)).tolerates(&gpu));
    }

    #[test]
    fn prefer_no_schedule_is_soft_only_when_asked() {
        let soft = [Taint::new("x", "", Effect::PreferNoSchedule)];
        assert!(first_untolerated(&soft, &[], false).is_some());
        assert!(first_untolerated(&soft, &[], true).is_none());
    }

    #[test]
    fn ephemeral_taints_match_by_key_and_effect_as_the_reference_s() {
        use Effect::{NoExecute, NoSchedule};
        let cases = [
            ("node.kubernetes.io/not-ready", "", NoSchedule, true),
            ("node.kubernetes.io/not-ready", "", NoExecute, true),
            ("node.kubernetes.io/unreachable", "", NoSchedule, true),
            // The value is not compared, as `Taint.MatchTaint` does not.
            (
                "node.cloudprovider.kubernetes.io/uninitialized",
                "x",
                NoSchedule,
                true,
            ),
            ("karpenter.sh/unregistered", "", NoExecute, true),
            ("readiness.k8s.io/network", "pending", NoSchedule, true),
            // An unreachable node's eviction taint is no new node's.
            ("node.kubernetes.io/unreachable", "", NoExecute, false),
            ("karpenter.sh/unregistered", "", NoSchedule, false),
            ("node.kubernetes.io/unschedulable", "", NoSchedule, false),
            ("example.com/readiness.k8s.io/x", "", NoSchedule, false),
        ];
        for (key, value, effect, ephemeral) in cases {
            let taint = Taint::new(key, value, effect);
            assert_eq!(taint.is_ephemeral(), ephemeral, "{taint}");
        }
    }
}
