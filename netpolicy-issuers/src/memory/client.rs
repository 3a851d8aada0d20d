use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Mutex, MutexGuard},
};

use crate::{Error, FirewallState, IpState, Issuer, PortRule, Result, Tags};

/// One recorded change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An IP was created.
    Created(String),
    /// An IP was deleted.
    Deleted(String),
    /// An IP was assigned to a node.
    Assigned(String, String),
    /// An IP was unassigned.
    Unassigned(String),
    /// A firewall port rule was added.
    PortAdded(PortRule),
    /// A firewall port rule was removed.
    PortRemoved(PortRule),
    /// A node was added to the firewall.
    NodeAdded(String),
    /// A node was removed from the firewall.
    NodeRemoved(String),
}

#[derive(Debug, Default)]
struct State {
    ips: BTreeMap<String, (Option<String>, Tags)>,
    firewalls: BTreeMap<String, FirewallState>,
    next: u32,
    events: Vec<Event>,
    faults: VecDeque<Option<Error>>,
    calls: u64,
    latency: std::time::Duration,
}

/// The memory provider.
#[derive(Debug, Default)]
pub struct MemoryIssuer {
    state: Mutex<State>,
}

impl MemoryIssuer {
    /// An empty provider.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Scripts the next calls: each entry is the fate of one call (`None` succeeds,
    /// `Some(e)` fails with `e` without changing anything). Calls past the script succeed.
    pub fn inject(&self, faults: impl IntoIterator<Item = Option<Error>>) {
        self.lock().faults.extend(faults);
    }

    /// Makes every call take `latency` (as a slow cloud API would).
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.lock().latency = latency;
    }

    /// Every change so far.
    pub fn events(&self) -> Vec<Event> {
        self.lock().events.clone()
    }

    /// Calls made so far.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// An IP as it is now.
    pub fn ip(&self, address: &str) -> Option<IpState> {
        self.lock().ips.get(address).map(|(a, _)| IpState {
            address: address.to_owned(),
            assigned_to: a.clone(),
        })
    }

    /// A firewall as it is now.
    pub fn firewall(&self, name: &str) -> Option<FirewallState> {
        self.lock().firewalls.get(name).cloned()
    }

    /// Puts an IP in place (for tests that adopt an existing IP).
    pub fn seed_ip(&self, address: &str, assigned_to: Option<&str>, tags: Tags) {
        self.lock()
            .ips
            .insert(address.to_owned(), (assigned_to.map(Into::into), tags));
    }

    /// Waits out the latency, then runs `f` unless the fault script says this call fails.
    async fn call<T>(&self, f: impl FnOnce(&mut State) -> Result<T>) -> Result<T> {
        let latency = self.lock().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut s = self.lock();
        s.calls += 1;
        if let Some(Some(e)) = s.faults.pop_front() {
            return Err(e);
        }
        f(&mut s)
    }
}

fn fw<'a>(s: &'a mut State, name: &str) -> Result<&'a mut FirewallState> {
    s.firewalls
        .get_mut(name)
        .ok_or_else(|| Error::NotFound(format!("firewall {name}")))
}

impl Issuer for MemoryIssuer {
    async fn tagged_ips(&self, cluster: &str) -> Result<Vec<(IpState, String)>> {
        self.call(|s| {
            Ok(s.ips
                .iter()
                .filter(|(_, (_, t))| t.cluster == cluster)
                .map(|(a, (n, t))| {
                    (
                        IpState {
                            address: a.clone(),
                            assigned_to: n.clone(),
                        },
                        t.routed_ip.clone(),
                    )
                })
                .collect())
        })
        .await
    }

    async fn find_ip(&self, address: Option<&str>, tags: &Tags) -> Result<Option<IpState>> {
        self.call(|s| {
            Ok(s.ips
                .iter()
                .find(|(a, (_, t))| match address {
                    Some(want) => a.as_str() == want,
                    None => t == tags,
                })
                .map(|(a, (n, _))| IpState {
                    address: a.clone(),
                    assigned_to: n.clone(),
                }))
        })
        .await
    }

    async fn create_ip(&self, tags: &Tags) -> Result<IpState> {
        self.call(|s| {
            s.next += 1;
            let address = format!("203.0.113.{}", s.next);
            s.ips.insert(address.clone(), (None, tags.clone()));
            s.events.push(Event::Created(address.clone()));
            Ok(IpState {
                address,
                assigned_to: None,
            })
        })
        .await
    }

    async fn delete_ip(&self, address: &str) -> Result<()> {
        self.call(|s| {
            s.ips
                .remove(address)
                .ok_or_else(|| Error::NotFound(address.to_owned()))?;
            s.events.push(Event::Deleted(address.to_owned()));
            Ok(())
        })
        .await
    }

    async fn assign(&self, address: &str, node: &str) -> Result<()> {
        self.call(|s| {
            let ip = s
                .ips
                .get_mut(address)
                .ok_or_else(|| Error::NotFound(address.to_owned()))?;
            if ip.0.as_deref() != Some(node) {
                ip.0 = Some(node.to_owned());
                s.events
                    .push(Event::Assigned(address.to_owned(), node.to_owned()));
            }
            Ok(())
        })
        .await
    }

    async fn unassign(&self, address: &str) -> Result<()> {
        self.call(|s| {
            let ip = s
                .ips
                .get_mut(address)
                .ok_or_else(|| Error::NotFound(address.to_owned()))?;
            if ip.0.take().is_some() {
                s.events.push(Event::Unassigned(address.to_owned()));
            }
            Ok(())
        })
        .await
    }

    async fn find_firewall(&self, name: &str) -> Result<Option<FirewallState>> {
        self.call(|s| Ok(s.firewalls.get(name).cloned())).await
    }

    async fn create_firewall(&self, name: &str) -> Result<()> {
        self.call(|s| {
            s.firewalls.entry(name.to_owned()).or_default();
            Ok(())
        })
        .await
    }

    async fn add_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        self.call(|s| {
            if fw(s, firewall)?.ports.insert(rule.clone()) {
                s.events.push(Event::PortAdded(rule.clone()));
            }
            Ok(())
        })
        .await
    }

    async fn remove_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        self.call(|s| {
            if fw(s, firewall)?.ports.remove(rule) {
                s.events.push(Event::PortRemoved(rule.clone()));
            }
            Ok(())
        })
        .await
    }

    async fn add_node(&self, firewall: &str, node: &str) -> Result<()> {
        self.call(|s| {
            if fw(s, firewall)?.nodes.insert(node.to_owned()) {
                s.events.push(Event::NodeAdded(node.to_owned()));
            }
            Ok(())
        })
        .await
    }

    async fn remove_node(&self, firewall: &str, node: &str) -> Result<()> {
        self.call(|s| {
            if fw(s, firewall)?.nodes.remove(node) {
                s.events.push(Event::NodeRemoved(node.to_owned()));
            }
            Ok(())
        })
        .await
    }
}
