//! Karpenter's feature gates, spelled as Karpenter spells them
//! (`--feature-gates` / `FEATURE_GATES`: `Name=bool,...`), with Karpenter
//! v1.14.1's defaults. dovetail acts on `SpotToSpotConsolidation`,
//! `StaticCapacity`, `NodeRepair`, `NodeOverlay` and `CapacityBuffer`, and
//! always has `ReservedCapacity`'s (capacity reservations in the AWS
//! provider, `cloud::aws::reservations`), so `ReservedCapacity=false` is
//! refused. A gate set to a behaviour dovetail lacks is an error, never
//! silently ignored.

/// A gate of Karpenter v1.14.1, its default there, and the only value
/// dovetail accepts (`None`: either).
const GATES: [(&str, bool, Option<bool>); 6] = [
    ("NodeRepair", false, None),
    ("ReservedCapacity", true, Some(true)),
    ("SpotToSpotConsolidation", false, None),
    ("NodeOverlay", false, None),
    ("StaticCapacity", false, None),
    ("CapacityBuffer", false, None),
];

/// The gates dovetail acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeatureGates {
    /// A spot node may be replaced by cheaper spot capacity.
    pub spot_to_spot_consolidation: bool,
    /// NodePools with `spec.replicas` keep that many NodeClaims; off, such
    /// a NodePool launches nothing and is reported inactive.
    pub static_capacity: bool,
    /// Nodes unhealthy past their toleration are replaced without draining.
    pub node_repair: bool,
    /// NodeOverlays change the instance types' prices and capacity.
    pub node_overlay: bool,
    /// CapacityBuffers keep spare capacity for their virtual pods.
    pub capacity_buffer: bool,
}

impl FeatureGates {
    /// Parses `Name=bool,...` onto the defaults (spaces around items
    /// allowed; empty is the defaults). The error names the gate and lists
    /// the known ones.
    pub fn parse(s: &str) -> Result<FeatureGates, String> {
        let mut gates = FeatureGates::default();
        gates.apply(s)?;
        Ok(gates)
    }

    /// Sets the gates `s` names, leaving the others as they are: a flag
    /// given on the command line wins over a scenario's settings gate by
    /// gate.
    pub fn apply(&mut self, s: &str) -> Result<(), String> {
        let known = || {
            GATES
                .iter()
                .map(|(n, d, _)| format!("{n} (default {d})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| format!("feature gate {item:?} must be Name=true or Name=false"))?;
            let (name, value) = (name.trim(), value.trim());
            let value = match value.to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(format!(
                        "feature gate {name}={value:?}: the value must be true or false"
                    ));
                }
            };
            let Some((_, _, only)) = GATES.iter().find(|(n, _, _)| *n == name) else {
                return Err(format!(
                    "unknown feature gate {name:?}; the known gates are {}",
                    known()
                ));
            };
            if only.is_some_and(|o| o != value) {
                return Err(format!(
                    "feature gate {name}={value} is not implemented by dovetail yet"
                ));
            }
            match name {
                "SpotToSpotConsolidation" => self.spot_to_spot_consolidation = value,
                "StaticCapacity" => self.static_capacity = value,
                "NodeRepair" => self.node_repair = value,
                "NodeOverlay" => self.node_overlay = value,
                "CapacityBuffer" => self.capacity_buffer = value,
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_with_karpenters_names_and_defaults() {
        assert_eq!(FeatureGates::parse("").unwrap(), FeatureGates::default());
        assert!(!FeatureGates::default().spot_to_spot_consolidation);
        assert!(!FeatureGates::default().static_capacity);
        let g = FeatureGates::parse("SpotToSpotConsolidation=true, NodeRepair=false").unwrap();
        assert!(g.spot_to_spot_consolidation);
        assert!(
            FeatureGates::parse("ReservedCapacity=true,SpotToSpotConsolidation=False")
                .is_ok_and(|g| !g.spot_to_spot_consolidation)
        );
        assert!(
            FeatureGates::parse("StaticCapacity=true")
                .unwrap()
                .static_capacity
        );
        // Karpenter's own default string parses to the defaults.
        let karpenter = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false";
        assert_eq!(
            FeatureGates::parse(karpenter).unwrap(),
            FeatureGates::default()
        );
    }

    #[test]
    fn a_later_setting_wins_gate_by_gate() {
        let mut g = FeatureGates::parse("SpotToSpotConsolidation=true").unwrap();
        g.apply("StaticCapacity=true").unwrap();
        assert!(g.spot_to_spot_consolidation && g.static_capacity);
        g.apply("SpotToSpotConsolidation=false").unwrap();
        assert!(!g.spot_to_spot_consolidation && g.static_capacity);
    }

    #[test]
    fn unknown_or_unimplemented_gates_are_errors() {
        let e = FeatureGates::parse("SpotToSpot=true").unwrap_err();
        assert!(e.contains("SpotToSpotConsolidation (default false)"), "{e}");
        assert!(e.contains("StaticCapacity (default false)"), "{e}");
        assert!(FeatureGates::parse("NodeRepair=true").unwrap().node_repair);
        assert!(
            FeatureGates::parse("NodeOverlay=true")
                .unwrap()
                .node_overlay
        );
        assert!(
            FeatureGates::parse("CapacityBuffer=true")
                .unwrap()
                .capacity_buffer
        );
        // dovetail always has reserved capacity.
        let e = FeatureGates::parse("ReservedCapacity=false").unwrap_err();
        assert!(e.contains("not implemented"), "{e}");
        assert!(FeatureGates::parse("ReservedCapacity=true").is_ok());
        assert!(FeatureGates::parse("SpotToSpotConsolidation").is_err());
        assert!(FeatureGates::parse("SpotToSpotConsolidation=yes").is_err());
    }
}
