//! Hetzner Cloud's floating IP, action and firewall endpoints (`/v1`), answering in the
//! documented JSON shapes. Serve with `serve(api, "/v1")`.

use std::collections::BTreeMap;

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{Cloud, Gate, Shared, gate};

/// The only token the server accepts.
pub const TOKEN: &str = "hz-test-token-0123456789";

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

fn same_id(v: &Value, id: &str) -> bool {
    id.parse::<u64>()
        .is_ok_and(|id| v["id"].as_u64() == Some(id))
}

fn ok(v: Value) -> Response {
    axum::Json(v).into_response()
}

fn running(c: &mut Cloud, command: &str) -> Value {
    c.next += 1;
    json!({"id": 1000 + c.next, "command": command, "status": "running", "progress": 0,
           "started": "2026-11-22T00:00:00+00:00", "finished": null, "resources": [], "error": null})
}

/// The API (an axum handler for [`super::serve`]).
///
/// # Panics
/// When the state lock is poisoned.
// Long because it is the route table of Hetzner's documented API that the tests use, one
// match arm per method and path, each answering in the documented shape.
pub async fn api(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut c = s.lock().unwrap();
    let (path, body) = match gate(&mut c, TOKEN, "/v1", &method, &uri, &headers, &body) {
        Gate::Unauthorized => {
            return error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "unable to authenticate",
            );
        }
        Gate::Throttled => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "1")],
                axum::Json(json!(
                    {"error": {"code": "rate_limit_exceeded", "message": "limit reached"}}
                )),
            )
                .into_response();
        }
        Gate::Pass { path, body } => (path, body),
    };
    let query: BTreeMap<String, String> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                k.to_owned(),
                v.replace("%2F", "/")
                    .replace("%3D", "=")
                    .replace("%2C", ","),
            )
        })
        .collect();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["floating_ips"]) => {
            let sel: Vec<(String, String)> = query
                .get("label_selector")
                .map(|s| {
                    s.split(',')
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (k.into(), v.into()))
                        .collect()
                })
                .unwrap_or_default();
            let ips: Vec<Value> = c
                .ips
                .iter()
                .filter(|ip| {
                    sel.iter()
                        .all(|(k, v)| ip["labels"][k.as_str()] == v.as_str())
                })
                .cloned()
                .collect();
            let n = ips.len();
            ok(
                json!({"floating_ips": ips, "meta": {"pagination": {"page": 1, "per_page": 50,
                "previous_page": null, "next_page": null, "last_page": 1, "total_entries": n}}}),
            )
        }
        ("POST", ["floating_ips"]) => {
            if body["type"] != "ipv4" || !body["home_location"].is_string() {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_input",
                    "type and home_location required",
                );
            }
            c.next += 1;
            let ip = json!({"id": c.next, "ip": format!("198.51.100.{}", c.next), "type": "ipv4",
                "server": null, "labels": body["labels"], "description": body["description"],
                "home_location": {"name": body["home_location"]}, "blocked": false});
            c.ips.push(ip.clone());
            (
                StatusCode::CREATED,
                axum::Json(json!({"floating_ip": ip, "action": null})),
            )
                .into_response()
        }
        ("DELETE", ["floating_ips", id]) => {
            let before = c.ips.len();
            c.ips.retain(|ip| !same_id(ip, id));
            if c.ips.len() == before {
                return error(StatusCode::NOT_FOUND, "not_found", "floating IP not found");
            }
            StatusCode::NO_CONTENT.into_response()
        }
        ("POST", ["floating_ips", id, "actions", action]) => {
            let Some(i) = c.ips.iter().position(|ip| same_id(ip, id)) else {
                return error(StatusCode::NOT_FOUND, "not_found", "floating IP not found");
            };
            match *action {
                "assign" => {
                    let Some(server) = body["server"].as_u64() else {
                        return error(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "invalid_input",
                            "server required",
                        );
                    };
                    c.ips[i]["server"] = json!(server);
                }
                "unassign" => c.ips[i]["server"] = Value::Null,
                _ => return error(StatusCode::NOT_FOUND, "not_found", "no such action"),
            }
            let a = running(&mut c, &format!("{action}_floating_ip"));
            (StatusCode::CREATED, axum::Json(json!({"action": a}))).into_response()
        }
        ("GET", ["actions", id]) => ok(json!({"action": {"id": id.parse::<u64>().unwrap_or(0),
            "status": "success", "progress": 100, "error": null}})),
        ("GET", ["firewalls"]) => {
            let name = query.get("name").cloned().unwrap_or_default();
            let fws: Vec<Value> = c
                .firewalls
                .iter()
                .filter(|f| f["name"] == name.as_str())
                .cloned()
                .collect();
            ok(json!({"firewalls": fws, "meta": {"pagination": {"page": 1, "next_page": null}}}))
        }
        ("POST", ["firewalls"]) => {
            c.next += 1;
            let fw = json!({"id": c.next, "name": body["name"], "rules": [], "applied_to": [], "labels": {}});
            c.firewalls.push(fw.clone());
            (
                StatusCode::CREATED,
                axum::Json(json!({"firewall": fw, "actions": []})),
            )
                .into_response()
        }
        ("POST", ["firewalls", id, "actions", action]) => {
            let Some(i) = c.firewalls.iter().position(|f| same_id(f, id)) else {
                return error(StatusCode::NOT_FOUND, "not_found", "firewall not found");
            };
            match *action {
                "set_rules" => {
                    for r in body["rules"].as_array().into_iter().flatten() {
                        if r["direction"] == "in"
                            && r["source_ips"].as_array().is_none_or(Vec::is_empty)
                        {
                            return error(
                                StatusCode::UNPROCESSABLE_ENTITY,
                                "invalid_input",
                                "source_ips required",
                            );
                        }
                    }
                    c.firewalls[i]["rules"] = body["rules"].clone();
                }
                "apply_to_resources" => {
                    for r in body["apply_to"].as_array().into_iter().flatten() {
                        let applied = c.firewalls[i]["applied_to"].as_array_mut().unwrap();
                        if !applied.contains(r) {
                            applied.push(r.clone());
                        }
                    }
                }
                "remove_from_resources" => {
                    let gone: Vec<Value> =
                        body["remove_from"].as_array().cloned().unwrap_or_default();
                    c.firewalls[i]["applied_to"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|r| !gone.contains(r));
                }
                _ => return error(StatusCode::NOT_FOUND, "not_found", "no such action"),
            }
            let a = running(&mut c, action);
            (StatusCode::CREATED, axum::Json(json!({"actions": [a]}))).into_response()
        }
        _ => error(StatusCode::NOT_FOUND, "not_found", "no such endpoint"),
    }
}
