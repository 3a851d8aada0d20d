//! Routed cloud IPs: `RoutedIPIssuer` (a cloud account, exactly one provider) and
//! `RoutedIP`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use netpolicy_core::spec::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ReturnRouting;

/// A cloud account that hands out routed IPs: exactly one provider.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "RoutedIPIssuer",
    plural = "routedipissuers",
    shortname = "ripi",
    status = "RoutedIPIssuerStatus",
    derive = "PartialEq",
    derive = "Default",
    validation = Rule::new(netpolicy_issuers::exactly_one_rule())
        .message(kube::core::Message::Message(netpolicy_issuers::exactly_one_message()))
)]
#[serde(rename_all = "camelCase")]
pub struct RoutedIPIssuerSpec {
    /// AWS Elastic IPs (the firewall is a security group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsIssuer>,
    /// DigitalOcean reserved IPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digitalocean: Option<DigitalOceanIssuer>,
    /// Hetzner Cloud floating IPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hetzner: Option<HetznerIssuer>,
    /// The in-process provider, for tests and demos.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryIssuerSpec>,
    /// A cloud firewall kept in step with the IP's holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall: Option<NameRef>,
    /// Return traffic of the issuer's IPs leaves the way it came: the holder of a
    /// RoutedIP gets `from <ip> lookup <table>` and a default route via `gateway` on
    /// `interface` in that table, in its NodeNetworkConfig (source `RoutedIP/<name>`);
    /// they move with the IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_routing: Option<ReturnRouting>,
}

impl RoutedIPIssuerSpec {
    /// The providers this spec names (exactly one in a valid spec), each as
    /// `netpolicy-issuers` describes it, in [`netpolicy_issuers::PROVIDERS`]' order.
    #[must_use]
    pub fn providers(&self) -> Vec<&'static netpolicy_issuers::Provider> {
        let Ok(serde_json::Value::Object(spec)) = serde_json::to_value(self) else {
            return Vec::new();
        };
        netpolicy_issuers::PROVIDERS
            .iter()
            .copied()
            .filter(|p| spec.contains_key(p.key))
            .collect()
    }
}

/// What the operator reports about a RoutedIPIssuer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutedIPIssuerStatus {
    /// Standard conditions (`Ready`: the token is readable and the provider answers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// DigitalOcean settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigitalOceanIssuer {
    /// The Secret (and key) holding the API token.
    pub token_secret_ref: SecretKeyRef,
    /// Region of new IPs (`fra1`).
    pub region: String,
    /// The API's base URL (default `https://api.digitalocean.com/v2`): a proxy, or a
    /// local server in tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('https://') || self.startsWith('http://')",
        "message": "endpoint is an http:// or https:// URL"
    }]))]
    pub endpoint: Option<String>,
}

/// Hetzner Cloud settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HetznerIssuer {
    /// The Secret (and key) holding the API token.
    pub token_secret_ref: SecretKeyRef,
    /// Home location of new IPs (`fsn1`).
    pub location: String,
    /// The link the holder keeps the IP on (Hetzner routes a floating IP to the server
    /// and expects its OS to have it): default `lo`. The holder's NodeNetworkConfig
    /// gets an `addresses` item (source `RoutedIP/<name>`) that the agent applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_device: Option<String>,
    /// The API's base URL (default `https://api.hetzner.cloud/v1`): a proxy, or a local
    /// server in tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('https://') || self.startsWith('http://')",
        "message": "endpoint is an http:// or https:// URL"
    }]))]
    pub endpoint: Option<String>,
}

/// AWS settings: Elastic IPs in a VPC, associated with the primary network interface of
/// the holder's instance (`spec.providerID` `aws:///<zone>/<instance-id>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsIssuer {
    /// The region of the IPs and instances (`eu-west-1`).
    #[schemars(length(min = 1))]
    pub region: String,
    /// A Secret with `aws_access_key_id`, `aws_secret_access_key` and optionally
    /// `aws_session_token`. Default: the AWS SDK's credential chain (IRSA web identity,
    /// EKS pod identity, instance profile via IMDSv2, environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<NamespacedRef>,
    /// The VPC the `firewall` security group is looked up and created in. Default: found
    /// by name in any VPC, created in the region's default VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('vpc-')",
        "message": "vpcId is a VPC ID (vpc-...)"
    }]))]
    pub vpc_id: Option<String>,
    /// The EC2 API's base URL (default `https://ec2.<region>.amazonaws.com`): a VPC
    /// endpoint, a proxy, or a local emulator in tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.startsWith('https://') || self.startsWith('http://')",
        "message": "endpoint is an http:// or https:// URL"
    }]))]
    pub endpoint: Option<String>,
}

/// The in-process provider takes no settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryIssuerSpec {}

/// A Secret key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// Key in the Secret (default `token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A reference by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NameRef {
    /// Name.
    pub name: String,
}

/// A namespaced reference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NamespacedRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// What happens to the cloud IP when its RoutedIP is deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ReclaimPolicy {
    /// Unassign it and keep it.
    #[default]
    Retain,
    /// Delete it.
    Delete,
}

fn default_cooldown() -> u32 {
    60
}

/// A cloud IP routed to one elected node.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "netpolicy.io",
    version = "v1alpha1",
    kind = "RoutedIP",
    plural = "routedips",
    shortname = "rip",
    status = "RoutedIPStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".status.address"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.node"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".status.step"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RoutedIPSpec {
    /// The RoutedIPIssuer to get the IP from.
    pub issuer_ref: NameRef,
    /// Adopt this existing IP instead of creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `Retain` (default) or `Delete`.
    #[serde(default)]
    pub reclaim_policy: ReclaimPolicy,
    /// Nodes that may hold the IP (empty: all).
    #[serde(default)]
    pub node_selector: LabelSelector,
    /// Only nodes with a ready endpoint of this Service may hold the IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_ref: Option<NamespacedRef>,
    /// Seconds a node that lost the IP waits before it may hold it again.
    #[serde(default = "default_cooldown")]
    pub cooldown_seconds: u32,
}

/// What the operator reports about a RoutedIP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutedIPStatus {
    /// The IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The node holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The cloud firewall kept in step (the issuer's `firewall`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall: Option<String>,
    /// The ports the firewall opens (the Service's ports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<RoutedIPPort>,
    /// Nodes that lost the IP, and until when (RFC 3339) they may not hold it again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cooldown_until: BTreeMap<String, String>,
    /// The failover step in progress (absent when settled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Standard conditions (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A port the firewall opens for a RoutedIP.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub struct RoutedIPPort {
    /// `tcp` or `udp`.
    pub protocol: String,
    /// Port.
    pub port: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRD's rule names `self.spec.<key>` for every provider `netpolicy-issuers`
    /// describes: the API server refuses a rule over a field the schema lacks, so a
    /// provider added there without its settings here must fail this test, not the CRD.
    #[test]
    fn the_spec_has_the_settings_of_every_provider_described() {
        let schema =
            serde_json::to_value(schemars::schema_for!(RoutedIPIssuerSpec)).unwrap_or_default();
        for p in netpolicy_issuers::PROVIDERS {
            assert!(
                schema["properties"].get(p.key).is_some(),
                "RoutedIPIssuerSpec has no field {:?} for the provider netpolicy-issuers \
                 describes",
                p.key
            );
        }
        let two = RoutedIPIssuerSpec {
            memory: Some(MemoryIssuerSpec {}),
            hetzner: Some(HetznerIssuer::default()),
            ..RoutedIPIssuerSpec::default()
        };
        let named: Vec<&str> = two.providers().iter().map(|n| n.key).collect();
        assert_eq!(named, ["hetzner", "memory"]);
    }
}
