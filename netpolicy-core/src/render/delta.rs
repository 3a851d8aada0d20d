//! What turns one rendering's items into another's: [`RenderedDelta`], per list runs of
//! the old items kept, each followed by new items. An edit of a few
//! items of a large layer (one route of a ClusterConfig's 500) is then a delta of those
//! items, which a reader that holds the old layer applies instead of reading the new
//! one whole (issue 68).
//!
//! The delta is exact: applied to the items it was computed from, it gives the new
//! items in their order, so the result has the new layer's content address
//! ([`crate::fleet::layer_name`]), which a reader checks before it trusts it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{RenderedSpec, SourcedSpec};
use crate::spec::{AddressSpec, RouteSpec, RuleSpec, VlanSpec};

/// How one list changes: the new list is its runs in order, each `keep` items of the
/// old list from `from`, then its `items` (new ones).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListDelta<T> {
    /// The runs.
    #[serde(default = "Vec::new", skip_serializing_if = "<[Run<T>]>::is_empty")]
    pub runs: Vec<Run<T>>,
}

impl<T> Default for ListDelta<T> {
    fn default() -> Self {
        Self { runs: Vec::new() }
    }
}

impl<T> ListDelta<T> {
    /// How many new items the delta carries.
    pub fn added(&self) -> usize {
        self.runs.iter().map(|r| r.items.len()).sum()
    }
}

/// Items of the old list, then new ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Run<T> {
    /// Where the kept items start in the old list.
    #[serde(default)]
    pub from: u32,
    /// How many old items are kept.
    #[serde(default)]
    pub keep: u32,
    /// The new items after them.
    #[serde(default = "Vec::new", skip_serializing_if = "<[T]>::is_empty")]
    pub items: Vec<T>,
}

/// How a rendering's items change, list by list ([`RenderedSpec::delta_to`]). Hard-
/// synced tables are not part of it: a layer has none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenderedDelta {
    /// VLANs.
    #[serde(default)]
    pub vlans: ListDelta<SourcedSpec<VlanSpec>>,
    /// Routes.
    #[serde(default)]
    pub routes: ListDelta<SourcedSpec<RouteSpec>>,
    /// Addresses.
    #[serde(default)]
    pub addresses: ListDelta<SourcedSpec<AddressSpec>>,
    /// Rules.
    #[serde(default)]
    pub rules: ListDelta<SourcedSpec<RuleSpec>>,
}

/// Why a delta does not apply to the items given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{list}: the delta keeps items {from}..{to} of a list of {len}")]
pub struct DeltaError {
    /// The list (`routes`).
    pub list: &'static str,
    /// The first item a run keeps.
    pub from: u64,
    /// The end of what it keeps.
    pub to: u64,
    /// How many items the list given has.
    pub len: usize,
}

/// Of the old items, how far from the last one kept the next one is looked for: an
/// item removed, added or moved nearby costs one new item, one moved farther its copy.
const WINDOW: usize = 64;

fn diff<T: PartialEq + Clone>(old: &[T], new: &[T]) -> ListDelta<T> {
    let mut runs: Vec<Run<T>> = Vec::new();
    let (mut i, mut next) = (0usize, 0usize);
    let u = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    while i < new.len() {
        let near = next.saturating_sub(WINDOW)..(next + WINDOW).min(old.len());
        let at = if old.get(next) == Some(&new[i]) {
            Some(next)
        } else {
            near.into_iter().find(|&k| old[k] == new[i])
        };
        match at {
            Some(k) => {
                let n = old[k..]
                    .iter()
                    .zip(&new[i..])
                    .take_while(|(a, b)| a == b)
                    .count();
                runs.push(Run {
                    from: u(k),
                    keep: u(n),
                    items: Vec::new(),
                });
                i += n;
                next = k + n;
            }
            None => {
                match runs.last_mut() {
                    Some(r) => r.items.push(new[i].clone()),
                    None => runs.push(Run {
                        from: 0,
                        keep: 0,
                        items: vec![new[i].clone()],
                    }),
                }
                i += 1;
            }
        }
    }
    ListDelta { runs }
}

fn patch<T: Clone>(list: &'static str, old: &[T], d: &ListDelta<T>) -> Result<Vec<T>, DeltaError> {
    let mut out = Vec::with_capacity(old.len());
    for r in &d.runs {
        let (from, keep) = (r.from as usize, r.keep as usize);
        let kept = old.get(from..from.saturating_add(keep)).ok_or(DeltaError {
            list,
            from: u64::from(r.from),
            to: u64::from(r.from) + u64::from(r.keep),
            len: old.len(),
        })?;
        out.extend_from_slice(kept);
        out.extend_from_slice(&r.items);
    }
    Ok(out)
}

impl RenderedSpec {
    /// The delta from these items to `new`'s (hard-synced tables left out).
    ///
    /// ```
    /// use netpolicy_core::render::{RenderedSpec, SourceRef, SourcedSpec};
    /// use netpolicy_core::spec::RouteSpec;
    ///
    /// let route = |to: String, via: &str| SourcedSpec {
    ///     item: RouteSpec { to, via: Some(via.into()), ..Default::default() },
    ///     sources: vec![SourceRef { kind: "ClusterConfig".into(), name: "default".into() }],
    /// };
    /// let routes = |edited: &str| (0..500)
    ///     .map(|i| route(format!("10.{}.{}.0/24", i / 250, i % 250), if i == 7 { edited } else { "192.0.2.1" }))
    ///     .collect();
    /// let old = RenderedSpec { routes: routes("192.0.2.1"), ..Default::default() };
    /// let new = RenderedSpec { routes: routes("192.0.2.2"), ..Default::default() };
    /// let delta = old.delta_to(&new);
    /// assert_eq!(delta.routes.added(), 1, "the edited route only");
    /// assert_eq!(old.with_delta(&delta)?, new);
    /// # Ok::<(), netpolicy_core::render::DeltaError>(())
    /// ```
    pub fn delta_to(&self, new: &Self) -> RenderedDelta {
        RenderedDelta {
            vlans: diff(&self.vlans, &new.vlans),
            routes: diff(&self.routes, &new.routes),
            addresses: diff(&self.addresses, &new.addresses),
            rules: diff(&self.rules, &new.rules),
        }
    }

    /// These items with `delta` applied (hard-synced tables kept as they are).
    ///
    /// # Errors
    /// [`DeltaError`] when a run keeps items a list does not have: the delta was
    /// computed from other items.
    pub fn with_delta(&self, delta: &RenderedDelta) -> Result<Self, DeltaError> {
        Ok(Self {
            vlans: patch("vlans", &self.vlans, &delta.vlans)?,
            routes: patch("routes", &self.routes, &delta.routes)?,
            addresses: patch("addresses", &self.addresses, &delta.addresses)?,
            rules: patch("rules", &self.rules, &delta.rules)?,
            table_hard_sync: self.table_hard_sync.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn list(v: &[u8]) -> Vec<u8> {
        v.to_vec()
    }

    #[test]
    fn a_list_that_is_too_short_is_refused_with_its_name() {
        let d = ListDelta {
            runs: vec![Run {
                from: 2,
                keep: 2,
                items: vec![9u8],
            }],
        };
        let e = patch("routes", &list(&[1, 2, 3]), &d).unwrap_err();
        assert_eq!(
            e.to_string(),
            "routes: the delta keeps items 2..4 of a list of 3"
        );
        assert_eq!(
            patch("routes", &list(&[1, 2, 3, 4]), &d),
            Ok(list(&[3, 4, 9]))
        );
    }

    #[test]
    fn an_item_removed_here_and_one_added_there_cost_one_item() {
        let old: Vec<u8> = (0..120).collect();
        let mut new = old.clone();
        new.remove(5);
        new.push(250);
        let d = diff(&old, &new);
        assert_eq!(d.added(), 1, "{d:?}");
        assert_eq!(patch("l", &old, &d), Ok(new));
        // Repeated items.
        let d = diff(&list(&[1, 1]), &list(&[1, 1, 1]));
        assert_eq!(patch("l", &list(&[1, 1]), &d), Ok(list(&[1, 1, 1])));
        let d = diff(&list(&[1, 1, 1]), &list(&[1]));
        assert_eq!(patch("l", &list(&[1, 1, 1]), &d), Ok(list(&[1])));
    }

    proptest! {
        /// Applied to the list it came from, a delta gives the new list exactly, and it
        /// carries no more items than the new list has.
        #[test]
        fn a_delta_gives_the_new_list(
            old in proptest::collection::vec(0u8..4, 0..40),
            new in proptest::collection::vec(0u8..4, 0..40),
        ) {
            let d = diff(&old, &new);
            prop_assert_eq!(patch("l", &old, &d), Ok(new.clone()));
            prop_assert!(d.added() <= new.len());
        }

        /// One item changed in place: the delta carries that item only.
        #[test]
        fn one_edit_is_one_item(
            old in proptest::collection::vec(0u8..200, 1..60),
            at in 0usize..60,
            to in 200u8..255,
        ) {
            let at = at % old.len();
            let mut new = old.clone();
            new[at] = to;
            let d = diff(&old, &new);
            prop_assert_eq!(d.added(), 1);
            prop_assert_eq!(patch("l", &old, &d), Ok(new));
        }
    }
}
