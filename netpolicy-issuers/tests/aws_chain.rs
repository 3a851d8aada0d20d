//! The AWS client with credentials from the AWS SDK's default chain (here: the
//! environment; on EKS the same chain reads IRSA's web identity or pod identity), against
//! moto with IAM on, so the signature and the key are checked. The chain reads the
//! process environment, which a test must not change under other threads: the test runs
//! this binary again as a child with the keys in its environment (`chain_child`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

use netpolicy_issuers::{Issuer, Tags, aws::AwsIssuer};
use netpolicy_testenv::moto::{Moto, REGION};

const CHILD: &str = "NETPOLICY_AWS_CHAIN_CHILD";

fn child(moto: &Moto, key: &str, secret: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "chain_child", "--ignored", "--nocapture"])
        .env(CHILD, &moto.endpoint)
        .env("AWS_ACCESS_KEY_ID", key)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .output()
        .unwrap()
}

#[test]
fn the_default_credential_chain_signs_with_the_environments_keys() {
    let moto = Moto::start_with_auth(3);
    let policy = r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Action": ["ec2:DescribeAddresses"], "Resource": "*"}]}"#;
    let (key, secret) = moto.user("chain", policy);

    let ok = child(&moto, &key, &secret);
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(out.contains("chain: answered"), "{out}");
    assert!(!out.contains(&secret), "{out}");

    // A secret the account does not know: refused (AuthFailure), the secret in no message.
    let bad = child(&moto, &key, "wrong-secret");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&bad.stdout),
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(!bad.status.success(), "{out}");
    assert!(out.contains("AuthFailure"), "{out}");
    assert!(!out.contains("wrong-secret"), "{out}");
}

/// Run only by the test above, with the keys in its environment.
#[tokio::test]
#[ignore = "the child half of the_default_credential_chain_signs_with_the_environments_keys"]
async fn chain_child() {
    let endpoint = std::env::var(CHILD).expect("run by the parent test only");
    let aws = AwsIssuer::from_default_chain(REGION, Some(&endpoint))
        .await
        .unwrap();
    let tags = Tags {
        cluster: "c".into(),
        routed_ip: "r".into(),
    };
    match aws.find_ip(None, &tags).await {
        Ok(found) => {
            assert_eq!(found, None);
            println!("chain: answered; {aws:?}");
        }
        Err(e) => panic!("chain: refused: {e}"),
    }
}
