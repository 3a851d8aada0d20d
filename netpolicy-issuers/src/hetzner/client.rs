use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

pub use crate::http::Api;
use crate::{Error, FirewallState, IpState, Issuer, PortRule, Result, Tags, urlencode};

/// Label keys on netpolicy's floating IPs.
pub const CLUSTER_LABEL: &str = "netpolicy.io/cluster";
/// Label key naming the RoutedIP.
pub const ROUTED_IP_LABEL: &str = "netpolicy.io/routed-ip";

/// A Hetzner Cloud client.
pub struct HetznerIssuer {
    /// The HTTP side: retries, backoff, timeouts (tunable).
    pub api: Api,
    location: String,
    /// Pause between polls of an action.
    pub poll_interval: Duration,
}

impl std::fmt::Debug for HetznerIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HetznerIssuer")
            .field("api", &self.api)
            .field("location", &self.location)
            .finish()
    }
}

#[derive(Debug, Deserialize)]
struct FloatingIp {
    id: u64,
    ip: String,
    server: Option<u64>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct Action {
    id: u64,
    status: String,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Firewall {
    id: u64,
    #[serde(default)]
    rules: Vec<Value>,
    #[serde(default)]
    applied_to: Vec<Value>,
}

fn server_id(node: &str) -> Result<u64> {
    node.strip_prefix("hcloud://")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            Error::Provider(format!(
                "{node:?} is not a Hetzner provider ID (hcloud://<server id>)"
            ))
        })
}

impl HetznerIssuer {
    /// A client for `https://api.hetzner.cloud/v1` creating IPs in `location`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(token: impl Into<String>, location: impl Into<String>) -> Result<Self> {
        Self::with_base_url(super::BASE_URL, token, location)
    }

    /// The same against another base URL (a proxy, or a test server).
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn with_base_url(
        base: impl Into<String>,
        token: impl Into<String>,
        location: impl Into<String>,
    ) -> Result<Self> {
        Ok(Self {
            api: Api::new(base, token)?,
            location: location.into(),
            poll_interval: Duration::from_millis(500),
        })
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value> {
        self.api.call(method, path, body).await
    }

    async fn wait_action(&self, action: &Value) -> Result<()> {
        let mut a: Action = serde_json::from_value(action.clone())
            .map_err(|e| Error::Provider(format!("bad action: {e}")))?;
        loop {
            match a.status.as_str() {
                "success" => return Ok(()),
                "error" => {
                    let msg = a
                        .error
                        .as_ref()
                        .and_then(|e| e["message"].as_str().map(ToOwned::to_owned))
                        .unwrap_or_else(|| "action failed".into());
                    return Err(Error::Provider(format!("action {}: {msg}", a.id)));
                }
                _ => {
                    tokio::time::sleep(self.poll_interval).await;
                    let v = self
                        .call(Method::GET, &format!("/actions/{}", a.id), None)
                        .await?;
                    a = serde_json::from_value(v["action"].clone())
                        .map_err(|e| Error::Provider(format!("bad action: {e}")))?;
                }
            }
        }
    }

    async fn wait_actions(&self, v: &Value) -> Result<()> {
        if let Some(a) = v.get("action").filter(|a| !a.is_null()) {
            self.wait_action(a).await?;
        }
        for a in v["actions"].as_array().into_iter().flatten() {
            self.wait_action(a).await?;
        }
        Ok(())
    }

    async fn ips(&self, selector: Option<&str>) -> Result<Vec<FloatingIp>> {
        let mut out = Vec::new();
        let mut page = 1;
        loop {
            let mut path = format!("/floating_ips?page={page}&per_page=50");
            if let Some(s) = selector {
                path.push_str("&label_selector=");
                path.push_str(&urlencode(s));
            }
            let v = self.call(Method::GET, &path, None).await?;
            let list: Vec<FloatingIp> = serde_json::from_value(v["floating_ips"].clone())
                .map_err(|e| Error::Provider(format!("bad floating IP list: {e}")))?;
            out.extend(list);
            match v["meta"]["pagination"]["next_page"].as_u64() {
                Some(n) if n > page => page = n,
                _ => return Ok(out),
            }
        }
    }

    async fn ip_id(&self, address: &str) -> Result<u64> {
        self.ips(None)
            .await?
            .into_iter()
            .find(|i| i.ip == address)
            .map(|i| i.id)
            .ok_or_else(|| Error::NotFound(format!("floating IP {address}")))
    }

    async fn firewall_by_name(&self, name: &str) -> Result<Option<Firewall>> {
        let v = self
            .call(
                Method::GET,
                &format!("/firewalls?name={}", urlencode(name)),
                None,
            )
            .await?;
        let list: Vec<Firewall> = serde_json::from_value(v["firewalls"].clone())
            .map_err(|e| Error::Provider(format!("bad firewall list: {e}")))?;
        Ok(list.into_iter().next())
    }

    async fn firewall_id(&self, name: &str) -> Result<Firewall> {
        self.firewall_by_name(name)
            .await?
            .ok_or_else(|| Error::NotFound(format!("firewall {name}")))
    }

    /// Replaces the firewall's rules with `change` applied to them. Rules netpolicy does
    /// not manage are sent back exactly as read (their sources, descriptions, ...).
    async fn set_ports(&self, name: &str, change: impl FnOnce(&mut Vec<Value>)) -> Result<()> {
        let fw = self.firewall_id(name).await?;
        let mut rules = fw.rules;
        change(&mut rules);
        let v = self
            .call(
                Method::POST,
                &format!("/firewalls/{}/actions/set_rules", fw.id),
                Some(json!({ "rules": rules })),
            )
            .await?;
        self.wait_actions(&v).await
    }
}

/// The inbound port rule a firewall rule is, if it is one netpolicy manages: inbound from
/// everywhere (`0.0.0.0/0` and `::/0`), as netpolicy writes them. Rules with narrower
/// sources (SSH from a VPN, ...) are someone else's and are never changed.
fn port_rule(v: &Value) -> Option<PortRule> {
    if v["direction"].as_str()? != "in" {
        return None;
    }
    let sources: BTreeSet<&str> = v["source_ips"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if sources != BTreeSet::from(["0.0.0.0/0", "::/0"]) {
        return None;
    }
    Some(PortRule {
        protocol: v["protocol"].as_str()?.to_owned(),
        port: v["port"].as_str()?.parse().ok()?,
    })
}

fn rule_json(r: &PortRule) -> Value {
    json!({"direction": "in", "protocol": r.protocol, "port": r.port.to_string(),
           "source_ips": ["0.0.0.0/0", "::/0"]})
}

impl Issuer for HetznerIssuer {
    async fn find_ip(&self, address: Option<&str>, tags: &Tags) -> Result<Option<IpState>> {
        let found = match address {
            Some(a) => self.ips(None).await?.into_iter().find(|i| i.ip == a),
            None => {
                let sel = format!(
                    "{CLUSTER_LABEL}={},{ROUTED_IP_LABEL}={}",
                    tags.cluster, tags.routed_ip
                );
                self.ips(Some(&sel)).await?.into_iter().next()
            }
        };
        Ok(found.map(|i| IpState {
            address: i.ip,
            assigned_to: i.server.map(|s| format!("hcloud://{s}")),
        }))
    }

    async fn tagged_ips(&self, cluster: &str) -> Result<Vec<(IpState, String)>> {
        let sel = format!("{CLUSTER_LABEL}={cluster}");
        Ok(self
            .ips(Some(&sel))
            .await?
            .into_iter()
            .map(|i| {
                let name = i.labels.get(ROUTED_IP_LABEL).cloned().unwrap_or_default();
                (
                    IpState {
                        address: i.ip,
                        assigned_to: i.server.map(|s| format!("hcloud://{s}")),
                    },
                    name,
                )
            })
            .collect())
    }

    async fn create_ip(&self, tags: &Tags) -> Result<IpState> {
        let labels: BTreeMap<&str, &str> = BTreeMap::from([
            (CLUSTER_LABEL, tags.cluster.as_str()),
            (ROUTED_IP_LABEL, tags.routed_ip.as_str()),
        ]);
        let v = self
            .call(
                Method::POST,
                "/floating_ips",
                Some(json!({
                    "type": "ipv4",
                    "home_location": self.location,
                    "description": format!("netpolicy RoutedIP {}", tags.routed_ip),
                    "labels": labels,
                })),
            )
            .await?;
        self.wait_actions(&v).await?;
        let ip: FloatingIp = serde_json::from_value(v["floating_ip"].clone())
            .map_err(|e| Error::Provider(format!("bad floating IP: {e}")))?;
        Ok(IpState {
            address: ip.ip,
            assigned_to: ip.server.map(|s| format!("hcloud://{s}")),
        })
    }

    async fn delete_ip(&self, address: &str) -> Result<()> {
        let id = self.ip_id(address).await?;
        self.call(Method::DELETE, &format!("/floating_ips/{id}"), None)
            .await
            .map(|_| ())
    }

    async fn assign(&self, address: &str, node: &str) -> Result<()> {
        let server = server_id(node)?;
        let id = self.ip_id(address).await?;
        let v = self
            .call(
                Method::POST,
                &format!("/floating_ips/{id}/actions/assign"),
                Some(json!({ "server": server })),
            )
            .await?;
        self.wait_actions(&v).await
    }

    async fn unassign(&self, address: &str) -> Result<()> {
        let id = self.ip_id(address).await?;
        let v = self
            .call(
                Method::POST,
                &format!("/floating_ips/{id}/actions/unassign"),
                None,
            )
            .await?;
        self.wait_actions(&v).await
    }

    async fn find_firewall(&self, name: &str) -> Result<Option<FirewallState>> {
        Ok(self.firewall_by_name(name).await?.map(|fw| FirewallState {
            ports: fw.rules.iter().filter_map(port_rule).collect(),
            nodes: fw
                .applied_to
                .iter()
                .filter_map(|a| a["server"]["id"].as_u64())
                .map(|id| format!("hcloud://{id}"))
                .collect(),
        }))
    }

    async fn create_firewall(&self, name: &str) -> Result<()> {
        let v = self
            .call(Method::POST, "/firewalls", Some(json!({ "name": name })))
            .await?;
        self.wait_actions(&v).await
    }

    async fn add_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        let new = rule_json(rule);
        self.set_ports(firewall, |rules| {
            if !rules.iter().any(|r| port_rule(r).as_ref() == Some(rule)) {
                rules.push(new);
            }
        })
        .await
    }

    async fn remove_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        self.set_ports(firewall, |rules| {
            rules.retain(|r| port_rule(r).as_ref() != Some(rule));
        })
        .await
    }

    async fn add_node(&self, firewall: &str, node: &str) -> Result<()> {
        let server = server_id(node)?;
        let fw = self.firewall_id(firewall).await?;
        let v = self
            .call(
                Method::POST,
                &format!("/firewalls/{}/actions/apply_to_resources", fw.id),
                Some(json!({"apply_to": [{"type": "server", "server": {"id": server}}]})),
            )
            .await?;
        self.wait_actions(&v).await
    }

    async fn remove_node(&self, firewall: &str, node: &str) -> Result<()> {
        let server = server_id(node)?;
        let fw = self.firewall_id(firewall).await?;
        let v = self
            .call(
                Method::POST,
                &format!("/firewalls/{}/actions/remove_from_resources", fw.id),
                Some(json!({"remove_from": [{"type": "server", "server": {"id": server}}]})),
            )
            .await?;
        self.wait_actions(&v).await
    }
}
