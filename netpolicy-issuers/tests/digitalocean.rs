//! The real DigitalOcean client against a local HTTP server implementing the documented
//! reserved IP, reserved IP action and firewall endpoints with their JSON shapes, and
//! recording every request (method, path, Authorization header, body).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{collections::BTreeSet, time::Duration};

use netpolicy_issuers::{
    Error, Issuer, ReclaimPolicy, digitalocean::DigitalOceanIssuer, reconcile, release,
};
use serde_json::{Value, json};

mod common;
use common::{desired, tags};
use netpolicy_testenv::cloud::{
    Req,
    digitalocean::{TOKEN, api},
    serve,
};

fn client(base: &str, token: &str) -> DigitalOceanIssuer {
    let mut c = DigitalOceanIssuer::with_base_url(base, token, "fra1").unwrap();
    c.poll_interval = Duration::from_millis(5);
    c.api.max_backoff = Duration::from_millis(20);
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reserved_ip_is_created_assigned_and_failed_over_through_the_documented_api() {
    let (base, cloud) = serve(api, "/v2").await;
    let doc = client(&base, TOKEN);
    cloud.lock().unwrap().throttle.push("/reserved_ips/".into());
    let first = reconcile(
        &doc,
        &tags(),
        None,
        &desired("digitalocean://8219222", &[443]),
    )
    .await
    .unwrap();
    {
        let c = cloud.lock().unwrap();
        assert_eq!(c.ips.len(), 1);
        assert_eq!(c.ips[0]["ip"], first.address.as_str());
        assert_eq!(c.ips[0]["droplet"]["id"], 8_219_222);
        assert_eq!(c.firewalls[0]["droplet_ids"], json!([8_219_222]));
        assert_eq!(c.firewalls[0]["inbound_rules"][0]["ports"], "443");
        assert!(c.log.iter().all(|r| r.auth == format!("Bearer {TOKEN}")));
        assert!(
            c.log
                .iter()
                .all(|r| !r.path.contains(TOKEN) && !r.body.to_string().contains(TOKEN))
        );
        let create = c
            .log
            .iter()
            .find(|r| r.method == "POST" && r.path == "/v2/reserved_ips")
            .unwrap();
        assert_eq!(create.body, json!({"region": "fra1"}));
        let assigns: Vec<&Req> = c
            .log
            .iter()
            .filter(|r| r.path.ends_with("/actions") && r.method == "POST")
            .collect();
        assert_eq!(assigns.len(), 2, "the throttled action was retried");
        assert_eq!(
            assigns[1].body,
            json!({"type": "assign", "droplet_id": 8_219_222})
        );
        assert!(
            c.log
                .iter()
                .any(|r| r.method == "GET" && r.path.contains("/actions/")),
            "actions are polled"
        );
    }
    // Restarted with the recorded address: fail over, open 80, close 443 afterwards.
    let before = cloud.lock().unwrap().log.len();
    let doc = client(&base, TOKEN);
    let second = reconcile(
        &doc,
        &tags(),
        Some(&first.address),
        &desired("digitalocean://8219223", &[80]),
    )
    .await
    .unwrap();
    assert_eq!(second.address, first.address);
    let c = cloud.lock().unwrap();
    assert_eq!(c.ips.len(), 1, "no second IP");
    assert_eq!(c.ips[0]["droplet"]["id"], 8_219_223);
    assert_eq!(c.firewalls[0]["droplet_ids"], json!([8_219_223]));
    let ports: BTreeSet<&str> = c.firewalls[0]["inbound_rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ports"].as_str().unwrap())
        .collect();
    assert_eq!(ports, BTreeSet::from(["80"]));
    let steps: Vec<String> = c.log[before..]
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {} {}", r.method, r.path, r.body))
        .collect();
    let at = |needle: &str| {
        steps
            .iter()
            .position(|s| s.contains(needle))
            .unwrap_or_else(|| panic!("{needle}: {steps:#?}"))
    };
    let assign = at("\"type\":\"assign\"");
    assert!(
        at("/rules {\"inbound_rules\":[{\"ports\":\"80\"") < assign,
        "the new port opens first"
    );
    assert!(
        at("/droplets {\"droplet_ids\":[8219223]") < assign,
        "the new droplet is inside first"
    );
    assert!(
        assign < at("DELETE /v2/firewalls/"),
        "nothing closes before the assignment"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn narrower_firewall_rules_stay_and_release_follows_the_reclaim_policy() {
    let (base, cloud) = serve(api, "/v2").await;
    let doc = client(&base, TOKEN);
    doc.create_firewall("web").await.unwrap();
    let ssh = json!({"protocol": "tcp", "ports": "22", "sources": {"addresses": ["10.0.0.0/8"]}});
    cloud.lock().unwrap().firewalls[0]["inbound_rules"] = json!([ssh]);
    let r = reconcile(&doc, &tags(), None, &desired("digitalocean://1", &[443]))
        .await
        .unwrap();
    assert!(
        cloud.lock().unwrap().firewalls[0]["inbound_rules"]
            .as_array()
            .unwrap()
            .contains(&ssh)
    );
    release(&doc, &tags(), Some(&r.address), ReclaimPolicy::Retain)
        .await
        .unwrap();
    assert_eq!(cloud.lock().unwrap().ips[0]["droplet"], Value::Null);
    release(&doc, &tags(), Some(&r.address), ReclaimPolicy::Delete)
        .await
        .unwrap();
    release(&doc, &tags(), Some(&r.address), ReclaimPolicy::Delete)
        .await
        .unwrap();
    let c = cloud.lock().unwrap();
    assert!(c.ips.is_empty());
    assert_eq!(
        c.log
            .iter()
            .filter(|r| r.method == "DELETE" && r.path.starts_with("/v2/reserved_ips/"))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_are_typed_and_never_show_the_token() {
    let (base, _cloud) = serve(api, "/v2").await;
    let wrong = client(&base, "dop_v1_wrong_secret_value");
    let e = wrong
        .find_ip(Some("45.55.96.1"), &tags())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unauthorized(_)), "{e:?}");
    assert!(!e.to_string().contains("dop_v1_wrong_secret_value"));
    assert!(!format!("{wrong:?}").contains("dop_v1_wrong_secret_value"));
    let doc = client(&base, TOKEN);
    assert_eq!(
        doc.find_ip(Some("45.55.96.250"), &tags()).await.unwrap(),
        None
    );
    assert!(matches!(
        doc.assign("45.55.96.250", "digitalocean://1")
            .await
            .unwrap_err(),
        Error::NotFound(_)
    ));
    let e = doc.assign("45.55.96.250", "hcloud://1").await.unwrap_err();
    assert!(
        e.to_string().contains("not a DigitalOcean provider ID"),
        "{e}"
    );
    // No tags on reserved IPs: without an address nothing is found.
    assert_eq!(doc.find_ip(None, &tags()).await.unwrap(), None);
}
