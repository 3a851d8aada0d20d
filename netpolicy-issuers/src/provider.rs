//! What netpolicy knows of each provider, said once: a [`Provider`] in the provider's own
//! module (compiled with or without its feature), and one line of [`providers!`] in
//! `lib.rs` that makes the module, its entry in [`crate::PROVIDERS`] and its variant of
//! [`crate::AnyIssuer`] (with the dispatch of every [`crate::Issuer`] call). The
//! RoutedIPIssuer's rule "exactly one provider", its message, the Node `providerID`
//! forms and the default endpoints all follow from [`crate::PROVIDERS`].

/// A provider as netpolicy describes it: plain data, no client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provider {
    /// The key that names it in a RoutedIPIssuer's spec (`hetzner`); also its cargo
    /// feature.
    pub key: &'static str,
    /// What it hands out, as a sentence fragment (`Hetzner Cloud floating IPs`).
    pub what: &'static str,
    /// How it names a node (`spec.providerID`); `None`: any ID will do.
    pub node_id: Option<NodeId>,
    /// Its API's base URL when the issuer names no `endpoint` (`<region>` stands for the
    /// issuer's region where the URL depends on it); `None`: no API.
    pub endpoint: Option<&'static str>,
    /// The spec field saying where new IPs are made, and an example value; `None`: no
    /// such field.
    pub home: Option<(&'static str, &'static str)>,
    /// How the operator authenticates to it.
    pub credentials: Credentials,
}

/// The form of a node's `spec.providerID` a provider assigns IPs by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeId {
    /// The prefix every such ID starts with (`hcloud://`).
    pub prefix: &'static str,
    /// The whole form, as a person reads it (`hcloud://<server id>`).
    pub form: &'static str,
}

/// How a provider's client gets its credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    /// An API token in a Secret (`tokenSecretRef`).
    Token,
    /// AWS keys in a Secret (`credentialsSecretRef`), else the AWS SDK's default chain.
    Aws,
    /// None (the in-process provider).
    None,
}

/// The provider named `key`, compiled in or not.
#[must_use]
pub fn provider(key: &str) -> Option<&'static Provider> {
    crate::PROVIDERS.iter().copied().find(|p| p.key == key)
}

/// The providers as a person lists them: `aws, digitalocean, hetzner or memory`.
#[must_use]
pub fn provider_list() -> String {
    let keys: Vec<&str> = crate::PROVIDERS.iter().map(|p| p.key).collect();
    match keys.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => (*last).to_owned(),
        None => String::new(),
    }
}

/// The CEL rule on a RoutedIPIssuer: its spec names exactly one provider.
#[must_use]
pub fn exactly_one_rule() -> String {
    let has: Vec<String> = crate::PROVIDERS
        .iter()
        .map(|p| format!("has(self.spec.{})", p.key))
        .collect();
    format!("[{}].filter(x, x).size() == 1", has.join(", "))
}

/// The message of [`exactly_one_rule`] (and of `plan`'s same check).
#[must_use]
pub fn exactly_one_message() -> String {
    format!(
        "a RoutedIPIssuer names exactly one provider: {}",
        provider_list()
    )
}

/// Makes each provider's module, [`crate::PROVIDERS`] and [`crate::AnyIssuer`] from one
/// line per provider: `module "feature" => Variant(client type),` with its doc comment.
macro_rules! providers {
    ($($(#[doc = $doc:literal])* $module:ident $feature:literal => $variant:ident($client:ty),)+) => {
        $(pub mod $module;)+

        /// Every provider netpolicy describes, compiled in or not (features choose the
        /// clients, not the descriptions), in the order the CRD lists them.
        pub const PROVIDERS: &[&Provider] = &[$(&$module::PROVIDER),+];

        /// Whichever provider an issuer names, as one [`Issuer`]: what an operator that
        /// serves several providers holds per issuer, so its code calls the trait once
        /// instead of matching on the provider at every call. One variant per provider
        /// compiled in (by feature).
        #[derive(Debug)]
        pub enum AnyIssuer {
            $(
                $(#[doc = $doc])*
                #[cfg(feature = $feature)]
                #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
                $variant($client),
            )+
        }

        #[allow(
            unused_variables,
            reason = "with no provider compiled in, AnyIssuer has no variant to pass them to"
        )]
        impl Issuer for AnyIssuer {
            async fn find_ip(&self, address: Option<&str>, tags: &Tags) -> Result<Option<IpState>> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.find_ip(address, tags).await,)+ }
            }

            async fn create_ip(&self, tags: &Tags) -> Result<IpState> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.create_ip(tags).await,)+ }
            }

            async fn delete_ip(&self, address: &str) -> Result<()> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.delete_ip(address).await,)+ }
            }

            async fn assign(&self, address: &str, node: &str) -> Result<()> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.assign(address, node).await,)+ }
            }

            async fn unassign(&self, address: &str) -> Result<()> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.unassign(address).await,)+ }
            }

            async fn find_firewall(&self, name: &str) -> Result<Option<FirewallState>> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.find_firewall(name).await,)+ }
            }

            async fn create_firewall(&self, name: &str) -> Result<()> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.create_firewall(name).await,)+ }
            }

            async fn add_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.add_port(firewall, rule).await,)+ }
            }

            async fn remove_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.remove_port(firewall, rule).await,)+ }
            }

            async fn add_node(&self, firewall: &str, node: &str) -> Result<()> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.add_node(firewall, node).await,)+ }
            }

            async fn remove_node(&self, firewall: &str, node: &str) -> Result<()> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.remove_node(firewall, node).await,)+ }
            }

            async fn tagged_ips(&self, cluster: &str) -> Result<Vec<(IpState, String)>> {
                match *self { $(#[cfg(feature = $feature)] Self::$variant(ref i) => i.tagged_ips(cluster).await,)+ }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_and_its_message_name_every_provider_once() {
        assert_eq!(
            exactly_one_rule(),
            "[has(self.spec.aws), has(self.spec.digitalocean), has(self.spec.hetzner), \
             has(self.spec.memory)].filter(x, x).size() == 1"
        );
        assert_eq!(
            exactly_one_message(),
            "a RoutedIPIssuer names exactly one provider: aws, digitalocean, hetzner or memory"
        );
        let keys: std::collections::BTreeSet<&str> =
            crate::PROVIDERS.iter().map(|p| p.key).collect();
        assert_eq!(
            keys.len(),
            crate::PROVIDERS.len(),
            "one description per key"
        );
        assert_eq!(provider("hetzner").map(|p| p.key), Some("hetzner"));
        assert_eq!(provider("gcp"), None);
    }

    #[test]
    fn every_cloud_provider_says_how_it_names_a_node_and_where_its_api_is() {
        for p in crate::PROVIDERS {
            let cloud = p.credentials != Credentials::None;
            assert_eq!(p.node_id.is_some(), cloud, "{}: node ID form", p.key);
            assert_eq!(p.endpoint.is_some(), cloud, "{}: endpoint", p.key);
            if let Some(id) = p.node_id {
                assert!(id.form.starts_with(id.prefix), "{}: {id:?}", p.key);
            }
        }
    }

    #[cfg(feature = "memory")]
    #[tokio::test]
    async fn any_issuer_is_the_provider_it_holds() {
        use std::sync::Arc;

        use crate::{AnyIssuer, Issuer, Tags, memory::MemoryIssuer};

        let memory = Arc::new(MemoryIssuer::default());
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
