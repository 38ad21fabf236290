//! Free addresses per subnet, with the launches in flight counted against
//! them (Karpenter's subnet provider: `ZonalSubnetsForLaunch`,
//! `UpdateInflightIPs`, `UpdateICEdSubnet`). Pure and synchronous: the
//! provider keeps one [`SubnetIps`] behind a lock.
//!
//! - **Observed** counts come from DescribeSubnets (every node class
//!   resolution). Reading a subnet again drops what was counted in flight
//!   against it: EC2's count now includes those launches.
//! - **Choosing** a subnet per zone for a launch takes, in each zone, the
//!   subnet with the most addresses left (the in-flight count where there
//!   is one, else the observed count; a subnet never observed comes last,
//!   ties keep the node class's order), then counts the launch against each
//!   chosen subnet: the fewest pods of the launch's instance types in that
//!   zone, as each pod takes an address from the VPC CNI.
//! - **After CreateFleet**, the subnets the launch did not use get their
//!   addresses back, unless the subnet was read again meanwhile (then its
//!   count is EC2's). A launch that failed used none.
//! - A subnet CreateFleet found **full** has no address left until it is
//!   read again.

use std::collections::BTreeMap;

/// One subnet's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Observed {
    /// Free addresses, as DescribeSubnets last said (or 0 once full).
    available: i64,
    /// Bumped each time the subnet is observed, so a release can tell
    /// whether the count it would correct was read again since.
    generation: u64,
}

/// The addresses a launch counted against one subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub subnet: String,
    pub zone: String,
    pub addresses: i64,
    generation: u64,
}

/// Free addresses per subnet and the launches in flight against them (see
/// the module documentation).
#[derive(Debug, Default)]
pub struct SubnetIps {
    observed: BTreeMap<String, Observed>,
    /// Subnet -> the addresses predicted left once the launches in flight
    /// are up.
    inflight: BTreeMap<String, i64>,
    generation: u64,
}

impl SubnetIps {
    /// Records DescribeSubnets' count for a subnet, dropping the launches
    /// counted in flight against it.
    pub fn observe(&mut self, subnet: &str, available: i64) {
        self.generation += 1;
        self.observed.insert(
            subnet.to_string(),
            Observed {
                available,
                generation: self.generation,
            },
        );
        self.inflight.remove(subnet);
    }

    /// A subnet CreateFleet found out of addresses: none left until it is
    /// read again.
    pub fn full(&mut self, subnet: &str) {
        self.observe(subnet, 0);
    }

    /// The addresses a subnet has left, launches in flight counted; `None`
    /// if it was never observed.
    pub fn left(&self, subnet: &str) -> Option<i64> {
        self.inflight
            .get(subnet)
            .copied()
            .or_else(|| self.observed.get(subnet).map(|o| o.available))
    }

    /// Chooses a subnet per zone from `subnets` (`(zone, subnet)`, in the
    /// node class's order) and counts `addresses(zone)` against each
    /// chosen subnet. Returns zone -> subnet, and the reservations to pass
    /// to [`Self::release`] once CreateFleet answered.
    pub fn choose<'a>(
        &mut self,
        subnets: impl IntoIterator<Item = (&'a str, &'a str)>,
        addresses: impl Fn(&str) -> i64,
    ) -> (BTreeMap<String, String>, Vec<Reservation>) {
        let mut chosen: BTreeMap<String, String> = BTreeMap::new();
        for (zone, subnet) in subnets {
            match chosen.get(zone) {
                Some(current) if self.left(current) >= self.left(subnet) => {}
                _ => {
                    chosen.insert(zone.to_string(), subnet.to_string());
                }
            }
        }
        let mut reservations = Vec::new();
        for (zone, subnet) in &chosen {
            // A subnet never observed has no count to deduct from.
            let Some(left) = self.left(subnet) else {
                continue;
            };
            let n = addresses(zone).max(0);
            if n == 0 {
                continue;
            }
            self.inflight.insert(subnet.clone(), left - n);
            reservations.push(Reservation {
                subnet: subnet.clone(),
                zone: zone.clone(),
                addresses: n,
                generation: self.observed.get(subnet).map_or(0, |o| o.generation),
            });
        }
        (chosen, reservations)
    }

    /// After CreateFleet: gives back the addresses of the reservations
    /// whose subnet the launch did not use (`used`: the subnet of its
    /// instance, `None` when it launched nothing), unless the subnet was
    /// observed again since the reservation.
    pub fn release(&mut self, reservations: &[Reservation], used: Option<&str>) {
        for r in reservations {
            if Some(r.subnet.as_str()) == used {
                continue;
            }
            let unchanged = self
                .observed
                .get(&r.subnet)
                .is_some_and(|o| o.generation == r.generation);
            if !unchanged {
                continue;
            }
            if let Some(left) = self.inflight.get_mut(&r.subnet) {
                *left += r.addresses;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two subnets in one zone: `a` has room for one more node of 29 pods
    /// (30 addresses), `b` a little less but still room for one (29).
    fn two_subnets() -> SubnetIps {
        let mut s = SubnetIps::default();
        s.observe("subnet-a", 30);
        s.observe("subnet-b", 29);
        s
    }

    const ZONE: [(&str, &str); 2] = [("us-east-1a", "subnet-a"), ("us-east-1a", "subnet-b")];

    #[test]
    fn concurrent_launches_do_not_both_take_the_subnet_with_room_for_one() {
        let mut s = two_subnets();
        let (first, r1) = s.choose(ZONE, |_| 29);
        let (second, r2) = s.choose(ZONE, |_| 29);
        assert_eq!(first["us-east-1a"], "subnet-a");
        // subnet-a has 1 address left once the first launch is up.
        assert_eq!(s.left("subnet-a"), Some(1));
        assert_eq!(second["us-east-1a"], "subnet-b");
        assert_eq!(s.left("subnet-b"), Some(0));
        assert_eq!((r1.len(), r2.len()), (1, 1));
        // Without the accounting both would have gone to subnet-a.
        let mut fresh = two_subnets();
        let (again, _) = fresh.choose(ZONE, |_| 0);
        let (again2, _) = fresh.choose(ZONE, |_| 0);
        assert_eq!(again, again2);
    }

    #[test]
    fn each_zone_gets_its_own_subnet_and_count() {
        let mut s = SubnetIps::default();
        s.observe("subnet-a", 100);
        s.observe("subnet-b", 50);
        s.observe("subnet-c", 80);
        let subnets = [
            ("us-east-1a", "subnet-a"),
            ("us-east-1b", "subnet-b"),
            ("us-east-1b", "subnet-c"),
        ];
        let (chosen, reservations) = s.choose(subnets, |z| if z == "us-east-1a" { 10 } else { 20 });
        assert_eq!(chosen["us-east-1a"], "subnet-a");
        assert_eq!(chosen["us-east-1b"], "subnet-c");
        assert_eq!(s.left("subnet-a"), Some(90));
        assert_eq!(s.left("subnet-c"), Some(60));
        assert_eq!(s.left("subnet-b"), Some(50));
        assert_eq!(reservations.len(), 2);
    }

    #[test]
    fn unused_subnets_get_their_addresses_back_after_the_fleet() {
        let mut s = SubnetIps::default();
        s.observe("subnet-a", 100);
        s.observe("subnet-b", 100);
        let subnets = [("us-east-1a", "subnet-a"), ("us-east-1b", "subnet-b")];
        let (_, reservations) = s.choose(subnets, |_| 29);
        assert_eq!(
            (s.left("subnet-a"), s.left("subnet-b")),
            (Some(71), Some(71))
        );
        // The instance went to subnet-b: subnet-a's count comes back.
        s.release(&reservations, Some("subnet-b"));
        assert_eq!(
            (s.left("subnet-a"), s.left("subnet-b")),
            (Some(100), Some(71))
        );
        // A launch that failed gives back everything.
        let (_, failed) = s.choose(subnets, |_| 29);
        s.release(&failed, None);
        assert_eq!(
            (s.left("subnet-a"), s.left("subnet-b")),
            (Some(100), Some(71))
        );
    }

    #[test]
    fn reading_the_subnets_again_replaces_the_in_flight_count() {
        let mut s = two_subnets();
        let (_, reservations) = s.choose(ZONE, |_| 29);
        assert_eq!(s.left("subnet-a"), Some(1));
        // DescribeSubnets again: EC2's count already has the instance.
        s.observe("subnet-a", 2);
        assert_eq!(s.left("subnet-a"), Some(2));
        // A release of a reservation made before that read does not add
        // the addresses a second time.
        s.release(&reservations, None);
        assert_eq!(s.left("subnet-a"), Some(2));
    }

    #[test]
    fn a_full_subnet_is_chosen_last_until_read_again() {
        let mut s = two_subnets();
        s.full("subnet-a");
        let (chosen, _) = s.choose(ZONE, |_| 1);
        assert_eq!(chosen["us-east-1a"], "subnet-b");
        s.observe("subnet-a", 500);
        let (chosen, _) = s.choose(ZONE, |_| 1);
        assert_eq!(chosen["us-east-1a"], "subnet-a");
    }

    #[test]
    fn subnets_never_observed_keep_the_node_class_order_and_count_nothing() {
        let mut s = SubnetIps::default();
        let (chosen, reservations) = s.choose(ZONE, |_| 29);
        assert_eq!(chosen["us-east-1a"], "subnet-a");
        assert!(reservations.is_empty());
        assert_eq!(s.left("subnet-a"), None);
        // An observed subnet wins over one never observed.
        s.observe("subnet-b", 5);
        let (chosen, _) = s.choose(ZONE, |_| 29);
        assert_eq!(chosen["us-east-1a"], "subnet-b");
    }
}
