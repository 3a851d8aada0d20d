//! A set of `u128` offsets stored as maximal runs of consecutive members.
//!
//! Filling a pool from the bottom is one run; a pool at 99% after random releases is
//! one run per hole. The lowest non-member is found from the first run alone.

use std::collections::BTreeMap;

/// Sorted, disjoint, non-adjacent inclusive runs `start → end`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RunSet {
    runs: BTreeMap<u128, u128>,
    len: u128,
}

impl RunSet {
    /// Number of members.
    pub(crate) fn len(&self) -> u128 {
        self.len
    }

    /// Number of runs (for memory accounting and tests).
    pub(crate) fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// The run containing `x`, if any.
    fn run_of(&self, x: u128) -> Option<(u128, u128)> {
        let (&s, &e) = self.runs.range(..=x).next_back()?;
        (x <= e).then_some((s, e))
    }

    /// Whether `x` is a member.
    #[cfg(test)]
    pub(crate) fn contains(&self, x: u128) -> bool {
        self.run_of(x).is_some()
    }

    /// Adds `x`; returns false when it was already a member.
    pub(crate) fn insert(&mut self, x: u128) -> bool {
        let before = self.runs.range(..=x).next_back().map(|(&s, &e)| (s, e));
        if let Some((_, e)) = before
            && x <= e
        {
            return false;
        }
        let after = x
            .checked_add(1)
            .and_then(|n| self.runs.get(&n).map(|&e| (n, e)));
        let joins_before = before.filter(|&(_, e)| e.checked_add(1) == Some(x));
        match (joins_before, after) {
            (Some((s, _)), Some((n, e2))) => {
                self.runs.remove(&n);
                self.runs.insert(s, e2);
            }
            (Some((s, _)), None) => {
                self.runs.insert(s, x);
            }
            (None, Some((n, e2))) => {
                self.runs.remove(&n);
                self.runs.insert(x, e2);
            }
            (None, None) => {
                self.runs.insert(x, x);
            }
        }
        self.len += 1;
        true
    }

    /// Removes `x`; returns false when it was not a member.
    pub(crate) fn remove(&mut self, x: u128) -> bool {
        let Some((s, e)) = self.run_of(x) else {
            return false;
        };
        if s == x {
            self.runs.remove(&s);
        } else {
            self.runs.insert(s, x - 1);
        }
        if x < e {
            self.runs.insert(x + 1, e);
        }
        self.len -= 1;
        true
    }

    /// The lowest non-member below `limit`.
    pub(crate) fn first_free(&self, limit: u128) -> Option<u128> {
        let free = match self.runs.first_key_value() {
            Some((&0, &e)) => e.checked_add(1)?,
            _ => 0,
        };
        (free < limit).then_some(free)
    }

    /// Members in ascending order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u128> + '_ {
        self.runs.iter().flat_map(|(&s, &e)| s..=e)
    }

    /// Builds from sorted, distinct members in one pass.
    pub(crate) fn from_sorted(members: impl IntoIterator<Item = u128>) -> Self {
        let mut runs = BTreeMap::new();
        let mut len = 0u128;
        let mut cur: Option<(u128, u128)> = None;
        for x in members {
            len += 1;
            cur = match cur {
                Some((s, e)) if e.checked_add(1) == Some(x) => Some((s, x)),
                Some((s, e)) => {
                    runs.insert(s, e);
                    Some((x, x))
                }
                None => Some((x, x)),
            };
        }
        if let Some((s, e)) = cur {
            runs.insert(s, e);
        }
        Self { runs, len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_and_split() {
        let mut r = RunSet::default();
        for x in [0, 2, 1, 5, 4, 3] {
            assert!(r.insert(x));
        }
        assert!(!r.insert(3));
        assert_eq!(r.run_count(), 1);
        assert_eq!(r.first_free(100), Some(6));
        assert!(r.remove(2));
        assert_eq!(r.run_count(), 2);
        assert_eq!(r.first_free(100), Some(2));
        assert!(!r.remove(2));
        assert_eq!(r.len(), 5);
        assert_eq!(r.iter().collect::<Vec<_>>(), [0, 1, 3, 4, 5]);
        assert_eq!(r.first_free(6), Some(2));
        assert_eq!(RunSet::from_sorted([0, 1, 3, 4, 5]), r);
    }

    #[test]
    fn the_top_of_the_space_is_handled() {
        let mut r = RunSet::default();
        assert!(r.insert(u128::MAX));
        assert!(r.insert(u128::MAX - 1));
        assert_eq!(r.run_count(), 1);
        assert!(r.remove(u128::MAX));
        assert!(r.contains(u128::MAX - 1));
        assert_eq!(r.first_free(u128::MAX), Some(0));
    }
}
