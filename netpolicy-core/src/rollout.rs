//! Safe rollout: how many nodes may apply a changed config at once, in which order, and
//! which waiting nodes may go now.
//!
//! A policy's `rollout.maxUnavailable` (an integer, or a percentage of the nodes it
//! selects; default 25%) bounds the nodes that are *unavailable* for it at any moment:
//! nodes that were given a new config and have not yet reported it applied with its
//! probes passed, and nodes that report `Degraded`. A node's change goes out only when
//! every policy that selects the node has room ([`admit`]); nodes go in a stable order
//! (by name), so [`waves`] shows who goes when. A policy with a Degraded node is
//! *halted*: no further node of it is admitted until its spec changes (the Degraded
//! node itself may take the new config).
//!
//! Pure: values in, values out.
//!
//! # Examples
//! ```
//! use netpolicy_core::rollout::{MaxUnavailable, waves};
//!
//! let m = MaxUnavailable::parse("25%").unwrap();
//! assert_eq!(m.resolve(10), 2); // rounded down, at least one
//! let nodes = ["a", "b", "c", "d", "e"];
//! assert_eq!(waves(&nodes, m.resolve(nodes.len())), vec![vec!["a"], vec!["b"], vec!["c"], vec!["d"], vec!["e"]]);
//! ```

use std::collections::BTreeMap;

use crate::error::{Error, FieldError, Result};

/// The default: a quarter of the nodes.
pub const DEFAULT_MAX_UNAVAILABLE: MaxUnavailable = MaxUnavailable::Percent(25);
/// Seconds a node has to pass its probes before it rolls back (default).
pub const DEFAULT_ROLLBACK_SECONDS: u32 = 30;

/// At most this many nodes (or this share of them) unavailable at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MaxUnavailable {
    /// A number of nodes (at least 1).
    Count(u32),
    /// A percentage of the selected nodes (1..=100), rounded down, at least one node.
    Percent(u32),
}

impl MaxUnavailable {
    /// Parses `"3"` or `"25%"` (Kubernetes' int-or-string, as text).
    ///
    /// # Errors
    /// Anything else, or 0, or a percentage over 100; the message names the value.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::Invalid(vec![FieldError {
                path: "rollout.maxUnavailable".into(),
                message: format!("{s:?} {why}"),
            }])
        };
        let v = match s.strip_suffix('%') {
            Some(p) => {
                let p: u32 = p
                    .parse()
                    .map_err(|_| bad("is not an integer or a percentage (3, 25%)"))?;
                if !(1..=100).contains(&p) {
                    return Err(bad("is not a percentage in 1%..100%"));
                }
                Self::Percent(p)
            }
            None => {
                let n: u32 = s
                    .parse()
                    .map_err(|_| bad("is not an integer or a percentage (3, 25%)"))?;
                if n == 0 {
                    return Err(bad("would never let a node change: use at least 1"));
                }
                Self::Count(n)
            }
        };
        Ok(v)
    }

    /// The number of nodes for a policy that selects `total`: never more than
    /// `total`, never fewer than one (a rollout always progresses).
    pub fn resolve(self, total: usize) -> usize {
        let n = match self {
            Self::Count(n) => n as usize,
            Self::Percent(p) => total * p as usize / 100,
        };
        n.clamp(1, total.max(1))
    }
}

impl std::fmt::Display for MaxUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// The order a change reaches `nodes` when none is unavailable to begin with: waves of
/// at most `max` nodes, by name.
pub fn waves<S: AsRef<str> + Ord + Clone>(nodes: &[S], max: usize) -> Vec<Vec<S>> {
    let mut sorted = nodes.to_vec();
    sorted.sort();
    sorted.dedup();
    sorted.chunks(max.max(1)).map(<[S]>::to_vec).collect()
}

/// One policy's rollout budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// Most nodes unavailable at once ([`MaxUnavailable::resolve`]d).
    pub max: usize,
    /// Nodes unavailable now.
    pub unavailable: usize,
    /// A node of it reports Degraded for its current config: nothing new goes out.
    pub halted: bool,
}

/// A node with a change waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting<'a, P> {
    /// The node.
    pub node: &'a str,
    /// The policies that select it (their budgets decide).
    pub policies: Vec<P>,
    /// Already unavailable (in flight or Degraded): taking the change costs no budget,
    /// and a halt does not stop it.
    pub unavailable: bool,
}

/// Which waiting nodes may take their change now, in name order: a node goes when every
/// policy that selects it has room (`unavailable < max`) and is not halted, or when it is
/// already unavailable. Admitting a node uses one unit of each of its policies' budgets.
/// The budgets are updated in place.
pub fn admit<'a, P: Ord + Clone>(
    mut waiting: Vec<Waiting<'a, P>>,
    budgets: &mut BTreeMap<P, Budget>,
) -> Vec<&'a str> {
    waiting.sort_by(|a, b| a.node.cmp(b.node));
    let mut out = Vec::new();
    for w in waiting {
        if w.unavailable {
            out.push(w.node);
            continue;
        }
        let room = w.policies.iter().all(|p| {
            budgets
                .get(p)
                .is_none_or(|b| !b.halted && b.unavailable < b.max)
        });
        if !room {
            continue;
        }
        for p in &w.policies {
            if let Some(b) = budgets.get_mut(p) {
                b.unavailable += 1;
            }
        }
        out.push(w.node);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_down_to_at_least_one_and_counts_cap_at_the_total() {
        let p = MaxUnavailable::parse("25%").unwrap();
        assert_eq!(
            (p.resolve(0), p.resolve(3), p.resolve(4), p.resolve(10)),
            (1, 1, 1, 2)
        );
        assert_eq!(MaxUnavailable::parse("100%").unwrap().resolve(7), 7);
        assert_eq!(MaxUnavailable::parse("5").unwrap().resolve(3), 3);
        for bad in ["0", "0%", "101%", "x", "-1", "1.5", "%"] {
            let e = MaxUnavailable::parse(bad).unwrap_err().to_string();
            assert!(e.contains("rollout.maxUnavailable"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_halted_policy_admits_only_its_unavailable_nodes() {
        let mut b: BTreeMap<&str, Budget> = [(
            "p",
            Budget {
                max: 2,
                unavailable: 1,
                halted: true,
            },
        )]
        .into();
        let w = |node, unavailable| Waiting {
            node,
            policies: vec!["p"],
            unavailable,
        };
        assert_eq!(admit(vec![w("b", false), w("a", true)], &mut b), ["a"]);
        b.get_mut("p").unwrap().halted = false;
        assert_eq!(admit(vec![w("c", false), w("b", false)], &mut b), ["b"]);
        assert_eq!(b["p"].unavailable, 2);
    }
}
