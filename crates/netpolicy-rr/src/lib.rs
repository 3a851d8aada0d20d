//! # netpolicy-rr
//!
//! Calico BGP route-reflector topology for netpolicy: how many reflectors per zone,
//! which nodes, and (coming) which `BGPPeer` objects and how to move between topologies
//! without dropping a node's last session. Pure: no I/O, no clock, no randomness.
//!
//! **Status:** sizing, eligibility and stable placement with cluster IDs ([`place`]) and
//! the `simple` topology with its BGPPeers and node label changes ([`simple_topology`])
//! are here; the `multi` topology, transition plans, the CRD and `netpolicy plan` output
//! come with the rest of the route-reflector issue.
//!
//! # Rules
//! - Sizing: per zone, `clamp(ceil(ready × ratio), min, max)`, never more than the
//!   eligible nodes (a zone short of `min` uses all of them and says so). With
//!   [`Per::Cluster`] the cluster-wide count is spread over zones as evenly as possible.
//! - Eligibility: Ready, schedulable, matching `eligibleNodes`, and every `NoSchedule` /
//!   `NoExecute` taint tolerated.
//! - Stability: a reflector stays while it is eligible and needed. New reflectors are
//!   preferred nodes first, then the oldest (long-lived nodes make stable reflectors),
//!   then by name. Scaling down removes the reflector with the fewest current clients
//!   (fewest peerings to move); ties go against non-preferred, then the youngest, then
//!   the last name.
//! - Cluster IDs: with [`Per::Zone`], zone `i` in zone-name order gets `clusterID` with
//!   its last octet plus `i`; with [`Per::Cluster`] every reflector shares `clusterID`.
//!
//! # Examples
//! ```
//! use netpolicy_rr::{Config, Current, NodeInfo, place};
//!
//! let nodes: Vec<NodeInfo> = (0..10)
//!     .map(|i| NodeInfo::ready(&format!("n{i}"), if i < 5 { "a" } else { "b" }, i))
//!     .collect();
//! let config = Config { min: 2, ..Config::default() };
//! let p = place(&nodes, &config, &Current::default())?;
//! assert_eq!(p.zones.len(), 2);
//! assert_eq!(p.zones[0].reflectors, ["n0", "n1"]); // oldest first
//! assert_eq!(p.zones[1].cluster_id.to_string(), "224.0.0.2");
//! # Ok::<(), netpolicy_rr::Error>(())
//! ```
//!
//! # Complexity
//!
//! | operation | cost (n nodes, z zones) |
//! |---|---|
//! | [`place`] | O(n log n + z log z) |

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use netpolicy_core::{
    FieldError,
    selector::{Labels, Selector},
};

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of `netpolicy-rr`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The configuration is invalid; every problem is listed with its field.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
}

/// A taint's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// `NoSchedule`.
    NoSchedule,
    /// `PreferNoSchedule` (does not affect eligibility).
    PreferNoSchedule,
    /// `NoExecute`.
    NoExecute,
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value (empty when none).
    pub value: String,
    /// Effect.
    pub effect: Effect,
}

/// A toleration, with Kubernetes' matching rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Toleration {
    /// Key; empty with `exists` tolerates every key.
    pub key: String,
    /// `Exists` (any value) instead of `Equal`.
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; `None` tolerates every effect.
    pub effect: Option<Effect>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.exists {
            self.key.is_empty() || self.key == taint.key
        } else {
            self.key == taint.key && self.value == taint.value
        }
    }
}

/// What the topology needs to know about a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Labels (the zone is read from `Config::zone_label`).
    pub labels: Labels,
    /// The Ready condition is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Creation time, seconds since the epoch (only its order matters).
    pub created: i64,
}

impl NodeInfo {
    /// A Ready, schedulable, untainted node in `zone` (label
    /// `topology.kubernetes.io/zone`), for examples and tests.
    pub fn ready(name: &str, zone: &str, created: i64) -> Self {
        Self {
            name: name.to_owned(),
            labels: Labels::from([(DEFAULT_ZONE_LABEL.to_owned(), zone.to_owned())]),
            ready: true,
            unschedulable: false,
            taints: Vec::new(),
            created,
        }
    }
}

/// Reflectors sized per zone or for the whole cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Per {
    /// Each zone sized on its own.
    #[default]
    Zone,
    /// One cluster-wide count, spread over zones.
    Cluster,
}

/// The default zone label.
pub const DEFAULT_ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The validated `RouteReflectorConfig` as far as placement needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Fewest reflectors per zone (or cluster).
    pub min: u32,
    /// Most reflectors per zone (or cluster).
    pub max: u32,
    /// Reflectors per Ready node.
    pub ratio: f64,
    /// Zone or cluster sizing.
    pub per: Per,
    /// Label holding the zone.
    pub zone_label: String,
    /// Nodes that may be reflectors.
    pub eligible: Selector,
    /// Nodes chosen first; `None` prefers none (an empty selector would prefer all).
    pub preferred: Option<Selector>,
    /// Taints reflectors may have.
    pub tolerations: Vec<Toleration>,
    /// Base cluster ID.
    pub cluster_id: Ipv4Addr,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            min: 3,
            max: 10,
            ratio: 0.005,
            per: Per::Zone,
            zone_label: DEFAULT_ZONE_LABEL.to_owned(),
            eligible: Selector::everything(),
            preferred: None,
            tolerations: Vec::new(),
            cluster_id: Ipv4Addr::new(224, 0, 0, 1),
        }
    }
}

impl Config {
    /// Checks the numbers; field paths are those of the `RouteReflectorConfig` spec.
    ///
    /// # Errors
    /// [`Error::Invalid`] listing every problem.
    pub fn check(&self) -> Result<()> {
        let mut p = Vec::new();
        if self.min > self.max {
            p.push(FieldError::new(
                "spec.min",
                format!("min {} is larger than max {}", self.min, self.max),
            ));
        }
        if !(self.ratio.is_finite() && self.ratio > 0.0 && self.ratio <= 1.0) {
            p.push(FieldError::new(
                "spec.ratio",
                format!("ratio {} is not in (0, 1]", self.ratio),
            ));
        }
        if self.zone_label.is_empty() {
            p.push(FieldError::new(
                "spec.zoneLabel",
                "the zone label must not be empty",
            ));
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(p))
        }
    }

    /// Whether `node` may be a reflector.
    pub fn is_eligible(&self, node: &NodeInfo) -> bool {
        node.ready
            && !node.unschedulable
            && self.eligible.matches(&node.labels)
            && node.taints.iter().all(|t| {
                t.effect == Effect::PreferNoSchedule
                    || self.tolerations.iter().any(|tol| tol.tolerates(t))
            })
    }

    /// Reflectors wanted for `ready` Ready nodes, before the eligible-node cap.
    pub fn wanted(&self, ready: usize) -> u32 {
        let raw = (ready as f64 * self.ratio).ceil();
        let raw = if raw >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            raw as u32
        };
        raw.clamp(self.min, self.max)
    }
}

/// What exists now: reflector nodes, their cluster IDs, and current peerings
/// (client → reflectors).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Current {
    /// Nodes that are reflectors now.
    pub reflectors: BTreeSet<String>,
    /// Cluster ID annotations now, by node.
    pub cluster_ids: BTreeMap<String, Ipv4Addr>,
    /// Each client's reflectors now.
    pub peerings: BTreeMap<String, Vec<String>>,
}

/// The placement of one zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZonePlacement {
    /// Zone name (empty for nodes without the zone label).
    pub zone: String,
    /// Ready nodes in the zone.
    pub ready: usize,
    /// Eligible nodes in the zone.
    pub eligible: usize,
    /// Reflectors wanted before the eligible-node cap.
    pub wanted: u32,
    /// The zone's reflectors, sorted by name.
    pub reflectors: Vec<String>,
    /// Their cluster ID.
    pub cluster_id: Ipv4Addr,
    /// Why the zone has fewer reflectors than wanted, when it does.
    pub shortfall: Option<String>,
}

/// Reflectors for every zone, by zone name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Zones in name order.
    pub zones: Vec<ZonePlacement>,
}

impl Placement {
    /// Every reflector with its cluster ID.
    pub fn reflectors(&self) -> impl Iterator<Item = (&str, Ipv4Addr)> {
        self.zones
            .iter()
            .flat_map(|z| z.reflectors.iter().map(move |r| (r.as_str(), z.cluster_id)))
    }
}

/// Spreads `total` over zones as evenly as possible, never more than a zone's
/// eligible nodes; leftovers go to zones with room, in name order.
fn spread(total: u32, caps: &[usize]) -> Vec<u32> {
    let mut out = vec![0u32; caps.len()];
    let mut left = total;
    loop {
        let mut gave = false;
        for (i, cap) in caps.iter().enumerate() {
            if left == 0 {
                return out;
            }
            if (out[i] as usize) < *cap {
                out[i] += 1;
                left -= 1;
                gave = true;
            }
        }
        if !gave {
            return out;
        }
    }
}

/// Chooses the reflectors of every zone.
///
/// # Errors
/// [`Error::Invalid`] when the configuration is invalid or there are more zones than
/// cluster IDs left in the last octet.
pub fn place(nodes: &[NodeInfo], config: &Config, current: &Current) -> Result<Placement> {
    config.check()?;
    let mut zones: BTreeMap<&str, Vec<&NodeInfo>> = BTreeMap::new();
    for n in nodes {
        let zone = n.labels.get(&config.zone_label).map_or("", String::as_str);
        zones.entry(zone).or_default().push(n);
    }
    let last = config.cluster_id.octets()[3];
    if usize::from(last) + zones.len().saturating_sub(1) > 255 && config.per == Per::Zone {
        return Err(Error::Invalid(vec![FieldError::new(
            "spec.clusterID",
            format!(
                "{} zones need {} cluster IDs counting up from {}, past x.x.x.255",
                zones.len(),
                zones.len(),
                config.cluster_id
            ),
        )]));
    }
    let ready: Vec<usize> = zones
        .values()
        .map(|ns| ns.iter().filter(|n| n.ready).count())
        .collect();
    let eligible: Vec<Vec<&NodeInfo>> = zones
        .values()
        .map(|ns| {
            ns.iter()
                .copied()
                .filter(|n| config.is_eligible(n))
                .collect()
        })
        .collect();
    let caps: Vec<usize> = eligible.iter().map(Vec::len).collect();
    let (wanted, targets): (Vec<u32>, Vec<u32>) = match config.per {
        Per::Zone => ready
            .iter()
            .zip(&caps)
            .map(|(&r, &c)| {
                let w = config.wanted(r);
                (w, w.min(u32::try_from(c).unwrap_or(u32::MAX)))
            })
            .unzip(),
        Per::Cluster => {
            let total = config.wanted(ready.iter().sum());
            let even = spread(total, &vec![usize::MAX; caps.len()]);
            (even, spread(total, &caps))
        }
    };
    let clients = client_counts(current);
    let mut out = Vec::with_capacity(zones.len());
    for (i, (zone, _)) in zones.iter().enumerate() {
        let k = targets[i] as usize;
        let chosen = choose(&eligible[i], k, config, current, &clients);
        let shortfall = (targets[i] < wanted[i]).then(|| {
            format!(
                "wants {} reflectors but only {} node(s) are eligible; using all of them",
                wanted[i], caps[i]
            )
        });
        let cluster_id = match config.per {
            Per::Zone => {
                let mut o = config.cluster_id.octets();
                o[3] = last.saturating_add(u8::try_from(i).unwrap_or(u8::MAX));
                Ipv4Addr::from(o)
            }
            Per::Cluster => config.cluster_id,
        };
        out.push(ZonePlacement {
            zone: (*zone).to_owned(),
            ready: ready[i],
            eligible: caps[i],
            wanted: wanted[i],
            reflectors: chosen,
            cluster_id,
            shortfall,
        });
    }
    Ok(Placement { zones: out })
}

fn client_counts(current: &Current) -> BTreeMap<&str, usize> {
    let mut c: BTreeMap<&str, usize> = BTreeMap::new();
    for rs in current.peerings.values() {
        for r in rs {
            *c.entry(r.as_str()).or_default() += 1;
        }
    }
    c
}

/// `k` reflectors from a zone's eligible nodes: current ones stay (fewest clients
/// removed first when there are too many), then preferred, oldest, by name.
fn choose(
    eligible: &[&NodeInfo],
    k: usize,
    config: &Config,
    current: &Current,
    clients: &BTreeMap<&str, usize>,
) -> Vec<String> {
    let preferred = |n: &NodeInfo| {
        config
            .preferred
            .as_ref()
            .is_some_and(|s| s.matches(&n.labels))
    };
    let (mut keep, mut rest): (Vec<&NodeInfo>, Vec<&NodeInfo>) = eligible
        .iter()
        .copied()
        .partition(|n| current.reflectors.contains(&n.name));
    if keep.len() > k {
        // Most valuable first: most clients, preferred, oldest, first name.
        keep.sort_by(|a, b| {
            let ca = clients.get(a.name.as_str()).copied().unwrap_or(0);
            let cb = clients.get(b.name.as_str()).copied().unwrap_or(0);
            cb.cmp(&ca)
                .then(preferred(b).cmp(&preferred(a)))
                .then(a.created.cmp(&b.created))
                .then(a.name.cmp(&b.name))
        });
        keep.truncate(k);
    } else {
        rest.sort_by(|a, b| {
            preferred(b)
                .cmp(&preferred(a))
                .then(a.created.cmp(&b.created))
                .then(a.name.cmp(&b.name))
        });
        let need = k - keep.len();
        keep.extend(rest.into_iter().take(need));
    }
    let mut names: Vec<String> = keep.into_iter().map(|n| n.name.clone()).collect();
    names.sort();
    names
}

/// The annotation Calico reads a reflector's cluster ID from.
pub const CLUSTER_ID_ANNOTATION: &str = "projectcalico.org/RouteReflectorClusterID";

/// A Calico `BGPPeer` (`crd.projectcalico.org/v1`), by selectors.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BgpPeer {
    /// Object name.
    pub name: String,
    /// Calico selector of the nodes that open the sessions.
    pub node_selector: String,
    /// Calico selector of the nodes they peer with.
    pub peer_selector: String,
}

/// A change to one node's reflector label and cluster-ID annotation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeChange {
    /// Node name.
    pub node: String,
    /// The node becomes (true) or stops being (false) a reflector.
    pub reflector: bool,
    /// The annotation to set (`None` removes it).
    pub cluster_id: Option<Ipv4Addr>,
}

/// The `simple` topology: who peers with whom, and its objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleTopology {
    /// Each client's reflectors (all reflectors of its zone; all reflectors when its
    /// zone has none), sorted.
    pub clients: BTreeMap<String, Vec<String>>,
    /// BGPPeer objects: one per zone for its clients, plus one full mesh between
    /// reflectors: O(zones), not O(nodes).
    pub bgp_peers: Vec<BgpPeer>,
    /// Label and annotation changes from `current`, by node.
    pub node_changes: Vec<NodeChange>,
}

/// A Calico selector string literal.
fn quoted(v: &str) -> String {
    format!("'{}'", v.replace('\'', ""))
}

/// An object-name fragment from a zone name (lowercase alphanumerics and dashes).
fn name_part(zone: &str) -> String {
    let s: String = zone
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-').to_owned();
    if s.is_empty() {
        "no-zone".to_owned()
    } else {
        s
    }
}

/// The `simple` topology for a placement: every client peers with every reflector of its
/// zone, reflectors peer with each other.
///
/// `reflector_label` is the label key set on reflector nodes (value `"true"`).
pub fn simple_topology(
    nodes: &[NodeInfo],
    config: &Config,
    placement: &Placement,
    current: &Current,
    reflector_label: &str,
) -> SimpleTopology {
    let ids: BTreeMap<&str, Ipv4Addr> = placement.reflectors().collect();
    let all: Vec<String> = ids.keys().map(|s| (*s).to_owned()).collect();
    let by_zone: BTreeMap<&str, &ZonePlacement> = placement
        .zones
        .iter()
        .map(|z| (z.zone.as_str(), z))
        .collect();
    let mut clients = BTreeMap::new();
    for n in nodes {
        if ids.contains_key(n.name.as_str()) {
            continue;
        }
        let zone = n.labels.get(&config.zone_label).map_or("", String::as_str);
        let rs = match by_zone.get(zone) {
            Some(z) if !z.reflectors.is_empty() => z.reflectors.clone(),
            _ => all.clone(),
        };
        clients.insert(n.name.clone(), rs);
    }
    let rr = format!("has({reflector_label})");
    let mut bgp_peers = vec![BgpPeer {
        name: "netpolicy-rr-mesh".to_owned(),
        node_selector: rr.clone(),
        peer_selector: rr.clone(),
    }];
    for z in &placement.zones {
        let in_zone = format!("{} == {}", config.zone_label, quoted(&z.zone));
        bgp_peers.push(BgpPeer {
            name: format!("netpolicy-rr-clients-{}", name_part(&z.zone)),
            node_selector: format!("!{rr} && {in_zone}"),
            peer_selector: if z.reflectors.is_empty() {
                rr.clone()
            } else {
                format!("{rr} && {in_zone}")
            },
        });
    }
    let mut node_changes = Vec::new();
    for n in nodes {
        let want = ids.get(n.name.as_str()).copied();
        let is = current.reflectors.contains(&n.name);
        let has_id = current.cluster_ids.get(&n.name).copied();
        if want.is_some() != is || want != has_id {
            node_changes.push(NodeChange {
                node: n.name.clone(),
                reflector: want.is_some(),
                cluster_id: want,
            });
        }
    }
    node_changes.sort();
    SimpleTopology {
        clients,
        bgp_peers,
        node_changes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone_nodes(zone: &str, n: usize, from: i64) -> Vec<NodeInfo> {
        (0..n)
            .map(|i| NodeInfo::ready(&format!("{zone}-{i:03}"), zone, from + i as i64))
            .collect()
    }

    #[test]
    fn sizing_clamps_ready_times_ratio() {
        let c = Config::default();
        assert_eq!(c.wanted(0), 3);
        assert_eq!(c.wanted(1000), 5);
        assert_eq!(c.wanted(1001), 6);
        assert_eq!(c.wanted(100_000), 10);
    }

    #[test]
    fn a_zone_short_of_min_uses_every_eligible_node_and_says_so() {
        let mut nodes = zone_nodes("a", 2, 0);
        nodes[1].unschedulable = true;
        let p = place(&nodes, &Config::default(), &Current::default()).unwrap();
        assert_eq!(p.zones[0].reflectors, ["a-000"]);
        assert!(
            p.zones[0]
                .shortfall
                .as_ref()
                .unwrap()
                .contains("only 1 node(s)")
        );
    }

    #[test]
    fn taints_need_tolerations() {
        let mut nodes = zone_nodes("a", 4, 0);
        nodes[0].taints.push(Taint {
            key: "dedicated".into(),
            value: "db".into(),
            effect: Effect::NoSchedule,
        });
        nodes[1].taints.push(Taint {
            key: "soft".into(),
            value: String::new(),
            effect: Effect::PreferNoSchedule,
        });
        let mut c = Config::default();
        let p = place(&nodes, &c, &Current::default()).unwrap();
        assert_eq!(p.zones[0].reflectors, ["a-001", "a-002", "a-003"]);
        c.tolerations.push(Toleration {
            key: "dedicated".into(),
            exists: true,
            ..Default::default()
        });
        assert!(c.is_eligible(&nodes[0]));
        let wrong_effect = Toleration {
            key: "dedicated".into(),
            exists: true,
            effect: Some(Effect::NoExecute),
            ..Default::default()
        };
        assert!(!wrong_effect.tolerates(&nodes[0].taints[0]));
        let everything = Toleration {
            exists: true,
            ..Default::default()
        };
        assert!(everything.tolerates(&nodes[0].taints[0]));
    }

    #[test]
    fn current_reflectors_stay_and_scale_down_drops_the_fewest_clients() {
        let nodes = zone_nodes("a", 10, 0);
        let current = Current {
            reflectors: ["a-005", "a-006", "a-007", "a-008"]
                .map(String::from)
                .into(),
            peerings: [
                (
                    "a-000".to_string(),
                    vec!["a-005".to_string(), "a-006".to_string()],
                ),
                (
                    "a-001".to_string(),
                    vec!["a-007".to_string(), "a-006".to_string()],
                ),
                (
                    "a-002".to_string(),
                    vec!["a-008".to_string(), "a-005".to_string()],
                ),
            ]
            .into(),
            ..Current::default()
        };
        let p = place(&nodes, &Config::default(), &current).unwrap();
        // 3 wanted: a-007 and a-008 have one client each; a-008 is the youngest.
        assert_eq!(p.zones[0].reflectors, ["a-005", "a-006", "a-007"]);
    }

    #[test]
    fn preferred_nodes_come_first() {
        let mut nodes = zone_nodes("a", 6, 0);
        nodes[5].labels.insert("rr".into(), "yes".into());
        let c = Config {
            preferred: Some(Selector::from_requirements(vec![
                netpolicy_core::selector::Requirement::Exists { key: "rr".into() },
            ])),
            ..Config::default()
        };
        let p = place(&nodes, &c, &Current::default()).unwrap();
        assert_eq!(p.zones[0].reflectors, ["a-000", "a-001", "a-005"]);
    }

    #[test]
    fn per_cluster_spreads_evenly_and_shares_the_cluster_id() {
        let mut nodes = zone_nodes("a", 5, 0);
        nodes.extend(zone_nodes("b", 5, 0));
        nodes.extend(zone_nodes("c", 1, 0));
        let c = Config {
            per: Per::Cluster,
            min: 7,
            ..Config::default()
        };
        let p = place(&nodes, &c, &Current::default()).unwrap();
        let counts: Vec<usize> = p.zones.iter().map(|z| z.reflectors.len()).collect();
        assert_eq!(counts, [3, 3, 1]);
        assert!(
            p.reflectors()
                .all(|(_, id)| id == Ipv4Addr::new(224, 0, 0, 1))
        );
    }

    #[test]
    fn simple_topology_peers_clients_with_their_zone_and_has_o_zones_objects() {
        let mut nodes = zone_nodes("a", 6, 0);
        nodes.extend(zone_nodes("b", 6, 0));
        let mut c_only = zone_nodes("c", 2, 0);
        for n in &mut c_only {
            n.unschedulable = true; // zone c has no eligible node
        }
        nodes.extend(c_only);
        let config = Config::default();
        let current = Current {
            reflectors: ["a-005".to_string()].into(),
            cluster_ids: [("a-005".to_string(), Ipv4Addr::new(224, 0, 0, 9))].into(),
            ..Current::default()
        };
        let p = place(&nodes, &config, &current).unwrap();
        let t = simple_topology(&nodes, &config, &p, &current, "calico-route-reflector");
        assert_eq!(t.clients["a-003"], ["a-000", "a-001", "a-005"]);
        assert_eq!(t.clients["b-004"], ["b-000", "b-001", "b-002"]);
        // Zone c has no reflector: its clients peer with all of them.
        assert_eq!(t.clients["c-000"].len(), 6);
        assert_eq!(t.bgp_peers.len(), 1 + 3);
        assert_eq!(
            t.bgp_peers[1].node_selector,
            "!has(calico-route-reflector) && topology.kubernetes.io/zone == 'a'"
        );
        assert_eq!(t.bgp_peers[3].peer_selector, "has(calico-route-reflector)");
        // a-005 stays but its cluster ID is corrected; five nodes become reflectors.
        let a005 = t.node_changes.iter().find(|c| c.node == "a-005").unwrap();
        assert_eq!(a005.cluster_id, Some(Ipv4Addr::new(224, 0, 0, 1)));
        assert_eq!(t.node_changes.len(), 6);
    }

    #[test]
    fn invalid_numbers_name_their_fields() {
        let c = Config {
            min: 5,
            max: 2,
            ratio: -1.0,
            ..Config::default()
        };
        let e = place(&[], &c, &Current::default()).unwrap_err();
        let Error::Invalid(v) = e;
        let paths: Vec<&str> = v.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["spec.min", "spec.ratio"]);
    }
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
