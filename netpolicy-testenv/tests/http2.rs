//! `http2_client` against the real API server: requests and a watch over one HTTP/2
//! connection.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api,
    api::{ListParams, WatchParams},
};

#[tokio::test(flavor = "multi_thread")]
async fn an_http2_client_lists_and_watches() {
    let cp = netpolicy_testenv::shared();
    drop(cp.client().await);
    let client = netpolicy_testenv::http2_client(&cp.kubeconfig).await;
    let api: Api<Namespace> = Api::all(client);
    let listed = api.list(&ListParams::default()).await;
    let listed = listed.unwrap_or_else(|e| panic!("list over HTTP/2: {e:?}"));
    assert!(
        listed
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("default"))
    );
    // A watch from the list's version: the API server sends a bookmark or an event.
    let version = listed.metadata.resource_version.unwrap_or_default();
    let wp = WatchParams::default().timeout(5);
    let w = api.watch(&wp, &version).await;
    let mut w = w
        .unwrap_or_else(|e| panic!("watch over HTTP/2: {e:?}"))
        .boxed();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), w.next()).await;
    assert!(ended.is_ok(), "the watch ends within its 5 s timeout");
}

#[tokio::test(flavor = "multi_thread")]
async fn many_watches_share_one_http2_connection() {
    let cp = netpolicy_testenv::shared();
    drop(cp.client().await);
    let client = netpolicy_testenv::http2_client(&cp.kubeconfig).await;
    let api: Api<Namespace> = Api::all(client);
    let version = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default();
    let tasks: Vec<_> = (0..160)
        .map(|_| {
            let api = api.clone();
            let version = version.clone();
            tokio::spawn(async move {
                let wp = WatchParams::default().timeout(5);
                let mut w = api.watch(&wp, &version).await.unwrap().boxed();
                while w.next().await.is_some() {}
            })
        })
        .collect();
    let listed = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        api.list(&ListParams::default()),
    )
    .await;
    assert!(
        matches!(listed, Ok(Ok(_))),
        "a list beside 160 watches: {listed:?}"
    );
    for t in tasks {
        tokio::time::timeout(std::time::Duration::from_secs(20), t)
            .await
            .expect("each watch ends within its 5 s timeout")
            .unwrap();
    }
}
