use std::{collections::BTreeSet, time::Duration};

use reqwest::Method;
use serde_json::{Value, json};

pub use crate::http::Api;
use crate::{Error, FirewallState, IpState, Issuer, PortRule, Result, Tags};

/// A DigitalOcean client.
pub struct DigitalOceanIssuer {
    /// The HTTP side: retries, backoff, timeouts (tunable).
    pub api: Api,
    region: String,
    /// Pause between polls of an action.
    pub poll_interval: Duration,
}

impl std::fmt::Debug for DigitalOceanIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DigitalOceanIssuer")
            .field("api", &self.api)
            .field("region", &self.region)
            .finish()
    }
}

fn droplet_id(node: &str) -> Result<u64> {
    node.strip_prefix("digitalocean://")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            Error::Provider(format!(
                "{node:?} is not a DigitalOcean provider ID (digitalocean://<droplet id>)"
            ))
        })
}

fn ip_state(v: &Value) -> Option<IpState> {
    Some(IpState {
        address: v["ip"].as_str()?.to_owned(),
        assigned_to: v["droplet"]["id"]
            .as_u64()
            .map(|id| format!("digitalocean://{id}")),
    })
}

fn inbound(rule: &PortRule) -> Value {
    json!({"protocol": rule.protocol, "ports": rule.port.to_string(),
           "sources": {"addresses": ["0.0.0.0/0", "::/0"]}})
}

/// The port rule an inbound rule is, if netpolicy manages it (open to everywhere).
fn managed(v: &Value) -> Option<PortRule> {
    let addrs: BTreeSet<&str> = v["sources"]["addresses"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let only_addresses = v["sources"]
        .as_object()
        .is_some_and(|o| o.keys().all(|k| k == "addresses"));
    if addrs != BTreeSet::from(["0.0.0.0/0", "::/0"]) || !only_addresses {
        return None;
    }
    Some(PortRule {
        protocol: v["protocol"].as_str()?.to_owned(),
        port: v["ports"].as_str()?.parse().ok()?,
    })
}

impl DigitalOceanIssuer {
    /// A client for `https://api.digitalocean.com/v2` creating IPs in `region`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(token: impl Into<String>, region: impl Into<String>) -> Result<Self> {
        Self::with_base_url(super::BASE_URL, token, region)
    }

    /// The same against another base URL (a proxy, or a test server).
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn with_base_url(
        base: impl Into<String>,
        token: impl Into<String>,
        region: impl Into<String>,
    ) -> Result<Self> {
        Ok(Self {
            api: Api::new(base, token)?,
            region: region.into(),
            poll_interval: Duration::from_millis(500),
        })
    }

    async fn action(&self, address: &str, body: Value) -> Result<()> {
        let v = self
            .api
            .call(
                Method::POST,
                &format!("/reserved_ips/{address}/actions"),
                Some(body),
            )
            .await?;
        let mut action = v["action"].clone();
        loop {
            match action["status"].as_str() {
                Some("completed") => return Ok(()),
                Some("errored") => {
                    return Err(Error::Provider(format!(
                        "action {} on {address} errored",
                        action["id"]
                    )));
                }
                _ => {
                    tokio::time::sleep(self.poll_interval).await;
                    let id = action["id"].as_u64().unwrap_or_default();
                    let v = self
                        .api
                        .call(
                            Method::GET,
                            &format!("/reserved_ips/{address}/actions/{id}"),
                            None,
                        )
                        .await?;
                    action = v["action"].clone();
                }
            }
        }
    }

    async fn firewall(&self, name: &str) -> Result<Option<Value>> {
        let mut page = 1;
        loop {
            let v = self
                .api
                .call(
                    Method::GET,
                    &format!("/firewalls?page={page}&per_page=200"),
                    None,
                )
                .await?;
            if let Some(fw) = v["firewalls"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|f| f["name"] == name)
            {
                return Ok(Some(fw.clone()));
            }
            if v["links"]["pages"]["next"].is_string() {
                page += 1;
            } else {
                return Ok(None);
            }
        }
    }

    async fn firewall_id(&self, name: &str) -> Result<String> {
        self.firewall(name)
            .await?
            .and_then(|f| f["id"].as_str().map(ToOwned::to_owned))
            .ok_or_else(|| Error::NotFound(format!("firewall {name}")))
    }
}

impl Issuer for DigitalOceanIssuer {
    async fn find_ip(&self, address: Option<&str>, _tags: &Tags) -> Result<Option<IpState>> {
        // Reserved IPs have no tags: only an address can find one.
        let Some(address) = address else {
            return Ok(None);
        };
        match self
            .api
            .call(Method::GET, &format!("/reserved_ips/{address}"), None)
            .await
        {
            Ok(v) => Ok(ip_state(&v["reserved_ip"])),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn create_ip(&self, _tags: &Tags) -> Result<IpState> {
        let v = self
            .api
            .call(
                Method::POST,
                "/reserved_ips",
                Some(json!({ "region": self.region })),
            )
            .await?;
        ip_state(&v["reserved_ip"])
            .ok_or_else(|| Error::Provider("create answered without an IP".into()))
    }

    async fn delete_ip(&self, address: &str) -> Result<()> {
        self.api
            .call(Method::DELETE, &format!("/reserved_ips/{address}"), None)
            .await
            .map(|_| ())
    }

    async fn assign(&self, address: &str, node: &str) -> Result<()> {
        let droplet = droplet_id(node)?;
        self.action(address, json!({"type": "assign", "droplet_id": droplet}))
            .await
    }

    async fn unassign(&self, address: &str) -> Result<()> {
        self.action(address, json!({"type": "unassign"})).await
    }

    async fn find_firewall(&self, name: &str) -> Result<Option<FirewallState>> {
        Ok(self.firewall(name).await?.map(|fw| FirewallState {
            ports: fw["inbound_rules"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(managed)
                .collect(),
            nodes: fw["droplet_ids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .map(|id| format!("digitalocean://{id}"))
                .collect(),
        }))
    }

    async fn create_firewall(&self, name: &str) -> Result<()> {
        self.api
            .call(Method::POST, "/firewalls", Some(json!({ "name": name })))
            .await
            .map(|_| ())
    }

    async fn add_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        let id = self.firewall_id(firewall).await?;
        self.api
            .call(
                Method::POST,
                &format!("/firewalls/{id}/rules"),
                Some(json!({"inbound_rules": [inbound(rule)]})),
            )
            .await
            .map(|_| ())
    }

    async fn remove_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        let id = self.firewall_id(firewall).await?;
        self.api
            .call(
                Method::DELETE,
                &format!("/firewalls/{id}/rules"),
                Some(json!({"inbound_rules": [inbound(rule)]})),
            )
            .await
            .map(|_| ())
    }

    async fn add_node(&self, firewall: &str, node: &str) -> Result<()> {
        let droplet = droplet_id(node)?;
        let id = self.firewall_id(firewall).await?;
        self.api
            .call(
                Method::POST,
                &format!("/firewalls/{id}/droplets"),
                Some(json!({"droplet_ids": [droplet]})),
            )
            .await
            .map(|_| ())
    }

    async fn remove_node(&self, firewall: &str, node: &str) -> Result<()> {
        let droplet = droplet_id(node)?;
        let id = self.firewall_id(firewall).await?;
        self.api
            .call(
                Method::DELETE,
                &format!("/firewalls/{id}/droplets"),
                Some(json!({"droplet_ids": [droplet]})),
            )
            .await
            .map(|_| ())
    }
}
