//! Shared renderings and rollout waves (the node agent model of docs/architecture.md):
//! which rendering each node runs, decided the same way by the operator, over every
//! node, and by one node's agent, from its own labels and a few small shared objects.
//!
//! - **Groups.** Nodes selected by the same policies share one merged configuration. A
//!   group is named by its policies ([`group_name`]); its rendering is named by its
//!   content ([`rendering_name`]): one immutable object per distinct configuration,
//!   however many nodes run it.
//! - **The index.** The agent finds its group from its labels and every policy's
//!   selector ([`PolicySelector`]: a policy's identity and selector, none of its items):
//!   small, and the same for every node.
//! - **Waves.** A rollout ([`Rollout`], one per group it moves; every group one change
//!   moves shares its name) sends the new renderings out in waves. A node's place in a
//!   rollout is its [`order_key`] (a hash of the rollout's name and the node's name,
//!   then the name): the operator sorts a group's members by it and cuts waves within
//!   each policy's budget ([`plan_waves_within`]; [`plan_waves`] for one budget; kept in
//!   its [`Waves`]), and publishes only the last key of the group's last open wave
//!   ([`Rollout::through`]). A node
//!   runs the new rendering when its own key is not above it: no member list and no
//!   wave list, so the rollout object does not grow with the group. Opening a wave or
//!   rolling back is one small write of [`Rollout::through`] or
//!   [`Rollout::rolled_back`].
//!
//! [`choose`] is the agent's choice; [`assign`] is the operator's full computation over
//! every node; they agree for every node (a property test holds them to it). [`advance`]
//! opens waves on the members' reports within each policy's `maxUnavailable` and halts a
//! policy on a failure (a simulated property test holds it to both);
//! [`advance_in_step`] also keeps the groups of one change in step, so that one write
//! opens a wave of all of them.
//!
//! Pure: values in, values out.
//!
//! # Examples
//! ```
//! use netpolicy_core::{
//!     fleet::{PolicySelector, Rollout, Through, Waves, assign, choose, group_name, plan_waves},
//!     selector::{Labels, Selector},
//! };
//!
//! let index = vec![PolicySelector::new("ClusterConfig/default", Selector::everything())];
//! let nodes: Vec<(String, Labels)> =
//!     ["a", "b", "c"].iter().map(|n| (n.to_string(), Labels::new())).collect();
//! let group = group_name(["ClusterConfig/default"]);
//! let names: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
//! let waves = Waves {
//!     rollout: Rollout {
//!         name: "default-2".into(),
//!         group,
//!         rendering: "r-new".into(),
//!         previous: Some("r-old".into()),
//!         through: Through::Nothing,
//!         rolled_back: false,
//!     },
//!     bounds: plan_waves("default-2", &names, 2),
//!     open: 1,
//! };
//! let all = assign(&nodes, &index, std::slice::from_ref(&waves));
//! // Two waves (2 + 1 nodes); the first is open: two nodes run r-new, one r-old.
//! let new = all.values().filter(|c| c.rendering.as_deref() == Some("r-new")).count();
//! assert_eq!((waves.bounds.len(), new), (2, 2));
//! // Each node's agent finds the same from its labels, the index and the one key the
//! // published rollout carries.
//! let published = [waves.published()];
//! for (name, labels) in &nodes {
//!     assert_eq!(choose(name, labels, &index, &published), all[name]);
//! }
//! ```

use std::collections::BTreeMap;

use crate::{
    hash::fnv1a,
    selector::{LabelLookup, Labels, Selector},
};

/// A policy as the agent needs it to find its group: its identity and its selector,
/// none of its items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySelector {
    /// The policy's identity (`ClusterConfig/default`, `NodeConfig/edge`).
    pub policy: String,
    /// The nodes it selects.
    pub selector: Selector,
}

impl PolicySelector {
    /// A policy's identity and selector.
    pub fn new(policy: impl Into<String>, selector: Selector) -> Self {
        Self {
            policy: policy.into(),
            selector,
        }
    }
}

/// The name of the group of nodes selected by exactly `policies` (in any order):
/// `g-` and 16 hex digits of a hash of the sorted identities. The empty set (a node no
/// policy selects) is a group too.
pub fn group_name<'a>(policies: impl IntoIterator<Item = &'a str>) -> String {
    let mut p: Vec<&str> = policies.into_iter().collect();
    p.sort_unstable();
    p.dedup();
    format!("g-{:016x}", fnv1a(&p))
}

/// The content address of a rendering: `r-` and 16 hex digits of a hash of its
/// canonical text (the same configuration gives the same name on every platform).
pub fn rendering_name(canonical: &str) -> String {
    format!("r-{:016x}", fnv1a(&[canonical]))
}

/// The content address of a layer (items many renderings share, stored once): `l-` and
/// 16 hex digits of a hash of its canonical text.
pub fn layer_name(canonical: &str) -> String {
    let mut h = crate::hash::Fnv1a::default();
    h.update(canonical.as_bytes());
    layer_name_of(h)
}

/// [`layer_name`] of the text written into `hash` (a serializer's output hashed as it
/// is written: the same name as of the whole text).
#[must_use]
pub fn layer_name_of(hash: crate::hash::Fnv1a) -> String {
    format!("l-{:016x}", hash.finish())
}

/// How long node `node`'s agent waits before it reports a newly applied rendering: a
/// fixed share of `spread` taken from its name (`fnv1a`), so the agents of one wave,
/// which apply the same rendering at the same moment, send their status patches spread
/// over `spread` instead of in one burst (the agent's `--report-spread-ms`; a custom
/// agent or a simulated one waits the same). The kernel is already changed by then;
/// only the report waits. A failure is never delayed: it halts the rollout. Zero
/// `spread`: no wait.
pub fn report_delay(node: &str, spread: std::time::Duration) -> std::time::Duration {
    let millis = u64::try_from(spread.as_millis()).unwrap_or(u64::MAX);
    if millis == 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::from_millis(fnv1a(&[node]) % millis)
}

/// The policies (of `index`) that select a node with `labels`, by identity, sorted.
pub fn selecting<'a, L: LabelLookup + ?Sized>(
    labels: &L,
    index: &'a [PolicySelector],
) -> Vec<&'a str> {
    let mut p: Vec<&str> = index
        .iter()
        .filter(|p| p.selector.matches(labels))
        .map(|p| p.policy.as_str())
        .collect();
    p.sort_unstable();
    p.dedup();
    p
}

/// A node's place in a rollout: a hash of the rollout's and the node's names, then the
/// node's name (so that two nodes never tie). Hashing with the rollout's name spreads
/// each rollout's first wave over other nodes than the last one's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OrderKey {
    /// The hash.
    pub hash: u64,
    /// The node's name.
    pub node: String,
}

/// The least report spread ([`report_spread_ms`]), and what an agent uses when
/// neither its own setting nor the fleet gives one.
pub const MIN_REPORT_SPREAD_MS: u32 = 500;

/// How long, in milliseconds, the agents of a fleet of `nodes` nodes spread their
/// reports of a newly applied rendering over (each waits its own share after applying):
/// at least [`MIN_REPORT_SPREAD_MS`] (500), and half a millisecond a node above 1,000
/// nodes, in steps of 500 ms
/// (a step per 1,000 nodes, so the fleet object changes once per thousand nodes joined
/// or gone, not with every node). A wave of a quarter of 10,000 nodes then sends its
/// 2,500 status patches over 5 s, after its applies rather than among the reads of the
/// agents still applying.
///
/// ```
/// use netpolicy_core::fleet::report_spread_ms;
/// assert_eq!(report_spread_ms(3), 500);
/// assert_eq!(report_spread_ms(1_000), 500);
/// assert_eq!(report_spread_ms(1_001), 1_000);
/// assert_eq!(report_spread_ms(10_000), 5_000);
/// ```
pub fn report_spread_ms(nodes: usize) -> u32 {
    let steps = u32::try_from(nodes.div_ceil(1_000)).unwrap_or(u32::MAX);
    steps.max(1).saturating_mul(MIN_REPORT_SPREAD_MS)
}

/// `node`'s [`OrderKey`] in the rollout named `rollout`.
pub fn order_key(rollout: &str, node: &str) -> OrderKey {
    OrderKey {
        hash: fnv1a(&[rollout, node]),
        node: node.to_owned(),
    }
}

/// The waves of a rollout over `members`: sorted by [`order_key`], cut into waves of at
/// most `max` nodes (at least one); each wave given by its last member's key.
pub fn plan_waves<S: AsRef<str>>(rollout: &str, members: &[S], max: usize) -> Vec<OrderKey> {
    let mut keys: Vec<OrderKey> = members
        .iter()
        .map(|m| order_key(rollout, m.as_ref()))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.chunks(max.max(1))
        .filter_map(|wave| wave.last().cloned())
        .collect()
}

/// The wave of a node whose key is `key`, given each wave's last key: the first wave
/// whose last key is not below it. A node after the last bound (one that joined the
/// group after the waves were cut) is in the last wave; with no waves, wave 0.
pub fn wave_of(key: &OrderKey, bounds: &[OrderKey]) -> usize {
    bounds
        .partition_point(|b| b < key)
        .min(bounds.len().saturating_sub(1))
}

/// How far a rollout has gone, as the agents read it: one key, whatever the group's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Through {
    /// No wave is open: every member runs the previous rendering.
    Nothing,
    /// Members whose [`OrderKey`] is not above this key run the new rendering: the last
    /// key of the last open wave.
    Key(OrderKey),
    /// Every wave is open: every member runs the new rendering, members that joined
    /// the group after its waves were cut included.
    Everything,
}

/// One group's rollout as the agents read it: the rendering it moves to, the one it
/// leaves, and how far it has gone. Its size does not depend on the group's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// Its name (the order of its waves follows from it: [`order_key`]).
    pub name: String,
    /// The group it rolls out to ([`group_name`]).
    pub group: String,
    /// The rendering it rolls out ([`rendering_name`]).
    pub rendering: String,
    /// The rendering the group ran before; `None`: none (a new group runs the new one
    /// everywhere: there is nothing to keep).
    pub previous: Option<String>,
    /// How far it has gone.
    pub through: Through,
    /// Rolled back: every member runs [`Self::previous`].
    pub rolled_back: bool,
}

impl Rollout {
    /// The rendering the member whose key is `key` runs.
    pub fn rendering_for(&self, key: &OrderKey) -> Option<&str> {
        let Some(previous) = self.previous.as_deref() else {
            return (!self.rolled_back).then_some(self.rendering.as_str());
        };
        let new = !self.rolled_back
            && match &self.through {
                Through::Nothing => false,
                Through::Key(t) => key <= t,
                Through::Everything => true,
            };
        Some(if new {
            self.rendering.as_str()
        } else {
            previous
        })
    }
}

/// A rollout as the operator keeps it: the published [`Rollout`] and the waves it cut
/// over the group's members ([`plan_waves`]), of which the first `open` are open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waves {
    /// The rollout (its [`Rollout::through`] is ignored: [`Self::published`] sets it).
    pub rollout: Rollout,
    /// Each wave's last key.
    pub bounds: Vec<OrderKey>,
    /// Waves open.
    pub open: usize,
}

impl Waves {
    /// The rollout the agents read: `through` the last key of the last open wave.
    pub fn published(&self) -> Rollout {
        let through = match self.open {
            0 => Through::Nothing,
            n if n >= self.bounds.len() => Through::Everything,
            n => Through::Key(self.bounds[n - 1].clone()),
        };
        Rollout {
            through,
            ..self.rollout.clone()
        }
    }

    /// Whether every wave is open (the rollout is done unless it rolls back).
    pub fn complete(&self) -> bool {
        !self.rollout.rolled_back && self.open >= self.bounds.len()
    }
}

/// What a node runs: its group and the rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Its group ([`group_name`]).
    pub group: String,
    /// The rendering to apply; `None`: the group has no rollout (the agent keeps what
    /// it runs).
    pub rendering: Option<String>,
}

/// The agent's choice for node `name` with `labels`, from the policy index and the
/// published rollouts it reads (it may read only its group's). The first rollout that
/// names the group decides: list the newest first (a group's settled rendering is a
/// rollout with no `previous`, listed after every rollout under way).
pub fn choose(
    name: &str,
    labels: &Labels,
    index: &[PolicySelector],
    rollouts: &[Rollout],
) -> Choice {
    let labels = crate::merge::with_node_name(name, labels);
    let group = group_name(selecting(&labels, index));
    let rendering = rollouts.iter().find(|r| r.group == group).and_then(|r| {
        r.rendering_for(&order_key(&r.name, name))
            .map(str::to_owned)
    });
    Choice { group, rendering }
}

/// The operator's full computation: every node's [`Choice`], from the whole membership
/// of each group (each policy's selected nodes, then each group's members sorted and
/// placed in the waves the operator cut: a wave is open or not).
pub fn assign(
    nodes: &[(String, Labels)],
    index: &[PolicySelector],
    rollouts: &[Waves],
) -> BTreeMap<String, Choice> {
    // Each policy's selected nodes, then each node's policy set.
    let mut sets: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in index {
        for (name, labels) in nodes {
            if p.selector
                .matches(&crate::merge::with_node_name(name, labels))
            {
                sets.entry(name.as_str())
                    .or_default()
                    .push(p.policy.as_str());
            }
        }
    }
    let mut members: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (name, _) in nodes {
        let set = sets.get(name.as_str()).cloned().unwrap_or_default();
        members
            .entry(group_name(set))
            .or_default()
            .push(name.as_str());
    }
    let mut out = BTreeMap::new();
    for (group, names) in members {
        let Some(w) = rollouts.iter().find(|w| w.rollout.group == group) else {
            for n in names {
                let c = Choice {
                    group: group.clone(),
                    rendering: None,
                };
                out.insert(n.to_owned(), c);
            }
            continue;
        };
        let r = &w.rollout;
        // The members in rollout order; a wave takes members up to its bound; members
        // past the last bound join the last wave.
        let mut ordered: Vec<OrderKey> = names.iter().map(|n| order_key(&r.name, n)).collect();
        ordered.sort_unstable();
        let mut wave = 0;
        for key in ordered {
            while wave + 1 < w.bounds.len() && key > w.bounds[wave] {
                wave += 1;
            }
            let rendering = match &r.previous {
                None => (!r.rolled_back).then(|| r.rendering.clone()),
                Some(p) if r.rolled_back || wave >= w.open => Some(p.clone()),
                Some(_) => Some(r.rendering.clone()),
            };
            let c = Choice {
                group: group.clone(),
                rendering,
            };
            out.insert(key.node, c);
        }
    }
    out
}

/// What a member of a group reports about its rollout's new rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// Applied, its probes passed.
    Applied,
    /// Not applied yet (or its probes are still running).
    Pending,
    /// Its probes failed: the agent went back to its last good rendering (`Degraded`).
    Failed,
}

/// A member of a rollout as [`advance`] reads it: its place, its report on the new
/// rendering, and the policies that select it (their budgets gate its wave).
#[derive(Debug, Clone)]
pub struct Member<'a, P> {
    /// Its key in the rollout.
    pub key: OrderKey,
    /// Its report on the rendering the rollout gives it.
    pub report: Report,
    /// The policies of its group.
    pub policies: &'a [P],
}

/// A rollout as [`advance`] reads it: its waves, over members of one group or of every
/// group one change touches (one wave sequence, one published key).
#[derive(Debug, Clone)]
pub struct Progress<'a, P> {
    /// The rollout and its waves.
    pub waves: &'a Waves,
    /// Its members, with their reports.
    pub members: &'a [Member<'a, P>],
}

/// The waves of a rollout over `members` (each with the policies that select it),
/// within each policy's budget (`max`; a policy absent from it is not limited): the
/// members sorted by [`order_key`], each wave closed before a member that would take
/// one of its policies over its budget (a wave holds at least one member). Each wave
/// is given by its last member's key. With one policy of budget `m` this is
/// [`plan_waves`] with `m`.
pub fn plan_waves_within<S: AsRef<str>, P: Ord>(
    rollout: &str,
    members: &[(S, &[P])],
    max: &BTreeMap<P, usize>,
) -> Vec<OrderKey> {
    let mut keyed: Vec<(OrderKey, &[P])> = members
        .iter()
        .map(|(m, p)| (order_key(rollout, m.as_ref()), *p))
        .collect();
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    let mut bounds = Vec::new();
    let mut taken: BTreeMap<&P, usize> = BTreeMap::new();
    let mut last: Option<&OrderKey> = None;
    for (key, policies) in &keyed {
        let over = policies.iter().any(|p| {
            let cap = max.get(p).copied().unwrap_or(usize::MAX).max(1);
            taken.get(p).copied().unwrap_or_default() + 1 > cap
        });
        if over && let Some(l) = last {
            bounds.push(l.clone());
            taken.clear();
        }
        for p in *policies {
            *taken.entry(p).or_default() += 1;
        }
        last = Some(key);
    }
    if let Some(l) = last {
        bounds.push(l.clone());
    }
    bounds
}

/// The next step of every rollout: how many of its waves are open now (the same or
/// more). A rollout's next wave opens when, for every policy of the wave's members, no
/// member of that policy reports `Failed` in an open wave of any rollout (a failure
/// halts the policy's rollouts, as a Degraded node does) and that policy's members not
/// yet `Applied` in open waves, plus the wave's members of it, stay within the policy's
/// `max` (its `maxUnavailable`, resolved). A wave that alone exceeds a budget opens
/// only when none of that policy's members is unavailable: a rollout always
/// progresses. Rollouts are taken by name; a wave that opens counts against the budgets
/// of the rollouts after it.
pub fn advance<P: Ord + Clone>(
    rollouts: &[Progress<'_, P>],
    max: &BTreeMap<P, usize>,
) -> Vec<usize> {
    advance_within(rollouts, max, &vec![usize::MAX; rollouts.len()])
}

/// [`advance`] with the groups of one change kept in step: a group's wave `w + 1`
/// opens only once every group of the same change (`change[i]` names the change of
/// `rollouts[i]`) that still has a wave to finish has all its waves up to `w` applied;
/// first waves open as the budgets allow. The groups a change moves then open their
/// next waves together, on the report that finishes the slowest group's wave: one write
/// of the change's rollout object opens a wave of every group, however many groups it
/// moves (each opening its own as its members reported cost one write per group and
/// wave). A group held back takes nothing from the budgets, so it never keeps the group
/// it waits for from opening. Budgets, halts and rollbacks are as [`advance`] says.
/// A `change` shorter than `rollouts` leaves the groups it does not name unheld.
pub fn advance_in_step<P: Ord + Clone, C: Ord>(
    rollouts: &[Progress<'_, P>],
    change: &[C],
    max: &BTreeMap<P, usize>,
) -> Vec<usize> {
    let applied: Vec<usize> = rollouts.iter().map(applied_through).collect();
    // Per change: the fewest waves applied all through by a group with waves to finish.
    let mut floor: BTreeMap<&C, usize> = BTreeMap::new();
    for ((g, c), done) in rollouts.iter().zip(change).zip(&applied) {
        if !g.waves.rollout.rolled_back && *done < g.waves.bounds.len() {
            let f = floor.entry(c).or_insert(usize::MAX);
            *f = (*f).min(*done);
        }
    }
    let limit: Vec<usize> = (0..rollouts.len())
        .map(|i| {
            change
                .get(i)
                .and_then(|c| floor.get(c))
                .map_or(usize::MAX, |f| f.saturating_add(1))
        })
        .collect();
    advance_within(rollouts, max, &limit)
}

/// How many of a group's waves are open with every member in them `Applied`.
fn applied_through<P>(g: &Progress<'_, P>) -> usize {
    g.members
        .iter()
        .filter(|m| m.report != Report::Applied)
        .map(|m| wave_of(&m.key, &g.waves.bounds))
        .fold(g.waves.open, usize::min)
}

/// [`advance`], opening no more than `limit[i]` waves of `rollouts[i]`.
fn advance_within<P: Ord + Clone>(
    rollouts: &[Progress<'_, P>],
    max: &BTreeMap<P, usize>,
    limit: &[usize],
) -> Vec<usize> {
    let is_open = |g: &Progress<'_, P>, key: &OrderKey| {
        !g.waves.rollout.rolled_back && wave_of(key, &g.waves.bounds) < g.waves.open
    };
    let mut unavailable: BTreeMap<P, usize> = BTreeMap::new();
    let mut halted: BTreeMap<P, bool> = BTreeMap::new();
    for g in rollouts {
        for m in g.members.iter().filter(|m| is_open(g, &m.key)) {
            for p in m.policies {
                *unavailable.entry(p.clone()).or_default() +=
                    usize::from(m.report != Report::Applied);
                *halted.entry(p.clone()).or_default() |= m.report == Report::Failed;
            }
        }
    }
    let mut order: Vec<usize> = (0..rollouts.len()).collect();
    order.sort_by(|a, b| {
        rollouts[*a]
            .waves
            .rollout
            .name
            .cmp(&rollouts[*b].waves.rollout.name)
    });
    let mut out: Vec<usize> = rollouts.iter().map(|g| g.waves.open).collect();
    for i in order {
        let g = &rollouts[i];
        let w = g.waves.open;
        if g.waves.rollout.rolled_back
            || w >= g.waves.bounds.len()
            || w >= limit.get(i).copied().unwrap_or(usize::MAX)
        {
            continue;
        }
        // The wave's members per policy.
        let mut size: BTreeMap<&P, usize> = BTreeMap::new();
        for m in g
            .members
            .iter()
            .filter(|m| wave_of(&m.key, &g.waves.bounds) == w)
        {
            for p in m.policies {
                *size.entry(p).or_default() += 1;
            }
        }
        let fits = size.iter().all(|(p, n)| {
            let down = unavailable.get(*p).copied().unwrap_or_default();
            let cap = max.get(*p).copied().unwrap_or(usize::MAX).max(1);
            !halted.get(*p).copied().unwrap_or_default() && (down + n <= cap || down == 0)
        });
        if !fits {
            continue;
        }
        out[i] = w + 1;
        for (p, n) in size {
            *unavailable.entry(p.clone()).or_default() += n;
        }
    }
    out
}

#[cfg(test)]
mod tests;
