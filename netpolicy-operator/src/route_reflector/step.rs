//! The route-reflector job's decisions, without a cluster: from what Calico's datastore
//! holds, the RouteReflectorConfig and what the job remembers of its last step, the
//! next step, its pacing, the status and the Events. Routing's `writes` is the model:
//! [`step`] decides, the controller carries the [`Decision`] out in the order it gives.
//! The rules themselves are netpolicy-rr's ([`topology`], [`transition`]); this file
//! adds what a running job adds to them: pacing, the transition's Events and status,
//! and when Calico's node-to-node mesh may be turned off.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::events::EventType;
use netpolicy_rr::{Config, Current, Kind, NodeInfo, Op, Topology, topology, transition};

use crate::{
    api::{
        NodeToNodeMesh, RouteReflectorConfigSpec, RouteReflectorConfigStatus, TransitionStatus,
        conditions::{self, events, route_reflector as rc},
    },
    k8s::condition,
    runtime::Next,
};

/// The `NodeToNodeMesh` condition's message while the mesh is on.
pub(crate) const MESH_ON: &str = "Calico's node-to-node mesh is still on (nodeToNodeMesh: report \
                                  leaves it; `disable` turns it off once every node has its \
                                  reflector sessions)";

/// The shortest wait after a step, whatever `stepDelaySeconds` says.
const MIN_STEP_WAIT: Duration = Duration::from_millis(500);

/// What the job remembers between passes. A restart forgets it and loses nothing the
/// cluster needs: the plan is made again from what the cluster holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Memory {
    /// The transition in progress: when it started, steps done, steps planned then.
    pub started: Option<(Time, u32, u32)>,
    /// The last `Ready` reason reported by an Event (one Event per change).
    pub reported: Option<String>,
}

/// An Event on the RouteReflectorConfig.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Event {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
}

impl Event {
    fn normal(reason: &'static str, note: String) -> Self {
        Self {
            type_: EventType::Normal,
            reason,
            note,
        }
    }
}

/// What a pass does to Calico's datastore.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Action {
    /// Nothing.
    Nothing,
    /// The step's operations, in order. The status ("applying step N") is written
    /// before them.
    Step(Vec<Op>),
    /// Calico's node-to-node mesh turned off (`nodeToNodeMesh: disable`, and every node
    /// has its reflector sessions). The status saying it is off is written after it.
    DisableMesh,
}

/// One pass's decision, carried out in this order: the Events `before`; with a step,
/// the status, the operations, the Events `after` and then the memory; otherwise the
/// memory, the action, the Events `after`, the end of the transition and the status.
/// (A status never says done before the action it reports succeeded.)
#[derive(Debug)]
pub(crate) struct Decision {
    /// The status the config should have (the controller writes it only if it differs).
    pub status: RouteReflectorConfigStatus,
    pub before: Vec<Event>,
    pub action: Action,
    pub after: Vec<Event>,
    /// The job's memory from here on.
    pub memory: Memory,
    /// Whether a transition is under way (`None`: not known, the gauge is left as it is).
    pub in_transition: Option<bool>,
    /// A transition starts with this step (the transitions counter).
    pub starts_transition: bool,
    /// The last step's sessions are up: pacing ends, calico-node's reports are cleared.
    pub transition_over: bool,
    /// When to pass again.
    pub next: Next,
    /// The topology planned towards (its metrics), when one could be computed.
    pub target: Option<Topology>,
}

/// What a pass knows besides the job's memory.
pub(crate) struct Pass<'a> {
    pub spec: &'a RouteReflectorConfigSpec,
    /// `spec`, validated ([`super::config`]).
    pub cfg: &'a Config,
    pub status: &'a RouteReflectorConfigStatus,
    pub generation: Option<i64>,
    pub now: &'a Time,
    /// The nodes placement reads.
    pub nodes: &'a [NodeInfo],
    /// The marks and peers the datastore holds, `mesh` set from `mesh_on`.
    pub current: &'a Current,
    /// Whether Calico's node-to-node mesh is on (`None`: Calico serves no
    /// BGPConfiguration).
    pub mesh_on: Option<bool>,
    /// How long the last step is still paced: the rest of its `stepDelaySeconds`, or its
    /// BGP sessions not up yet (`None`: not paced).
    pub pacing: Option<Duration>,
}

/// The pass's decision: plan from what the datastore holds and apply the plan's first
/// step (unless the last one is still paced), or settle when nothing is left to do.
pub(crate) fn step(pass: &Pass<'_>, memory: &Memory) -> Decision {
    let target = match topology(pass.nodes, pass.cfg, pass.current) {
        Ok(t) => t,
        Err(e) => {
            return not_ready(
                memory,
                pass.status,
                rc::INVALID,
                e.to_string(),
                (pass.generation, pass.now),
                Next::Resync,
            );
        }
    };
    let steps = transition(pass.nodes, pass.current, &target);
    let reflectors = u32::try_from(target.placement.reflectors().count()).unwrap_or(u32::MAX);
    let facts = StatusFacts {
        cur: pass.status,
        reflectors,
        ring: target.ring.clone(),
        cluster_ids: cluster_ids(&target, pass.cfg.topology),
        generation: pass.generation,
        now: pass.now,
    };
    let mut memory = memory.clone();
    let Some(first) = steps.first() else {
        let mut before = Vec::new();
        if let Some((_, done, _)) = memory.started.take() {
            before.push(Event::normal(
                events::SETTLED,
                format!("transition done after {done} step(s): {reflectors} reflector(s)"),
            ));
        }
        if target.warnings.is_empty() {
            memory.reported = Some(rc::SETTLED.to_owned());
        }
        // Every node has its reflector sessions only when the topology has no warning
        // (a zone without reflectors, no reflector at all), and not while the last step
        // is being paced: the mesh is what carries the routes until then (turned off at
        // once, every pair whose session the last step restarted lost its routes on live
        // BGP).
        let complete = target.warnings.is_empty() && pass.pacing.is_none();
        let disable = pass.spec.node_to_node_mesh == NodeToNodeMesh::Disable;
        let (action, after, mesh) = match pass.mesh_on {
            Some(true) if disable && complete => (
                Action::DisableMesh,
                vec![Event::normal(
                    events::MESH_DISABLED,
                    "every node has its reflector sessions: Calico's node-to-node mesh turned \
                     off"
                    .into(),
                )],
                None,
            ),
            Some(true) => (Action::Nothing, Vec::new(), Some(MESH_ON.to_owned())),
            _ => (Action::Nothing, Vec::new(), None),
        };
        return Decision {
            status: facts.settled(&target.warnings, mesh),
            before,
            action,
            after,
            memory,
            in_transition: Some(pass.pacing.is_some()),
            starts_transition: false,
            transition_over: pass.pacing.is_none(),
            next: pass.pacing.map_or(Next::Resync, Next::After),
            target: Some(target),
        };
    };
    if let Some(left) = pass.pacing {
        // BIRD needs the step delay to bring the last step's sessions up before the next
        // step relies on them.
        return Decision {
            status: pass.status.clone(),
            before: Vec::new(),
            action: Action::Nothing,
            after: Vec::new(),
            memory,
            in_transition: Some(true),
            starts_transition: false,
            transition_over: false,
            next: Next::After(left),
            target: Some(target),
        };
    }
    let mut before = Vec::new();
    let starts_transition = memory.started.is_none();
    let (started, done, of) = memory.started.clone().unwrap_or_else(|| {
        let of = u32::try_from(steps.len()).unwrap_or(u32::MAX);
        before.push(Event::normal(
            events::TRANSITION_STARTED,
            format!("{of} step(s) to {reflectors} reflector(s)"),
        ));
        (pass.now.clone(), 0, of)
    });
    let phase = first.phase.as_str();
    let status = facts.stepping(phase, done, of, steps.len(), &started);
    let after = vec![Event::normal(
        events::STEP_APPLIED,
        format!(
            "step {} of {} ({phase}): {} operation(s)",
            done + 1,
            of.max(done + 1),
            first.ops.len()
        ),
    )];
    memory.started = Some((started, done + 1, of));
    let delay = Duration::from_secs(u64::from(pass.spec.step_delay_seconds));
    Decision {
        status,
        before,
        action: Action::Step(first.ops.clone()),
        after,
        memory,
        in_transition: Some(true),
        starts_transition,
        transition_over: false,
        next: Next::After(delay.max(MIN_STEP_WAIT)),
        target: Some(target),
    }
}

/// The config is not Ready for `reason`: the only condition it then has, and a Warning
/// Event when the reason is new. `at`: the config's generation and the time now.
pub(crate) fn not_ready(
    memory: &Memory,
    cur: &RouteReflectorConfigStatus,
    reason: &'static str,
    message: String,
    at: (Option<i64>, &Time),
    next: Next,
) -> Decision {
    let mut memory = memory.clone();
    let mut before = Vec::new();
    if memory.reported.as_deref() != Some(reason) {
        memory.reported = Some(reason.to_owned());
        before.push(Event {
            type_: EventType::Warning,
            reason,
            note: message.clone(),
        });
    }
    let mut status = cur.clone();
    status.conditions = vec![condition(
        &cur.conditions,
        conditions::READY,
        false,
        reason,
        message,
        at.0,
        at.1,
    )];
    Decision {
        status,
        before,
        action: Action::Nothing,
        after: Vec::new(),
        memory,
        in_transition: None,
        starts_transition: false,
        transition_over: false,
        next,
        target: None,
    }
}

/// The status after a pass failed on Calico's etcd: `Ready` false with the failure,
/// every other condition and field as it was (the pass is retried).
pub(crate) fn unreachable(
    cur: &RouteReflectorConfigStatus,
    message: String,
    at: (Option<i64>, &Time),
) -> RouteReflectorConfigStatus {
    let c = condition(
        &cur.conditions,
        conditions::READY,
        false,
        rc::DATASTORE_UNREACHABLE,
        message,
        at.0,
        at.1,
    );
    let mut st = cur.clone();
    st.conditions.retain(|x| x.type_ != conditions::READY);
    st.conditions.insert(0, c);
    st
}

/// The cluster IDs a topology gives: per reflector (`multi`) or per zone (`simple`).
fn cluster_ids(target: &Topology, kind: Kind) -> BTreeMap<String, String> {
    let mut ids = BTreeMap::new();
    for z in &target.placement.zones {
        if z.reflectors.is_empty() {
            continue;
        }
        if kind == Kind::Multi {
            for r in &z.reflectors {
                if let Some(id) = target.marks.get(r).and_then(|m| m.cluster_id) {
                    ids.insert(r.clone(), id.to_string());
                }
            }
        } else {
            ids.insert(z.zone.clone(), z.cluster_id.to_string());
        }
    }
    ids
}

/// What a status is made of besides its conditions.
struct StatusFacts<'a> {
    cur: &'a RouteReflectorConfigStatus,
    reflectors: u32,
    ring: Vec<String>,
    cluster_ids: BTreeMap<String, String>,
    generation: Option<i64>,
    now: &'a Time,
}

impl StatusFacts<'_> {
    fn condition(&self, type_: &str, status: bool, reason: &str, message: String) -> Condition {
        condition(
            &self.cur.conditions,
            type_,
            status,
            reason,
            message,
            self.generation,
            self.now,
        )
    }

    /// The status of a settled topology: Ready unless it has `warnings`; `mesh` says why
    /// Calico's node-to-node mesh is still on.
    fn settled(self, warnings: &[String], mesh: Option<String>) -> RouteReflectorConfigStatus {
        let ready = warnings.is_empty();
        let conditions = vec![
            self.condition(
                conditions::READY,
                ready,
                rc::SETTLED,
                if ready {
                    format!(
                        "{} reflector(s); every node has its sessions",
                        self.reflectors
                    )
                } else {
                    warnings.join("; ")
                },
            ),
            self.condition(rc::PROGRESSING, false, rc::SETTLED, "no transition".into()),
            match mesh {
                None => self.condition(
                    rc::NODE_TO_NODE_MESH,
                    false,
                    rc::MESH_OFF,
                    "Calico's node-to-node mesh is off".into(),
                ),
                Some(m) => self.condition(rc::NODE_TO_NODE_MESH, true, rc::MESH_ON, m),
            },
        ];
        RouteReflectorConfigStatus {
            reflectors: Some(self.reflectors),
            ring: self.ring,
            cluster_ids: self.cluster_ids,
            transition: None,
            conditions,
        }
    }

    /// The status while step `done + 1` of `of` (phase `phase`) is applied, `left`
    /// steps planned from here.
    fn stepping(
        self,
        phase: &str,
        done: u32,
        of: u32,
        left: usize,
        started: &Time,
    ) -> RouteReflectorConfigStatus {
        let conditions = vec![
            self.condition(
                conditions::READY,
                false,
                rc::APPLYING,
                format!("applying step {} ({phase})", done + 1),
            ),
            self.condition(
                rc::PROGRESSING,
                true,
                rc::APPLYING,
                format!("{left} step(s) left"),
            ),
        ];
        RouteReflectorConfigStatus {
            reflectors: Some(self.reflectors),
            ring: self.ring,
            cluster_ids: self.cluster_ids,
            transition: Some(TransitionStatus {
                phase: phase.to_owned(),
                step: done + 1,
                of: of.max(done + 1),
                started: started.0.to_string(),
            }),
            conditions,
        }
    }
}

/// The decisions a pass makes, replayed the way the controller carries them out: each
/// step's operations applied to a modelled cluster ([`netpolicy_rr::sim::Cluster`]) and
/// the next pass planned from what it then holds. (The process tests,
/// tests/route_reflectors*.rs and tests/bgp_live.rs, run the controller against real API
/// servers, etcd, confd and BIRD.)
#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use netpolicy_rr::sim::Cluster;
    use proptest::prelude::*;

    use super::*;
    use crate::{
        api::{ReflectorsPer, RouteReflectorConfigSpec},
        route_reflector::{config, marks_of},
    };

    const LABEL: &str = crate::api::DEFAULT_REFLECTOR_LABEL;

    fn nodes(zones: &[(&str, usize)]) -> Vec<NodeInfo> {
        let mut out = Vec::new();
        for (z, n) in zones {
            for i in 0..*n {
                let created = i64::try_from(out.len()).unwrap_or(0);
                out.push(NodeInfo::ready(&format!("{z}{i}"), z, created));
            }
        }
        out
    }

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    /// What the datastore holds once `cluster` is what it holds.
    fn current_of(cluster: &Cluster, ring: &[String], mesh: bool) -> Current {
        Current {
            marks: cluster
                .labels
                .iter()
                .map(|(n, l)| {
                    let id = cluster.cluster_ids.get(n).map(ToString::to_string);
                    (n.clone(), marks_of(Some(l), id.as_deref(), LABEL))
                })
                .filter(|(_, m)| !m.is_empty())
                .collect(),
            bgp_peers: cluster.peers.values().cloned().collect(),
            ring: ring.to_vec(),
            mesh,
        }
    }

    /// A job's passes over a modelled cluster.
    struct Job {
        spec: RouteReflectorConfigSpec,
        nodes: Vec<NodeInfo>,
        cluster: Cluster,
        mesh_on: Option<bool>,
        status: RouteReflectorConfigStatus,
        memory: Memory,
        clock: i64,
    }

    impl Job {
        fn new(spec: RouteReflectorConfigSpec, nodes: Vec<NodeInfo>) -> Self {
            let cluster = Cluster::new(&nodes, &Current::default(), LABEL);
            Self {
                spec,
                nodes,
                cluster,
                mesh_on: Some(true),
                status: RouteReflectorConfigStatus::default(),
                memory: Memory::default(),
                clock: 0,
            }
        }

        /// One pass decided (not carried out).
        fn decide(&self, pacing: Option<Duration>) -> Decision {
            let cfg = config(&self.spec).unwrap_or_else(|e| panic!("{e:?}"));
            let current = current_of(&self.cluster, &self.status.ring, self.mesh_on == Some(true));
            let now = at(self.clock);
            step(
                &Pass {
                    spec: &self.spec,
                    cfg: &cfg,
                    status: &self.status,
                    generation: Some(1),
                    now: &now,
                    nodes: &self.nodes,
                    current: &current,
                    mesh_on: self.mesh_on,
                    pacing,
                },
                &self.memory,
            )
        }

        /// One pass decided and carried out as the controller does.
        fn pass(&mut self, pacing: Option<Duration>) -> Decision {
            let d = self.decide(pacing);
            match &d.action {
                Action::Step(ops) => ops.iter().for_each(|op| self.cluster.apply(op)),
                Action::DisableMesh => self.mesh_on = Some(false),
                Action::Nothing => {}
            }
            self.status = d.status.clone();
            self.memory = d.memory.clone();
            self.clock += 10;
            d
        }
    }

    fn reasons(events: &[Event]) -> Vec<&str> {
        events.iter().map(|e| e.reason).collect()
    }

    fn spec(per: ReflectorsPer, mesh: NodeToNodeMesh) -> RouteReflectorConfigSpec {
        RouteReflectorConfigSpec {
            min: 1,
            per,
            node_to_node_mesh: mesh,
            step_delay_seconds: 0,
            ..RouteReflectorConfigSpec::default()
        }
    }

    #[test]
    fn a_cold_start_steps_through_the_plan_then_settles_and_turns_the_mesh_off() {
        let mut job = Job::new(
            spec(ReflectorsPer::Zone, NodeToNodeMesh::Disable),
            nodes(&[("a", 3), ("b", 3)]),
        );
        let first = job.pass(None);
        let Action::Step(ops) = &first.action else {
            panic!("a cluster without reflectors takes a step: {first:?}")
        };
        assert!(!ops.is_empty());
        assert!(first.starts_transition);
        assert_eq!(reasons(&first.before), [events::TRANSITION_STARTED]);
        assert_eq!(reasons(&first.after), [events::STEP_APPLIED]);
        assert!(conditions::is_true(
            &first.status.conditions,
            rc::PROGRESSING
        ));
        let of = first.status.transition.as_ref().map(|t| (t.step, t.of));
        let planned = first.memory.started.as_ref().map(|s| s.2);
        assert_eq!(of.map(|t| t.0), Some(1));
        assert_eq!(of.map(|t| t.1), planned);
        // The step delay (0 here) is at least half a second between steps.
        assert_eq!(first.next, Next::After(MIN_STEP_WAIT));
        let mut steps = 1;
        let settled = loop {
            let d = job.pass(None);
            match d.action {
                Action::Step(_) => {
                    assert!(!d.starts_transition, "one transition, however many steps");
                    assert!(d.before.is_empty());
                    steps += 1;
                    assert_eq!(d.status.transition.as_ref().map(|t| t.step), Some(steps));
                }
                _ => break d,
            }
            assert!(steps < 50, "the plan ends");
        };
        // Settled with every node's sessions: the mesh goes, the transition is over.
        assert_eq!(settled.action, Action::DisableMesh);
        assert_eq!(reasons(&settled.before), [events::SETTLED]);
        assert!(
            settled.before[0]
                .note
                .contains(&format!("after {steps} step(s)"))
        );
        assert_eq!(reasons(&settled.after), [events::MESH_DISABLED]);
        assert!(settled.transition_over);
        assert_eq!(settled.memory.started, None);
        assert!(conditions::is_true(
            &settled.status.conditions,
            conditions::READY
        ));
        assert!(conditions::is_false(
            &settled.status.conditions,
            rc::NODE_TO_NODE_MESH
        ));
        assert_eq!(settled.status.reflectors, Some(2));
        assert_eq!(
            settled.status.cluster_ids.keys().collect::<Vec<_>>(),
            ["a", "b"],
            "`simple`: one cluster ID per zone"
        );
        // Nothing new: nothing to do, the same status (so nothing written).
        let quiet = job.pass(None);
        assert_eq!(quiet.action, Action::Nothing);
        assert!(quiet.before.is_empty() && quiet.after.is_empty());
        assert_eq!(quiet.status, settled.status);
        assert_eq!(quiet.next, Next::Resync);
    }

    #[test]
    fn a_paced_step_waits_and_writes_nothing() {
        let mut job = Job::new(
            spec(ReflectorsPer::Zone, NodeToNodeMesh::Report),
            nodes(&[("a", 3), ("b", 3)]),
        );
        job.pass(None);
        let before = job.status.clone();
        let memory = job.memory.clone();
        let paced = job.decide(Some(Duration::from_secs(3)));
        if job.decide(None).action == Action::Nothing {
            return; // a one-step plan: nothing is left to pace
        }
        assert_eq!(paced.action, Action::Nothing);
        assert_eq!(paced.next, Next::After(Duration::from_secs(3)));
        assert_eq!(paced.status, before, "the status stays 'applying step 1'");
        assert_eq!(paced.memory, memory);
        assert_eq!(paced.in_transition, Some(true));
        assert!(paced.before.is_empty() && paced.after.is_empty());
    }

    #[test]
    fn the_mesh_stays_on_while_the_last_step_is_paced_and_with_report() {
        for mesh in [NodeToNodeMesh::Report, NodeToNodeMesh::Disable] {
            let mut job = Job::new(spec(ReflectorsPer::Zone, mesh), nodes(&[("a", 3)]));
            while matches!(job.decide(None).action, Action::Step(_)) {
                job.pass(None);
            }
            // The plan is applied but the last step's sessions are not up yet: the mesh
            // carries the routes, the transition is not over.
            let paced = job.decide(Some(Duration::from_secs(2)));
            assert_eq!(paced.action, Action::Nothing, "{mesh:?}");
            assert!(!paced.transition_over);
            assert_eq!(paced.in_transition, Some(true));
            assert_eq!(paced.next, Next::After(Duration::from_secs(2)));
            assert!(conditions::is_true(
                &paced.status.conditions,
                rc::NODE_TO_NODE_MESH
            ));
            // Once they are: `disable` turns it off, `report` never does.
            let settled = job.decide(None);
            assert!(settled.transition_over);
            match mesh {
                NodeToNodeMesh::Disable => assert_eq!(settled.action, Action::DisableMesh),
                NodeToNodeMesh::Report => {
                    assert_eq!(settled.action, Action::Nothing);
                    assert!(conditions::is_true(
                        &settled.status.conditions,
                        rc::NODE_TO_NODE_MESH
                    ));
                }
            }
        }
    }

    #[test]
    fn a_topology_with_warnings_is_not_ready_and_keeps_the_mesh() {
        // `min: 1` per zone of nodes none of which is eligible: no reflector at all.
        let mut s = spec(ReflectorsPer::Zone, NodeToNodeMesh::Disable);
        s.eligible_nodes
            .match_labels
            .insert("rr".into(), "yes".into());
        let mut job = Job::new(s, nodes(&[("a", 2)]));
        // Its peers are still applied (a node labelled eligible later finds them).
        while matches!(job.decide(None).action, Action::Step(_)) {
            job.pass(None);
        }
        let d = job.decide(None);
        assert_eq!(
            d.action,
            Action::Nothing,
            "the mesh carries the routes: {d:?}"
        );
        let ready = conditions::find(&d.status.conditions, conditions::READY);
        assert!(
            ready.is_some_and(|c| c.status == "False" && c.message.contains("no node")),
            "{d:?}"
        );
        assert!(conditions::is_true(
            &d.status.conditions,
            rc::NODE_TO_NODE_MESH
        ));
    }

    #[test]
    fn not_ready_tells_a_reason_once() {
        let memory = Memory::default();
        let cur = RouteReflectorConfigStatus::default();
        let now = at(0);
        let first = not_ready(
            &memory,
            &cur,
            rc::INVALID,
            "min: bad".into(),
            (Some(1), &now),
            Next::Resync,
        );
        assert_eq!(reasons(&first.before), [rc::INVALID]);
        assert_eq!(first.before[0].type_, EventType::Warning);
        assert_eq!(first.status.conditions.len(), 1);
        let again = not_ready(
            &first.memory,
            &first.status,
            rc::INVALID,
            "min: bad".into(),
            (Some(1), &at(60)),
            Next::Resync,
        );
        assert!(again.before.is_empty(), "the same reason is told once");
        assert_eq!(again.status, first.status, "and not written again");
        let other = not_ready(
            &again.memory,
            &again.status,
            rc::DATASTORE_UNREACHABLE,
            "etcd down".into(),
            (Some(1), &now),
            Next::Resync,
        );
        assert_eq!(reasons(&other.before), [rc::DATASTORE_UNREACHABLE]);
    }

    #[test]
    fn an_etcd_failure_replaces_ready_only() {
        let mut job = Job::new(
            spec(ReflectorsPer::Zone, NodeToNodeMesh::Report),
            nodes(&[("a", 3)]),
        );
        while matches!(job.pass(None).action, Action::Step(_)) {}
        let st = unreachable(&job.status, "connection refused".into(), (Some(1), &at(99)));
        let ready = conditions::find(&st.conditions, conditions::READY);
        assert!(
            ready.is_some_and(|c| c.reason == rc::DATASTORE_UNREACHABLE && c.status == "False")
        );
        assert_eq!(st.conditions.len(), job.status.conditions.len());
        assert_eq!(st.cluster_ids, job.status.cluster_ids);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the cluster and the layout: the job's passes reach a settled status
        /// in as many steps as the first plan had or fewer, each step numbered in turn,
        /// the transition told started once and done once, and the settled cluster needs
        /// no further step.
        #[test]
        fn passes_settle_in_the_planned_steps(
            zones in prop::collection::vec(1usize..6, 1..4),
            multi in any::<bool>(),
            min in 1u32..3,
        ) {
            let names = ["a", "b", "c", "d"];
            let layout: Vec<(&str, usize)> = names.iter().copied().zip(zones).collect();
            let mut s = spec(
                if multi { ReflectorsPer::Cluster } else { ReflectorsPer::Zone },
                NodeToNodeMesh::Disable,
            );
            s.min = min;
            if multi {
                s.topology = crate::api::ReflectorTopology::Multi;
            }
            let Ok(_) = config(&s) else { return Ok(()) };
            let mut job = Job::new(s, nodes(&layout));
            let first = job.pass(None);
            let planned = first.memory.started.as_ref().map_or(0, |s| s.2);
            let mut started = usize::from(first.starts_transition);
            let mut steps = u32::from(matches!(first.action, Action::Step(_)));
            let mut d = first;
            while matches!(d.action, Action::Step(_)) {
                d = job.pass(None);
                started += usize::from(d.starts_transition);
                if let Action::Step(_) = d.action {
                    steps += 1;
                    prop_assert_eq!(d.status.transition.as_ref().map(|t| t.step), Some(steps));
                }
                prop_assert!(steps <= planned.max(1), "{} steps of {} planned", steps, planned);
            }
            prop_assert!(started <= 1);
            let told = d.before.iter().filter(|e| e.reason == events::SETTLED).count();
            prop_assert_eq!(told, usize::from(steps > 0));
            prop_assert!(d.status.transition.is_none());
            prop_assert!(!matches!(job.pass(None).action, Action::Step(_)));
        }
    }
}
