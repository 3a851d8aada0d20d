use std::{
    collections::BTreeSet,
    sync::OnceLock,
    time::{Duration, SystemTime},
};

use aws_credential_types::{
    Credentials,
    provider::{ProvideCredentials, SharedCredentialsProvider},
};
use aws_sigv4::{
    http_request::{SignableBody, SignableRequest, SigningSettings, sign},
    sign::v4,
};
use aws_smithy_runtime_api::client::identity::Identity;
use reqwest::StatusCode;
use roxmltree::{Document, Node};
use tokio::sync::Mutex;

use crate::{Error, FirewallState, IpState, Issuer, PortRule, Result, Tags, urlencode};

/// Tag key naming the cluster on netpolicy's Elastic IPs.
pub const CLUSTER_TAG: &str = "netpolicy.io/cluster";
/// Tag key naming the RoutedIP.
pub const ROUTED_IP_TAG: &str = "netpolicy.io/routed-ip";
/// The EC2 API version of every call.
pub const API_VERSION: &str = "2016-11-15";
/// Every EC2 action netpolicy calls: what an IAM policy for it must allow
/// (`docs/routed-ips.md` has the policy; a test runs the whole flow under exactly it).
pub const ACTIONS: &[&str] = &[
    "ec2:AllocateAddress",
    "ec2:AssociateAddress",
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:CreateSecurityGroup",
    "ec2:CreateTags",
    "ec2:DescribeAddresses",
    "ec2:DescribeInstances",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeVpcs",
    "ec2:DisassociateAddress",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:ReleaseAddress",
    "ec2:RevokeSecurityGroupIngress",
];

/// Ingress rules netpolicy writes (and the only ones it reads as its own).
const OPEN: &str = "0.0.0.0/0";

/// Credentials kept until this close to their expiry.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// Read-modify-writes of an interface's groups, one at a time in this process (two
/// RoutedIPs of different issuers may change one node's interface at once).
fn interface_lock() -> &'static Mutex<()> {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| Mutex::new(()))
}

enum Source {
    Fixed(Credentials),
    Chain(SharedCredentialsProvider),
}

/// An EC2 client for Elastic IPs and security groups (see the module docs).
pub struct AwsIssuer {
    http: reqwest::Client,
    endpoint: String,
    region: String,
    vpc: Option<String>,
    source: Source,
    cached: Mutex<Option<Credentials>>,
    /// Retries of a call answered with throttling or a server error (or not answered).
    pub retries: u32,
    /// Longest wait between retries.
    pub max_backoff: Duration,
}

impl std::fmt::Debug for AwsIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsIssuer")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("vpc", &self.vpc)
            .field(
                "credentials",
                &match self.source {
                    Source::Fixed(_) => "fixed <redacted>",
                    Source::Chain(_) => "default chain",
                },
            )
            .finish()
    }
}

/// An Elastic IP as `DescribeAddresses` shows it.
#[derive(Debug, Clone, Default)]
struct Address {
    public_ip: String,
    allocation_id: String,
    association_id: Option<String>,
    interface: Option<String>,
    instance: Option<String>,
    routed_ip: Option<String>,
}

/// An instance's primary network interface.
#[derive(Debug, Clone)]
struct Primary {
    id: String,
    groups: Vec<String>,
}

fn instance_id(node: &str) -> Result<&str> {
    node.strip_prefix("aws://")
        .and_then(|rest| rest.rsplit('/').next())
        .filter(|id| id.starts_with("i-") && id.len() > 2)
        .ok_or_else(|| {
            Error::Provider(format!(
                "{node:?} is not an AWS provider ID (aws:///<zone>/<instance-id>)"
            ))
        })
}

fn provider_id(zone: &str, instance: &str) -> String {
    format!("aws:///{zone}/{instance}")
}

fn child<'a, 'i>(n: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    n.children().find(|c| c.has_tag_name(name))
}

fn text(n: Node<'_, '_>, name: &str) -> Option<String> {
    child(n, name)
        .and_then(|c| c.text())
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(ToOwned::to_owned)
}

/// The `item`s of the set `name` under `n`.
fn items<'a, 'i>(n: Node<'a, 'i>, name: &str) -> Vec<Node<'a, 'i>> {
    child(n, name)
        .map(|s| s.children().filter(|c| c.has_tag_name("item")).collect())
        .unwrap_or_default()
}

fn parse<'b>(action: &str, body: &'b str) -> Result<Document<'b>> {
    Document::parse(body)
        .map_err(|e| Error::Provider(format!("{action}: the answer is not XML: {e}")))
}

fn address(item: Node<'_, '_>) -> Option<Address> {
    let routed_ip = items(item, "tagSet")
        .into_iter()
        .find(|t| text(*t, "key").as_deref() == Some(ROUTED_IP_TAG))
        .and_then(|t| text(t, "value"));
    Some(Address {
        public_ip: text(item, "publicIp")?,
        allocation_id: text(item, "allocationId")?,
        association_id: text(item, "associationId"),
        interface: text(item, "networkInterfaceId"),
        instance: text(item, "instanceId"),
        routed_ip,
    })
}

/// EC2's error `(code, message)` from an error answer.
fn error_of(body: &str) -> (String, String) {
    let Ok(doc) = Document::parse(body) else {
        return (String::new(), body.chars().take(200).collect());
    };
    let find = |name: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name(name))
            .and_then(|n| n.text())
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    (find("Code"), find("Message"))
}

fn throttled(code: &str, status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || matches!(
            code,
            "RequestLimitExceeded"
                | "Throttling"
                | "ThrottlingException"
                | "RequestThrottled"
                | "TooManyRequestsException"
        )
}

fn server_side(code: &str, status: StatusCode) -> bool {
    status.is_server_error() && !throttled(code, status)
        || matches!(code, "InternalError" | "Unavailable" | "ServiceUnavailable")
}

/// An EC2 error code as an [`Error`] (the message starts with the action and the code).
fn classify(action: &str, code: &str, message: &str, status: StatusCode) -> Error {
    let what = if code.is_empty() {
        format!("{action}: {message} (HTTP {status})")
    } else {
        format!("{action}: {code}: {message}")
    };
    match code {
        "AuthFailure"
        | "UnauthorizedOperation"
        | "AccessDenied"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "ExpiredToken"
        | "RequestExpired"
        | "OptInRequired"
        | "Blocked" => Error::Unauthorized(what),
        "AddressLimitExceeded"
        | "RulesPerSecurityGroupLimitExceeded"
        | "SecurityGroupLimitExceeded"
        | "SecurityGroupsPerInterfaceLimitExceeded" => Error::LimitExceeded(what),
        "IncorrectState"
        | "InvalidIPAddress.InUse"
        | "Resource.AlreadyAssociated"
        | "DependencyViolation" => Error::Conflict(what),
        c if c.ends_with(".NotFound") => Error::NotFound(what),
        _ if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN => {
            Error::Unauthorized(what)
        }
        _ => Error::Provider(what),
    }
}

/// Query parameters of one call, in order.
#[derive(Debug, Default)]
struct Params(Vec<(String, String)>);

impl Params {
    fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.push((key.into(), value.into()));
        self
    }

    fn filter(self, n: usize, name: &str, value: &str) -> Self {
        self.set(format!("Filter.{n}.Name"), name)
            .set(format!("Filter.{n}.Value.1"), value)
    }

    fn ingress(self, rule: &PortRule) -> Self {
        self.set("IpPermissions.1.IpProtocol", rule.protocol.clone())
            .set("IpPermissions.1.FromPort", rule.port.to_string())
            .set("IpPermissions.1.ToPort", rule.port.to_string())
            .set("IpPermissions.1.IpRanges.1.CidrIp", OPEN)
    }
}

impl AwsIssuer {
    /// A client for `region` with credentials from the AWS SDK's default chain
    /// (environment, web identity / IRSA, EKS pod identity, ECS, IMDSv2), against
    /// `endpoint` (default `https://ec2.<region>.amazonaws.com`).
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub async fn from_default_chain(region: &str, endpoint: Option<&str>) -> Result<Self> {
        use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
        let https = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(region.to_owned()))
            .http_client(https)
            .load()
            .await;
        let provider = config.credentials_provider().ok_or_else(|| {
            Error::Unauthorized("AWS: the default credential chain is not available".into())
        })?;
        Self::new(region, endpoint, Source::Chain(provider))
    }

    /// A client for `region` with fixed keys (a Secret's `aws_access_key_id`,
    /// `aws_secret_access_key` and optional `aws_session_token`).
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn with_credentials(
        region: &str,
        endpoint: Option<&str>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Result<Self> {
        let creds = Credentials::new(
            access_key_id,
            secret_access_key,
            session_token,
            None,
            "netpolicy",
        );
        Self::new(region, endpoint, Source::Fixed(creds))
    }

    fn new(region: &str, endpoint: Option<&str>, source: Source) -> Result<Self> {
        if region.is_empty() {
            return Err(Error::Provider("AWS: the region is empty".into()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(crate::CONNECT_TIMEOUT)
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| Error::Provider(format!("HTTP client: {e}")))?;
        let endpoint = endpoint.map_or_else(
            || format!("https://ec2.{region}.amazonaws.com/"),
            |e| format!("{}/", e.trim_end_matches('/')),
        );
        Ok(Self {
            http,
            endpoint,
            region: region.to_owned(),
            vpc: None,
            source,
            cached: Mutex::new(None),
            retries: 4,
            max_backoff: Duration::from_secs(20),
        })
    }

    /// Security groups are looked up and created in this VPC (default: found by name in
    /// any VPC, created in the region's default VPC).
    #[must_use]
    pub fn with_vpc(mut self, vpc: Option<String>) -> Self {
        self.vpc = vpc.filter(|v| !v.is_empty());
        self
    }

    async fn credentials(&self) -> Result<Credentials> {
        let chain = match &self.source {
            Source::Fixed(c) => return Ok(c.clone()),
            Source::Chain(p) => p,
        };
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            let fresh = c.expiry().is_none_or(|t| {
                t.duration_since(SystemTime::now())
                    .is_ok_and(|left| left > REFRESH_BEFORE)
            });
            if fresh {
                return Ok(c.clone());
            }
        }
        let c = chain.provide_credentials().await.map_err(|e| {
            Error::Unauthorized(format!(
                "AWS credentials: {e} (name a Secret in spec.aws.credentialsSecretRef, or \
                 give the operator's ServiceAccount a role: IRSA or EKS pod identity)"
            ))
        })?;
        *cached = Some(c.clone());
        Ok(c)
    }

    fn backoff(&self, attempt: u32) -> Duration {
        Duration::from_millis(250u64.saturating_mul(1 << attempt.min(10))).min(self.max_backoff)
    }

    /// One signed EC2 Query call with retries; returns the XML answer.
    async fn call(&self, action: &str, params: Params) -> Result<String> {
        // Form encoding as the AWS SDKs write it (a space is `+`): EC2 hashes the bytes as
        // sent, and emulators that re-encode the parsed form (moto) get the same bytes.
        let form = |s: &str| urlencode(s).replace("%20", "+");
        let mut body = format!("Action={action}&Version={API_VERSION}");
        for (k, v) in &params.0 {
            body.push('&');
            body.push_str(&form(k));
            body.push('=');
            body.push_str(&form(v));
        }
        let mut attempt = 0;
        let mut unanswered = 0;
        loop {
            let request = self.signed(action, &body).await?;
            let resp = match self.http.execute(request).await {
                Ok(r) => r,
                Err(e) if crate::unreachable(&e) => {
                    unanswered += 1;
                    if unanswered < crate::CONNECT_ATTEMPTS {
                        tokio::time::sleep(self.backoff(0)).await;
                        continue;
                    }
                    return Err(Error::Unreachable(format!("{action}: {}", e.without_url())));
                }
                Err(_) if attempt < self.retries => {
                    attempt += 1;
                    tokio::time::sleep(self.backoff(attempt)).await;
                    continue;
                }
                Err(e) => {
                    return Err(Error::Provider(format!("{action}: {}", e.without_url())));
                }
            };
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            if status.is_success() {
                return Ok(text);
            }
            let (code, message) = error_of(&text);
            let limited = throttled(&code, status);
            if (limited || server_side(&code, status)) && attempt < self.retries {
                attempt += 1;
                tokio::time::sleep(self.backoff(attempt)).await;
                continue;
            }
            if limited {
                return Err(Error::RateLimited {
                    retry_after: self.backoff(attempt + 1).as_secs().max(1),
                });
            }
            return Err(classify(action, &code, &message, status));
        }
    }

    async fn signed(&self, action: &str, body: &str) -> Result<reqwest::Request> {
        let identity: Identity = self.credentials().await?.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("ec2")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| Error::Provider(format!("{action}: signing: {e}")))?
            .into();
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let signable = SignableRequest::new(
            "POST",
            self.endpoint.as_str(),
            [("content-type", content_type)].into_iter(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .map_err(|e| Error::Provider(format!("{action}: signing: {e}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| Error::Provider(format!("{action}: signing: {e}")))?
            .into_parts();
        let mut req = self
            .http
            .post(&self.endpoint)
            .header("content-type", content_type)
            .body(body.to_owned());
        for (name, value) in instructions.headers() {
            req = req.header(name, value);
        }
        req.build()
            .map_err(|e| Error::Provider(format!("{action}: {}", e.without_url())))
    }

    async fn addresses(&self, params: Params) -> Result<Vec<Address>> {
        let body = match self.call("DescribeAddresses", params).await {
            Err(Error::NotFound(_)) => return Ok(Vec::new()),
            other => other?,
        };
        let doc = parse("DescribeAddresses", &body)?;
        let root = doc.root_element();
        Ok(items(root, "addressesSet")
            .into_iter()
            .filter_map(address)
            .collect())
    }

    async fn by_ip(&self, ip: &str) -> Result<Option<Address>> {
        let found = self
            .addresses(Params::default().set("PublicIp.1", ip))
            .await?;
        Ok(found.into_iter().find(|a| a.public_ip == ip))
    }

    async fn must(&self, ip: &str) -> Result<Address> {
        self.by_ip(ip)
            .await?
            .ok_or_else(|| Error::NotFound(format!("Elastic IP {ip}")))
    }

    /// The provider ID of the instance an address is associated with.
    async fn holder(&self, a: &Address) -> Result<Option<String>> {
        if let Some(eni) = &a.interface {
            let body = self
                .call(
                    "DescribeNetworkInterfaces",
                    Params::default().set("NetworkInterfaceId.1", eni.clone()),
                )
                .await?;
            let doc = parse("DescribeNetworkInterfaces", &body)?;
            let item = items(doc.root_element(), "networkInterfaceSet")
                .into_iter()
                .next();
            let found = item.and_then(|i| {
                let instance = child(i, "attachment").and_then(|at| text(at, "instanceId"))?;
                Some(provider_id(&text(i, "availabilityZone")?, &instance))
            });
            // An interface on no instance: a holder no node matches (moved on assign).
            return Ok(Some(found.unwrap_or_else(|| format!("eni:{eni}"))));
        }
        match &a.instance {
            Some(i) => Ok(Some(self.instance(i).await?.0)),
            None => Ok(None),
        }
    }

    /// An instance's provider ID and primary interface.
    async fn instance(&self, id: &str) -> Result<(String, Primary)> {
        let body = self
            .call(
                "DescribeInstances",
                Params::default().set("InstanceId.1", id),
            )
            .await?;
        let doc = parse("DescribeInstances", &body)?;
        let instance = doc
            .descendants()
            .find(|n| n.has_tag_name("item") && text(*n, "instanceId").as_deref() == Some(id))
            .ok_or_else(|| Error::NotFound(format!("DescribeInstances: instance {id}")))?;
        let zone = child(instance, "placement")
            .and_then(|p| text(p, "availabilityZone"))
            .unwrap_or_default();
        let primary = items(instance, "networkInterfaceSet")
            .into_iter()
            .find(|n| {
                child(*n, "attachment").is_some_and(|at| {
                    text(at, "deviceIndex").as_deref() == Some("0")
                        && text(at, "networkCardIndex").is_none_or(|c| c == "0")
                })
            })
            .ok_or_else(|| {
                Error::Provider(format!(
                    "DescribeInstances: instance {id} has no primary network interface"
                ))
            })?;
        let groups = items(primary, "groupSet")
            .into_iter()
            .filter_map(|g| text(g, "groupId"))
            .collect();
        let eni = text(primary, "networkInterfaceId").ok_or_else(|| {
            Error::Provider(format!(
                "DescribeInstances: instance {id}: interface without ID"
            ))
        })?;
        Ok((provider_id(&zone, id), Primary { id: eni, groups }))
    }

    async fn state(&self, a: &Address) -> Result<IpState> {
        Ok(IpState {
            address: a.public_ip.clone(),
            assigned_to: self.holder(a).await?,
        })
    }

    /// The security group named `name`: its ID and the ports netpolicy manages.
    async fn group(&self, name: &str) -> Result<Option<(String, BTreeSet<PortRule>)>> {
        let mut params = Params::default().filter(1, "group-name", name);
        if let Some(vpc) = &self.vpc {
            params = params.filter(2, "vpc-id", vpc);
        }
        let body = self.call("DescribeSecurityGroups", params).await?;
        let doc = parse("DescribeSecurityGroups", &body)?;
        let groups = items(doc.root_element(), "securityGroupInfo");
        if groups.len() > 1 {
            return Err(Error::Provider(format!(
                "DescribeSecurityGroups: {} security groups are named {name:?} (one per VPC): \
                 set spec.aws.vpcId",
                groups.len()
            )));
        }
        let Some(g) = groups.first() else {
            return Ok(None);
        };
        let id = text(*g, "groupId").ok_or_else(|| {
            Error::Provider(format!("DescribeSecurityGroups: {name:?} without an ID"))
        })?;
        let mut ports = BTreeSet::new();
        for p in items(*g, "ipPermissions") {
            let protocol = text(p, "ipProtocol").unwrap_or_default();
            let (from, to) = (text(p, "fromPort"), text(p, "toPort"));
            let open = items(p, "ipRanges")
                .into_iter()
                .any(|r| text(r, "cidrIp").as_deref() == Some(OPEN));
            if (protocol == "tcp" || protocol == "udp")
                && open
                && from == to
                && let Some(port) = from.and_then(|f| f.parse().ok())
            {
                ports.insert(PortRule { protocol, port });
            }
        }
        Ok(Some((id, ports)))
    }

    async fn group_id(&self, name: &str) -> Result<String> {
        self.group(name)
            .await?
            .map(|(id, _)| id)
            .ok_or_else(|| Error::NotFound(format!("security group {name:?}")))
    }

    async fn default_vpc(&self) -> Result<String> {
        let body = self
            .call(
                "DescribeVpcs",
                Params::default().filter(1, "isDefault", "true"),
            )
            .await?;
        let doc = parse("DescribeVpcs", &body)?;
        items(doc.root_element(), "vpcSet")
            .into_iter()
            .find_map(|v| text(v, "vpcId"))
            .ok_or_else(|| {
                Error::Provider(format!(
                    "CreateSecurityGroup: region {} has no default VPC: set spec.aws.vpcId to \
                     the cluster's VPC",
                    self.region
                ))
            })
    }

    /// Sets the groups of an instance's primary interface to `f(current)`.
    async fn regroup(
        &self,
        node: &str,
        f: impl FnOnce(&[String]) -> Option<Vec<String>>,
    ) -> Result<()> {
        let _one_at_a_time = interface_lock().lock().await;
        let (_, primary) = self.instance(instance_id(node)?).await?;
        let Some(groups) = f(&primary.groups) else {
            return Ok(());
        };
        let mut params = Params::default().set("NetworkInterfaceId", primary.id);
        for (i, g) in groups.iter().enumerate() {
            params = params.set(format!("SecurityGroupId.{}", i + 1), g.clone());
        }
        self.call("ModifyNetworkInterfaceAttribute", params)
            .await
            .map(drop)
    }
}

impl Issuer for AwsIssuer {
    async fn find_ip(&self, address: Option<&str>, tags: &Tags) -> Result<Option<IpState>> {
        let found = match address {
            Some(ip) => self.by_ip(ip).await?,
            None => {
                let mut tagged = self
                    .addresses(
                        Params::default()
                            .filter(1, &format!("tag:{CLUSTER_TAG}"), &tags.cluster)
                            .filter(2, &format!("tag:{ROUTED_IP_TAG}"), &tags.routed_ip),
                    )
                    .await?;
                // Two tagged for one RoutedIP (an allocation retried after a lost answer):
                // the oldest-numbered is kept, the other shows as an orphan nowhere — it is
                // the same RoutedIP's — so pick deterministically.
                tagged.sort_by(|a, b| a.allocation_id.cmp(&b.allocation_id));
                tagged.into_iter().next()
            }
        };
        match found {
            Some(a) => Ok(Some(self.state(&a).await?)),
            None => Ok(None),
        }
    }

    async fn create_ip(&self, tags: &Tags) -> Result<IpState> {
        let body = self
            .call(
                "AllocateAddress",
                Params::default()
                    .set("Domain", "vpc")
                    .set("TagSpecification.1.ResourceType", "elastic-ip")
                    .set("TagSpecification.1.Tag.1.Key", CLUSTER_TAG)
                    .set("TagSpecification.1.Tag.1.Value", tags.cluster.clone())
                    .set("TagSpecification.1.Tag.2.Key", ROUTED_IP_TAG)
                    .set("TagSpecification.1.Tag.2.Value", tags.routed_ip.clone()),
            )
            .await?;
        let doc = parse("AllocateAddress", &body)?;
        let ip = text(doc.root_element(), "publicIp")
            .ok_or_else(|| Error::Provider("AllocateAddress: the answer has no publicIp".into()))?;
        Ok(IpState {
            address: ip,
            assigned_to: None,
        })
    }

    async fn delete_ip(&self, address: &str) -> Result<()> {
        let a = self.must(address).await?;
        if let Some(assoc) = &a.association_id {
            self.call(
                "DisassociateAddress",
                Params::default().set("AssociationId", assoc.clone()),
            )
            .await?;
        }
        self.call(
            "ReleaseAddress",
            Params::default().set("AllocationId", a.allocation_id),
        )
        .await
        .map(drop)
    }

    async fn assign(&self, address: &str, node: &str) -> Result<()> {
        let a = self.must(address).await?;
        let (_, primary) = self.instance(instance_id(node)?).await?;
        self.call(
            "AssociateAddress",
            Params::default()
                .set("AllocationId", a.allocation_id)
                .set("NetworkInterfaceId", primary.id)
                .set("AllowReassociation", "true"),
        )
        .await
        .map(drop)
    }

    async fn unassign(&self, address: &str) -> Result<()> {
        let a = self.must(address).await?;
        let Some(assoc) = a.association_id else {
            return Ok(());
        };
        match self
            .call(
                "DisassociateAddress",
                Params::default().set("AssociationId", assoc),
            )
            .await
        {
            Err(Error::NotFound(_)) => Ok(()),
            other => other.map(drop),
        }
    }

    async fn find_firewall(&self, name: &str) -> Result<Option<FirewallState>> {
        let Some((id, ports)) = self.group(name).await? else {
            return Ok(None);
        };
        let body = self
            .call(
                "DescribeNetworkInterfaces",
                Params::default().filter(1, "group-id", &id),
            )
            .await?;
        let doc = parse("DescribeNetworkInterfaces", &body)?;
        let nodes = items(doc.root_element(), "networkInterfaceSet")
            .into_iter()
            .filter_map(|i| {
                let at = child(i, "attachment")?;
                if text(at, "deviceIndex").as_deref() != Some("0") {
                    return None;
                }
                Some(provider_id(
                    &text(i, "availabilityZone")?,
                    &text(at, "instanceId")?,
                ))
            })
            .collect();
        Ok(Some(FirewallState { ports, nodes }))
    }

    async fn create_firewall(&self, name: &str) -> Result<()> {
        let vpc = match &self.vpc {
            Some(v) => v.clone(),
            None => self.default_vpc().await?,
        };
        let r = self
            .call(
                "CreateSecurityGroup",
                Params::default()
                    .set("GroupName", name)
                    .set(
                        "GroupDescription",
                        "netpolicy: the ports of the Services behind routed IPs",
                    )
                    .set("VpcId", vpc),
            )
            .await;
        match r {
            Err(Error::Provider(m)) if m.contains("InvalidGroup.Duplicate") => Ok(()),
            other => other.map(drop),
        }
    }

    async fn add_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        let id = self.group_id(firewall).await?;
        let r = self
            .call(
                "AuthorizeSecurityGroupIngress",
                Params::default().set("GroupId", id).ingress(rule),
            )
            .await;
        match r {
            Err(Error::Provider(m)) if m.contains("InvalidPermission.Duplicate") => Ok(()),
            other => other.map(drop),
        }
    }

    async fn remove_port(&self, firewall: &str, rule: &PortRule) -> Result<()> {
        let id = self.group_id(firewall).await?;
        let r = self
            .call(
                "RevokeSecurityGroupIngress",
                Params::default().set("GroupId", id).ingress(rule),
            )
            .await;
        match r {
            Err(Error::NotFound(_)) => Ok(()),
            other => other.map(drop),
        }
    }

    async fn add_node(&self, firewall: &str, node: &str) -> Result<()> {
        let id = self.group_id(firewall).await?;
        self.regroup(node, |groups| {
            (!groups.contains(&id)).then(|| {
                let mut g = groups.to_vec();
                g.push(id.clone());
                g
            })
        })
        .await
    }

    async fn remove_node(&self, firewall: &str, node: &str) -> Result<()> {
        let id = self.group_id(firewall).await?;
        let mut only = false;
        let r = self
            .regroup(node, |groups| {
                if !groups.contains(&id) {
                    return None;
                }
                let rest: Vec<String> = groups.iter().filter(|g| **g != id).cloned().collect();
                only = rest.is_empty();
                (!only).then_some(rest)
            })
            .await;
        if only {
            return Err(Error::Conflict(format!(
                "ModifyNetworkInterfaceAttribute: {firewall:?} is the only security group of \
                 {node}'s primary interface and an interface needs one: add the node's own \
                 group to it first"
            )));
        }
        match r {
            // The instance is gone: so is its interface's membership.
            Err(Error::NotFound(_)) => Ok(()),
            other => other,
        }
    }

    async fn tagged_ips(&self, cluster: &str) -> Result<Vec<(IpState, String)>> {
        let tagged = self
            .addresses(Params::default().filter(1, &format!("tag:{CLUSTER_TAG}"), cluster))
            .await?;
        let mut out = Vec::with_capacity(tagged.len());
        for a in tagged {
            let Some(rip) = a.routed_ip.clone() else {
                continue;
            };
            out.push((self.state(&a).await?, rip));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_name_an_instance() {
        assert_eq!(instance_id("aws:///eu-west-1a/i-0abc").unwrap(), "i-0abc");
        assert_eq!(instance_id("aws://eu-west-1a/i-0abc").unwrap(), "i-0abc");
        for bad in [
            "hcloud://1",
            "aws:///eu-west-1a/",
            "aws:///eu-west-1a/vol-1",
            "i-0abc",
        ] {
            let e = instance_id(bad).unwrap_err().to_string();
            assert!(e.contains("aws:///<zone>/<instance-id>"), "{bad}: {e}");
        }
    }

    #[test]
    fn ec2_error_codes_become_errors_a_person_can_act_on() {
        let forbidden = StatusCode::FORBIDDEN;
        let bad = StatusCode::BAD_REQUEST;
        let e = classify(
            "AssociateAddress",
            "UnauthorizedOperation",
            "not allowed",
            forbidden,
        );
        assert_eq!(
            e,
            Error::Unauthorized("AssociateAddress: UnauthorizedOperation: not allowed".into())
        );
        assert!(matches!(
            classify("X", "AuthFailure", "", StatusCode::UNAUTHORIZED),
            Error::Unauthorized(_)
        ));
        assert!(matches!(
            classify("AllocateAddress", "AddressLimitExceeded", "", bad),
            Error::LimitExceeded(_)
        ));
        assert!(matches!(
            classify("ReleaseAddress", "InvalidAllocationID.NotFound", "", bad),
            Error::NotFound(_)
        ));
        assert!(matches!(
            classify("ReleaseAddress", "InvalidIPAddress.InUse", "", bad),
            Error::Conflict(_)
        ));
        assert!(matches!(
            classify("X", "SomethingElse", "", bad),
            Error::Provider(_)
        ));
        assert!(throttled(
            "RequestLimitExceeded",
            StatusCode::SERVICE_UNAVAILABLE
        ));
        assert!(!server_side(
            "RequestLimitExceeded",
            StatusCode::SERVICE_UNAVAILABLE
        ));
        assert!(server_side("", StatusCode::BAD_GATEWAY));
    }

    #[test]
    fn an_error_answer_gives_its_code_and_message() {
        let body = "<?xml version=\"1.0\"?><Response><Errors><Error><Code>AuthFailure</Code>\
                    <Message>AWS was not able to validate</Message></Error></Errors>\
                    <RequestID>r</RequestID></Response>";
        assert_eq!(
            error_of(body),
            ("AuthFailure".into(), "AWS was not able to validate".into())
        );
        assert_eq!(error_of("not xml").0, "");
    }

    #[test]
    fn the_debug_output_shows_no_key() {
        let c =
            AwsIssuer::with_credentials("eu-west-1", None, "AKIDEXAMPLE", "s3cr3t", None).unwrap();
        let d = format!("{c:?}");
        assert!(!d.contains("s3cr3t") && !d.contains("AKIDEXAMPLE"), "{d}");
        assert!(d.contains("https://ec2.eu-west-1.amazonaws.com/"), "{d}");
    }
}
