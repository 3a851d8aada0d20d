//! The NetworkRollouts one reader has seen ([`SeenRollouts`]), kept as the fleet needs
//! them.

use std::collections::{BTreeMap, BTreeSet};

use netpolicy_core::fleet::Rollout;

use super::{
    FleetError, NetworkFleetSpec, NetworkRolloutSpec, current_rollouts, current_rollouts_of,
};

/// The NetworkRollouts a reader has seen (an agent: those of its own group), from its
/// watch's events, for [`current_rollouts`].
///
/// The operator deletes a finished rollout only after the NetworkFleet that folds it
/// in is written, but a reader watching both hears them on different watches: taking
/// the delete first would send its nodes back to the group's old settled rendering
/// until the fleet's event comes (a rollback of the kernel, and a status written twice).
/// So a rollout deleted, or missing from a new list of the watch, counts until the fleet
/// the reader has seen folded it in (its `sequence` reached the rollout's); a rollout
/// deleted with no fleet seen yet waits for one.
///
/// # Examples
///
/// ```
/// use netpolicy_api::{NetworkFleetSpec, NetworkRolloutSpec, SeenRollouts};
///
/// let rollout = NetworkRolloutSpec { sequence: 7, groups: vec![], rolled_back: false };
/// let mut fleet = NetworkFleetSpec { sequence: 6, ..Default::default() };
/// let mut seen = SeenRollouts::default();
/// seen.listed([("rollout-7".to_owned(), rollout)].into(), Some(&fleet));
/// // The delete comes before the fleet that folds it: it still counts.
/// assert!(!seen.deleted("rollout-7", Some(&fleet)));
/// assert_eq!(seen.len(), 1);
/// fleet.sequence = 7;
/// assert!(seen.fleet_seen(Some(&fleet)), "folded in: forgotten");
/// assert_eq!(seen.len(), 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeenRollouts {
    /// By name.
    rollouts: BTreeMap<String, NetworkRolloutSpec>,
    /// Of those, the ones deleted that the fleet seen has not folded in yet.
    unfolded: BTreeSet<String>,
}

impl SeenRollouts {
    /// A rollout created or changed; whether what it says changed.
    pub fn applied(&mut self, name: &str, spec: &NetworkRolloutSpec) -> bool {
        self.unfolded.remove(name);
        if self.rollouts.get(name) == Some(spec) {
            return false;
        }
        self.rollouts.insert(name.to_owned(), spec.clone());
        true
    }

    /// A rollout deleted, with the fleet seen last; whether it no longer counts (it was
    /// known and `fleet` folded it in).
    pub fn deleted(&mut self, name: &str, fleet: Option<&NetworkFleetSpec>) -> bool {
        if !self.rollouts.contains_key(name) {
            return false;
        }
        self.unfolded.insert(name.to_owned());
        self.fleet_seen(fleet)
    }

    /// The whole list, after the watch (re)started, with the fleet seen last: what it
    /// had that the list lacks is deleted ([`Self::deleted`]). Whether what counts
    /// changed.
    pub fn listed(
        &mut self,
        list: BTreeMap<String, NetworkRolloutSpec>,
        fleet: Option<&NetworkFleetSpec>,
    ) -> bool {
        let before = self.rollouts.clone();
        for name in self.rollouts.keys() {
            if !list.contains_key(name) {
                self.unfolded.insert(name.clone());
            }
        }
        self.unfolded.retain(|n| !list.contains_key(n));
        let kept: Vec<(String, NetworkRolloutSpec)> = self
            .rollouts
            .iter()
            .filter(|(n, _)| self.unfolded.contains(*n))
            .map(|(n, r)| (n.clone(), r.clone()))
            .collect();
        self.rollouts = list;
        self.rollouts.extend(kept);
        self.fleet_seen(fleet);
        self.rollouts != before
    }

    /// The fleet changed (`None`: deleted): the deleted rollouts it folded in are
    /// forgotten. Whether any was.
    pub fn fleet_seen(&mut self, fleet: Option<&NetworkFleetSpec>) -> bool {
        let Some(folded) = fleet.map(|f| f.sequence) else {
            return false; // No fleet: it cannot have folded them.
        };
        let rollouts = &mut self.rollouts;
        let before = rollouts.len();
        self.unfolded.retain(|name| {
            let keep = rollouts.get(name).is_some_and(|r| r.sequence > folded);
            if !keep {
                rollouts.remove(name);
            }
            keep
        });
        rollouts.len() != before
    }

    /// Forgets everything (the reader follows another group now).
    pub fn clear(&mut self) {
        self.rollouts.clear();
        self.unfolded.clear();
    }

    /// How many rollouts count.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rollouts.len()
    }

    /// Whether none does.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rollouts.is_empty()
    }

    /// What every group the reader follows runs ([`current_rollouts`] over these).
    ///
    /// # Errors
    /// [`FleetError`] naming the rollout whose `through` does not parse.
    pub fn current(&self, fleet: Option<&NetworkFleetSpec>) -> Result<Vec<Rollout>, FleetError> {
        current_rollouts(fleet, self.rollouts.iter().map(|(n, r)| (n.as_str(), r)))
    }

    /// What `group` runs ([`current_rollouts_of`] over these): what an agent of that
    /// group chooses from, each time it looks.
    ///
    /// # Errors
    /// [`FleetError`] naming the rollout whose entry for `group` does not parse.
    pub fn current_of(
        &self,
        group: &str,
        fleet: Option<&NetworkFleetSpec>,
    ) -> Result<Vec<Rollout>, FleetError> {
        current_rollouts_of(
            group,
            fleet,
            self.rollouts.iter().map(|(n, r)| (n.as_str(), r)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout(sequence: u64) -> NetworkRolloutSpec {
        NetworkRolloutSpec {
            sequence,
            groups: Vec::new(),
            rolled_back: false,
        }
    }

    fn fleet(sequence: u64) -> NetworkFleetSpec {
        NetworkFleetSpec {
            policies: Vec::new(),
            groups: Vec::new(),
            sequence,
            report_spread_ms: None,
        }
    }

    #[test]
    fn a_deleted_rollout_counts_until_the_fleet_folds_it_in() {
        let mut s = SeenRollouts::default();
        assert!(s.applied("rollout-2", &rollout(2)));
        assert!(!s.applied("rollout-2", &rollout(2)), "same spec");
        // The fleet first, then the delete: gone at once.
        assert!(s.deleted("rollout-2", Some(&fleet(2))));
        assert!(s.is_empty());
        assert!(!s.deleted("rollout-2", Some(&fleet(2))), "not known");
        // The delete first: kept, then forgotten with the fleet that folds it.
        s.applied("rollout-3", &rollout(3));
        assert!(!s.deleted("rollout-3", Some(&fleet(2))));
        assert!(!s.deleted("rollout-3", None), "no fleet seen: kept");
        assert_eq!(s.len(), 1);
        assert!(!s.fleet_seen(None));
        assert!(!s.fleet_seen(Some(&fleet(2))));
        assert!(s.fleet_seen(Some(&fleet(3))));
        assert!(s.is_empty());
        // A list without one it had: deleted while the watch was away.
        s.applied("rollout-4", &rollout(4));
        let list = BTreeMap::from([("rollout-5".to_owned(), rollout(5))]);
        assert!(s.listed(list.clone(), Some(&fleet(3))));
        assert_eq!(s.len(), 2, "rollout-4 kept until folded");
        assert!(
            !s.listed(list.clone(), Some(&fleet(3))),
            "the same list again"
        );
        assert!(s.listed(list, Some(&fleet(4))));
        assert_eq!(s.len(), 1);
        // Seen again after its delete (a list raced it): it counts as it is.
        s.applied("rollout-6", &rollout(6));
        assert!(!s.deleted("rollout-6", Some(&fleet(4))));
        assert!(!s.applied("rollout-6", &rollout(6)));
        assert!(!s.fleet_seen(Some(&fleet(6))), "no longer deleted: kept");
        assert_eq!(s.len(), 2);
        s.clear();
        assert!(s.is_empty());
    }
}
