//! A custom node agent's core, from `netpolicy-netlink` alone: a desired state built
//! from netpolicy-core's spec types (re-exported), applied to the network namespace named
//! on the command line, read back, printed with `Display`, and removed again.
//!
//! `consumer-agent <netns>` (root: `CAP_NET_ADMIN`; the namespace has a link `v0` with
//! 192.0.2.10/24).

use std::process::ExitCode;

use netpolicy_netlink::{
    netpolicy_core::spec::{AddressSpec, RouteSpec},
    prelude::*,
};

fn main() -> ExitCode {
    let Some(netns) = std::env::args().nth(1) else {
        eprintln!("usage: consumer-agent <netns>");
        return ExitCode::from(2);
    };
    match run(&netns) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(netns: &str) -> Result<(), Box<dyn std::error::Error>> {
    let spec = RoutingSpec {
        routes: vec![RouteSpec {
            to: "10.20.0.0/16".into(),
            via: Some("192.0.2.1".into()),
            table: Some(100),
            ..RouteSpec::default()
        }],
        addresses: vec![AddressSpec {
            dev: "lo".into(),
            address: "203.0.113.7/32".into(),
            ..Default::default()
        }],
        ..RoutingSpec::default()
    };
    let desired: RoutingConfig = spec.validate("spec")?;
    let mut adapter = Adapter::open(&Namespace::Named(netns.into()), Ownership::default())?;
    let report = adapter.reconcile(&desired, false)?;
    for r in &report.results {
        println!("{r}");
    }
    if !report.is_converged() {
        return Err("the namespace does not hold the desired state".into());
    }
    let again = adapter.plan(&desired)?;
    println!("read back: {} difference(s)", again.ops.len());
    if !again.ops.is_empty() {
        return Err("read back differs".into());
    }
    println!("{}", adapter.cleanup()?);
    Ok(())
}
