//! Meridio's objects (`meridio.nordix.org` v1 and v1alpha1, kebab-case fields) as ours.

use serde_json::{Map, Value, json};

use super::{Converted, OURS};

/// `source-subnets` → `sourceSubnets`, recursively through objects and lists.
pub(super) fn camel_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let mut out = String::new();
                    let mut up = false;
                    for c in k.chars() {
                        if c == '-' {
                            up = true;
                        } else if up {
                            out.extend(c.to_uppercase());
                            up = false;
                        } else {
                            out.push(c);
                        }
                    }
                    (out, camel_keys(v))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(camel_keys).collect()),
        other => other.clone(),
    }
}

/// One of Meridio's objects (`meridio.nordix.org`, kebab-case fields) as ours
/// (camelCase; the Attractor's interface flat). Metadata (name, namespace, labels with
/// the `trench` label, annotations such as `resource-template`) is kept.
pub(super) fn meridio_object(
    kind: &str,
    d: &Value,
    at: &str,
    out: &mut Converted,
) -> Option<Value> {
    // Meridio accepts a Trench or Conduit without `spec` (its defaults): ours too, as an
    // empty spec (never `spec: null`, which the schema refuses).
    let mut spec = match camel_keys(&d["spec"]) {
        Value::Null => json!({}),
        s => s,
    };
    let mut metadata = Map::new();
    for k in ["name", "namespace", "labels", "annotations"] {
        if let Some(v) = d["metadata"].get(k).filter(|v| !v.is_null()) {
            metadata.insert(k.into(), v.clone());
        }
    }
    if kind == "Conduit"
        && let Some(r) = spec.as_object_mut().and_then(|o| o.remove("replicas"))
    {
        // v1alpha1: the load balancers' replicas were the Conduit's; later Meridio (and
        // netpolicy) count them on the Attractor.
        out.notes.push(format!(
            "{at}: spec.replicas {r} (Meridio v1alpha1's load-balancer replicas) is the \
             Attractor's spec.replicas in the later API and here: dropped from the \
             Conduit; set it on the Attractor whose composites name this Conduit"
        ));
    }
    if kind == "Attractor" {
        let i = d["spec"]["interface"].clone();
        let ty = i["type"].as_str().unwrap_or("nsm-vlan");
        let mut iface = Map::new();
        iface.insert("name".into(), i["name"].clone());
        match ty {
            "nsm-vlan" => {
                if let Some(b) = i["nsm-vlan"]["base-interface"].as_str() {
                    iface.insert("link".into(), json!(b));
                }
                if let Some(v) = i["nsm-vlan"]["vlan-id"].as_u64() {
                    iface.insert("vlanId".into(), json!(v));
                }
            }
            "network-attachment" => {
                // Multus gives the front ends the interface: no link or VLAN of ours.
                iface.insert("link".into(), i["name"].clone());
                let nads: Vec<Value> = i["network-attachments"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|n| {
                        let mut o = json!({"name": n["name"]});
                        for k in ["namespace", "interface"] {
                            if let Some(v) = n[k].as_str() {
                                o[k] = json!(v);
                            }
                        }
                        o
                    })
                    .collect();
                if nads.len() != 1 {
                    out.errors.push(format!(
                        "{at}: interface type network-attachment needs exactly one \
                         network-attachments entry (found {})",
                        nads.len()
                    ));
                    return None;
                }
                iface.insert("networkAttachments".into(), Value::Array(nads));
            }
            _ => {
                out.errors.push(format!(
                    "{at}: interface type {ty} is neither nsm-vlan nor network-attachment"
                ));
                return None;
            }
        }
        for (theirs, ours) in [("ipv4-prefix", "ipv4Prefix"), ("ipv6-prefix", "ipv6Prefix")] {
            let Some(p) = i[theirs].as_str() else {
                continue;
            };
            // Meridio also takes ranges (`a-b/len`, several joined by `;`): ours is
            // the network they belong to.
            let net = if p.contains('-') || p.contains(';') {
                let len = p.rsplit('/').next().unwrap_or_default();
                let first = p.split(['-', ';', '/']).next().unwrap_or_default();
                let network = format!("{first}/{len}")
                    .parse::<ipnetwork::IpNetwork>()
                    .ok()
                    .and_then(|n| ipnetwork::IpNetwork::new(n.network(), n.prefix()).ok());
                let Some(n) = network else {
                    out.errors
                        .push(format!("{at}: interface.{theirs} {p:?} is not a range"));
                    return None;
                };
                out.notes.push(format!(
                    "{at}: interface.{theirs} {p:?} is a range: netpolicy takes its network \
                         {n} (every address of it but the gateways' may be handed out)"
                ));
                n.to_string()
            } else {
                p.to_owned()
            };
            iface.insert(ours.into(), json!(net));
        }
        spec["interface"] = Value::Object(iface);
    }
    Some(json!({"apiVersion": OURS, "kind": kind, "metadata": metadata, "spec": spec}))
}
