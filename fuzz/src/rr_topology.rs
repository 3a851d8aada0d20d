//! Random clusters and route-reflector configurations, decoded from the input bytes: the
//! topology never panics, its rules hold, the transition from a previous topology keeps
//! every node connected when replayed operation by operation, and the incremental
//! engine agrees with a full recomputation.

use netpolicy_rr::{
    Config, Current, Effect, Engine, Kind, NodeInfo, Per, Taint, sim, topology, transition,
};

const ZONES: [&str; 5] = ["a", "b", "c", "d", ""];

fn node(id: u8, b: u8, created: u8) -> NodeInfo {
    let mut n = NodeInfo::ready(
        &format!("n{id:03}"),
        ZONES[usize::from(b % 5)],
        i64::from(created),
    );
    if ZONES[usize::from(b % 5)].is_empty() {
        n.labels.clear();
    }
    n.ready = b & 0x08 == 0 || b & 0x10 == 0;
    n.unschedulable = b & 0x20 != 0 && b & 0x40 != 0;
    if b & 0x80 != 0 && b & 0x40 == 0 {
        n.taints.push(Taint {
            key: "k".into(),
            value: String::new(),
            effect: Effect::NoExecute,
        });
    }
    n
}

fn config(b: &[u8; 5]) -> Config {
    Config {
        min: u32::from(b[0] % 5),
        max: u32::from(b[0] % 5 + b[1] % 5),
        ratio: f64::from(b[2] % 50 + 1) / 100.0,
        per: if b[3] & 1 == 0 {
            Per::Zone
        } else {
            Per::Cluster
        },
        topology: if b[3] & 2 == 0 {
            Kind::Simple
        } else {
            Kind::Multi
        },
        peers_per_node: u32::from(b[4] % 5),
        reflector_label: "rr".into(),
        ..Config::default()
    }
}

/// One input: panics on a broken invariant (a finding).
pub fn run(data: &[u8]) {
    if data.len() < 10 {
        return;
    }
    let c0 = config(&[data[0], data[1], data[2], data[3], data[4]]);
    let c1 = config(&[data[5], data[6], data[7], data[8], data[9]]);
    let body = &data[10..];
    // Triples: (node id, flags, creation); ids under 64 are in the first cluster,
    // the rest are added for the second; the high bit of the id drops the node.
    let mut first = Vec::new();
    let mut second = Vec::new();
    for t in body.chunks_exact(3).take(60) {
        let n = node(t[0] & 0x3f, t[1], t[2]);
        if t[0] & 0x40 == 0 {
            first.push(n.clone());
        }
        if t[0] & 0x80 == 0 {
            second.push(n);
        }
    }
    first.sort_by(|a, b| a.name.cmp(&b.name));
    first.dedup_by(|a, b| a.name == b.name);
    second.sort_by(|a, b| a.name.cmp(&b.name));
    second.dedup_by(|a, b| a.name == b.name);
    let empty = Current::default();
    let Ok(t0) = topology(&first, &c0, &empty) else {
        // Only configuration errors are allowed.
        assert!(c0.check().is_err() || c0.peers_per_node == 0);
        return;
    };
    for n in &first {
        if t0.placement.reflectors().any(|(r, _)| r == n.name) {
            assert!(c0.is_eligible(n), "{} is not eligible", n.name);
        }
    }
    let now = t0.applied();
    let Ok(t1) = topology(&second, &c1, &now) else {
        return;
    };
    let steps = transition(&second, &now, &t1);
    if let Err(e) = sim::verify(&second, &now, &steps, &t1, "rr") {
        if std::env::var("RR_DEBUG").is_ok() {
            eprintln!(
                "c0 {c0:?}\nc1 {c1:?}\nfirst {first:#?}\nsecond {second:#?}\nnow {now:#?}\nt1 {t1:#?}\nsteps {steps:#?}"
            );
        }
        panic!("{e}");
    }
    // The engine, fed the second cluster's nodes one by one from the first's state.
    let Ok(mut engine) = Engine::new(first.clone(), c0.clone(), &empty) else {
        return;
    };
    for n in &first {
        if !second.iter().any(|m| m.name == n.name) {
            let prev = engine.current();
            engine.remove_node(&n.name).unwrap();
            assert_eq!(
                engine.topology(),
                &topology(engine.nodes(), &c0, &prev).unwrap()
            );
        }
    }
    for n in &second {
        let prev = engine.current();
        engine.add_node(n.clone()).unwrap();
        assert_eq!(
            engine.topology(),
            &topology(engine.nodes(), &c0, &prev).unwrap()
        );
    }
}
