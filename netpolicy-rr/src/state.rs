//! What netpolicy owns in a cluster: the marks on nodes (reflector label, cluster-ID
//! annotation, reflector-set labels) and the `BGPPeer` objects; and how names and
//! label keys are formed.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use crate::calico;

/// The annotation Calico reads a reflector's cluster ID from.
pub const CLUSTER_ID_ANNOTATION: &str = "projectcalico.org/RouteReflectorClusterID";

/// Prefix of the label keys that put a client into a reflector set (`multi`).
pub const SET_LABEL_PREFIX: &str = "rr.netpolicy.io/set-";

/// Prefix of every `BGPPeer` object netpolicy owns.
pub const BGP_PEER_PREFIX: &str = "netpolicy-rr-";

/// The marks netpolicy owns on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Marks {
    /// Value of the reflector label (see [`reflector_token`]); `Some` on reflectors.
    pub reflector: Option<String>,
    /// The [`CLUSTER_ID_ANNOTATION`].
    pub cluster_id: Option<Ipv4Addr>,
    /// Reflector-set label keys (`rr.netpolicy.io/set-<id>`, value empty) on a client.
    /// A client has one, or two while it moves between sets.
    pub sets: BTreeSet<String>,
}

impl Marks {
    /// No mark at all.
    pub fn is_empty(&self) -> bool {
        self.reflector.is_none() && self.cluster_id.is_none() && self.sets.is_empty()
    }
}

/// A Calico `BGPPeer` (`crd.projectcalico.org/v1`), by selectors.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BgpPeer {
    /// Object name.
    pub name: String,
    /// Calico selector of the nodes that open the sessions.
    pub node_selector: String,
    /// Calico selector of the nodes they peer with.
    pub peer_selector: String,
}

/// What exists now: netpolicy's marks on each node and its `BGPPeer` objects (objects
/// without the [`BGP_PEER_PREFIX`] are not ours and must not be passed here).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Current {
    /// Marks by node name (nodes without marks may be left out).
    pub marks: BTreeMap<String, Marks>,
    /// Our `BGPPeer` objects.
    pub bgp_peers: Vec<BgpPeer>,
    /// The `multi` ring as last applied ([`crate::Topology::ring`]; the operator keeps it
    /// in the RouteReflectorConfig's status). Empty when unknown: the ring is then built
    /// afresh, which may move clients whose sets still exist.
    pub ring: Vec<String>,
    /// Calico's node-to-node mesh is on (`BGPConfiguration` `nodeToNodeMeshEnabled`, on
    /// when unset): confd gives every two nodes without a cluster ID a session. It
    /// carries the routes while a cold start promotes reflectors ([`crate::sim`] models
    /// it, [`crate::transition()`] batches cluster-ID changes only while it is on).
    pub mesh: bool,
}

impl Current {
    /// A state in which `reflectors` carry the reflector label and nothing else exists
    /// (for examples and tests).
    pub fn with_reflectors<'a>(reflectors: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            marks: reflectors
                .into_iter()
                .map(|r| {
                    let m = Marks {
                        reflector: Some(reflector_token(r)),
                        ..Marks::default()
                    };
                    (r.to_owned(), m)
                })
                .collect(),
            bgp_peers: Vec::new(),
            ring: Vec::new(),
            mesh: false,
        }
    }

    /// Whether `node` carries the reflector label now.
    pub fn is_reflector(&self, node: &str) -> bool {
        self.marks.get(node).is_some_and(|m| m.reflector.is_some())
    }

    /// Nodes carrying the reflector label now.
    pub fn reflectors(&self) -> impl Iterator<Item = &str> {
        self.marks
            .iter()
            .filter(|(_, m)| m.reflector.is_some())
            .map(|(n, _)| n.as_str())
    }

    /// Clients per reflector through reflector sets (the `multi` topology): for each
    /// set object, the clients labelled into it, credited to each reflector its peer
    /// selector names. In `simple` every reflector of a zone serves all of the zone's
    /// clients, so no count is needed to choose between them.
    pub fn client_counts(&self) -> BTreeMap<String, usize> {
        let by_token: BTreeMap<&str, &str> = self
            .marks
            .iter()
            .filter_map(|(n, m)| m.reflector.as_deref().map(|t| (t, n.as_str())))
            .collect();
        let mut per_set: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for m in self.marks.values() {
            for s in &m.sets {
                *per_set.entry(s.as_str()).or_default() += 1;
            }
        }
        let mut out = BTreeMap::new();
        for peer in &self.bgp_peers {
            let Some(id) = peer.name.strip_prefix(SET_OBJECT_PREFIX) else {
                continue;
            };
            let key = format!("{SET_LABEL_PREFIX}{id}");
            let Some(&n) = per_set.get(key.as_str()) else {
                continue;
            };
            if let Ok(sel) = calico::Selector::parse(&peer.peer_selector) {
                for token in selector_values(&sel) {
                    if let Some(node) = by_token.get(token.as_str()) {
                        *out.entry((*node).to_owned()).or_default() += n;
                    }
                }
            }
        }
        out
    }
}

/// Name prefix of the per-set `BGPPeer` objects.
pub(crate) const SET_OBJECT_PREFIX: &str = "netpolicy-rr-set-";

/// Name prefix of the per-reflector link `BGPPeer` objects (`multi`).
pub(crate) const LINK_OBJECT_PREFIX: &str = "netpolicy-rr-link-";

/// Name prefix of the move `BGPPeer` objects: while a plan moves a client from one valid
/// set to another, an object naming the client and its new set (the set object's
/// selectors, so it adds no session) records which of its two set labels is the new
/// one. The labels alone do not say, and a plan made mid-way must place the client
/// where the plan under way does.
pub(crate) const MOVE_OBJECT_PREFIX: &str = "netpolicy-rr-move-";

/// The name of the move object of `client` into the set of label `key`.
pub(crate) fn move_object_name(client: &str, key: &str) -> String {
    format!("{MOVE_OBJECT_PREFIX}{:016x}", fnv1a(&[client, "|", key]))
}

fn selector_values(s: &calico::Selector) -> Vec<String> {
    use calico::Selector as S;
    match s {
        S::In(_, vs) => vs.clone(),
        S::Eq(_, v) => vec![v.clone()],
        S::And(a, b) | S::Or(a, b) => {
            let mut v = selector_values(a);
            v.extend(selector_values(b));
            v
        }
        _ => Vec::new(),
    }
}

pub(crate) use netpolicy_core::hash::fnv1a;

/// The reflector label's value on node `name`: the name itself when it is a valid label
/// value (at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends, which
/// node names nearly always are), otherwise `h-` and a 16-digit hash of the name. The
/// `multi` topology selects individual reflectors by this value.
pub fn reflector_token(name: &str) -> String {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
        && name
            .bytes()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if valid {
        name.to_owned()
    } else {
        format!("h-{:016x}", fnv1a(&[name]))
    }
}

/// A Calico selector string literal (label values cannot contain quotes; any that
/// reach here are dropped rather than allowed to break the selector).
pub(crate) fn quoted(v: &str) -> String {
    format!("'{}'", v.replace(['\'', '"'], ""))
}

/// An object-name fragment from a zone name (lowercase alphanumerics and dashes).
pub(crate) fn name_part(zone: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_names_when_valid_and_stable_hashes_otherwise() {
        assert_eq!(reflector_token("node-1.example"), "node-1.example");
        let long = "n".repeat(64);
        let t = reflector_token(&long);
        assert_eq!(t.len(), 18);
        assert!(t.starts_with("h-"));
        assert_eq!(t, reflector_token(&long));
        assert_ne!(reflector_token("-x"), "-x");
        // FNV-1a's published test vector.
        assert_eq!(fnv1a(&["a"]), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn client_counts_follow_set_labels_and_objects() {
        let mut c = Current::with_reflectors(["r1", "r2", "r3"]);
        let key = format!("{SET_LABEL_PREFIX}abc");
        for n in ["c1", "c2"] {
            c.marks
                .entry(n.into())
                .or_default()
                .sets
                .insert(key.clone());
        }
        c.bgp_peers.push(BgpPeer {
            name: format!("{SET_OBJECT_PREFIX}abc"),
            node_selector: format!("has({key})"),
            peer_selector: "rr in {'r1', 'r3'}".into(),
        });
        let counts = c.client_counts();
        assert_eq!(counts.get("r1"), Some(&2));
        assert_eq!(counts.get("r2"), None);
        assert_eq!(counts.get("r3"), Some(&2));
    }
}
