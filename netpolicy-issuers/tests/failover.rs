//! Reliability: random provider faults (429 with Retry-After, conflicts, errors) during
//! random failovers and port changes, against the memory provider. Whatever fails and
//! however often, repeated reconciles converge to the elected node alone holding the IP
//! and alone in the firewall, with exactly the needed ports; at no moment is a needed
//! port closed before its replacement is open, or the holder outside the firewall; under
//! `Retain` the IP is never deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;

use netpolicy_issuers::{
    Desired, Error, PortRule, ReclaimPolicy, Tags,
    memory::{Event, MemoryIssuer},
    reconcile, release,
};
use proptest::prelude::*;

fn fault() -> impl Strategy<Value = Option<Error>> {
    prop_oneof![
        6 => Just(None),
        1 => Just(Some(Error::RateLimited { retry_after: 2 })),
        1 => Just(Some(Error::Conflict("action in progress".into()))),
        1 => Just(Some(Error::Provider("500".into()))),
    ]
}

fn target() -> impl Strategy<Value = (usize, BTreeSet<u16>)> {
    (
        0..3usize,
        proptest::collection::btree_set(prop_oneof![Just(80u16), Just(443), Just(8443)], 1..3),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn failovers_under_faults_converge_and_never_expose_or_lose_the_service(
        targets in proptest::collection::vec(target(), 1..6),
        faults in proptest::collection::vec(proptest::collection::vec(fault(), 0..12), 6),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let issuer = MemoryIssuer::new();
        let tags = Tags { cluster: "c1".into(), routed_ip: "web".into() };
        let nodes = ["do://1", "do://2", "do://3"];
        let mut address = None;
        for (k, (node, ports)) in targets.iter().enumerate() {
            let desired = Desired {
                node: Some(nodes[*node].to_owned()),
                firewall: Some("fw".into()),
                ports: ports.iter().map(|p| PortRule::tcp(*p)).collect(),
            };
            let before = issuer.events().len();
            issuer.inject(faults[k % faults.len()].clone());
            let mut attempts = 0;
            loop {
                attempts += 1;
                prop_assert!(attempts < 50, "no convergence");
                match rt.block_on(reconcile(&issuer, &tags, address.as_deref(), &desired)) {
                    Ok(_) => break,
                    Err(Error::RateLimited { retry_after }) => prop_assert_eq!(retry_after, 2),
                    Err(_) => {}
                }
            }
            // Converged: one holder, the elected node; the firewall holds it alone and
            // exactly the needed ports.
            let ip = issuer.ip(&address.clone().unwrap_or_else(|| {
                match &issuer.events()[0] { Event::Created(a) => a.clone(), e => panic!("{e:?}") }
            })).unwrap();
            address.get_or_insert(ip.address.clone());
            prop_assert_eq!(ip.assigned_to.as_deref(), Some(nodes[*node]));
            let fw = issuer.firewall("fw").unwrap();
            prop_assert_eq!(&fw.nodes, &BTreeSet::from([nodes[*node].to_owned()]));
            prop_assert_eq!(&fw.ports, &desired.ports);
            // Order within this failover: every needed port is opened before any port is
            // closed, and the holder is always inside the firewall.
            let events = issuer.events();
            let mine = &events[before..];
            let last_add = mine.iter().rposition(|e| matches!(e, Event::PortAdded(_)));
            let first_remove = mine.iter().position(|e| matches!(e, Event::PortRemoved(_)));
            if let (Some(a), Some(r)) = (last_add, first_remove) {
                prop_assert!(a < r, "a port closed before the new one opened: {mine:?}");
            }
            let mut holder: Option<String> = None;
            let mut inside: BTreeSet<String> = BTreeSet::new();
            for e in &events {
                match e {
                    Event::Assigned(_, n) => {
                        prop_assert!(inside.contains(n), "assigned to {n} outside the firewall");
                        holder = Some(n.clone());
                    }
                    Event::NodeAdded(n) => { inside.insert(n.clone()); }
                    Event::NodeRemoved(n) => {
                        prop_assert!(holder.as_ref() != Some(n), "removed the holder {n} from the firewall");
                        inside.remove(n);
                    }
                    _ => {}
                }
            }
        }
        // Deleting the RoutedIP under Retain: unassigned, never deleted, whatever fails.
        issuer.inject(faults[0].clone());
        let mut attempts = 0;
        while rt.block_on(release(&issuer, &tags, None, ReclaimPolicy::Retain)).is_err() {
            attempts += 1;
            prop_assert!(attempts < 50);
        }
        let address = address.unwrap();
        prop_assert_eq!(issuer.ip(&address).unwrap().assigned_to, None);
        prop_assert!(!issuer.events().iter().any(|e| matches!(e, Event::Deleted(_))));
        // Exactly one IP was ever created: a restarted reconcile finds it by its tags.
        let created = issuer.events().iter().filter(|e| matches!(e, Event::Created(_))).count();
        prop_assert_eq!(created, 1);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn web() -> Tags {
    Tags {
        cluster: "c1".into(),
        routed_ip: "web".into(),
    }
}

fn on(node: &str, firewall: Option<&str>, ports: &[u16]) -> Desired {
    Desired {
        node: Some(node.into()),
        firewall: firewall.map(Into::into),
        ports: ports.iter().map(|p| PortRule::tcp(*p)).collect(),
    }
}

#[test]
fn delete_policy_deletes_and_is_idempotent() {
    let rt = runtime();
    let issuer = MemoryIssuer::new();
    rt.block_on(reconcile(&issuer, &web(), None, &on("do://1", None, &[])))
        .unwrap();
    rt.block_on(release(&issuer, &web(), None, ReclaimPolicy::Delete))
        .unwrap();
    rt.block_on(release(&issuer, &web(), None, ReclaimPolicy::Delete))
        .unwrap();
    let deleted = issuer
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Deleted(_)))
        .count();
    assert_eq!(deleted, 1);
}

#[test]
fn adopting_a_missing_address_is_a_clear_error() {
    let e = runtime()
        .block_on(reconcile(
            &MemoryIssuer::new(),
            &web(),
            Some("198.51.100.9"),
            &on("do://1", None, &[]),
        ))
        .unwrap_err();
    assert_eq!(e, Error::NotFound("IP 198.51.100.9 to adopt".into()));
}

#[test]
fn a_slow_provider_is_slow_and_still_converges() {
    let issuer = MemoryIssuer::new();
    issuer.set_latency(std::time::Duration::from_millis(20));
    let start = std::time::Instant::now();
    let r = runtime()
        .block_on(reconcile(
            &issuer,
            &web(),
            None,
            &on("do://1", Some("fw"), &[443]),
        ))
        .unwrap();
    let calls = issuer.calls();
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(20 * calls),
        "{calls} calls"
    );
    assert_eq!(
        issuer.ip(&r.address).unwrap().assigned_to.as_deref(),
        Some("do://1")
    );
}
