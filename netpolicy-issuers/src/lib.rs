//! # netpolicy-issuers
//!
//! Routed cloud IPs for netpolicy: the [`Issuer`] trait (find, create, delete, assign,
//! unassign; firewall: find, create, port rules, nodes), the pure [`elect`]ion and
//! failover [`plan`], a [`reconcile`] driver, and providers behind cargo features
//! (`memory`: in-process, with fault injection, for tests, demos and embedding).
//!
//! ```toml
//! [dependencies]
//! # Pick the providers you use: memory, hetzner, digitalocean, aws.
//! netpolicy-issuers = { version = "0.1", features = ["hetzner"] }
//! tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
//! ```
//!
//! MSRV: Rust 1.89 (the `aws` feature: 1.94.1, the AWS SDK's own).
//!
//! Providers: `memory` (in-process, scripted faults), `hetzner` (floating IPs found by
//! labels), `digitalocean` (reserved IPs, found by address only: they carry no tags, so
//! keep the address [`reconcile`] returns), `aws` (Elastic IPs found by tags, security
//! groups as the firewall, credentials from the AWS SDK's default chain).
//!
//! # Failover order (availability first)
//! Elect; ensure the firewall; add the port rules the service needs; add the new node to
//! the firewall; assign the IP to it; only then remove stale port rules and stale nodes.
//! At no step is a needed port closed or the new holder outside the firewall while it
//! holds the IP. [`plan`] works from observed provider state, so re-planning after a
//! crash yields exactly the remaining steps, and every step is idempotent.
//!
//! # Election
//! Eligible: Ready, schedulable, matching the RoutedIP's `nodeSelector`, no
//! `NoSchedule`/`NoExecute` taint, a provider ID, and, when `serviceRef` is set, a ready
//! endpoint of the Service. The current holder stays while eligible. A node that lost the
//! IP less than `cooldownSeconds` ago is passed over (anti-flap). Ties go to the **oldest**
//! node, then the name: the seed picked the youngest, but the youngest node is the one
//! most likely to be a replacement still settling (or to be scaled away first); the
//! oldest has proven itself, and the choice is deterministic.
//!
//! # Examples
//! ```
//! use netpolicy_issuers::{Candidate, ElectionInput, elect};
//!
//! let nodes = vec![
//!     Candidate::ready("a", "do://1", 10),
//!     Candidate::ready("b", "do://2", 5), // older
//! ];
//! let input = ElectionInput { nodes: &nodes, holder: None, cooldown: &[], now: 100, cooldown_seconds: 60 };
//! assert_eq!(elect(&input).map(|c| c.name.as_str()), Some("b"));
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

use std::collections::BTreeSet;

#[macro_use]
mod provider;
#[cfg(any(feature = "hetzner", feature = "digitalocean"))]
mod http;

pub use provider::{
    Credentials, NodeId, Provider, exactly_one_message, exactly_one_rule, provider, provider_list,
};

// One line per provider: its module (a `PROVIDER` description, and the client behind its
// feature), its entry in `PROVIDERS`, its variant of `AnyIssuer`.
providers! {
    /// AWS Elastic IPs and security groups.
    aws "aws" => Aws(aws::AwsIssuer),
    /// DigitalOcean reserved IPs and cloud firewalls.
    digitalocean "digitalocean" => DigitalOcean(digitalocean::DigitalOceanIssuer),
    /// Hetzner Cloud floating IPs and firewalls.
    hetzner "hetzner" => Hetzner(hetzner::HetznerIssuer),
    /// The in-process provider (shared: its state is the provider's).
    memory "memory" => Memory(std::sync::Arc<memory::MemoryIssuer>),
}

/// Percent-encodes a query value (RFC 3986 unreserved characters stay; SigV4 signs the
/// query exactly in this form).
#[cfg(any(feature = "hetzner", feature = "aws"))]
pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a provider call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The object does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The request conflicts with the object's state (another action in progress, ...).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Too many requests; retry after this many seconds.
    #[error("rate limited: retry after {retry_after} s")]
    RateLimited {
        /// Seconds to wait.
        retry_after: u64,
    },
    /// The token is missing, wrong or lacks a scope.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// A quota of the account is used up (AWS `AddressLimitExceeded`, rules per security
    /// group, ...): retrying soon does not help; raise the quota or free what holds it.
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// The provider's API did not answer: no connection within
    /// [`CONNECT_TIMEOUT`] (twice), or refused. Said within seconds, retried with
    /// backoff by the caller.
    #[error("provider API unreachable: {0}")]
    Unreachable(String),
    /// Anything else the provider reports.
    #[error("provider error: {0}")]
    Provider(String),
}

/// How long the clients wait for a connection to a provider's API before trying once
/// more and then saying [`Error::Unreachable`]: an unreachable API is said within
/// seconds (an answer, once connected, may take up to 30 s).
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Attempts at a connection that fails or times out, within one call.
#[cfg(any(feature = "aws", feature = "hetzner", feature = "digitalocean"))]
pub(crate) const CONNECT_ATTEMPTS: u32 = 2;

/// Whether a request failed for want of a connection (refused, timed out connecting,
/// no route, name not resolved), not after the provider got it.
#[cfg(any(feature = "aws", feature = "hetzner", feature = "digitalocean"))]
pub(crate) fn unreachable(e: &reqwest::Error) -> bool {
    e.is_connect() || (e.is_timeout() && !e.is_body() && !e.is_decode())
}

/// A firewall port rule (inbound, TCP or UDP, to the routed IP's nodes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRule {
    /// `tcp` or `udp`.
    pub protocol: String,
    /// Port.
    pub port: u16,
}

impl PortRule {
    /// A TCP port.
    pub fn tcp(port: u16) -> Self {
        Self {
            protocol: "tcp".into(),
            port,
        }
    }
}

/// A routed IP as the provider has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpState {
    /// The address.
    pub address: String,
    /// The provider ID of the node it is assigned to.
    pub assigned_to: Option<String>,
}

/// A firewall as the provider has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FirewallState {
    /// Inbound port rules.
    pub ports: BTreeSet<PortRule>,
    /// Provider IDs of the nodes it applies to.
    pub nodes: BTreeSet<String>,
}

/// Tags netpolicy puts on what it creates, so a restarted operator finds its own IPs
/// (and orphans of deleted RoutedIPs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tags {
    /// The cluster's identity.
    pub cluster: String,
    /// The RoutedIP's name.
    pub routed_ip: String,
}

/// A cloud provider's routed-IP and firewall API.
pub trait Issuer {
    /// Finds the IP by address, or by the tags netpolicy put on it.
    fn find_ip(
        &self,
        address: Option<&str>,
        tags: &Tags,
    ) -> impl Future<Output = Result<Option<IpState>>> + Send;
    /// Creates an IP tagged with `tags`.
    fn create_ip(&self, tags: &Tags) -> impl Future<Output = Result<IpState>> + Send;
    /// Deletes the IP.
    fn delete_ip(&self, address: &str) -> impl Future<Output = Result<()>> + Send;
    /// Assigns the IP to the node with provider ID `node` (moves it if assigned elsewhere).
    fn assign(&self, address: &str, node: &str) -> impl Future<Output = Result<()>> + Send;
    /// Unassigns the IP.
    fn unassign(&self, address: &str) -> impl Future<Output = Result<()>> + Send;
    /// Finds a firewall by name.
    fn find_firewall(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<FirewallState>>> + Send;
    /// Creates an empty firewall.
    fn create_firewall(&self, name: &str) -> impl Future<Output = Result<()>> + Send;
    /// Adds an inbound port rule.
    fn add_port(&self, firewall: &str, rule: &PortRule) -> impl Future<Output = Result<()>> + Send;
    /// Removes an inbound port rule.
    fn remove_port(
        &self,
        firewall: &str,
        rule: &PortRule,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Applies the firewall to a node.
    fn add_node(&self, firewall: &str, node: &str) -> impl Future<Output = Result<()>> + Send;
    /// Stops applying the firewall to a node.
    fn remove_node(&self, firewall: &str, node: &str) -> impl Future<Output = Result<()>> + Send;
    /// Every IP tagged as cluster `cluster`'s, with the RoutedIP name it was tagged for:
    /// how a restarted operator finds orphans (IPs whose RoutedIP is gone). Providers
    /// whose IPs carry no tags (DigitalOcean) find none.
    fn tagged_ips(
        &self,
        cluster: &str,
    ) -> impl Future<Output = Result<Vec<(IpState, String)>>> + Send {
        let _ = cluster;
        async { Ok(Vec::new()) }
    }
}

/// What election needs to know about a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Node name.
    pub name: String,
    /// `spec.providerID`; a node without one cannot hold an IP.
    pub provider_id: Option<String>,
    /// Ready condition True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// Has a `NoSchedule` or `NoExecute` taint.
    pub tainted: bool,
    /// Matches the RoutedIP's `nodeSelector`.
    pub selected: bool,
    /// Hosts a ready endpoint of the `serviceRef` Service (true when there is none).
    pub has_endpoint: bool,
    /// Creation time, seconds (only its order matters).
    pub created: i64,
}

impl Candidate {
    /// A Ready, selected, untainted node with a provider ID (for examples and tests).
    pub fn ready(name: &str, provider_id: &str, created: i64) -> Self {
        Self {
            name: name.into(),
            provider_id: Some(provider_id.into()),
            ready: true,
            unschedulable: false,
            tainted: false,
            selected: true,
            has_endpoint: true,
            created,
        }
    }

    /// Whether the node may hold the IP.
    pub fn eligible(&self) -> bool {
        self.ready
            && !self.unschedulable
            && !self.tainted
            && self.selected
            && self.has_endpoint
            && self.provider_id.is_some()
    }
}

/// Election input.
#[derive(Debug, Clone, Copy)]
pub struct ElectionInput<'a> {
    /// The nodes.
    pub nodes: &'a [Candidate],
    /// The current holder's name.
    pub holder: Option<&'a str>,
    /// Nodes that lost the IP, with when (seconds).
    pub cooldown: &'a [(String, i64)],
    /// Now (seconds).
    pub now: i64,
    /// `cooldownSeconds`.
    pub cooldown_seconds: i64,
}

/// The node that should hold the IP, or `None` when no node is eligible.
pub fn elect<'a>(input: &ElectionInput<'a>) -> Option<&'a Candidate> {
    if let Some(h) = input.holder
        && let Some(c) = input.nodes.iter().find(|n| n.name == h && n.eligible())
    {
        return Some(c);
    }
    let cooling = |n: &Candidate| {
        input
            .cooldown
            .iter()
            .any(|(name, at)| *name == n.name && input.now - at < input.cooldown_seconds)
    };
    input
        .nodes
        .iter()
        .filter(|n| n.eligible() && !cooling(n))
        .min_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)))
}

/// What the RoutedIP should look like at the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Provider ID of the elected node (`None`: nobody eligible; the IP stays put).
    pub node: Option<String>,
    /// The firewall to keep in step, if any.
    pub firewall: Option<String>,
    /// Ports the service needs.
    pub ports: BTreeSet<PortRule>,
}

/// What the provider has now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The IP (it exists by the time steps are planned).
    pub ip: IpState,
    /// The firewall, when one is configured and exists.
    pub firewall: Option<FirewallState>,
}

/// One provider step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create the firewall.
    CreateFirewall,
    /// Add a port rule.
    AddPort(PortRule),
    /// Apply the firewall to a node.
    AddNode(String),
    /// Assign the IP to a node.
    Assign(String),
    /// Remove a port rule the service no longer needs.
    RemovePort(PortRule),
    /// Stop applying the firewall to a node that no longer holds the IP.
    RemoveNode(String),
}

/// The steps from `observed` to `desired`, in the failover order (see the crate docs).
pub fn plan(observed: &Observed, desired: &Desired) -> Vec<Step> {
    let mut steps = Vec::new();
    let empty = FirewallState::default();
    if desired.firewall.is_some() {
        let fw = match &observed.firewall {
            Some(fw) => fw,
            None => {
                steps.push(Step::CreateFirewall);
                &empty
            }
        };
        for p in desired.ports.difference(&fw.ports) {
            steps.push(Step::AddPort(p.clone()));
        }
        if let Some(n) = &desired.node
            && !fw.nodes.contains(n)
        {
            steps.push(Step::AddNode(n.clone()));
        }
    }
    if let Some(n) = &desired.node
        && observed.ip.assigned_to.as_ref() != Some(n)
    {
        steps.push(Step::Assign(n.clone()));
    }
    if desired.firewall.is_some()
        && let Some(fw) = &observed.firewall
    {
        for p in fw.ports.difference(&desired.ports) {
            steps.push(Step::RemovePort(p.clone()));
        }
        // Without an elected node the current holder keeps its place in the firewall.
        let keep = desired.node.as_ref().or(observed.ip.assigned_to.as_ref());
        for n in &fw.nodes {
            if Some(n) != keep {
                steps.push(Step::RemoveNode(n.clone()));
            }
        }
    }
    steps
}

/// What to do with the IP when its RoutedIP is deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReclaimPolicy {
    /// Unassign, keep the IP (default).
    #[default]
    Retain,
    /// Delete the IP.
    Delete,
}

/// What a [`reconcile`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// The IP's address: record it (a RoutedIP's `status.address`) so that providers
    /// whose IPs carry no tags (DigitalOcean) find it again.
    pub address: String,
    /// The steps executed.
    pub steps: Vec<Step>,
}

/// What the provider has for a RoutedIP: its IP — found by `address`, or by `tags`, or
/// created (tagged) when neither finds one — and the firewall named `firewall`. The
/// first half of [`reconcile`]; a controller that records progress between steps calls
/// it, [`plan`] and [`execute`] itself (the same driver, one step at a time).
///
/// # Errors
/// The first provider error; [`Error::NotFound`] when `address` names an IP the
/// provider does not have (it is never replaced by a new one).
pub async fn observe<I: Issuer>(
    issuer: &I,
    tags: &Tags,
    address: Option<&str>,
    firewall: Option<&str>,
) -> Result<Observed> {
    let ip = match issuer.find_ip(address, tags).await? {
        Some(ip) => ip,
        None if address.is_some() => {
            return Err(Error::NotFound(format!(
                "IP {} to adopt",
                address.unwrap_or_default()
            )));
        }
        None => issuer.create_ip(tags).await?,
    };
    let firewall = match firewall {
        Some(name) => issuer.find_firewall(name).await?,
        None => None,
    };
    Ok(Observed { ip, firewall })
}

/// Carries out one step of a [`plan`] for the IP `address` and the firewall named
/// `firewall` (empty when none is configured). Every step is idempotent at the provider.
///
/// # Errors
/// The provider's.
pub async fn execute<I: Issuer>(
    issuer: &I,
    address: &str,
    firewall: &str,
    step: &Step,
) -> Result<()> {
    match step {
        Step::CreateFirewall => issuer.create_firewall(firewall).await,
        Step::AddPort(p) => issuer.add_port(firewall, p).await,
        Step::AddNode(n) => issuer.add_node(firewall, n).await,
        Step::Assign(n) => issuer.assign(address, n).await,
        Step::RemovePort(p) => issuer.remove_port(firewall, p).await,
        Step::RemoveNode(n) => issuer.remove_node(firewall, n).await,
    }
}

/// One reconcile of a RoutedIP: [`observe`] (find or create its IP, observe the
/// firewall), [`plan`], and [`execute`] the steps in order. It stops at the first
/// failing step and returns the error; the next call re-plans from what the provider
/// then has, so it resumes where it stopped.
///
/// # Errors
/// The first provider error.
pub async fn reconcile<I: Issuer>(
    issuer: &I,
    tags: &Tags,
    address: Option<&str>,
    desired: &Desired,
) -> Result<Reconciled> {
    let observed = observe(issuer, tags, address, desired.firewall.as_deref()).await?;
    let steps = plan(&observed, desired);
    let fw = desired.firewall.clone().unwrap_or_default();
    let mut done = Vec::new();
    for s in steps {
        execute(issuer, &observed.ip.address, &fw, &s).await?;
        done.push(s);
    }
    Ok(Reconciled {
        address: observed.ip.address,
        steps: done,
    })
}

/// Deletion of a RoutedIP: unassign (`Retain`) or delete (`Delete`) its IP. Idempotent.
///
/// # Errors
/// The first provider error other than "not found".
pub async fn release<I: Issuer>(
    issuer: &I,
    tags: &Tags,
    address: Option<&str>,
    policy: ReclaimPolicy,
) -> Result<()> {
    let Some(ip) = issuer.find_ip(address, tags).await? else {
        return Ok(());
    };
    let r = match policy {
        ReclaimPolicy::Retain if ip.assigned_to.is_some() => issuer.unassign(&ip.address).await,
        ReclaimPolicy::Retain => Ok(()),
        ReclaimPolicy::Delete => issuer.delete_ip(&ip.address).await,
    };
    match r {
        Err(Error::NotFound(_)) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(assigned: Option<&str>, fw: Option<(&[u16], &[&str])>) -> Observed {
        Observed {
            ip: IpState {
                address: "203.0.113.7".into(),
                assigned_to: assigned.map(Into::into),
            },
            firewall: fw.map(|(ports, nodes)| FirewallState {
                ports: ports.iter().map(|p| PortRule::tcp(*p)).collect(),
                nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            }),
        }
    }

    fn want(node: Option<&str>, ports: &[u16]) -> Desired {
        Desired {
            node: node.map(Into::into),
            firewall: Some("fw".into()),
            ports: ports.iter().map(|p| PortRule::tcp(*p)).collect(),
        }
    }

    #[test]
    fn failover_adds_before_it_removes() {
        let steps = plan(
            &obs(Some("old"), Some((&[80], &["old"]))),
            &want(Some("new"), &[443]),
        );
        assert_eq!(
            steps,
            [
                Step::AddPort(PortRule::tcp(443)),
                Step::AddNode("new".into()),
                Step::Assign("new".into()),
                Step::RemovePort(PortRule::tcp(80)),
                Step::RemoveNode("old".into()),
            ]
        );
    }

    #[test]
    fn replanning_after_a_crash_gives_the_remaining_steps() {
        // Crashed after AddPort and AddNode.
        let steps = plan(
            &obs(Some("old"), Some((&[80, 443], &["old", "new"]))),
            &want(Some("new"), &[443]),
        );
        assert_eq!(
            steps,
            [
                Step::Assign("new".into()),
                Step::RemovePort(PortRule::tcp(80)),
                Step::RemoveNode("old".into()),
            ]
        );
        assert!(
            plan(
                &obs(Some("new"), Some((&[443], &["new"]))),
                &want(Some("new"), &[443])
            )
            .is_empty()
        );
    }

    #[test]
    fn without_an_eligible_node_the_ip_and_its_firewall_place_stay() {
        let steps = plan(
            &obs(Some("old"), Some((&[443], &["old"]))),
            &want(None, &[443]),
        );
        assert!(steps.is_empty(), "{steps:?}");
    }

    #[test]
    fn election_keeps_the_holder_and_respects_cooldown() {
        let nodes = vec![
            Candidate::ready("a", "p-a", 30),
            Candidate::ready("b", "p-b", 10),
            Candidate::ready("c", "p-c", 20),
        ];
        let base = ElectionInput {
            nodes: &nodes,
            holder: Some("a"),
            cooldown: &[],
            now: 1000,
            cooldown_seconds: 60,
        };
        assert_eq!(elect(&base).unwrap().name, "a", "the holder stays");
        let lost = [("b".to_owned(), 980)];
        let input = ElectionInput {
            holder: None,
            cooldown: &lost,
            ..base
        };
        assert_eq!(elect(&input).unwrap().name, "c", "b is cooling down");
        let mut changed = nodes.clone();
        changed[2].tainted = true;
        changed[1].provider_id = None;
        let input = ElectionInput {
            nodes: &changed,
            holder: None,
            cooldown: &[],
            now: 1000,
            cooldown_seconds: 60,
        };
        assert_eq!(elect(&input).unwrap().name, "a");
    }
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
