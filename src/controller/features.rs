//! Karpenter's feature gates, spelled as Karpenter spells them
//! (`--feature-gates` / `FEATURE_GATES`: `Name=bool,...`). dovetail
//! implements `SpotToSpotConsolidation`; the other gates of v1.14.1 are
//! known, and may be set only to what dovetail does (a gate set to a
//! behaviour dovetail lacks is an error, never silently ignored).

/// A gate of Karpenter v1.14.1, its default there, and the only value
/// dovetail accepts (`None`: either).
const GATES: [(&str, bool, Option<bool>); 6] = [
    ("NodeRepair", false, Some(false)),
    ("ReservedCapacity", true, None),
    ("SpotToSpotConsolidation", false, None),
    ("NodeOverlay", false, Some(false)),
    ("StaticCapacity", false, Some(false)),
    ("CapacityBuffer", false, Some(false)),
];

/// The gates dovetail acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeatureGates {
    /// A spot node may be replaced by cheaper spot capacity.
    pub spot_to_spot_consolidation: bool,
}

impl FeatureGates {
    /// Parses `Name=bool,...` (spaces around items allowed; empty is the
    /// defaults). The error names the gate and lists the known ones.
    pub fn parse(s: &str) -> Result<FeatureGates, String> {
        let known = || {
            GATES
                .iter()
                .map(|(n, d, _)| format!("{n} (default {d})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut gates = FeatureGates::default();
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
            if name == "SpotToSpotConsolidation" {
                gates.spot_to_spot_consolidation = value;
            }
        }
        Ok(gates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_with_karpenters_names_and_defaults() {
        assert_eq!(FeatureGates::parse("").unwrap(), FeatureGates::default());
        assert!(!FeatureGates::default().spot_to_spot_consolidation);
        let g = FeatureGates::parse("SpotToSpotConsolidation=true, NodeRepair=false").unwrap();
        assert!(g.spot_to_spot_consolidation);
        assert!(
            FeatureGates::parse("ReservedCapacity=true,SpotToSpotConsolidation=False")
                .is_ok_and(|g| !g.spot_to_spot_consolidation)
        );
    }

    #[test]
    fn unknown_or_unimplemented_gates_are_errors() {
        let e = FeatureGates::parse("SpotToSpot=true").unwrap_err();
        assert!(e.contains("SpotToSpotConsolidation (default false)"), "{e}");
        assert!(FeatureGates::parse("NodeRepair=true").is_err());
        assert!(FeatureGates::parse("SpotToSpotConsolidation").is_err());
        assert!(FeatureGates::parse("SpotToSpotConsolidation=yes").is_err());
    }
}
