//! Embedding the allocator in a node agent or operator of your own.
//!
//! A trench gets a /16; each conduit a /20 from it; each node a /24 from its conduit,
//! freed when the node leaves. A floating IP pool hands out VIPs, survives a restart
//! through its snapshot, and refuses a taken static request by naming the holder.
//!
//! Run: `cargo run -p netpolicy-ipam --example embed`

use std::net::IpAddr;

use netpolicy_ipam::{alloc::Allocator, prefix::PrefixAllocator, space::AddressSpace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Hierarchical prefixes (Meridio's trench -> conduit -> node).
    let mut trench = PrefixAllocator::new_prefixes("10.64.0.0/16".parse()?, 20)?;
    let conduit = trench.allocate("conduit/load-balancer")?;
    let mut nodes = PrefixAllocator::new_prefixes(conduit, 24)?;
    for node in ["worker-1", "worker-2", "worker-3"] {
        println!("{node}: {}", nodes.allocate(node)?);
    }
    nodes.release("worker-2"); // the node left the cluster: its /24 is free again
    println!(
        "worker-4 (after worker-2 left): {}",
        nodes.allocate("worker-4")?
    );

    // A floating IP pool: 62 usable addresses, one excluded.
    let space = AddressSpace::parse(
        "spec",
        &["203.0.113.192/26".to_owned()],
        &[],
        &["203.0.113.193".to_owned()],
    )?;
    let mut vips = Allocator::new(space.clone());
    println!("capacity {}", vips.capacity());
    println!("shop/web: {}", vips.allocate("shop/web")?);
    let wanted: IpAddr = "203.0.113.250".parse()?;
    println!("shop/db: {}", vips.allocate_static("shop/db", &wanted)?);
    match vips.allocate_static("blog/web", &wanted) {
        Err(e) => println!("blog/web: refused: {e}"),
        Ok(a) => println!("blog/web: {a}"),
    }

    // Persist (for example into object statuses) and restore after a restart.
    let saved = vips.snapshot();
    let restored = Allocator::restore(space, saved)?;
    assert_eq!(restored.by_owner("shop/db"), vips.by_owner("shop/db"));
    println!(
        "restored {} allocations; nobody moved",
        restored.allocated()
    );
    Ok(())
}
