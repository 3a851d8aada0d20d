//! routedip-operator's `ClusterRoutedIPIssuer` and `RoutedIP`s (both of its API groups) as
//! our `RoutedIPIssuer` and `RoutedIP`s.

use serde_json::{Map, Value, json};

use netpolicy_issuers::{Credentials, Provider};

use super::{Converted, OURS, name_of};

/// The namespace `convert` gives routedip-operator's token Secret (its issuer names the
/// Secret without one).
pub(super) const ROUTEDIP_TOKEN_NAMESPACE: &str = "netpolicy-system";

/// The cloud provider a routedip-operator class or `issuerClass` names
/// (`digitalocean.com/floating-ip`, `digitalocean`, `aws`): one netpolicy describes whose
/// key the class contains.
pub(super) fn routedip_provider(class: &str) -> Option<&'static Provider> {
    let class = class.to_ascii_lowercase();
    clouds().find(|p| class.contains(p.key))
}

/// The providers that are clouds (not the in-process one).
fn clouds() -> impl Iterator<Item = &'static Provider> {
    netpolicy_issuers::PROVIDERS
        .iter()
        .copied()
        .filter(|p| p.credentials != Credentials::None)
}

/// routedip-operator's `ClusterRoutedIPIssuer` as our `RoutedIPIssuer` of the same name;
/// `None` (an error said) when its class names no provider netpolicy has.
pub(super) fn routed_ip_issuer(
    d: &Value,
    name: &str,
    at: &str,
    out: &mut Converted,
) -> Option<Value> {
    let spec = &d["spec"];
    let class = spec["className"].as_str().unwrap_or_default();
    let Some(provider) = routedip_provider(class) else {
        let clouds: Vec<&str> = clouds().map(|p| p.key).collect();
        out.errors.push(format!(
            "{at}: spec.className {class:?} names no provider netpolicy has ({})",
            clouds.join(", ")
        ));
        return None;
    };
    let secret = spec["fromSecretsRef"].as_str().unwrap_or_default();
    let mut issuer = Map::new();
    if provider.credentials == Credentials::Token {
        issuer.insert(
            "tokenSecretRef".into(),
            json!({"namespace": ROUTEDIP_TOKEN_NAMESPACE, "name": secret, "key": "token"}),
        );
        out.notes.push(format!(
            "{at}: spec.fromSecretsRef {secret:?} → tokenSecretRef \
             {ROUTEDIP_TOKEN_NAMESPACE}/{secret} key token: copy the token there (and list \
             the Secret in the chart's routedIPs.tokenSecrets)"
        ));
    } else if !secret.is_empty() {
        issuer.insert(
            "credentialsSecretRef".into(),
            json!({"namespace": ROUTEDIP_TOKEN_NAMESPACE, "name": secret}),
        );
    }
    // The seed creates IPs without saying where; netpolicy's provider needs it.
    if let Some((field, example)) = provider.home {
        issuer.insert(field.into(), json!(""));
        out.errors.push(format!(
            "{at}: spec.{}.{field} has no source in the seed's issuer: set it (such as \
             {example}) where the IPs live",
            provider.key
        ));
    }
    for (key, why) in [
        (
            "firewallPostAllow",
            "netpolicy always opens ports and adds the new holder before the IP moves, \
             and closes what is stale only after",
        ),
        (
            "nodePortRange",
            "the firewall opens the Service's ports (its port fields), not a NodePort range",
        ),
        (
            "perNodeIPLimit",
            "each RoutedIP is elected on its own; a node may hold several",
        ),
        (
            "updateRoutedIPSpec",
            "the operator calls the provider's API itself: no Jobs",
        ),
        (
            "updateFirewallSpec",
            "the operator calls the provider's API itself: no Jobs",
        ),
    ] {
        if !spec[key].is_null() {
            out.notes.push(format!(
                "{at}: spec.{key} has no netpolicy counterpart; dropped ({why})"
            ));
        }
    }
    Some(
        json!({"apiVersion": OURS, "kind": "RoutedIPIssuer", "metadata": {"name": name},
                "spec": {(provider.key): issuer}}),
    )
}

/// routedip-operator's namespaced `RoutedIP` (either group) as our cluster-scoped one of
/// the same name, adopting `spec.routedIP`; its issuer is the converted issuer of its
/// class (or, for `issuerClass`, of its provider).
pub(super) fn routed_ip(
    d: &Value,
    at: &str,
    issuers: &[(String, String)],
    out: &mut Converted,
) -> Option<Value> {
    let name = name_of(d);
    let namespace = d["metadata"]["namespace"].as_str().unwrap_or("default");
    let spec = &d["spec"];
    let issuer = match (spec["className"].as_str(), spec["issuerClass"].as_str()) {
        (Some(class), _) => issuers.iter().find(|(c, _)| c == class),
        (None, Some(class)) => routedip_provider(class).and_then(|p| {
            issuers
                .iter()
                .find(|(c, _)| routedip_provider(c) == Some(p))
        }),
        (None, None) => None,
    };
    let Some((_, issuer)) = issuer else {
        let class = spec["className"]
            .as_str()
            .or_else(|| spec["issuerClass"].as_str())
            .unwrap_or_default();
        out.errors.push(format!(
            "{at}: no issuer in the input for class {class:?}: convert it together with \
             its ClusterRoutedIPIssuer, or write spec.issuerRef by hand"
        ));
        return None;
    };
    let mut ours = Map::new();
    ours.insert("issuerRef".into(), json!({"name": issuer}));
    if let Some(ip) = spec["routedIP"].as_str().filter(|ip| !ip.is_empty()) {
        ours.insert("address".into(), json!(ip));
    }
    if let Some(service) = spec["serviceRef"]["name"].as_str() {
        let ns = spec["serviceRef"]["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(namespace);
        ours.insert(
            "serviceRef".into(),
            json!({"namespace": ns, "name": service}),
        );
    }
    ours.insert("reclaimPolicy".into(), json!("Retain"));
    out.notes.push(format!(
        "{at}: RoutedIP {name} is cluster-scoped in netpolicy (the seed's was in namespace \
         {namespace}); spec.routedIP is adopted as spec.address, never allocated again, and \
         its holder stays while eligible. Among new candidates the oldest node wins (the \
         seed took the youngest, the node likeliest to be a replacement still settling)"
    ));
    Some(
        json!({"apiVersion": OURS, "kind": "RoutedIP", "metadata": {"name": name},
                "spec": ours}),
    )
}
