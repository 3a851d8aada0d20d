//! DigitalOcean's reserved IP, reserved IP action and firewall endpoints (`/v2`),
//! answering in the documented JSON shapes. Serve with `serve(api, "/v2")`.

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{Gate, Shared, gate};

/// The only token the server accepts.
pub const TOKEN: &str = "dop_v1_test_0123456789abcdef";

fn error(status: StatusCode, id: &str, message: &str) -> Response {
    (status, axum::Json(json!({"id": id, "message": message}))).into_response()
}

fn json_status(status: StatusCode, v: Value) -> Response {
    (status, axum::Json(v)).into_response()
}

/// The API (an axum handler for [`super::serve`]).
///
/// # Panics
/// When the state lock is poisoned.
// Long because it is the route table of DigitalOcean's documented API that the tests use,
// one match arm per method and path, each answering in the documented shape.
pub async fn api(
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
