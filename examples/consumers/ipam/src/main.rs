//! IPAM embedded in another program, from `netpolicy-ipam` alone: the prefix type and
//! the field errors come re-exported from it.

use netpolicy_ipam::{
    Error, IpNetwork,
    alloc::Allocator,
    prefix::PrefixAllocator,
    space::AddressSpace,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let space = AddressSpace::parse(
        "spec",
        &["203.0.113.192/26".into(), "2001:db8:f00::/120".into()][..1],
        &[],
        &["203.0.113.193".into()],
    )?;
    let mut pool = Allocator::new(space.clone());
    let web = pool.allocate("shop/web")?;
    let db = pool.allocate("shop/db")?;
    println!("capacity {}, shop/web {web}, shop/db {db}", pool.capacity());
    let again = Allocator::restore(space, pool.snapshot())?;
    assert_eq!(again.by_owner("shop/web"), Some(web));

    let parent: IpNetwork = "10.64.0.0/20".parse()?;
    let mut nodes = PrefixAllocator::new_prefixes(parent, 24)?;
    println!("worker-1 {}", nodes.allocate("worker-1")?);

    // A mistyped reservation is an error naming its field, not silently nothing.
    match AddressSpace::parse("spec", &["203.0.113.192/26".into()], &[], &["203.0.131.193".into()]) {
        Err(Error::Invalid(problems)) => {
            for p in &problems {
                println!("refused: {}: {}", p.path, p.message);
            }
        }
        other => return Err(format!("the exclusion was accepted: {other:?}").into()),
    }
    Ok(())
}
