//! Capacity reservations (on-demand capacity reservations and capacity
//! blocks), as Karpenter v1.14.1 uses them with `ReservedCapacity` on (its
//! default):
//!
//! - **Resolution**: each `capacityReservationSelectorTerms` term is one
//!   DescribeCapacityReservations query ([`queries`]): by `id`, or by
//!   `tags` (`*`: any value), `ownerID` and `instanceMatchCriteria` as
//!   filters, always `state=active`. A reservation whose `id` EC2 does not
//!   know is skipped; reservations are deduplicated and those past their
//!   end dropped. Each becomes a `status.capacityReservations` entry
//!   ([`to_status`]); a capacity block within [`EXPIRATION_PERIOD`] of its
//!   end is `expiring`. No terms, no call.
//! - **Offerings**: a reservation is a `reserved` offering of its type in
//!   its zone, priced at the on-demand price divided by
//!   [`PRICE_DIVISOR`] (free, yet ordered as on-demand for
//!   consolidation), available while [`Availability`] counts an instance
//!   left in it and it is not expiring.
//! - **Availability**: the `AvailableInstanceCount` of the last answer;
//!   each launch planned into a reservation takes one at once (so
//!   concurrent launches do not all aim at the last instance), a launch
//!   that fails for another reason than capacity gives it back, a
//!   `ReservationCapacityExceeded` (or other capacity error) empties it
//!   until the next answer, and terminating an instance of it gives one
//!   back.
//! - **Launch** ([`super::launch`]): a reserved launch targets one
//!   reservation per instance type and zone (the one with the most
//!   instances left), with a launch template per reservation:
//!   `CapacityReservationSpecification` `capacity-reservations-only` with
//!   the reservation as target, market type `capacity-block` for a block;
//!   CreateFleet's default target capacity type is `on-demand`
//!   (`capacity-block` for blocks). Other launch templates say
//!   `CapacityReservationPreference: none`, so on-demand and spot launches
//!   never use up an open reservation meant for reserved launches.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_ec2::types::Filter;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::error::{AwsError, RetrySettings, paginate};
use crate::api::ec2nodeclass::{
    CapacityReservation, CapacityReservationSelectorTerm, InstanceMatchCriteria, ReservationState,
    ReservationType,
};
use crate::clock::Timestamp;
use crate::model::{InstanceType, Offering, Requirement, Reservation};

/// The label of a node launched into a reservation: the reservation's id.
pub const LABEL_RESERVATION_ID: &str = crate::api::LABEL_CAPACITY_RESERVATION_ID;
/// The label of a node launched into a reservation: `default` or
/// `capacity-block`.
pub const LABEL_RESERVATION_TYPE: &str = crate::model::labels::RESERVATION_TYPE;
/// The label of a node launched into a reservation: whether EC2 may
/// interrupt it.
pub const LABEL_RESERVATION_INTERRUPTIBLE: &str = crate::model::labels::RESERVATION_INTERRUPTIBLE;
/// How long before its end a capacity block is `expiring`: no launch goes
/// into it, and its nodes are deleted (EC2 starts reclaiming its instances
/// 30 minutes before the end; Karpenter leaves them 10 more minutes).
pub const EXPIRATION_PERIOD: Duration = Duration::from_secs(40 * 60);
/// A reserved offering costs the on-demand price divided by this: about
/// nothing, so it is chosen first, yet ordered like on-demand.
pub const PRICE_DIVISOR: f64 = 10_000_000.0;
/// CreateFleet's error when a targeted reservation has no instance left.
pub const RESERVATION_CAPACITY_EXCEEDED: &str = "ReservationCapacityExceeded";
/// DescribeCapacityReservations takes at most this many per page.
const PAGE_SIZE: i32 = 1000;

/// One DescribeCapacityReservations query.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Query {
    pub id: Option<String>,
    pub owner_id: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub instance_match_criteria: Option<&'static str>,
}

fn criteria(c: InstanceMatchCriteria) -> &'static str {
    match c {
        InstanceMatchCriteria::Open => "open",
        InstanceMatchCriteria::Targeted => "targeted",
    }
}

/// The queries of the selector terms, as Karpenter makes them: a term's
/// `id` is a query of its own; its tags, owner and match criteria another
/// (an owner alone selects nothing).
pub fn queries(terms: &[CapacityReservationSelectorTerm]) -> Vec<Query> {
    let mut out = Vec::new();
    for t in terms {
        if let Some(id) = t.id.as_ref().filter(|i| !i.is_empty()) {
            out.push(Query {
                id: Some(id.clone()),
                ..Query::default()
            });
        }
        let tags = t.tags.clone().unwrap_or_default();
        if !tags.is_empty() || t.instance_match_criteria.is_some() {
            out.push(Query {
                id: None,
                owner_id: t.owner_id.clone().filter(|o| !o.is_empty()),
                tags,
                instance_match_criteria: t.instance_match_criteria.map(criteria),
            });
        }
    }
    out.sort();
    out.dedup();
    out
}

impl Query {
    /// The query's filters (EC2's names): `state=active` always, then the
    /// owner, one per tag (`tag-key` for `*`), the match criteria.
    pub fn filters(&self) -> Vec<(String, String)> {
        let mut out = vec![("state".to_string(), "active".to_string())];
        if self.id.is_some() {
            return out;
        }
        if let Some(owner) = &self.owner_id {
            out.push(("owner-id".to_string(), owner.clone()));
        }
        for (k, v) in &self.tags {
            if v == "*" {
                out.push(("tag-key".to_string(), k.clone()));
            } else {
                out.push((format!("tag:{k}"), v.clone()));
            }
        }
        if let Some(c) = self.instance_match_criteria {
            out.push(("instance-match-criteria".to_string(), c.to_string()));
        }
        out
    }
}

impl Query {
    /// Whether EC2 answers the query with `f`, tagged `tags` (the simulated
    /// EC2 answers as EC2 does): by id alone, or by every filter.
    pub fn matches(&self, f: &Facts, tags: &BTreeMap<String, String>) -> bool {
        if let Some(id) = &self.id {
            return *id == f.id;
        }
        self.owner_id.as_ref().is_none_or(|o| *o == f.owner_id)
            && self
                .instance_match_criteria
                .is_none_or(|c| c == f.instance_match_criteria)
            && self
                .tags
                .iter()
                .all(|(k, v)| tags.get(k).is_some_and(|t| v == "*" || t == v))
    }
}

/// A reservation as EC2 reports it, reduced to what dovetail reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub owner_id: String,
    /// `open`, `targeted`, or what a newer EC2 says.
    pub instance_match_criteria: String,
    /// `default`, `capacity-block`, or what a newer EC2 says; `None` is
    /// `default`.
    pub reservation_type: Option<String>,
    pub end: Option<Timestamp>,
    pub interruptible: bool,
    pub available: i64,
}

impl Facts {
    /// `None` for an answer without an id, type or zone.
    pub fn from_sdk(r: &aws_sdk_ec2::types::CapacityReservation) -> Option<Facts> {
        Some(Facts {
            id: r.capacity_reservation_id()?.to_string(),
            instance_type: r.instance_type()?.to_string(),
            zone: r.availability_zone()?.to_string(),
            owner_id: r.owner_id().unwrap_or_default().to_string(),
            instance_match_criteria: r
                .instance_match_criteria()
                .map(|c| c.as_str().to_string())
                .unwrap_or_default(),
            reservation_type: r.reservation_type().map(|t| t.as_str().to_string()),
            end: r
                .end_date()
                .and_then(|d| Timestamp::new(d.secs(), i32::try_from(d.subsec_nanos()).ok()?).ok()),
            interruptible: r.interruptible().unwrap_or(false),
            available: i64::from(r.available_instance_count().unwrap_or(0)),
        })
    }
}

/// The status entry of a reservation at `now`, as Karpenter writes it; an
/// unknown match criteria or reservation type is an error (such a
/// reservation is left out, not guessed at).
pub fn to_status(f: &Facts, now: Timestamp) -> Result<CapacityReservation, String> {
    let instance_match_criteria = match f.instance_match_criteria.as_str() {
        "open" => InstanceMatchCriteria::Open,
        "targeted" => InstanceMatchCriteria::Targeted,
        other => {
            return Err(format!(
                "capacity reservation {}: unsupported instance match criteria {other:?}",
                f.id
            ));
        }
    };
    let reservation_type = match f.reservation_type.as_deref() {
        None | Some("" | "default") => ReservationType::Default,
        Some("capacity-block") => ReservationType::CapacityBlock,
        Some(other) => {
            return Err(format!(
                "capacity reservation {}: unsupported reservation type {other:?}",
                f.id
            ));
        }
    };
    let expiring = reservation_type == ReservationType::CapacityBlock
        && f.end.is_some_and(|end| {
            let from = end.checked_sub(EXPIRATION_PERIOD).unwrap_or(Timestamp::MIN);
            now >= from
        });
    Ok(CapacityReservation {
        availability_zone: f.zone.clone(),
        end_time: f.end.map(Time),
        id: f.id.clone(),
        instance_match_criteria,
        instance_type: f.instance_type.clone(),
        interruptible: Some(f.interruptible),
        owner_id: f.owner_id.clone(),
        reservation_type: Some(reservation_type),
        state: Some(if expiring {
            ReservationState::Expiring
        } else {
            ReservationState::Active
        }),
    })
}

/// Runs the queries of `terms`; reservations deduplicated by id, those
/// ended by `now` left out, sorted by id.
pub async fn describe(
    ec2: &aws_sdk_ec2::Client,
    retry: &RetrySettings,
    terms: &[CapacityReservationSelectorTerm],
    now: Timestamp,
) -> Result<Vec<Facts>, AwsError> {
    let mut found: BTreeMap<String, Facts> = BTreeMap::new();
    for q in queries(terms) {
        let filters: Vec<Filter> = q
            .filters()
            .into_iter()
            .map(|(n, v)| Filter::builder().name(n).values(v).build())
            .collect();
        let ids = q.id.clone().map(|i| vec![i]);
        let listed = paginate(
            retry,
            "ec2:DescribeCapacityReservations",
            |token| {
                ec2.describe_capacity_reservations()
                    .set_filters(Some(filters.clone()))
                    .set_capacity_reservation_ids(ids.clone())
                    // EC2 refuses MaxResults with ids.
                    .set_max_results(ids.is_none().then_some(PAGE_SIZE))
                    .set_next_token(token)
                    .send()
            },
            |page| {
                (
                    page.capacity_reservations().to_vec(),
                    page.next_token().map(str::to_string),
                )
            },
        )
        .await;
        let listed = match listed {
            Ok(l) => l,
            // An id EC2 does not know (any more) selects nothing.
            Err(e) if e.code() == Some("InvalidCapacityReservationId.NotFound") => Vec::new(),
            Err(e) => return Err(e),
        };
        for r in listed.iter().filter_map(Facts::from_sdk) {
            found.entry(r.id.clone()).or_insert(r);
        }
    }
    Ok(found
        .into_values()
        .filter(|f| f.end.is_none_or(|end| end > now))
        .collect())
}

/// The instances left in each reservation, as last answered and then
/// counted down by launches (see the module documentation).
#[derive(Debug, Default)]
pub struct Availability {
    counts: HashMap<String, i64>,
    /// Reservations EC2 said are full since their last answer: nothing is
    /// given back to them.
    exhausted: BTreeSet<String>,
}

impl Availability {
    /// Takes the counts of an answer.
    pub fn sync(&mut self, facts: &[Facts]) {
        for f in facts {
            self.counts.insert(f.id.clone(), f.available.max(0));
            self.exhausted.remove(&f.id);
        }
    }

    /// Instances left in the reservation (0 for one never answered).
    pub fn available(&self, id: &str) -> i64 {
        self.counts.get(id).copied().unwrap_or(0)
    }

    /// Takes one instance for a launch; false when none is left.
    pub fn take(&mut self, id: &str) -> bool {
        match self.counts.get_mut(id) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// Gives back one instance: a launch that did not happen, or an
    /// instance terminated.
    pub fn give_back(&mut self, id: &str) {
        if self.exhausted.contains(id) {
            return;
        }
        if let Some(n) = self.counts.get_mut(id) {
            *n += 1;
        }
    }

    /// EC2 said the reservation is full: none left until the next answer.
    pub fn exhaust(&mut self, id: &str) {
        if let Some(n) = self.counts.get_mut(id) {
            *n = 0;
            self.exhausted.insert(id.to_string());
        }
    }
}

/// Which reservation a reserved launch of a type in a zone targets: of the
/// active reservations of that type and zone with instances left that
/// `allowed` accepts, the one with the most left (then the lowest id).
pub fn choose<'a>(
    reservations: &'a [CapacityReservation],
    availability: &Availability,
    instance_type: &str,
    zone: &str,
    allowed: impl Fn(&CapacityReservation) -> bool,
) -> Option<&'a CapacityReservation> {
    reservations
        .iter()
        .filter(|r| r.instance_type == instance_type && r.availability_zone == zone)
        .filter(|r| r.state != Some(ReservationState::Expiring))
        .filter(|r| availability.available(&r.id) > 0)
        .filter(|r| allowed(r))
        .max_by(|a, b| {
            availability
                .available(&a.id)
                .cmp(&availability.available(&b.id))
                .then_with(|| b.id.cmp(&a.id))
        })
}

/// The `reserved` offering of `instance_type` in `zone` when `held` has
/// reservations of it there: every such reservation behind it, with the
/// instances `availability` says are left (none in an expiring one), at
/// `price`; available while one has an instance left (`None`: before
/// the counts are known, every reservation that is not expiring counts as
/// unbounded, as the launch plan checks them itself). One offering per
/// type and zone: which reservation a launch uses is its choice
/// ([`choose`]), and how many NodeClaims one solve may plan into each is
/// the solver's ([`crate::model::Reservation::left`]).
pub fn reserved_offering(
    held: &[CapacityReservation],
    availability: Option<&Availability>,
    instance_type: &str,
    zone: &str,
    price: f64,
) -> Option<Offering> {
    let reservations: Vec<Reservation> = held
        .iter()
        .filter(|r| r.instance_type == instance_type && r.availability_zone == zone)
        .map(|r| Reservation {
            id: r.id.clone(),
            labels: labels(r)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            left: match availability {
                _ if r.state == Some(ReservationState::Expiring) => 0,
                None => u32::MAX,
                Some(a) => u32::try_from(a.available(&r.id).max(0)).unwrap_or(u32::MAX),
            },
        })
        .collect();
    if reservations.is_empty() {
        return None;
    }
    Some(Offering {
        zone: zone.to_string(),
        capacity_type: crate::api::CAPACITY_TYPE_RESERVED.to_string(),
        price,
        available: reservations.iter().any(|r| r.left > 0),
        reservations,
    })
}

/// Karpenter's requirements of a type on the reservation labels: the
/// values of the node class's reservations of the type (absent for a type
/// with none), so pods and NodePools can select reserved capacity by id,
/// type and interruptibility. A node gets the labels only when launched
/// into one (`cloud::select::instance_labels` leaves them out).
pub fn add_requirements(it: &mut InstanceType, held: &[CapacityReservation]) {
    let of_type: Vec<&CapacityReservation> =
        held.iter().filter(|r| r.instance_type == it.name).collect();
    if of_type.is_empty() {
        return;
    }
    for (i, key) in [
        LABEL_RESERVATION_ID,
        LABEL_RESERVATION_TYPE,
        LABEL_RESERVATION_INTERRUPTIBLE,
    ]
    .into_iter()
    .enumerate()
    {
        let values: BTreeSet<String> = of_type.iter().map(|r| labels(r)[i].1.clone()).collect();
        it.requirements.add(key, Requirement::in_values(values));
    }
}

/// The value of [`LABEL_RESERVATION_TYPE`].
pub fn type_label(r: &CapacityReservation) -> &'static str {
    match r.reservation_type {
        Some(ReservationType::CapacityBlock) => "capacity-block",
        _ => "default",
    }
}

/// The labels of a node launched into `r`.
pub fn labels(r: &CapacityReservation) -> [(&'static str, String); 3] {
    [
        (LABEL_RESERVATION_ID, r.id.clone()),
        (LABEL_RESERVATION_TYPE, type_label(r).to_string()),
        (
            LABEL_RESERVATION_INTERRUPTIBLE,
            r.interruptible.unwrap_or(false).to_string(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::parse_rfc3339;

    fn t(s: &str) -> Timestamp {
        parse_rfc3339(s).expect("time")
    }

    fn facts(id: &str) -> Facts {
        Facts {
            id: id.to_string(),
            instance_type: "m5.large".to_string(),
            zone: "us-west-2a".to_string(),
            owner_id: "012345678901".to_string(),
            instance_match_criteria: "targeted".to_string(),
            reservation_type: None,
            end: None,
            interruptible: false,
            available: 2,
        }
    }

    fn term(yaml: &str) -> CapacityReservationSelectorTerm {
        serde_saphyr::from_str(yaml).expect("term")
    }

    #[test]
    fn an_id_is_a_query_of_its_own_and_tags_owner_and_criteria_are_filters() {
        let q = queries(&[
            term("{id: cr-1}"),
            term("{tags: {team: ml, any: '*'}, ownerID: '012345678901'}"),
            term("{instanceMatchCriteria: open}"),
            // An owner alone selects nothing, as in Karpenter.
            term("{ownerID: '012345678901'}"),
        ]);
        assert_eq!(q.len(), 3, "{q:?}");
        let by_id = q.iter().find(|q| q.id.is_some()).expect("id query");
        assert_eq!(by_id.filters(), [("state".into(), "active".into())]);
        let tagged = q.iter().find(|q| !q.tags.is_empty()).expect("tag query");
        assert_eq!(
            tagged.filters(),
            [
                ("state".to_string(), "active".to_string()),
                ("owner-id".to_string(), "012345678901".to_string()),
                ("tag-key".to_string(), "any".to_string()),
                ("tag:team".to_string(), "ml".to_string()),
            ]
        );
        let open = q
            .iter()
            .find(|q| q.instance_match_criteria.is_some())
            .expect("criteria query");
        assert_eq!(
            open.filters().last(),
            Some(&("instance-match-criteria".to_string(), "open".to_string()))
        );
        assert!(queries(&[]).is_empty());
    }

    #[test]
    fn a_capacity_block_is_expiring_forty_minutes_before_its_end() {
        let mut f = facts("cr-block");
        f.reservation_type = Some("capacity-block".to_string());
        f.end = Some(t("2026-09-01T12:00:00Z"));
        let active = to_status(&f, t("2026-09-01T11:19:59Z")).expect("status");
        assert_eq!(active.state, Some(ReservationState::Active));
        assert_eq!(
            active.reservation_type,
            Some(ReservationType::CapacityBlock)
        );
        let expiring = to_status(&f, t("2026-09-01T11:20:00Z")).expect("status");
        assert_eq!(expiring.state, Some(ReservationState::Expiring));
        // An ordinary reservation with an end date never expires early.
        let mut odcr = facts("cr-odcr");
        odcr.end = f.end;
        let s = to_status(&odcr, t("2026-09-01T11:59:00Z")).expect("status");
        assert_eq!(s.state, Some(ReservationState::Active));
        assert_eq!(s.reservation_type, Some(ReservationType::Default));
        assert_eq!(s.instance_match_criteria, InstanceMatchCriteria::Targeted);
        assert_eq!(s.interruptible, Some(false));
    }

    #[test]
    fn unknown_match_criteria_or_types_are_refused_not_guessed() {
        let mut f = facts("cr-1");
        f.instance_match_criteria = "someday".to_string();
        let err = to_status(&f, t("2026-09-01T00:00:00Z")).unwrap_err();
        assert!(err.contains("instance match criteria"), "{err}");
        let mut f = facts("cr-2");
        f.reservation_type = Some("future-kind".to_string());
        let err = to_status(&f, t("2026-09-01T00:00:00Z")).unwrap_err();
        assert!(err.contains("reservation type"), "{err}");
    }

    #[test]
    fn launches_count_down_and_failures_give_back_or_exhaust() {
        let mut a = Availability::default();
        a.sync(&[facts("cr-1")]);
        assert!(a.take("cr-1"));
        assert!(a.take("cr-1"));
        assert!(!a.take("cr-1"), "two were left");
        a.give_back("cr-1");
        assert_eq!(a.available("cr-1"), 1);
        a.exhaust("cr-1");
        assert_eq!(a.available("cr-1"), 0);
        a.give_back("cr-1");
        assert_eq!(a.available("cr-1"), 0, "full until EC2 says otherwise");
        assert!(!a.take("cr-unknown"));
        a.sync(&[facts("cr-1")]);
        assert_eq!(a.available("cr-1"), 2, "the next answer is the truth");
    }

    #[test]
    fn a_launch_targets_the_reservation_with_the_most_left() {
        let now = t("2026-09-01T00:00:00Z");
        let mut small = facts("cr-small");
        small.available = 1;
        let big = facts("cr-big");
        let mut other_zone = facts("cr-zone-b");
        other_zone.zone = "us-west-2b".to_string();
        other_zone.available = 9;
        let all = [small, big, other_zone];
        let status: Vec<CapacityReservation> =
            all.iter().map(|f| to_status(f, now).expect("ok")).collect();
        let mut a = Availability::default();
        a.sync(&all);
        let pick = |a: &Availability| {
            choose(&status, a, "m5.large", "us-west-2a", |_| true).map(|r| r.id.clone())
        };
        assert_eq!(pick(&a).as_deref(), Some("cr-big"));
        a.exhaust("cr-big");
        assert_eq!(pick(&a).as_deref(), Some("cr-small"));
        a.exhaust("cr-small");
        assert_eq!(pick(&a), None);
        // A requirement on the reservation id narrows the choice.
        a.sync(&all);
        let only_small = choose(&status, &a, "m5.large", "us-west-2a", |r| {
            r.id == "cr-small"
        });
        assert_eq!(only_small.map(|r| r.id.as_str()), Some("cr-small"));
        let labels = labels(only_small.expect("chosen"));
        assert_eq!(labels[0], (LABEL_RESERVATION_ID, "cr-small".to_string()));
        assert_eq!(labels[1], (LABEL_RESERVATION_TYPE, "default".to_string()));
        assert_eq!(
            labels[2],
            (LABEL_RESERVATION_INTERRUPTIBLE, "false".to_string())
        );
    }
}
