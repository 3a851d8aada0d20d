//! moto's EC2 emulator (`moto[server]`, pinned in `scripts/test-moto`) on 127.0.0.1: the
//! AWS the routed-IP tests run against. The real AWS client of `netpolicy-issuers` talks
//! to it unchanged (its `endpoint`); set-up and checks go through boto3 (the official
//! Python SDK, installed with moto) so that what a test reads is what EC2's own API
//! shows, not what netpolicy believes it wrote.
//!
//! [`Moto::start_with_auth`] turns moto's IAM on: requests must be signed (SigV4 checked)
//! with a key of a user whose policy allows the action, as on AWS.
//!
//! ```no_run
//! let moto = netpolicy_testenv::moto::Moto::start();
//! let nodes = moto.run_instances(2);
//! println!("{}", moto.python("print(len(ec2.describe_addresses()['Addresses']))"));
//! ```

// Test fixtures: a failure to start or to run a check is a broken test, said loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use axum::{body::Bytes, http::HeaderMap, response::IntoResponse};

/// The region every test uses.
pub const REGION: &str = "eu-west-1";
/// Access key of the unauthenticated emulator (moto accepts any without IAM).
pub const ACCESS_KEY: &str = "AKIDNETPOLICYTEST";
/// Its secret (tests check it never shows in logs, errors or statuses).
pub const SECRET_KEY: &str = "netpolicy-test-secret-key-do-not-log";

/// An EC2 instance started in the emulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// `i-…`.
    pub id: String,
    /// Its availability zone.
    pub zone: String,
    /// `aws:///<zone>/<id>`: what its Node's `spec.providerID` says.
    pub provider_id: String,
    /// Its primary network interface.
    pub eni: String,
}

/// A running moto server, stopped when dropped.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    bin: PathBuf,
    /// The keys boto3 signs with ([`Moto::admin`]'s with auth on).
    keys: (String, String),
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The directory with `moto_server` and `python` (boto3).
fn bin_dir() -> PathBuf {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| crate::tool_dir("NETPOLICY_MOTO", "test-moto"));
    match dir {
        Ok(d) => d.clone(),
        Err(e) => panic!("netpolicy-testenv: no moto: {e}"),
    }
}

impl Moto {
    /// Starts moto without IAM (any key is accepted).
    ///
    /// # Panics
    /// When moto cannot be installed or does not answer within 60 s.
    pub fn start() -> Self {
        Self::launch(None)
    }

    /// Starts moto with IAM on after `free` unauthenticated requests (moto's
    /// `INITIAL_NO_AUTH_ACTION_COUNT`): use them to make users with [`Moto::user`].
    ///
    /// # Panics
    /// As [`Moto::start`].
    pub fn start_with_auth(free: u32) -> Self {
        Self::launch(Some(free))
    }

    fn launch(free: Option<u32>) -> Self {
        let bin = bin_dir();
        let port = crate::free_ports(1).expect("a free port for moto")[0];
        let mut cmd = Command::new(bin.join("moto_server"));
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(n) = free {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", n.to_string());
        }
        let child = cmd.spawn().expect("moto_server starts");
        let moto = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            bin,
            keys: (ACCESS_KEY.into(), SECRET_KEY.into()),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not answer within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// Runs a Python script with `ec2`, `iam` (boto3 clients on this emulator, with the
    /// current keys), `json` and `REGION` defined; returns its standard output.
    ///
    /// # Panics
    /// When the script fails (its standard error is in the message).
    pub fn python(&self, script: &str) -> String {
        let prelude = format!(
            "import boto3, json\nREGION = {REGION:?}\n\
             kw = dict(endpoint_url={:?}, region_name=REGION, aws_access_key_id={:?}, \
             aws_secret_access_key={:?})\n\
             ec2 = boto3.client('ec2', **kw)\niam = boto3.client('iam', **kw)\n",
            self.endpoint, self.keys.0, self.keys.1
        );
        let out = Command::new(self.bin.join("python"))
            .args(["-c", &format!("{prelude}{script}")])
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "python failed: {}\n{script}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A Python script's output parsed as JSON (the script prints one document).
    ///
    /// # Panics
    /// When the script fails or prints no JSON.
    pub fn json(&self, script: &str) -> serde_json::Value {
        let out = self.python(script);
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// Makes an IAM user allowed everything and from now on signs this handle's boto3
    /// calls with its key (3 calls: within `start_with_auth`'s free ones).
    ///
    /// # Panics
    /// When moto refuses.
    pub fn admin(&mut self) {
        let all = r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}"#;
        self.keys = self.user("admin", all);
    }

    /// Makes an IAM user whose inline policy is `policy` (a JSON document); returns its
    /// key (access key ID, secret).
    ///
    /// # Panics
    /// When moto refuses.
    pub fn user(&self, name: &str, policy: &str) -> (String, String) {
        let v = self.json(&format!(
            "iam.create_user(UserName={name:?})\n\
             iam.put_user_policy(UserName={name:?}, PolicyName='netpolicy', PolicyDocument={policy:?})\n\
             k = iam.create_access_key(UserName={name:?})['AccessKey']\n\
             print(json.dumps([k['AccessKeyId'], k['SecretAccessKey']]))"
        ));
        (
            v[0].as_str().unwrap().to_owned(),
            v[1].as_str().unwrap().to_owned(),
        )
    }

    /// Starts `n` instances (moto's first image, `t3.micro`) in the default VPC.
    ///
    /// # Panics
    /// When moto refuses.
    pub fn run_instances(&self, n: u32) -> Vec<Instance> {
        let v = self.json(&format!(
            "img = ec2.describe_images()['Images'][0]['ImageId']\n\
             r = ec2.run_instances(ImageId=img, MinCount={n}, MaxCount={n}, InstanceType='t3.micro')\n\
             print(json.dumps([[i['InstanceId'], i['Placement']['AvailabilityZone'], \
             [e['NetworkInterfaceId'] for e in i['NetworkInterfaces'] if e['Attachment']['DeviceIndex'] == 0][0]] \
             for i in r['Instances']]))"
        ));
        v.as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let s = |k: usize| i[k].as_str().unwrap().to_owned();
                Instance {
                    provider_id: format!("aws:///{}/{}", s(1), s(0)),
                    id: s(0),
                    zone: s(1),
                    eni: s(2),
                }
            })
            .collect()
    }

    /// Every Elastic IP: `[{PublicIp, AllocationId, NetworkInterfaceId, Tags}]`.
    pub fn addresses(&self) -> serde_json::Value {
        self.json("print(json.dumps(ec2.describe_addresses()['Addresses'], default=str))")
    }

    /// The groups (IDs) of a network interface.
    pub fn groups_of(&self, eni: &str) -> Vec<String> {
        let v = self.json(&format!(
            "n = ec2.describe_network_interfaces(NetworkInterfaceIds=[{eni:?}])['NetworkInterfaces'][0]\n\
             print(json.dumps([g['GroupId'] for g in n['Groups']]))"
        ));
        serde_json::from_value(v).unwrap()
    }

    /// The security group named `name`: `{GroupId, IpPermissions}` (`null` when absent).
    pub fn security_group(&self, name: &str) -> serde_json::Value {
        self.json(&format!(
            "g = ec2.describe_security_groups(Filters=[{{'Name': 'group-name', 'Values': [{name:?}]}}])['SecurityGroups']\n\
             print(json.dumps(g[0] if g else None, default=str))"
        ))
    }
}

/// What passes the [`Gate`] in front of moto: the EC2 actions in order, and the ones held.
#[derive(Debug, Default)]
pub struct GateState {
    /// The `Action` of every request, in order (held ones included).
    pub actions: Vec<String>,
    /// Actions answered with EC2's throttling error (`RequestLimitExceeded`, HTTP 503)
    /// instead of being forwarded, with how many more times.
    pub hold: BTreeMap<String, usize>,
}

/// A gate shared between its proxy and the test.
pub type Gate = Arc<Mutex<GateState>>;

impl Moto {
    /// A proxy on 127.0.0.1 in front of this emulator: it records each request's EC2
    /// action and can hold an action (answer it with EC2's documented throttling error)
    /// so a test can stop a client mid-failover. Returns the proxy's endpoint.
    ///
    /// # Panics
    /// When it cannot listen.
    pub async fn gate(&self) -> (String, Gate) {
        let gate: Gate = Arc::default();
        let upstream = self.endpoint.clone();
        let http = reqwest::Client::new();
        let g = Arc::clone(&gate);
        let handler = move |headers: HeaderMap, body: Bytes| {
            let g = Arc::clone(&g);
            let http = http.clone();
            let upstream = upstream.clone();
            async move {
                let action = String::from_utf8_lossy(&body)
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("Action="))
                    .unwrap_or_default()
                    .to_owned();
                let held = {
                    let mut s = g.lock().unwrap();
                    s.actions.push(action.clone());
                    match s.hold.get_mut(&action) {
                        Some(n) if *n > 0 => {
                            *n -= 1;
                            true
                        }
                        _ => false,
                    }
                };
                if held {
                    let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
                        <Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>\
                        </Error></Errors><RequestID>gate</RequestID></Response>";
                    return (axum::http::StatusCode::SERVICE_UNAVAILABLE, xml.to_owned())
                        .into_response();
                }
                let mut req = http.post(format!("{upstream}/")).body(body);
                for (k, v) in &headers {
                    if k != "host" && k != "content-length" {
                        req = req.header(k.as_str(), v.as_bytes());
                    }
                }
                let resp = req.send().await.unwrap();
                let status = axum::http::StatusCode::from_u16(resp.status().as_u16()).unwrap();
                (status, resp.text().await.unwrap()).into_response()
            }
        };
        let app = axum::Router::new().route("/", axum::routing::post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (base, gate)
    }
}
