//! Placement groups, as Karpenter v1.14.1 uses a node class's
//! `placementGroupSelector`:
//!
//! - **Resolution**: one DescribePlacementGroups call, by `GroupId` or
//!   `GroupName`, filtered to `state=available`; the first group answered
//!   is the node class's. None answered: `PlacementGroupReady` is False
//!   (`PlacementGroupNotFound`), and nothing launches from the class; a
//!   failed call: False (`PlacementGroupResolutionFailed`). Without a
//!   selector the condition is True and nothing is asked.
//! - **Instance types**: only those whose `PlacementGroupInfo` supports the
//!   group's strategy (`cloud::select::NodeClassNeeds`). Their
//!   requirements gain `karpenter.k8s.aws/placement-group-id` (the group),
//!   and for a partition group `karpenter.k8s.aws/placement-group-partition`
//!   (1 to its partition count), so pods can select on them.
//! - **Launch**: the launch template's `Placement` names the group by id,
//!   and for a partition group the lowest partition the NodeClaim
//!   requires (none: EC2 chooses). The NodeClaim is labelled with the
//!   group's id and the partition, which a listed instance reports from
//!   its own `Placement`.

use aws_sdk_ec2::types::Filter;

use super::error::{AwsError, RetrySettings, call};
use crate::api::ec2nodeclass::PlacementGroupSelector;

/// The node label of the placement group an instance was launched into.
pub const LABEL_PLACEMENT_GROUP_ID: &str = crate::model::labels::PLACEMENT_GROUP_ID;
/// The node label of its partition, in a partition placement group.
pub const LABEL_PLACEMENT_GROUP_PARTITION: &str = crate::model::labels::PLACEMENT_GROUP_PARTITION;
/// The strategy whose groups have partitions.
pub const STRATEGY_PARTITION: &str = "partition";

/// A placement group EC2 resolved a selector to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementGroup {
    pub id: String,
    pub name: String,
    /// `cluster`, `partition` or `spread`.
    pub strategy: String,
    /// Partitions of a partition group (0 otherwise).
    pub partition_count: i32,
    /// `rack` or `host` for a spread group.
    pub spread_level: Option<String>,
}

impl PlacementGroup {
    fn from_sdk(g: &aws_sdk_ec2::types::PlacementGroup) -> Option<PlacementGroup> {
        Some(PlacementGroup {
            id: g.group_id()?.to_string(),
            name: g.group_name().unwrap_or_default().to_string(),
            strategy: g.strategy()?.as_str().to_string(),
            partition_count: g.partition_count().unwrap_or(0),
            spread_level: g.spread_level().map(|l| l.as_str().to_string()),
        })
    }

    /// The partitions a node may be placed in: `1..=partition_count` for a
    /// partition group, none otherwise.
    pub fn partitions(&self) -> Vec<String> {
        if self.strategy != STRATEGY_PARTITION {
            return Vec::new();
        }
        (1..=self.partition_count).map(|p| p.to_string()).collect()
    }

    /// Adds the requirements a type launched into the group has: the
    /// group's id and, for a partition group, its partitions.
    pub fn add_requirements(&self, it: &mut crate::model::InstanceType) {
        use crate::model::Requirement;
        it.requirements.add(
            LABEL_PLACEMENT_GROUP_ID,
            Requirement::in_values([self.id.clone()]),
        );
        let partitions = self.partitions();
        if !partitions.is_empty() {
            it.requirements.add(
                LABEL_PLACEMENT_GROUP_PARTITION,
                Requirement::in_values(partitions),
            );
        }
    }

    /// Whether `selector` names this group (by id or by name).
    pub fn selected_by(&self, selector: &PlacementGroupSelector) -> bool {
        selector.id.as_ref().map_or_else(
            || selector.name.as_ref().is_some_and(|n| *n == self.name),
            |id| *id == self.id,
        )
    }

    /// The partition a launch asks for: of the NodeClaim's allowed
    /// partitions, the lowest as strings sort (Karpenter's choice), for a
    /// partition group only.
    pub fn partition_for(&self, allowed: Option<&[String]>) -> Option<i32> {
        if self.strategy != STRATEGY_PARTITION {
            return None;
        }
        let mut values: Vec<&String> = allowed?.iter().collect();
        values.sort();
        values.first()?.parse().ok()
    }
}

/// Asks EC2 for the group `selector` names: `Ok(None)` when no available
/// group matches.
pub async fn describe(
    ec2: &aws_sdk_ec2::Client,
    retry: &RetrySettings,
    selector: &PlacementGroupSelector,
) -> Result<Option<PlacementGroup>, AwsError> {
    let id = selector.id.clone().filter(|i| !i.is_empty());
    let name = selector.name.clone().filter(|n| !n.is_empty());
    let out = call(retry, "ec2:DescribePlacementGroups", || {
        let mut req = ec2
            .describe_placement_groups()
            .filters(Filter::builder().name("state").values("available").build());
        if let Some(id) = &id {
            req = req.group_ids(id);
        } else if let Some(name) = &name {
            req = req.group_names(name);
        }
        req.send()
    })
    .await;
    match out {
        Ok(o) => Ok(o
            .placement_groups()
            .iter()
            .find_map(PlacementGroup::from_sdk)),
        // A group EC2 does not know is not found, not a failure.
        Err(e)
            if e.code()
                .is_some_and(|c| c.starts_with("InvalidPlacementGroup")) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// What the selector names, for messages: its name, else its id.
pub fn selector_text(selector: &PlacementGroupSelector) -> String {
    selector
        .name
        .clone()
        .or_else(|| selector.id.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(strategy: &str, partitions: i32) -> PlacementGroup {
        PlacementGroup {
            id: "pg-0abc".into(),
            name: "hpc".into(),
            strategy: strategy.into(),
            partition_count: partitions,
            spread_level: None,
        }
    }

    #[test]
    fn partitions_and_the_launch_partition_as_karpenter_picks_them() {
        let p = group("partition", 3);
        assert_eq!(p.partitions(), ["1", "2", "3"]);
        // The lowest as strings sort, as Karpenter sorts them.
        let allowed = ["3".to_string(), "2".to_string()];
        assert_eq!(p.partition_for(Some(&allowed)), Some(2));
        assert_eq!(p.partition_for(None), None);
        let cluster = group("cluster", 0);
        assert!(cluster.partitions().is_empty());
        assert_eq!(cluster.partition_for(Some(&allowed)), None);
    }

    #[test]
    fn a_group_is_read_from_ec2s_answer() {
        let g = aws_sdk_ec2::types::PlacementGroup::builder()
            .group_id("pg-0123")
            .group_name("spread-a")
            .strategy(aws_sdk_ec2::types::PlacementStrategy::Spread)
            .spread_level(aws_sdk_ec2::types::SpreadLevel::Rack)
            .build();
        let p = PlacementGroup::from_sdk(&g).expect("a group");
        assert_eq!(p.strategy, "spread");
        assert_eq!(p.spread_level.as_deref(), Some("rack"));
        assert_eq!(p.partition_count, 0);
        // No id, no group.
        let g = aws_sdk_ec2::types::PlacementGroup::builder()
            .group_name("x")
            .build();
        assert_eq!(PlacementGroup::from_sdk(&g), None);
    }
}
