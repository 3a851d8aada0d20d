//! Pacing by what BIRD reports, not only by the clock: between the steps of a transition
//! the job asks calico-node for each reflector's BGP sessions (`CalicoNodeStatus`,
//! Calico ≥ 3.22, class `BGP`) and starts the next step — or turns the mesh off — only
//! once every session of every reflector is Established again.
//!
//! Why the clock is not enough (found on live BGP, Calico's confd and BIRD 1.6): a
//! reflector whose cluster ID changes restarts every session, and Calico configures the
//! `BGPPeer` sessions between nodes with both ends active. Both ends reconnect after
//! the same `connect delay time`, their connections collide, and BIRD drops the session
//! it had just established (collision resolution, then "graceful restart detected") —
//! for 2 to 10 s, at random. A fixed `stepDelaySeconds` either waits far too long or
//! turns the mesh off while a client has no reflector session up.
//!
//! The objects (`netpolicy-rr-<node>`) exist only while a transition runs: calico-node
//! writes each one every `updatePeriodSeconds`, which a settled cluster does not need.
//! Where no calico-node reports (an older Calico, another BGP daemon), the job says so
//! once per transition and paces by `stepDelaySeconds` alone.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use kube::{
    Api,
    api::{DeleteParams, DynamicObject, ListParams, PostParams},
};
use serde_json::{Value, json};

/// Prefix of the `CalicoNodeStatus` objects the job creates.
pub(crate) const PREFIX: &str = "netpolicy-rr-";
/// How often calico-node reports while a transition runs.
const UPDATE_PERIOD_SECONDS: u32 = 1;
/// Reports are read only this long after a step: confd renders the step and BIRD
/// reconfigures in well under a second, and calico-node polls BIRD every
/// [`UPDATE_PERIOD_SECONDS`] (it writes the object only when something changed, so an
/// older report is still the current one).
pub(crate) const RENDERED_AFTER: Duration = Duration::from_secs(2);
/// No report this long after a step: calico-node does not report here.
pub(crate) const UNREPORTED_AFTER: Duration = Duration::from_secs(30);

/// What the reports say about the reflectors' sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every session of every reflector is Established.
    Up,
    /// Some are not yet (or a report is older than the step): why.
    Waiting(String),
    /// These reflectors have no report since the step.
    Unreported(Vec<String>),
}

/// The verdict for `reflectors` from the job's `CalicoNodeStatus` objects (read at least
/// [`RENDERED_AFTER`] after the step).
///
/// A `NodePeer` session beside an Established `NodeMesh` one to the same address is not
/// waited for: BIRD gives the address's connection to the first protocol, so the
/// `BGPPeer` session comes up only once the mesh leaves that pair.
pub(crate) fn verdict(objects: &[DynamicObject], reflectors: &BTreeSet<String>) -> Verdict {
    let by_node: BTreeMap<&str, &Value> = objects
        .iter()
        .filter_map(|o| Some((o.data.get("spec")?.get("node")?.as_str()?, &o.data)))
        .collect();
    let mut unreported = Vec::new();
    let mut waiting = Vec::new();
    for r in reflectors {
        let status = by_node.get(r.as_str()).and_then(|d| d.get("status"));
        let reported = status
            .and_then(|s| s.get("lastUpdated")?.as_str())
            .is_some_and(|t| !t.is_empty());
        if !reported {
            unreported.push(r.clone());
            continue;
        }
        let peers: Vec<&Value> = status
            .and_then(|s| s.get("bgp")?.get("peersV4")?.as_array())
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let field = |p: &Value, k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let mesh_up: BTreeSet<String> = peers
            .iter()
            .filter(|p| field(p, "type") == "NodeMesh" && field(p, "state") == "Established")
            .map(|p| field(p, "peerIP"))
            .collect();
        let down: Vec<String> = peers
            .iter()
            .filter(|p| field(p, "state") != "Established")
            .filter(|p| !(field(p, "type") == "NodePeer" && mesh_up.contains(&field(p, "peerIP"))))
            .map(|p| format!("{} ({})", field(p, "peerIP"), field(p, "state")))
            .collect();
        if !down.is_empty() {
            waiting.push(format!(
                "{r}: {} of {} session(s) not Established: {}",
                down.len(),
                peers.len(),
                down.join(", ")
            ));
        }
    }
    if !waiting.is_empty() {
        Verdict::Waiting(waiting.join("; "))
    } else if !unreported.is_empty() {
        Verdict::Unreported(unreported)
    } else {
        Verdict::Up
    }
}

/// The object asking calico-node on `node` for its BGP sessions.
pub(crate) fn request(node: &str) -> Value {
    json!({
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "CalicoNodeStatus",
        "metadata": {
            "name": format!("{PREFIX}{node}"),
            "labels": {"app.kubernetes.io/managed-by": "netpolicy"},
        },
        "spec": {"node": node, "classes": ["BGP"], "updatePeriodSeconds": UPDATE_PERIOD_SECONDS},
    })
}

/// The job's objects in `api` (`CalicoNodeStatus`); `None` when Calico does not serve
/// the kind.
async fn ours(api: &Api<DynamicObject>) -> Result<Option<Vec<DynamicObject>>, kube::Error> {
    match api.list(&ListParams::default()).await {
        Ok(l) => Ok(Some(
            l.items
                .into_iter()
                .filter(|o| {
                    o.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(PREFIX))
                })
                .collect(),
        )),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// What the reports mean for the next step, `since` the last one was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pacing {
    /// Look again after this long (why, when a session is down).
    Wait(Duration, Option<String>),
    /// Go on; with a message when the job goes on without the sessions it waited for
    /// (told once per step, as a Warning).
    GoOn(Option<String>),
}

/// Pacing by `verdict` (`None`: Calico does not serve `CalicoNodeStatus`). Bounded:
/// without reports for [`UNREPORTED_AFTER`] (no calico-node reporting here) or with a
/// session down for `max(60 s, 10 × delay)` (`delay`: `stepDelaySeconds`), the job
/// says so and goes on.
pub(crate) fn pacing(verdict: Option<Verdict>, since: Duration, delay: Duration) -> Pacing {
    const POLL: Duration = Duration::from_secs(1);
    // A report is read only once confd rendered the step (a Calico without
    // CalicoNodeStatus is not held up by this).
    if verdict.is_some() && since < RENDERED_AFTER {
        return Pacing::Wait(RENDERED_AFTER.saturating_sub(since), None);
    }
    match verdict {
        None | Some(Verdict::Up) => Pacing::GoOn(None),
        Some(Verdict::Unreported(_)) if since < UNREPORTED_AFTER => Pacing::Wait(POLL, None),
        Some(Verdict::Unreported(nodes)) => Pacing::GoOn(Some(format!(
            "calico-node reported no BGP sessions (CalicoNodeStatus) for {} in {} s: pacing \
             by stepDelaySeconds only",
            nodes.join(", "),
            UNREPORTED_AFTER.as_secs()
        ))),
        Some(Verdict::Waiting(why)) => {
            let bound = (delay * 10).max(Duration::from_secs(60));
            if since < bound {
                Pacing::Wait(POLL, Some(why))
            } else {
                Pacing::GoOn(Some(format!(
                    "BGP sessions still down {} s after the step, going on: {why}",
                    bound.as_secs()
                )))
            }
        }
    }
}

/// Makes sure each reflector has its object, then the verdict on the reports. `None`:
/// Calico does not serve `CalicoNodeStatus` here.
///
/// # Errors
/// The API server's.
pub(crate) async fn check(
    api: &Api<DynamicObject>,
    reflectors: &BTreeSet<String>,
) -> Result<Option<Verdict>, kube::Error> {
    let Some(mut objects) = ours(api).await? else {
        return Ok(None);
    };
    let have: BTreeSet<String> = objects
        .iter()
        .filter_map(|o| o.data.get("spec")?.get("node")?.as_str().map(str::to_owned))
        .collect();
    for r in reflectors.difference(&have) {
        let obj: DynamicObject =
            serde_json::from_value(request(r)).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(o) => objects.push(o),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(verdict(&objects, reflectors)))
}

/// Deletes every object of ours (the transition is over).
///
/// # Errors
/// The API server's.
pub(crate) async fn clear(api: &Api<DynamicObject>) -> Result<(), kube::Error> {
    for o in ours(api).await?.unwrap_or_default() {
        if let Some(name) = o.metadata.name {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(node: &str, at: &str, peers: Value) -> DynamicObject {
        let mut v = request(node);
        v["status"] = json!({"lastUpdated": at, "bgp": {"numberEstablishedV4": 0,
            "numberEstablishedV6": 0, "numberNotEstablishedV4": 0, "numberNotEstablishedV6": 0,
            "peersV4": peers}});
        serde_json::from_value(v).unwrap()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn every_session_established_is_up_and_a_missing_report_is_unreported() {
        let peers = json!([{"peerIP": "10.0.0.2", "type": "NodePeer", "state": "Established"}]);
        let objs = [report("r1", "2026-01-01T00:00:10Z", peers)];
        assert_eq!(verdict(&objs, &set(&["r1"])), Verdict::Up);
        // A reflector without an object, or whose object calico-node has not filled.
        let empty: DynamicObject = serde_json::from_value(request("r3")).unwrap();
        assert_eq!(
            verdict(&[objs[0].clone(), empty], &set(&["r1", "r2", "r3"])),
            Verdict::Unreported(vec!["r2".into(), "r3".into()])
        );
    }

    #[test]
    fn pacing_waits_for_the_render_then_the_sessions_within_bounds() {
        let s = Duration::from_secs;
        let delay = s(3);
        // No CalicoNodeStatus served: the step delay alone paces.
        assert_eq!(pacing(None, s(0), delay), Pacing::GoOn(None));
        // Served: nothing is read before confd rendered the step.
        assert_eq!(
            pacing(Some(Verdict::Up), Duration::from_millis(500), delay),
            Pacing::Wait(Duration::from_millis(1500), None)
        );
        assert_eq!(pacing(Some(Verdict::Up), s(2), delay), Pacing::GoOn(None));
        let down = || Some(Verdict::Waiting("r1: 10.0.0.2 (Active)".into()));
        assert_eq!(
            pacing(down(), s(59), delay),
            Pacing::Wait(s(1), Some("r1: 10.0.0.2 (Active)".into()))
        );
        // Down for 60 s (10 × 3 s is less): go on, and say so.
        match pacing(down(), s(60), delay) {
            Pacing::GoOn(Some(m)) => assert!(m.contains("60 s") && m.contains("r1"), "{m}"),
            other => panic!("{other:?}"),
        }
        // A longer step delay bounds the wait at ten of them.
        assert!(matches!(pacing(down(), s(60), s(10)), Pacing::Wait(..)));
        let silent = || Some(Verdict::Unreported(vec!["r1".into(), "r2".into()]));
        assert_eq!(pacing(silent(), s(29), delay), Pacing::Wait(s(1), None));
        match pacing(silent(), s(30), delay) {
            Pacing::GoOn(Some(m)) => assert!(m.contains("r1, r2 in 30 s"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_session_not_established_waits_unless_the_mesh_carries_that_pair() {
        let peers = json!([
            {"peerIP": "10.0.0.2", "type": "NodePeer", "state": "Active"},
            {"peerIP": "10.0.0.3", "type": "NodePeer", "state": "Connect"},
            {"peerIP": "10.0.0.3", "type": "NodeMesh", "state": "Established"},
        ]);
        let objs = [report("r1", "2026-01-01T00:00:10Z", peers)];
        match verdict(&objs, &set(&["r1"])) {
            Verdict::Waiting(why) => {
                assert!(why.contains("10.0.0.2 (Active)"), "{why}");
                assert!(!why.contains("10.0.0.3"), "{why}");
                assert!(why.contains("1 of 3"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
