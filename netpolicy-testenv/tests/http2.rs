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
    // 80 watches (what `http2_client` says one client holds: a connection carries 100
    // streams at once here) run for 60 s on the server's side; a list that had to wait
    // for a free stream would come back only after they end. The property is the order
    // (every watch has its response before the list is sent, and all are still open when
    // the list is answered), not a wall-clock bound, which a loaded CI machine misses.
    let (open_tx, mut open_rx) = tokio::sync::mpsc::channel(80);
    let tasks: Vec<_> = (0..80)
        .map(|_| {
            let api = api.clone();
            let version = version.clone();
            let open_tx = open_tx.clone();
            tokio::spawn(async move {
                let wp = WatchParams::default().timeout(60);
                let mut w = api.watch(&wp, &version).await.unwrap().boxed();
                open_tx.send(()).await.unwrap();
                while w.next().await.is_some() {}
            })
        })
        .collect();
    // Every watch's response has begun before the list is sent.
    for i in 0..80 {
        let opened = tokio::time::timeout(std::time::Duration::from_secs(50), open_rx.recv());
        assert!(
            matches!(opened.await, Ok(Some(()))),
            "80 watches open, {i} did"
        );
    }
    let listed = tokio::time::timeout(
        std::time::Duration::from_secs(50),
        api.list(&ListParams::default()),
    )
    .await;
    assert!(
        matches!(listed, Ok(Ok(_))),
        "a list beside 80 watches: {listed:?}"
    );
    let ended = tasks.iter().filter(|t| t.is_finished()).count();
    assert_eq!(
        ended, 0,
        "every watch is still open when the list is answered"
    );
    for t in tasks {
        t.abort();
    }
}
