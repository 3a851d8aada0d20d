//! The provider client of each RoutedIPIssuer: its token (or AWS keys) read from the
//! Secret the spec names and handed to the client only (never logged, never in an Event
//! or status), made again when the issuer's generation changes or the provider refused
//! the token.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use netpolicy_issuers::{
    AnyIssuer, aws::AwsIssuer as AwsClient, digitalocean::DigitalOceanIssuer,
    hetzner::HetznerIssuer, memory::MemoryIssuer,
};

use super::{Context, Failed};
use crate::{api::RoutedIPIssuer, runtime::informer::lock};

/// A provider client and the issuer generation it was made for.
pub(super) type Made = (Option<i64>, Arc<AnyIssuer>);

impl Context {
    /// The provider client of `issuer`, made (its token read) when the issuer changed.
    pub(super) async fn provider(&self, issuer: &RoutedIPIssuer) -> Result<Arc<AnyIssuer>, Failed> {
        let name = issuer.name_any();
        if let Some((g, p)) = lock(&self.providers).get(&name)
            && *g == issuer.metadata.generation
        {
            return Ok(Arc::clone(p));
        }
        let token = |r: &crate::api::SecretKeyRef, field: &str| {
            let key = r.key.clone().unwrap_or_else(|| "token".into());
            let (namespace, name) = (r.namespace.clone(), r.name.clone());
            let field = field.to_owned();
            async move {
                self.secret_value(&namespace, &name, &key, &field)
                    .await?
                    .ok_or_else(|| {
                        Failed::Issuer(format!(
                            "{field}: Secret {namespace}/{name} has no key {key:?}"
                        ))
                    })
            }
        };
        let provider = if let Some(a) = &issuer.spec.aws {
            AnyIssuer::Aws(self.aws_client(a).await?.with_vpc(a.vpc_id.clone()))
        } else if let Some(h) = &issuer.spec.hetzner {
            let t = token(&h.token_secret_ref, "spec.hetzner.tokenSecretRef").await?;
            let base = h
                .endpoint
                .as_deref()
                .unwrap_or(netpolicy_issuers::hetzner::BASE_URL);
            AnyIssuer::Hetzner(HetznerIssuer::with_base_url(base, t, &h.location)?)
        } else if let Some(d) = &issuer.spec.digitalocean {
            let t = token(&d.token_secret_ref, "spec.digitalocean.tokenSecretRef").await?;
            let base = d
                .endpoint
                .as_deref()
                .unwrap_or(netpolicy_issuers::digitalocean::BASE_URL);
            AnyIssuer::DigitalOcean(DigitalOceanIssuer::with_base_url(base, t, &d.region)?)
        } else if issuer.spec.memory.is_some() {
            AnyIssuer::Memory(Arc::clone(
                lock(&self.memory)
                    .entry(name.clone())
                    .or_insert_with(|| Arc::new(MemoryIssuer::new())),
            ))
        } else {
            return Err(Failed::Issuer(
                "spec: a RoutedIPIssuer names exactly one provider".into(),
            ));
        };
        let p = Arc::new(provider);
        lock(&self.providers).insert(name, (issuer.metadata.generation, Arc::clone(&p)));
        Ok(p)
    }

    /// One key of a Secret (trimmed), `None` when the Secret lacks it; an unreadable
    /// Secret or a value that is not UTF-8 is an error naming `field`.
    async fn secret_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        field: &str,
    ) -> Result<Option<String>, Failed> {
        let api = Api::<Secret>::namespaced(self.client.clone(), namespace);
        let secret = api.get(name).await.map_err(|e| {
            Failed::Issuer(format!(
                "{field}: Secret {namespace}/{name} cannot be read: {e}"
            ))
        })?;
        let Some(bytes) = secret.data.and_then(|mut d| d.remove(key)) else {
            return Ok(None);
        };
        String::from_utf8(bytes.0)
            .map(|t| Some(t.trim().to_owned()))
            .map_err(|_| Failed::Issuer(format!("{field}: {key} is not UTF-8")))
    }

    /// An AWS client: keys from `credentialsSecretRef`, else the AWS SDK's default chain
    /// (IRSA, EKS pod identity, IMDSv2, environment).
    async fn aws_client(&self, a: &crate::api::AwsIssuer) -> Result<AwsClient, Failed> {
        let endpoint = a.endpoint.as_deref();
        let Some(r) = &a.credentials_secret_ref else {
            return Ok(AwsClient::from_default_chain(&a.region, endpoint).await?);
        };
        let field = "spec.aws.credentialsSecretRef";
        let required = |key: &'static str| async move {
            self.secret_value(&r.namespace, &r.name, key, field)
                .await?
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    Failed::Issuer(format!(
                        "{field}: Secret {}/{} has no key {key:?}",
                        r.namespace, r.name
                    ))
                })
        };
        let id = required("aws_access_key_id").await?;
        let secret = required("aws_secret_access_key").await?;
        let session = self
            .secret_value(&r.namespace, &r.name, "aws_session_token", field)
            .await?
            .filter(|v| !v.is_empty());
        Ok(AwsClient::with_credentials(
            &a.region, endpoint, id, secret, session,
        )?)
    }
}
