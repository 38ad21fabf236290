//! Capacity reservations of the simulated account (a scenario's
//! `cloud.reservations`), as EC2 and the AWS provider
//! ([`crate::cloud::aws::reservations`]) treat them:
//!
//! - **Resolution**: a node class's `capacityReservationSelectorTerms`
//!   select the active reservations EC2 would answer their queries with
//!   (the same [`crate::cloud::aws::reservations::Query`] values, matched as EC2 filters: by id, or by tags,
//!   owner and match criteria); each is a status entry, a capacity block
//!   within 40 minutes of its end `expiring`.
//! - **Offerings**: a `reserved` offering of the type in the zone of each
//!   reservation held, priced as the AWS provider prices them, available
//!   while an instance is left in one of them.
//! - **Launches** go into the reservation with the most instances left
//!   that the NodeClaim's requirements allow; an instance is in it until
//!   it is terminated.
//! - **The end**: instances of an ended reservation run on as on-demand
//!   instances (EC2's behaviour for on-demand capacity reservations); those
//!   of an ended capacity block are terminated.
//!
//! Every reservation belongs to the simulated account, [`SIM_OWNER_ID`].

use std::collections::BTreeMap;

use crate::api::ec2nodeclass::{CapacityReservation, CapacityReservationSelectorTerm};
use crate::clock::Timestamp;
use crate::cloud::aws::reservations::{self, Availability, Facts, PRICE_DIVISOR};
use crate::model::InstanceType;

/// The account id of the simulated EC2 (AWS's documentation example).
pub const SIM_OWNER_ID: &str = "111122223333";

/// A capacity reservation of the simulated account.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReservation {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// How many instances it holds.
    pub count: u32,
    /// A capacity block (else an on-demand capacity reservation).
    pub capacity_block: bool,
    /// `open` or `targeted`.
    pub instance_match_criteria: String,
    pub tags: BTreeMap<String, String>,
    /// Its owner's account id.
    pub owner_id: String,
    /// Active from ...
    pub start: Timestamp,
    /// ... until (none: open-ended).
    pub end: Option<Timestamp>,
}

impl SimReservation {
    /// Whether EC2 lists it as active at `now`.
    pub fn active(&self, now: Timestamp) -> bool {
        self.start <= now && !self.ended(now)
    }

    /// Whether it has ended by `now`.
    pub fn ended(&self, now: Timestamp) -> bool {
        self.end.is_some_and(|e| e <= now)
    }

    /// As DescribeCapacityReservations reports it, with `used` of its
    /// instances taken.
    fn facts(&self, used: i64) -> Facts {
        Facts {
            id: self.id.clone(),
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            owner_id: self.owner_id.clone(),
            instance_match_criteria: self.instance_match_criteria.clone(),
            reservation_type: self.capacity_block.then(|| "capacity-block".to_string()),
            end: self.end,
            interruptible: false,
            available: (i64::from(self.count) - used).max(0),
        }
    }
}

/// What `terms` select at `now`, as a node class's status lists them, and
/// the instances left in each. `used` counts the live instances of a
/// reservation.
pub fn held(
    all: &[SimReservation],
    used: impl Fn(&str) -> i64,
    terms: &[CapacityReservationSelectorTerm],
    now: Timestamp,
) -> (Vec<CapacityReservation>, Availability) {
    let queries = reservations::queries(terms);
    let mut facts: Vec<Facts> = all
        .iter()
        .filter(|r| r.active(now))
        .filter(|r| queries.iter().any(|q| q.matches(&r.facts(0), &r.tags)))
        .map(|r| r.facts(used(&r.id)))
        .collect();
    facts.sort_by(|a, b| a.id.cmp(&b.id));
    facts.dedup_by(|a, b| a.id == b.id);
    let mut availability = Availability::default();
    availability.sync(&facts);
    let status = facts
        .iter()
        .filter_map(|f| reservations::to_status(f, now).ok())
        .collect();
    (status, availability)
}

/// `types` with a `reserved` offering for each type and zone `held` has a
/// reservation of, as the AWS provider makes them
/// ([`reservations::reserved_offering`], [`reservations::add_requirements`]),
/// priced as it prices reservations (the on-demand price divided by
/// [`PRICE_DIVISOR`]). Types without an on-demand offering in the zone get
/// none.
pub fn with_reserved_offerings(
    types: &[InstanceType],
    held: &[CapacityReservation],
    availability: &Availability,
) -> Vec<InstanceType> {
    types
        .iter()
        .map(|it| {
            let mut it = it.clone();
            let mut zones: Vec<&str> = held
                .iter()
                .filter(|r| r.instance_type == it.name)
                .map(|r| r.availability_zone.as_str())
                .collect();
            zones.sort_unstable();
            zones.dedup();
            for zone in zones {
                let Some(on_demand) = it
                    .offerings
                    .iter()
                    .find(|o| {
                        o.zone == zone && o.capacity_type == crate::api::CAPACITY_TYPE_ON_DEMAND
                    })
                    .map(|o| o.price)
                else {
                    continue;
                };
                it.offerings.extend(reservations::reserved_offering(
                    held,
                    Some(availability),
                    &it.name,
                    zone,
                    on_demand / PRICE_DIVISOR,
                ));
            }
            // The type's capacity types are its offerings' (reserved now
            // among them), as the AWS provider derives them.
            let capacity_types: Vec<String> = it
                .offerings
                .iter()
                .map(|o| o.capacity_type.clone())
                .collect();
            it.requirements.0.insert(
                crate::model::labels::CAPACITY_TYPE.to_string(),
                crate::model::Requirement::in_values(capacity_types),
            );
            reservations::add_requirements(&mut it, held);
            it
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::parse_rfc3339;

    fn reservation(id: &str, tags: &[(&str, &str)], capacity_block: bool) -> SimReservation {
        SimReservation {
            id: id.into(),
            instance_type: "m7i.large".into(),
            zone: "us-east-1a".into(),
            count: 2,
            capacity_block,
            instance_match_criteria: "targeted".into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            owner_id: SIM_OWNER_ID.to_string(),
            start: parse_rfc3339("2026-01-01T00:00:00Z").unwrap(),
            end: Some(parse_rfc3339("2026-01-01T02:00:00Z").unwrap()),
        }
    }

    fn terms(yaml: &str) -> Vec<CapacityReservationSelectorTerm> {
        serde_saphyr::from_str(yaml).expect("terms")
    }

    /// Terms select as EC2's filters do; the status lists each once, with
    /// the instances left; a capacity block is expiring in its last 40
    /// minutes, and an ended reservation is not listed.
    #[test]
    fn terms_select_reservations_as_ec2_filters_them() {
        let all = [
            reservation("cr-1", &[("team", "ml")], false),
            reservation("cr-2", &[("team", "web")], true),
        ];
        let at = |t: &str| parse_rfc3339(t).unwrap();
        let used = |id: &str| if id == "cr-1" { 1 } else { 0 };
        let now = at("2026-01-01T00:30:00Z");
        let (status, availability) =
            held(&all, used, &terms("[{tags: {team: ml}}, {id: cr-1}]"), now);
        let ids: Vec<&str> = status.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["cr-1"]);
        assert_eq!(availability.available("cr-1"), 1);
        let (status, _) = held(&all, used, &terms("[{tags: {team: '*'}}]"), now);
        assert_eq!(status.len(), 2);
        let (status, _) = held(
            &all,
            used,
            &terms("[{tags: {team: ml}, ownerID: '999999999999'}]"),
            now,
        );
        assert!(status.is_empty(), "another owner's");
        let late = at("2026-01-01T01:30:00Z");
        let (status, _) = held(&all, used, &terms("[{id: cr-2}]"), late);
        assert_eq!(
            status[0].state,
            Some(crate::api::ec2nodeclass::ReservationState::Expiring)
        );
        let (status, _) = held(
            &all,
            used,
            &terms("[{id: cr-2}]"),
            at("2026-01-01T02:00:00Z"),
        );
        assert!(status.is_empty(), "ended");
    }

    /// A reserved offering per held type and zone, at the AWS provider's
    /// price, unavailable once its reservations are used up.
    #[test]
    fn held_reservations_are_reserved_offerings_until_used_up() {
        let catalog = crate::world::ec2::SimEc2::builtin_catalog().expect("catalog");
        let it = catalog
            .iter()
            .find(|t| t.name == "m7i.large")
            .expect("m7i.large")
            .clone();
        let all = [reservation("cr-1", &[], false)];
        let now = parse_rfc3339("2026-01-01T00:30:00Z").unwrap();
        let offering = |used: i64| {
            let (status, availability) = held(&all, |_| used, &terms("[{id: cr-1}]"), now);
            let types = with_reserved_offerings(std::slice::from_ref(&it), &status, &availability);
            types[0]
                .offerings
                .iter()
                .find(|o| o.capacity_type == "reserved")
                .cloned()
                .expect("a reserved offering")
        };
        let on_demand = it
            .offerings
            .iter()
            .find(|o| o.zone == "us-east-1a" && o.capacity_type == "on-demand")
            .expect("on demand")
            .price;
        let o = offering(1);
        assert!(o.available);
        let (status, availability) = held(&all, |_| 1, &terms("[{id: cr-1}]"), now);
        let types = with_reserved_offerings(std::slice::from_ref(&it), &status, &availability);
        assert!(
            types[0]
                .requirements
                .get(crate::model::labels::CAPACITY_TYPE)
                .is_some_and(|r| r.has("reserved") && r.has("on-demand")),
            "pods that ask for reserved capacity can select it"
        );
        assert_eq!(o.zone, "us-east-1a");
        assert!((o.price - on_demand / PRICE_DIVISOR).abs() < 1e-15);
        assert!(!offering(2).available);
    }
}
