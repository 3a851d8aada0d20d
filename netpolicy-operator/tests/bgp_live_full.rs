//! All five route-reflector scenarios on live BGP (`tests/bgp_live.rs` says what they
//! prove): the cold start, nodes joining and leaving, a zone lost, the cluster-ID layout
//! changed, a reflector cordoned and its label removed by hand — on
//! `NETPOLICY_BGP_NODES` nodes (default 24) over 3 zones. A reported run (about 15 min):
//! `cargo test -p netpolicy-operator --test integration -- --ignored --nocapture bgp_live_full::`;
//! numbers in benches/README.md. `NETPOLICY_BGP_SCENARIOS` (both files) runs the cold
//! start and then only the scenarios it lists, in order (`4,4` goes through the
//! cluster-ID layouts twice): a diagnosis of one transition.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::bgp_live::scenarios;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a reported run (about 15 min): every route-reflector scenario on 24 live BGP nodes"]
async fn every_transition_loses_routes_only_where_a_reflector_restarts() {
    let n = std::env::var("NETPOLICY_BGP_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    scenarios::run(n).await;
}
