//! ipruler's `NodeConfig` and `ClusterConfig` (`ipruler.pegah.tech/v1`): routing items,
//! rules numbered, the FullConfig merge.

use serde_json::{Map, Value, json};

use super::Converted;

/// The device of the most specific route of `config` with a device and no gateway whose
/// destination holds `gateway`, and that route's destination.
pub(super) fn device_towards(config: &Value, gateway: &str) -> Option<(String, String)> {
    let gw: std::net::IpAddr = gateway.parse().ok()?;
    config["routes"]
        .as_array()?
        .iter()
        .filter(|r| r.get("via").is_none_or(Value::is_null))
        .filter_map(|r| {
            let dev = r["dev"].as_str()?;
            let to: ipnetwork::IpNetwork = r["to"].as_str()?.parse().ok()?;
            to.contains(gw)
                .then(|| (to.prefix(), dev.to_owned(), to.to_string()))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, dev, to)| (dev, to))
}

/// netpolicy routing items from ipruler's `spec.config`; `next_priority` numbers rules.
pub(super) fn routing(
    config: &Value,
    at: &str,
    next_priority: &mut u32,
    out: &mut Converted,
) -> Map<String, Value> {
    let mut spec = Map::new();
    let mut vlans = Vec::new();
    for (i, v) in config["vlans"].as_array().into_iter().flatten().enumerate() {
        let mut vlan = Map::new();
        for k in ["name", "link", "id", "protocol"] {
            if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
                vlan.insert(k.into(), x.clone());
            }
        }
        if vlan.get("link").is_none() || vlan.get("id").is_none() {
            out.errors
                .push(format!("{at}: spec.config.vlans[{i}] needs link and id"));
            continue;
        }
        vlans.push(Value::Object(vlan));
    }
    let mut routes = Vec::new();
    for r in config["routes"].as_array().into_iter().flatten() {
        let mut route = Map::new();
        for (from, to) in [
            ("to", "to"),
            ("via", "via"),
            ("dev", "dev"),
            ("table", "table"),
            ("scope", "scope"),
            ("on-link", "onlink"),
        ] {
            if let Some(x) = r.get(from).filter(|x| !x.is_null()) {
                route.insert(to.into(), x.clone());
            }
        }
        if r["on-link"] == true && r.get("dev").is_none_or(Value::is_null) {
            // ipruler finds the device when it applies, from the route to the gateway:
            // the same here, from this config's routes.
            match r["via"].as_str().and_then(|gw| device_towards(config, gw)) {
                Some((dev, by)) => {
                    out.notes.push(format!(
                        "{at}: route {}: on-link without dev: dev {dev} (from route {by}, \
                         the route to the gateway, as ipruler finds it when it applies)",
                        r["to"].as_str().unwrap_or("?")
                    ));
                    route.insert("dev".into(), json!(dev));
                }
                None => out.errors.push(format!(
                    "{at}: route {}: on-link without dev: the kernel needs the output device \
                     for an on-link gateway and no route of this config leads to the gateway \
                     through one; add `dev` to the converted route",
                    r["to"].as_str().unwrap_or("?")
                )),
            }
        }
        if r.get("protocol").is_some_and(|p| !p.is_null()) {
            out.notes.push(format!(
                "{at}: route {} drops `protocol: {}` (netpolicy marks its routes with protocol 203)",
                r["to"].as_str().unwrap_or("?"),
                r["protocol"].as_str().unwrap_or("?")
            ));
        }
        routes.push(Value::Object(route));
    }
    let mut rules = Vec::new();
    for r in config["rules"].as_array().into_iter().flatten() {
        let mut rule = Map::new();
        rule.insert("priority".into(), json!(*next_priority));
        for k in ["from", "table"] {
            if let Some(x) = r.get(k).filter(|x| !x.is_null()) {
                rule.insert(k.into(), x.clone());
            }
        }
        out.notes.push(format!(
            "{at}: rule from {} table {} gets priority {} (ipruler rules have none: check \
             against `ip rule show` on a node; converting in several runs, give each run \
             its own --rule-priority-start)",
            r["from"].as_str().unwrap_or("any"),
            r["table"],
            *next_priority
        ));
        *next_priority += 1;
        rules.push(Value::Object(rule));
    }
    let hard = &config["settings"]["table-hard-sync"];
    if !vlans.is_empty() {
        spec.insert("vlans".into(), Value::Array(vlans));
    }
    if !routes.is_empty() {
        spec.insert("routes".into(), Value::Array(routes));
    }
    if !rules.is_empty() {
        spec.insert("rules".into(), Value::Array(rules));
    }
    if hard.as_array().is_some_and(|a| !a.is_empty()) {
        spec.insert("tableHardSync".into(), hard.clone());
    }
    spec
}

/// ipruler's FullConfig: `node`'s items, then each of `cluster`'s that `node` has no item
/// of the same identity for (VLAN name, route table/destination/metric, address, rule
/// priority and selector); table lists united.
pub(super) fn full_config(node: &mut Map<String, Value>, cluster: &Map<String, Value>) {
    let identity = |field: &str, v: &Value| -> Value {
        match field {
            "vlans" => json!([v["name"], v["link"], v["id"]]),
            "routes" => json!([v["to"], v["table"], v["metric"]]),
            "addresses" => json!([v["dev"], v["address"]]),
            "rules" => {
                let mut k = v.clone();
                if let Some(o) = k.as_object_mut() {
                    o.remove("table");
                    o.remove("action");
                }
                k
            }
            _ => v.clone(),
        }
    };
    for (field, items) in cluster {
        let Value::Array(items) = items else {
            continue;
        };
        let have = node
            .entry(field.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(have) = have else {
            continue;
        };
        for item in items {
            let id = identity(field, item);
            if !have.iter().any(|h| identity(field, h) == id) {
                have.push(item.clone());
            }
        }
    }
}
