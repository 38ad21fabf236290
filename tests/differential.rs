//! The stand-ins checked against the real thing (issue 37, item 6): a real
//! Kubernetes API server (the testbed, with dovetail's CRDs from
//! `deploy/`) is the reference for
//! - `dovetail validate` and the served API's admission, on every document
//!   of the validate fixtures, the example repository and a sample of the
//!   conformance suite's generated CEL cases ([`admission`]);
//! - `dovetail simulate --serve`, on one script of requests run against
//!   both ([`served`]).
//!
//! Each difference is fixed, or listed with its reason in the test's
//! allow-lists and in `docs/differential.md`; an unexplained difference,
//! or an allow-list entry nothing needs any more, fails the test.

mod admission;
mod http;
mod karpenter_cases;
mod parsers;
mod served;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::root;
use crate::testbed::{Options, Testbed};
use http::Api;

/// A testbed with dovetail's CRDs installed and established, and a client
/// of it.
fn testbed_with_crds() -> (Testbed, Api) {
    let tb = Testbed::up(&Options::default());
    let deploy = root().join("deploy");
    tb.kubectl_ok(&["apply", "-k", deploy.to_str().expect("UTF-8 path")]);
    tb.kubectl_ok(&[
        "wait",
        "--for",
        "condition=Established",
        "crd",
        "--all",
        "--timeout",
        "60s",
    ]);
    let api = Api::from_kubeconfig(&tb.kubeconfig);
    (tb, api)
}

/// The changes of each kind the served API keeps for watches from a
/// resource version (`--watch-log`), few enough that the script can make
/// a resource version too old with as many changes.
const SERVED_WATCH_LOG: usize = 16;

/// `dovetail simulate --serve --controller none` of the test's scenario,
/// on 127.0.0.1 and a free port, keeping [`SERVED_WATCH_LOG`] changes of
/// each kind; stopped when dropped.
struct ServedApi {
    child: Child,
    dir: tempfile::TempDir,
    api: Api,
}

impl ServedApi {
    fn start() -> ServedApi {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        let child = Command::new(env!("CARGO_BIN_EXE_dovetail"))
            .arg("simulate")
            .arg(root().join("tests/scenarios/differential/served.yaml"))
            .args(["--serve", "127.0.0.1:0", "--controller", "none"])
            .args(["--watch-log", &SERVED_WATCH_LOG.to_string()])
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .args(["-o", "json", "--output-file"])
            .arg(dir.path().join("report.json"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("serve.log")).expect("log"))
            .spawn()
            .expect("dovetail simulate --serve starts");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !kubeconfig.exists() {
            assert!(
                Instant::now() < deadline,
                "the served API did not start:\n{}",
                std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The kubeconfig is written before the listener serves.
        let api = Api::from_kubeconfig(&kubeconfig);
        while api.get("/version").status != 200 {
            assert!(Instant::now() < deadline, "the served API does not answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        ServedApi { child, dir, api }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }
}

impl Drop for ServedApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `path` relative to the crate root, `/`-separated, as diagnostics name
/// files.
fn relative(path: &Path) -> String {
    let root: PathBuf = root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// The client-go program that speaks only protobuf (testbed/cmd/protoclient)
/// does the same steps, and reads back the same objects, from the real API
/// server and from the served API: the protobuf it is answered with
/// decodes into what it sent, from either.
#[test]
fn a_protobuf_client_sees_the_same_from_the_api_server_and_the_served_api() {
    let run = |kubeconfig: &Path, log: &dyn Fn() -> String| {
        let out = Command::new(crate::testbed::bin().join("protoclient"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .output()
            .expect("protoclient runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "protoclient failed: {}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr),
            log()
        );
        // Step lines, without the uid the server chose.
        stdout
            .lines()
            .map(|l| l.split(" (uid").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
    };
    let tb = Testbed::up(&Options::default());
    let real = run(&tb.kubeconfig, &|| tb.log_tail("kube-apiserver", 40));
    drop(tb);
    let served = ServedApi::start();
    let ours = run(&served.dir.path().join("kubeconfig"), &|| served.log());
    assert_eq!(ours, real);
}
