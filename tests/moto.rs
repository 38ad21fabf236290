//! One moto server (`python3 -m moto.server`, a third-party AWS emulator)
//! per test process, for every suite that talks to AWS APIs.
//!
//! - [`server`] starts it on the first call, on 127.0.0.1 and a free port,
//!   and returns it; later calls return the same server. It stops when the
//!   test process exits (it watches its stdin, which closes then).
//! - Without python3 the moto tests are skipped with a loud message
//!   ([`server`] returns `None`); with python3 but without moto they fail,
//!   with the command that installs it.
//! - Nothing but 127.0.0.1 is ever contacted.
//!
//! moto keeps its state per account and region for the life of the server:
//! suites stay independent by using their own resources (a VPC, a cluster
//! name) or their own region.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The credentials every request carries (moto accepts any).
pub const ACCESS_KEY_ID: &str = "testing";
pub const SECRET_ACCESS_KEY: &str = "testing";
/// How long moto may take to start listening.
const STARTUP: Duration = Duration::from_secs(60);
/// Ports tried when the one picked is taken before moto binds it.
const PORT_ATTEMPTS: usize = 3;
const INSTALL_HINT: &str = "python3 -m pip install 'moto[server]'";

/// Exits when the test process does (stdin closes), removing its log,
/// then runs moto.
const LAUNCHER: &str = r#"
import os, sys, threading
def watch():
    sys.stdin.read()
    try:
        os.unlink(sys.argv[2])
    except OSError:
        pass
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[1]])
"#;

/// A running moto server.
pub struct Moto {
    pub addr: SocketAddr,
    /// Where moto's own log goes while the tests run, for failures to
    /// point at (removed when moto stops).
    pub log: std::path::PathBuf,
    /// Kept for the life of the process: its stdin is moto's lifeline.
    _child: Mutex<Child>,
}

impl Moto {
    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The environment that points an AWS SDK (or the dovetail binary) at
    /// this server in `region`.
    pub fn sdk_env(&self, region: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_string()),
            ("AWS_REGION", region.to_string()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
        ]
    }
}

/// The test credentials as environment variables, for a program of the
/// tests' own that talks to moto.
pub fn credentials_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY),
    ]
}

/// An SDK configuration for `endpoint` (moto, or a proxy in front of it)
/// in `region`, with the test credentials and no SDK retries.
pub async fn sdk_config(endpoint: &str, region: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(region.to_string()))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
            None,
            None,
            "moto",
        ))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await
}

/// An SQS client for `endpoint` in `region` (see [`sdk_config`]).
pub async fn sqs_client(endpoint: &str, region: &str) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&sdk_config(endpoint, region).await)
}

static SERVER: OnceLock<Option<Moto>> = OnceLock::new();

/// The moto server, started on first use; `None` (after a loud message)
/// when python3 is not installed.
pub fn server() -> Option<&'static Moto> {
    SERVER.get_or_init(start).as_ref()
}

/// A moto server of the caller's own, stopped when dropped: for tests whose
/// controllers write to AWS for minutes (moto serves concurrent requests
/// from threads over shared state, and a listing that races another
/// suite's deletes can fail with a 500).
pub fn own() -> Moto {
    start().expect("python3 with moto's server (python3 -m pip install 'moto[server]')")
}

fn start() -> Option<Moto> {
    let python = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !python.is_ok_and(|s| s.success()) {
        // Also built into the benches (`#[path]`), so not `crate::missing`.
        let what = format!(
            "python3 is not installed, so the AWS tests against moto did not run \
             (install python3 and `{INSTALL_HINT}`)"
        );
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI=true and {what}"
        );
        eprintln!("\n*** NOT RUN: {what} ***\n");
        return None;
    }
    let import = Command::new("python3")
        .args(["-c", "import moto.server, flask, flask_cors"])
        .output()
        .expect("running python3");
    assert!(
        import.status.success(),
        "moto's server is not installed for python3 ({}); install it with: {INSTALL_HINT}",
        String::from_utf8_lossy(&import.stderr).trim()
    );
    static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let log = std::env::temp_dir().join(format!("dovetail-moto-{}-{n}.log", std::process::id()));
    let mut last_error = String::new();
    for _ in 0..PORT_ATTEMPTS {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port on 127.0.0.1")
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let out = std::fs::File::create(&log).expect("moto's log file");
        let mut child = Command::new("python3")
            .args(["-c", LAUNCHER, &port.to_string()])
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .spawn()
            .expect("starting moto");
        let deadline = Instant::now() + STARTUP;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                let moto = Moto {
                    addr,
                    log,
                    _child: Mutex::new(child),
                };
                eprintln!(
                    "moto listens on {} (log: {})",
                    moto.endpoint(),
                    moto.log.display()
                );
                return Some(moto);
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut text = String::new();
                let _ = std::fs::File::open(&log).and_then(|mut f| f.read_to_string(&mut text));
                last_error = format!("moto exited with {status}: {text}");
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                last_error = format!("moto did not listen on {addr} within {STARTUP:?}");
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    panic!("starting moto: {last_error} (log: {})", log.display());
}
