//! A minimal standalone agent: applies a YAML node config (the routing items of a
//! NodeConfig spec) to a network namespace and prints what it did. The "embedded in a
//! custom agent" use of netpolicy-netlink, in under a hundred lines.
//!
//! ```sh
//! ip netns add blue
//! cargo run -p netpolicy-netlink --example mini_agent -- blue node.yaml            # apply
//! cargo run -p netpolicy-netlink --example mini_agent -- blue node.yaml --dry-run  # show
//! cargo run -p netpolicy-netlink --example mini_agent -- blue --cleanup            # remove
//! ```
//!
//! `node.yaml`:
//! ```yaml
//! routes:
//!   - {to: 10.20.0.0/16, via: 192.0.2.1, table: 100}
//! rules:
//!   - {priority: 1000, from: 10.1.0.0/16, table: 100}
//! ```
//!
//! Exit status: 0 applied (or nothing to do), 1 some items failed, 2 bad input.

use std::process::ExitCode;

use netpolicy_core::spec::RoutingSpec;
use netpolicy_netlink::{Adapter, Namespace, Ownership};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(ns) = args.first() else {
        eprintln!("usage: mini_agent <netns> (<node.yaml> [--dry-run] | --cleanup)");
        return ExitCode::from(2);
    };
    let ns = if ns == "-" {
        Namespace::Current
    } else {
        Namespace::Named(ns.clone())
    };
    let mut adapter = match Adapter::open(&ns, Ownership::default()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let report = if args.iter().any(|a| a == "--cleanup") {
        adapter.cleanup()
    } else {
        let Some(path) = args.get(1) else {
            eprintln!("usage: mini_agent <netns> <node.yaml> [--dry-run]");
            return ExitCode::from(2);
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {path}: {e}");
                return ExitCode::from(2);
            }
        };
        let spec: RoutingSpec = match serde_saphyr::from_str(&text) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {path}: {e}");
                return ExitCode::from(2);
            }
        };
        let desired = match spec.validate("spec") {
            Ok(d) => d,
            Err(e) => {
                eprintln!("error: {path}: {e}");
                return ExitCode::from(2);
            }
        };
        adapter.reconcile(&desired, args.iter().any(|a| a == "--dry-run"))
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if report.results.is_empty() {
        println!("nothing to do");
    }
    for r in &report.results {
        println!("{r}");
    }
    for s in &report.skipped {
        println!("       skipped  {:?} ({:?})", s.item, s.reason);
    }
    if report.failures().next().is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
