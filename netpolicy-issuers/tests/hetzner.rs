//! The real Hetzner client against a local HTTP server (`netpolicy_testenv::cloud`) that
//! implements the Hetzner Cloud API's floating IP, action and firewall endpoints with
//! their documented JSON shapes, and records every request (method, path, Authorization
//! header, body) for checking.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{collections::BTreeSet, time::Duration};

use netpolicy_issuers::{
    Desired, Error, Issuer, ReclaimPolicy, hetzner::HetznerIssuer, reconcile, release,
};
use serde_json::{Value, json};

mod common;
use common::{desired, tags};
use netpolicy_testenv::cloud::{
    Req,
    hetzner::{TOKEN, api},
    serve,
};

fn client(base: &str, token: &str) -> HetznerIssuer {
    let mut c = HetznerIssuer::with_base_url(base, token, "fsn1").unwrap();
    c.poll_interval = Duration::from_millis(5);
    c.api.max_backoff = Duration::from_millis(20);
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn a_routed_ip_is_created_assigned_and_failed_over_through_the_documented_api() {
    let (base, cloud) = serve(api, "/v1").await;
    let hz = client(&base, TOKEN);
    // Throttle the first assignment: the client waits (Retry-After) and retries.
    cloud.lock().unwrap().throttle.push("/floating_ips/".into());

    reconcile(&hz, &tags(), None, &desired("hcloud://42", &[443]))
        .await
        .unwrap();
    {
        let c = cloud.lock().unwrap();
        assert_eq!(c.ips.len(), 1);
        assert_eq!(c.ips[0]["server"], 42);
        assert_eq!(
            c.ips[0]["labels"],
            json!({"netpolicy.io/cluster": "prod-eu", "netpolicy.io/routed-ip": "ingress"})
        );
        let fw = &c.firewalls[0];
        assert_eq!(
            fw["applied_to"],
            json!([{"type": "server", "server": {"id": 42}}])
        );
        assert_eq!(fw["rules"][0]["port"], "443");
        // Every request carried the token, and only in the Authorization header.
        assert!(c.log.iter().all(|r| r.auth == format!("Bearer {TOKEN}")));
        assert!(
            c.log
                .iter()
                .all(|r| !r.path.contains(TOKEN) && !r.body.to_string().contains(TOKEN))
        );
        // The documented calls, in the failover order.
        let calls: Vec<String> = c
            .log
            .iter()
            .map(|r| format!("{} {}", r.method, r.path.split('?').next().unwrap()))
            .collect();
        let first = |needle: &str| {
            calls
                .iter()
                .position(|x| x == needle)
                .unwrap_or_else(|| panic!("{needle} not in {calls:#?}"))
        };
        assert!(first("POST /v1/floating_ips") < first("POST /v1/firewalls"));
        assert!(
            first("POST /v1/firewalls/2/actions/set_rules")
                < first("POST /v1/firewalls/2/actions/apply_to_resources")
        );
        assert!(
            first("POST /v1/firewalls/2/actions/apply_to_resources")
                < first("POST /v1/floating_ips/1/actions/assign")
        );
        let assigns: Vec<&Req> = c
            .log
            .iter()
            .filter(|r| r.path.ends_with("/actions/assign"))
            .collect();
        assert_eq!(assigns.len(), 2, "the throttled assignment was retried");
        assert_eq!(assigns[1].body, json!({"server": 42}));
        let create = c
            .log
            .iter()
            .find(|r| r.method == "POST" && r.path == "/v1/floating_ips")
            .unwrap();
        assert_eq!(create.body["type"], "ipv4");
        assert_eq!(create.body["home_location"], "fsn1");
        assert!(
            c.log.iter().any(|r| r.path.starts_with("/v1/actions/")),
            "actions are polled"
        );
    }

    // A restarted operator finds the IP by its labels; failover to 43 with port 80 added
    // and 443 dropped: open 80 and admit 43 before assigning, close 443 and drop 42 after.
    let before = cloud.lock().unwrap().log.len();
    let hz = client(&base, TOKEN);
    reconcile(&hz, &tags(), None, &desired("hcloud://43", &[80]))
        .await
        .unwrap();
    let c = cloud.lock().unwrap();
    assert_eq!(c.ips.len(), 1, "no second IP");
    assert_eq!(c.ips[0]["server"], 43);
    let fw = &c.firewalls[0];
    assert_eq!(
        fw["applied_to"],
        json!([{"type": "server", "server": {"id": 43}}])
    );
    let ports: BTreeSet<&str> = fw["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["port"].as_str().unwrap())
        .collect();
    assert_eq!(ports, BTreeSet::from(["80"]));
    let steps: Vec<String> = c.log[before..]
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| format!("{} {}", r.path, r.body))
        .collect();
    let at = |needle: &str| {
        steps
            .iter()
            .position(|s| s.contains(needle))
            .unwrap_or_else(|| panic!("{needle}: {steps:#?}"))
    };
    assert!(at("\"port\":\"80\"") < at("apply_to_resources"));
    assert!(at("apply_to_resources") < at("actions/assign"));
    assert!(at("actions/assign") < at("remove_from_resources"));
}

#[tokio::test(flavor = "multi_thread")]
async fn foreign_firewall_rules_are_kept_exactly_and_retain_never_deletes() {
    let (base, cloud) = serve(api, "/v1").await;
    let hz = client(&base, TOKEN);
    hz.create_firewall("web").await.unwrap();
    let ssh = json!({"direction": "in", "protocol": "tcp", "port": "22", "source_ips": ["10.0.0.0/8"], "description": "ssh from the VPN"});
    cloud.lock().unwrap().firewalls[0]["rules"] = json!([ssh]);
    reconcile(&hz, &tags(), None, &desired("hcloud://42", &[443]))
        .await
        .unwrap();
    assert!(
        cloud.lock().unwrap().firewalls[0]["rules"]
            .as_array()
            .unwrap()
            .contains(&ssh)
    );
    release(&hz, &tags(), None, ReclaimPolicy::Retain)
        .await
        .unwrap();
    let c = cloud.lock().unwrap();
    assert_eq!(c.ips.len(), 1, "Retain keeps the IP");
    assert_eq!(c.ips[0]["server"], Value::Null);
    assert!(!c.log.iter().any(|r| r.method == "DELETE"));
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_are_typed_and_never_show_the_token() {
    let (base, _cloud) = serve(api, "/v1").await;
    let wrong = client(&base, "not-the-token-secret");
    let e = wrong.find_ip(None, &tags()).await.unwrap_err();
    assert!(matches!(e, Error::Unauthorized(_)), "{e:?}");
    assert!(!e.to_string().contains("not-the-token-secret"));
    assert!(!format!("{wrong:?}").contains("not-the-token-secret"));
    let hz = client(&base, TOKEN);
    let e = hz.assign("203.0.113.99", "hcloud://1").await.unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");
    let e = hz.assign("203.0.113.99", "droplet://1").await.unwrap_err();
    assert!(e.to_string().contains("not a Hetzner provider ID"), "{e}");
    // Delete: gone once, then idempotent.
    reconcile(
        &hz,
        &tags(),
        None,
        &Desired {
            node: Some("hcloud://5".into()),
            firewall: None,
            ports: BTreeSet::new(),
        },
    )
    .await
    .unwrap();
    release(&hz, &tags(), None, ReclaimPolicy::Delete)
        .await
        .unwrap();
    release(&hz, &tags(), None, ReclaimPolicy::Delete)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_that_takes_no_connection_is_unreachable_after_one_more_try() {
    // Nothing listens on this port: every connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let hz = client(&format!("http://127.0.0.1:{closed}/v1"), TOKEN);
    let e = hz.find_ip(None, &tags()).await.unwrap_err();
    assert!(matches!(e, Error::Unreachable(_)), "{e:?}");
    assert!(e.to_string().starts_with("provider API unreachable"), "{e}");
    assert!(!e.to_string().contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_beyond_the_retries_surface_with_retry_after() {
    let (base, cloud) = serve(api, "/v1").await;
    let mut hz = client(&base, TOKEN);
    hz.api.retries = 1;
    cloud
        .lock()
        .unwrap()
        .throttle
        .extend(["/floating_ips".to_owned(), "/floating_ips".to_owned()]);
    let e = hz.find_ip(None, &tags()).await.unwrap_err();
    assert_eq!(e, Error::RateLimited { retry_after: 1 });
}

#[tokio::test(flavor = "multi_thread")]
async fn tagged_ips_are_listed_by_the_cluster_label_with_their_routed_ip() {
    let (base, cloud) = serve(api, "/v1").await;
    let hz = client(&base, TOKEN);
    let mine = |name: &str| netpolicy_issuers::Tags {
        cluster: "prod-eu".into(),
        routed_ip: name.into(),
    };
    hz.create_ip(&mine("web")).await.unwrap();
    hz.create_ip(&mine("mail")).await.unwrap();
    hz.create_ip(&netpolicy_issuers::Tags {
        cluster: "other".into(),
        routed_ip: "web".into(),
    })
    .await
    .unwrap();
    let mut got: Vec<String> = hz
        .tagged_ips("prod-eu")
        .await
        .unwrap()
        .into_iter()
        .map(|(ip, name)| format!("{name}={}", ip.address))
        .collect();
    got.sort();
    assert_eq!(got, ["mail=198.51.100.2", "web=198.51.100.1"]);
    let last = cloud.lock().unwrap().log.last().unwrap().path.clone();
    assert!(
        last.contains("label_selector=netpolicy.io%2Fcluster%3Dprod-eu"),
        "{last}"
    );
}
