//! [`AnyIssuer`]: whichever provider an issuer names, as one [`Issuer`]. What an
//! operator that serves several providers holds per issuer, so its code calls the
//! trait once instead of matching on the provider at every call.

#[cfg(feature = "memory")]
use std::sync::Arc;

use crate::{FirewallState, IpState, Issuer, PortRule, Result, Tags};

/// One of the providers compiled in (by feature).
#[derive(Debug)]
pub enum AnyIssuer {
    /// AWS Elastic IPs and security groups.
    #[cfg(feature = "aws")]
    Aws(crate::aws::AwsIssuer),
    /// Hetzner Cloud floating IPs and firewalls.
    #[cfg(feature = "hetzner")]
    Hetzner(crate::hetzner::HetznerIssuer),
    /// DigitalOcean reserved IPs and cloud firewalls.
    #[cfg(feature = "digitalocean")]
    DigitalOcean(crate::digitalocean::DigitalOceanIssuer),
    /// The in-process provider (shared: its state is the provider's).
    #[cfg(feature = "memory")]
    Memory(Arc<crate::memory::MemoryIssuer>),
}

/// `$e` with `$i` bound to the provider inside `$self`.
macro_rules! each {
    ($self:expr, $i:ident => $e:expr) => {
        match $self {
            #[cfg(feature = "aws")]
            AnyIssuer::Aws($i) => $e,
            #[cfg(feature = "hetzner")]
            AnyIssuer::Hetzner($i) => $e,
            #[cfg(feature = "digitalocean")]
            AnyIssuer::DigitalOcean($i) => $e,
            #[cfg(feature = "memory")]
            AnyIssuer::Memory($i) => {
                let $i = &**$i;
                $e
            }
        }
    };
}

impl Issuer for AnyIssuer {
    async fn find_ip(&self, address: Option<&str>, tags: &Tags) -> Result<Option<IpState>> {
        each!(self, i => i.find_ip(address, tags).await)
    }

    async fn create_ip(&self, tags: &Tags) -> Result<IpState> {
        each!(self, i => i.create_ip(tags).await)
    }

    async fn delete_ip(&self, address: &str) -> Result<()> {
        each!(self, i => i.delete_ip(address).await)
    }

    async fn assign(&self, address: &str, node: &str) -> Result<()> {
        each!(self, i => i.assign(address, node).await)
    }

    async fn unassign(&self, address: &str) -> Result<()> {
        each!(self, i => i.unassign(address).await)
    }

    async fn find_firewall(&self, name: &str) -> Result<Option<FirewallState>> {
        each!(self, i => i.find_firewall(name).await)
    }

    async fn create_firewall(&self, name: &str) -> Result<()> {
        each!(self, i => i.create_firewall(name).await)
    }

    async fn add_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        each!(self, i => i.add_port(firewall, rule).await)
    }

    async fn remove_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        each!(self, i => i.remove_port(firewall, rule).await)
    }

    async fn add_node(&self, firewall: &str, node: &str) -> Result<()> {
        each!(self, i => i.add_node(firewall, node).await)
    }

    async fn remove_node(&self, firewall: &str, node: &str) -> Result<()> {
        each!(self, i => i.remove_node(firewall, node).await)
    }

    async fn tagged_ips(&self, cluster: &str) -> Result<Vec<(IpState, String)>> {
        each!(self, i => i.tagged_ips(cluster).await)
    }
}

#[cfg(all(test, feature = "memory"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn any_issuer_is_the_provider_it_holds() {
        let memory = Arc::new(crate::memory::MemoryIssuer::default());
        let any = AnyIssuer::Memory(Arc::clone(&memory));
        let tags = Tags {
            cluster: "c".into(),
            routed_ip: "web".into(),
        };
        let ip = any.create_ip(&tags).await.map_err(|e| e.to_string());
        let found = any.find_ip(None, &tags).await.map_err(|e| e.to_string());
        let Ok(ip) = ip else {
            panic!("create: {ip:?}");
        };
        assert_eq!(found, Ok(Some(ip.clone())), "seen through the trait");
        assert_eq!(
            memory
                .find_ip(Some(&ip.address), &tags)
                .await
                .map_err(|e| e.to_string()),
            Ok(Some(ip)),
            "and in the provider itself"
        );
    }
}
