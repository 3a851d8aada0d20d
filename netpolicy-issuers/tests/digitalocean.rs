//! The real DigitalOcean client against a local HTTP server implementing the documented
//! reserved IP, reserved IP action and firewall endpoints with their JSON shapes, and
//! recording every request (method, path, Authorization header, body).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{collections::BTreeSet, time::Duration};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use netpolicy_issuers::{
    Error, Issuer, ReclaimPolicy, digitalocean::DigitalOceanIssuer, reconcile, release,
};
use serde_json::{Value, json};

mod common;
use common::{Gate, Req, Shared, desired, gate, serve, tags};

const TOKEN: &str = "dop_v1_test_0123456789abcdef";

fn error(status: StatusCode, id: &str, message: &str) -> Response {
    (status, axum::Json(json!({"id": id, "message": message}))).into_response()
}

fn json_status(status: StatusCode, v: Value) -> Response {
    (status, axum::Json(v)).into_response()
}

async fn api(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut c = s.lock().unwrap();
    let (path, body) = match gate(&mut c, TOKEN, "/v2", &method, &uri, &headers, &body) {
        Gate::Unauthorized => {
            return error(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "Unable to authenticate you",
            );
        }
        Gate::Throttled => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "1")],
                axum::Json(
                    json!({"id": "too_many_requests", "message": "API Rate limit exceeded."}),
                ),
            )
                .into_response();
        }
        Gate::Pass { path, body } => (path, body),
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("POST", ["reserved_ips"]) => {
            let Some(region) = body["region"].as_str() else {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "unprocessable_entity",
                    "region or droplet_id required",
                );
            };
            c.next += 1;
            let ip = json!({"ip": format!("45.55.96.{}", c.next), "region": {"slug": region},
                            "droplet": null, "locked": false, "project_id": "p1"});
            c.ips.push(ip.clone());
            json_status(
                StatusCode::ACCEPTED,
                json!({"reserved_ip": ip, "links": {}}),
            )
        }
        ("GET", ["reserved_ips", ip]) => match c.ips.iter().find(|x| x["ip"] == *ip) {
            Some(x) => json_status(StatusCode::OK, json!({"reserved_ip": x})),
            None => error(
                StatusCode::NOT_FOUND,
                "not_found",
                "The resource you were accessing could not be found.",
            ),
        },
        ("DELETE", ["reserved_ips", ip]) => {
            let before = c.ips.len();
            c.ips.retain(|x| x["ip"] != *ip);
            if c.ips.len() == before {
                return error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "The resource you were accessing could not be found.",
                );
            }
            StatusCode::NO_CONTENT.into_response()
        }
        ("POST", ["reserved_ips", ip, "actions"]) => {
            let Some(i) = c.ips.iter().position(|x| x["ip"] == *ip) else {
                return error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "The resource you were accessing could not be found.",
                );
            };
            match body["type"].as_str() {
                Some("assign") => {
                    let Some(d) = body["droplet_id"].as_u64() else {
                        return error(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "unprocessable_entity",
                            "droplet_id required",
                        );
                    };
                    c.ips[i]["droplet"] = json!({"id": d, "name": format!("droplet-{d}")});
                }
                Some("unassign") => c.ips[i]["droplet"] = Value::Null,
                _ => {
                    return error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "unprocessable_entity",
                        "unknown action type",
                    );
                }
            }
            c.next += 1;
            let kind = format!("{}_ip", body["type"].as_str().unwrap_or_default());
            json_status(
                StatusCode::CREATED,
                json!({"action": {"id": 68_000_000 + c.next,
                "status": "in-progress", "type": kind, "resource_type": "reserved_ip"}}),
            )
        }
        ("GET", ["reserved_ips", _ip, "actions", id]) => json_status(
            StatusCode::OK,
            json!({"action": {"id": id.parse::<u64>().unwrap_or(0), "status": "completed"}}),
        ),
        ("GET", ["firewalls"]) => {
            let fws = c.firewalls.clone();
            json_status(
                StatusCode::OK,
                json!({"firewalls": fws, "links": {}, "meta": {"total": fws.len()}}),
            )
        }
        ("POST", ["firewalls"]) => {
            c.next += 1;
            let fw = json!({"id": format!("fb6045f1-cf1d-4ca3-bfac-18832663025{}", c.next % 10),
                "name": body["name"], "status": "succeeded", "inbound_rules": [],
                "outbound_rules": [], "droplet_ids": [], "tags": []});
            c.firewalls.push(fw.clone());
            json_status(StatusCode::ACCEPTED, json!({"firewall": fw}))
        }
        (m, ["firewalls", id, what]) => {
            let Some(i) = c.firewalls.iter().position(|f| f["id"] == *id) else {
                return error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "The resource you were accessing could not be found.",
                );
            };
            match (m, *what) {
                ("POST", "rules") => {
                    for r in body["inbound_rules"].as_array().into_iter().flatten() {
                        if r["sources"].is_null() {
                            return error(
                                StatusCode::UNPROCESSABLE_ENTITY,
                                "unprocessable_entity",
                                "sources required",
                            );
                        }
                        let rules = c.firewalls[i]["inbound_rules"].as_array_mut().unwrap();
                        if !rules.contains(r) {
                            rules.push(r.clone());
                        }
                    }
                }
                ("DELETE", "rules") => {
                    let gone: Vec<Value> = body["inbound_rules"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    c.firewalls[i]["inbound_rules"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|r| !gone.contains(r));
                }
                ("POST", "droplets") => {
                    for d in body["droplet_ids"].as_array().into_iter().flatten() {
                        let ids = c.firewalls[i]["droplet_ids"].as_array_mut().unwrap();
                        if !ids.contains(d) {
                            ids.push(d.clone());
                        }
                    }
                }
                ("DELETE", "droplets") => {
                    let gone: Vec<Value> =
                        body["droplet_ids"].as_array().cloned().unwrap_or_default();
                    c.firewalls[i]["droplet_ids"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|d| !gone.contains(d));
                }
                _ => return error(StatusCode::NOT_FOUND, "not_found", "no such endpoint"),
            }
            StatusCode::NO_CONTENT.into_response()
        }
        _ => error(StatusCode::NOT_FOUND, "not_found", "no such endpoint"),
    }
}

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
