//! The links between reflectors: `simple`'s mesh object, `multi`'s ring with chords and
//! its per-reflector link objects.

use std::collections::BTreeSet;

use crate::{
    BgpPeer,
    state::{BGP_PEER_PREFIX, LINK_OBJECT_PREFIX, fnv1a, quoted, reflector_token},
};

/// The name of the reflector mesh object of `simple` (every reflector with every other).
pub(crate) fn mesh_name() -> String {
    format!("{BGP_PEER_PREFIX}mesh")
}

/// The reflector mesh object of `simple`.
pub(crate) fn mesh_object(rl: &str) -> BgpPeer {
    BgpPeer {
        name: mesh_name(),
        node_selector: format!("has({rl})"),
        peer_selector: format!("has({rl})"),
    }
}

/// `multi`'s links between reflectors, by ring position: each reflector with the
/// reflectors one and two places away on either side (a circulant graph; every pair
/// up to five reflectors).
///
/// Why not every pair, as `simple`'s mesh: in `multi` every reflector has its own
/// cluster ID, so each treats every other as its client and passes on every route it
/// learns from one, and Calico turns ADD-PATH on for every session. A route then
/// travels every simple path through the reflector graph, and every node holds one
/// path per path. In a full mesh of `R` reflectors that is every ordering of every
/// subset of the others: 326 paths between two of 7 reflectors, 13,700 of 9. On live
/// BGP with 24 nodes (7 reflectors) a client held up to 9,964 paths for 25 prefixes,
/// and the churn of those paths (BIRD replaces a kernel route on every change among
/// its equal paths) left kernel routes missing for up to 0.9 s while reflectors took
/// their IDs. The ring with chords keeps 28 paths between two of 6 and 124 of 9,
/// and stays connected with any one reflector gone or any one zone's reflectors gone
/// (the ring is round-robin over zones, so two reflectors of a zone are never
/// neighbours while other zones have reflectors to place between them).
pub(crate) fn ring_links(ring: &[String]) -> Vec<BTreeSet<usize>> {
    let n = ring.len();
    let mut out = vec![BTreeSet::new(); n];
    for i in 0..n {
        for d in 1..=2 {
            let j = (i + d) % n;
            if j != i {
                out[i].insert(j);
                out[j].insert(i);
            }
        }
    }
    out
}

/// The link object of reflector `r` (`multi`): `r` with `peers`. Named by a hash of
/// both, so that a changed neighbourhood is a new object, made before the old one goes
/// (the link both ends name is in both objects: one going keeps the session).
pub(crate) fn link_object(r: &str, peers: &[String], rl: &str) -> BgpPeer {
    let me = reflector_token(r);
    let mut tokens: Vec<String> = peers.iter().map(|p| reflector_token(p)).collect();
    tokens.sort();
    let mut parts: Vec<&str> = vec![me.as_str(), "|"];
    parts.extend(tokens.iter().map(String::as_str));
    let quoted_peers: Vec<String> = tokens.iter().map(|t| quoted(t)).collect();
    BgpPeer {
        name: format!("{LINK_OBJECT_PREFIX}{:016x}", fnv1a(&parts)),
        node_selector: format!("{rl} == {}", quoted(&me)),
        peer_selector: format!("{rl} in {{{}}}", quoted_peers.join(", ")),
    }
}
