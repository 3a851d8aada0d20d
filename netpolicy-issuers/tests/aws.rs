//! The real AWS client against moto's EC2 emulator (`netpolicy_testenv::moto`, started per
//! test on 127.0.0.1). Every check reads EC2's state through boto3, the official SDK, so a
//! test sees what AWS would show, not what the client believes it did.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use netpolicy_issuers::{
    Desired, Error, Issuer, PortRule, ReclaimPolicy, Step, Tags,
    aws::{ACTIONS, AwsIssuer},
    memory::MemoryIssuer,
    reconcile, release,
};
use netpolicy_testenv::moto::{ACCESS_KEY, Instance, Moto, REGION, SECRET_KEY};
use proptest::prelude::*;
use serde_json::Value;

mod common;
use common::{desired, tags};

fn client(moto: &Moto) -> AwsIssuer {
    let mut c =
        AwsIssuer::with_credentials(REGION, Some(&moto.endpoint), ACCESS_KEY, SECRET_KEY, None)
            .unwrap();
    c.max_backoff = std::time::Duration::from_millis(50);
    c
}

/// The one address, whose ENI it is associated with and its tags.
fn only_address(moto: &Moto) -> Value {
    let all = moto.addresses();
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    all[0].clone()
}

fn open_ports(moto: &Moto, group: &str) -> BTreeSet<u16> {
    let g = moto.security_group(group);
    g["IpPermissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u16::try_from(p["FromPort"].as_u64().unwrap()).unwrap())
        .collect()
}

fn has_group(moto: &Moto, node: &Instance, group: &str) -> bool {
    let id = moto.security_group(group)["GroupId"]
        .as_str()
        .unwrap()
        .to_owned();
    moto.groups_of(&node.eni).contains(&id)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_elastic_ip_is_allocated_tagged_associated_and_moved_without_a_gap() {
    let moto = Moto::start();
    let nodes = moto.run_instances(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    let default_group = moto.groups_of(&a.eni);
    let aws = client(&moto);

    let done = reconcile(&aws, &tags(), None, &desired(&a.provider_id, &[443]))
        .await
        .unwrap();
    let ip = only_address(&moto);
    assert_eq!(ip["PublicIp"], done.address.as_str());
    assert_eq!(
        ip["NetworkInterfaceId"],
        a.eni.as_str(),
        "the primary interface"
    );
    let mut tags_seen: Vec<(String, String)> = ip["Tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["Key"].as_str().unwrap().into(),
                t["Value"].as_str().unwrap().into(),
            )
        })
        .collect();
    tags_seen.sort();
    assert_eq!(
        tags_seen,
        [
            ("netpolicy.io/cluster".into(), "prod-eu".into()),
            ("netpolicy.io/routed-ip".into(), "ingress".into())
        ]
    );
    assert_eq!(open_ports(&moto, "web"), BTreeSet::from([443]));
    assert!(has_group(&moto, a, "web"));
    // The interface keeps the groups it had.
    assert!(
        default_group
            .iter()
            .all(|g| moto.groups_of(&a.eni).contains(g))
    );

    // Failover to b, the Service now on port 80. moto, like EC2, refuses to associate an
    // associated address without AllowReassociation: the move is one call, no gap.
    let moved = reconcile(
        &aws,
        &tags(),
        Some(&done.address),
        &desired(&b.provider_id, &[80]),
    )
    .await
    .unwrap();
    assert_eq!(
        moved.steps,
        [
            Step::AddPort(PortRule::tcp(80)),
            Step::AddNode(b.provider_id.clone()),
            Step::Assign(b.provider_id.clone()),
            Step::RemovePort(PortRule::tcp(443)),
            Step::RemoveNode(a.provider_id.clone()),
        ]
    );
    assert_eq!(only_address(&moto)["NetworkInterfaceId"], b.eni.as_str());
    assert_eq!(open_ports(&moto, "web"), BTreeSet::from([80]));
    assert!(has_group(&moto, b, "web") && !has_group(&moto, a, "web"));
    assert_eq!(
        moto.groups_of(&a.eni),
        default_group,
        "a keeps its own groups"
    );

    // Settled: the next reconcile finds nothing to do, by tags alone.
    let again = reconcile(&aws, &tags(), None, &desired(&b.provider_id, &[80]))
        .await
        .unwrap();
    assert_eq!(again.address, done.address);
    assert!(again.steps.is_empty(), "{:?}", again.steps);
}

#[tokio::test(flavor = "multi_thread")]
async fn retain_disassociates_and_keeps_the_allocation_delete_releases_it() {
    let moto = Moto::start();
    let nodes = moto.run_instances(1);
    let aws = client(&moto);
    let target = Desired {
        firewall: None,
        ..desired(&nodes[0].provider_id, &[])
    };
    let done = reconcile(&aws, &tags(), None, &target).await.unwrap();

    release(&aws, &tags(), Some(&done.address), ReclaimPolicy::Retain)
        .await
        .unwrap();
    let ip = only_address(&moto);
    assert_eq!(ip["PublicIp"], done.address.as_str());
    assert!(ip.get("AssociationId").is_none(), "{ip}");
    // Twice is fine (idempotent).
    release(&aws, &tags(), Some(&done.address), ReclaimPolicy::Retain)
        .await
        .unwrap();

    reconcile(&aws, &tags(), Some(&done.address), &target)
        .await
        .unwrap();
    release(&aws, &tags(), Some(&done.address), ReclaimPolicy::Delete)
        .await
        .unwrap();
    assert_eq!(moto.addresses(), serde_json::json!([]));
    release(&aws, &tags(), Some(&done.address), ReclaimPolicy::Delete)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_address_is_adopted_and_tagged_ones_are_listed_with_their_routed_ip() {
    let moto = Moto::start();
    let nodes = moto.run_instances(1);
    let aws = client(&moto);
    let existing = moto
        .json("print(json.dumps(ec2.allocate_address(Domain='vpc')['PublicIp']))")
        .as_str()
        .unwrap()
        .to_owned();
    let target = Desired {
        firewall: None,
        ..desired(&nodes[0].provider_id, &[])
    };
    let adopted = reconcile(&aws, &tags(), Some(&existing), &target)
        .await
        .unwrap();
    assert_eq!(adopted.address, existing);
    assert_eq!(
        moto.addresses().as_array().unwrap().len(),
        1,
        "none created"
    );

    // An address the account does not have is never replaced by a new one.
    let e = reconcile(&aws, &tags(), Some("198.51.100.1"), &target)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");
    assert_eq!(moto.addresses().as_array().unwrap().len(), 1);

    // Two tagged for this cluster (one for a RoutedIP that is gone), one for another.
    for (cluster, rip) in [("prod-eu", "web"), ("prod-eu", "gone"), ("other", "x")] {
        let t = Tags {
            cluster: cluster.into(),
            routed_ip: rip.into(),
        };
        aws.create_ip(&t).await.unwrap();
    }
    let mut listed: Vec<String> = aws
        .tagged_ips("prod-eu")
        .await
        .unwrap()
        .into_iter()
        .map(|(_, rip)| rip)
        .collect();
    listed.sort();
    assert_eq!(listed, ["gone", "web"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_documented_iam_policy_allows_every_call_and_errors_name_the_action() {
    let mut moto = Moto::start_with_auth(5);
    let nodes = moto.run_instances(2); // 2 unauthenticated calls
    moto.admin(); // 3 more; then signed as the admin
    let policy = iam_policy_of_the_guide();
    let (key, secret) = moto.user("netpolicy", &policy.to_string());

    // The guide's policy lists exactly the actions the client calls.
    let mut listed: Vec<String> = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| match &s["Action"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_owned()).collect(),
            v => panic!("{v}"),
        })
        .collect();
    listed.sort();
    assert_eq!(listed, ACTIONS);

    // Everything — create, firewall, failover, listing, release — under that policy
    // (tests/aws_chain.rs runs the same policy with keys from the SDK's default chain).
    let aws =
        AwsIssuer::with_credentials(REGION, Some(&moto.endpoint), &key, &secret, None).unwrap();
    let first = reconcile(&aws, &tags(), None, &desired(&nodes[0].provider_id, &[443]))
        .await
        .unwrap();
    reconcile(
        &aws,
        &tags(),
        Some(&first.address),
        &desired(&nodes[1].provider_id, &[80]),
    )
    .await
    .unwrap();
    aws.tagged_ips("prod-eu").await.unwrap();
    release(&aws, &tags(), Some(&first.address), ReclaimPolicy::Delete)
        .await
        .unwrap();

    // A policy without AssociateAddress: the error names the action; no key in it.
    let narrow = policy.to_string().replace("\"ec2:AssociateAddress\",", "");
    moto.python(&format!(
        "iam.put_user_policy(UserName='netpolicy', PolicyName='netpolicy', PolicyDocument={narrow:?})"
    ));
    let e = reconcile(&aws, &tags(), None, &desired(&nodes[0].provider_id, &[443]))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unauthorized(_)), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("AssociateAddress"), "{text}");
    assert!(!text.contains(&secret) && !text.contains(&key), "{text}");

    // A wrong secret: AuthFailure, typed, the secret nowhere.
    let wrong =
        AwsIssuer::with_credentials(REGION, Some(&moto.endpoint), &key, "not-the-secret", None)
            .unwrap();
    let e = wrong.find_ip(None, &tags()).await.unwrap_err();
    assert!(matches!(e, Error::Unauthorized(_)), "{e:?}");
    assert!(e.to_string().contains("AuthFailure"), "{e}");
    assert!(!e.to_string().contains("not-the-secret"));
}

/// A server answering EC2 Query calls from a script of `(HTTP status, body)`, the
/// documented shapes of EC2's answers and errors; it records each request's headers and
/// body. For what moto does not emulate: throttling and the Elastic IP quota.
async fn scripted(answers: Vec<(u16, String)>) -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    let log = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let answers = Arc::clone(&answers);
            let log = Arc::clone(&log);
            async move {
                log.lock().unwrap().push(format!("{headers:?} {body}"));
                let (status, xml) = answers.lock().unwrap().next().expect("an answer left");
                (axum::http::StatusCode::from_u16(status).unwrap(), xml)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

fn ec2_error(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
         <Message>{message}</Message></Error></Errors><RequestID>req-1</RequestID></Response>"
    )
}

const NO_ADDRESSES: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeAddressesResponse \
    xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>req-2</requestId>\
    <addressesSet/></DescribeAddressesResponse>";

#[tokio::test(flavor = "multi_thread")]
async fn request_limits_are_backed_off_and_every_request_is_signed_without_the_secret() {
    let throttled = || {
        (
            503,
            ec2_error("RequestLimitExceeded", "Request limit exceeded."),
        )
    };
    let (base, seen) = scripted(vec![throttled(), throttled(), (200, NO_ADDRESSES.into())]).await;
    let mut aws =
        AwsIssuer::with_credentials(REGION, Some(&base), ACCESS_KEY, SECRET_KEY, None).unwrap();
    aws.max_backoff = std::time::Duration::from_millis(50);
    assert_eq!(aws.find_ip(None, &tags()).await.unwrap(), None);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "two throttled answers, then the answer");
    for r in &seen {
        assert!(
            r.contains(&format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/"))
                && r.contains(&format!("/{REGION}/ec2/aws4_request")),
            "{r}"
        );
        assert!(
            r.contains("Action=DescribeAddresses&Version=2016-11-15"),
            "{r}"
        );
        assert!(!r.contains(SECRET_KEY), "{r}");
    }

    // Throttled beyond the retries: a rate-limit error for the caller to schedule.
    let (base, _) = scripted((0..5).map(|_| throttled()).collect()).await;
    let mut aws =
        AwsIssuer::with_credentials(REGION, Some(&base), ACCESS_KEY, SECRET_KEY, None).unwrap();
    aws.max_backoff = std::time::Duration::from_millis(10);
    let e = aws.find_ip(None, &tags()).await.unwrap_err();
    assert!(
        matches!(e, Error::RateLimited { retry_after } if retry_after >= 1),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exhausted_address_quota_is_a_limit_error_naming_the_action() {
    let (base, _) = scripted(vec![(
        400,
        ec2_error(
            "AddressLimitExceeded",
            "The maximum number of addresses has been reached.",
        ),
    )])
    .await;
    let aws =
        AwsIssuer::with_credentials(REGION, Some(&base), ACCESS_KEY, SECRET_KEY, None).unwrap();
    let e = aws.create_ip(&tags()).await.unwrap_err();
    assert_eq!(
        e,
        Error::LimitExceeded(
            "AllocateAddress: AddressLimitExceeded: The maximum number of addresses has been \
             reached."
                .into()
        )
    );
}

fn iam_policy_of_the_guide() -> Value {
    let guide = include_str!("../../docs/guides/routed-ips.md");
    let after = guide
        .split("<!-- iam-policy -->")
        .nth(1)
        .expect("the guide marks its IAM policy");
    let json = after
        .split("```json")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("a json block after the marker");
    serde_json::from_str(json).unwrap()
}

// The AWS provider does what the in-memory provider (the reference the failover
// property tests use) does, operation for operation: the same holder and the same
// firewall after every reconcile, and the same release outcomes.
proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn the_aws_provider_behaves_as_the_in_memory_one(
        ops in proptest::collection::vec(
            (0..3usize, proptest::collection::btree_set(prop_oneof![Just(80u16), Just(443), Just(8443)], 0..3), 0..6u8),
            1..6,
        ),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let moto = Moto::start();
        let nodes = moto.run_instances(3);
        let aws = client(&moto);
        let mem = MemoryIssuer::new();
        let t = tags();
        let (mut a_addr, mut m_addr) = (None::<String>, None::<String>);
        for (node, ports, action) in ops {
            let want = desired(&nodes[node].provider_id, &ports.iter().copied().collect::<Vec<_>>());
            match action {
                0 => {
                    rt.block_on(release(&aws, &t, a_addr.as_deref(), ReclaimPolicy::Retain)).unwrap();
                    rt.block_on(release(&mem, &t, m_addr.as_deref(), ReclaimPolicy::Retain)).unwrap();
                }
                _ => {
                    let a = rt.block_on(reconcile(&aws, &t, a_addr.as_deref(), &want)).unwrap();
                    let m = rt.block_on(reconcile(&mem, &t, m_addr.as_deref(), &want)).unwrap();
                    prop_assert_eq!(&a.steps, &m.steps);
                    a_addr = Some(a.address);
                    m_addr = Some(m.address);
                }
            }
            let a_ip = rt.block_on(aws.find_ip(a_addr.as_deref(), &t)).unwrap().map(|i| i.assigned_to);
            let m_ip = rt.block_on(mem.find_ip(m_addr.as_deref(), &t)).unwrap().map(|i| i.assigned_to);
            prop_assert_eq!(a_ip, m_ip);
            let a_fw = rt.block_on(aws.find_firewall("web")).unwrap();
            let m_fw = rt.block_on(mem.find_firewall("web")).unwrap();
            prop_assert_eq!(a_fw, m_fw);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_takes_no_connection_is_unreachable_after_one_more_try() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let aws = AwsIssuer::with_credentials(
        REGION,
        Some(&format!("http://127.0.0.1:{closed}")),
        ACCESS_KEY,
        SECRET_KEY,
        None,
    )
    .unwrap();
    let e = aws.find_ip(None, &tags()).await.unwrap_err();
    assert!(matches!(e, Error::Unreachable(_)), "{e:?}");
    assert!(!e.to_string().contains(SECRET_KEY), "{e}");
}
