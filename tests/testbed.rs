//! The real control plane (`testbed/`): etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and KWOK built from their Go
//! modules, and with moto the registrar that registers a Node for each
//! instance as its kubelet would.
//!
//! - [`bin`] is the directory of the testbed's binaries: `DOVETAIL_TESTBED_BIN`
//!   when set (`.ci/run` builds them first), else `testbed/build`, which
//!   builds once per machine and answers from its cache afterwards. Without
//!   Go, every test here fails, saying so: the testbed is not optional.
//! - [`Testbed::up`] starts one control plane in a temporary directory, one
//!   test at a time in a process (each holds a few hundred MiB and both
//!   cores while it starts); dropping it stops everything it started.
//! - `kubectl` is the testbed's own, of the API server's version.
//! - Nothing but 127.0.0.1 is ever contacted.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::root;

/// The directory holding the testbed's binaries, built on first use.
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(dir) = std::env::var_os("DOVETAIL_TESTBED_BIN") {
            let dir = PathBuf::from(dir);
            assert!(
                dir.join("controlplane").is_file(),
                "DOVETAIL_TESTBED_BIN={} holds no controlplane binary (build it with testbed/build)",
                dir.display()
            );
            return dir;
        }
        let out = Command::new(root().join("testbed/build"))
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("running testbed/build: {e}"));
        assert!(
            out.status.success(),
            "testbed/build failed (it needs Go 1.26 and the Go module proxy; see README, \
             \"Testing on a real control plane\")"
        );
        PathBuf::from(String::from_utf8(out.stdout).expect("UTF-8").trim())
    })
}

/// One control plane at a time per test process (`benches/scale.py`'s
/// run in `tests/kwok.rs` takes its turn too).
pub fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How a control plane starts.
#[derive(Default)]
pub struct Options {
    /// moto's endpoint and the cluster name its instances are tagged for:
    /// the registrar registers their Nodes.
    pub ec2: Option<(String, String)>,
    pub region: Option<String>,
    /// `COMPONENT:FLAG` for one component.
    pub extra: Vec<String>,
}

/// A running control plane; stopped when dropped.
pub struct Testbed {
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

impl Testbed {
    pub fn up(options: &Options) -> Testbed {
        let bin = bin();
        let guard = turn();
        let dir = tempfile::Builder::new()
            .prefix("dovetail-testbed-")
            .tempdir()
            .expect("a directory for the control plane");
        let mut cmd = Command::new(bin.join("controlplane"));
        cmd.arg("up")
            .arg(dir.path())
            .args(["--watch-pid", &std::process::id().to_string()]);
        if let Some((endpoint, cluster)) = &options.ec2 {
            cmd.args(["--ec2-endpoint", endpoint, "--cluster-name", cluster]);
        }
        if let Some(region) = &options.region {
            cmd.args(["--region", region]);
        }
        for e in &options.extra {
            cmd.args(["--extra", e]);
        }
        cmd.envs(crate::moto::credentials_env());
        let out = cmd.output().expect("controlplane up runs");
        assert!(
            out.status.success(),
            "controlplane up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Testbed {
            kubeconfig: dir.path().join("kubeconfig"),
            dir,
            _turn: guard,
        }
    }

    /// The testbed's kubectl as the admin.
    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin().join("kubectl"));
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        cmd
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_command(args).output().expect("kubectl runs")
    }

    /// kubectl's stdout, failing the test with its stderr if it fails.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8")
    }

    /// kubectl with `input` on its stdin.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .kubectl_command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("kubectl finishes")
    }

    /// `kubectl apply --server-side -f -` of `yaml`, which must succeed.
    pub fn apply(&self, yaml: &str) {
        let out = self.kubectl_stdin(&["apply", "--server-side", "-f", "-"], yaml);
        assert!(
            out.status.success(),
            "kubectl apply failed: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl get ARGS -o json`.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&a)).expect("kubectl -o json")
    }

    /// The items of `kubectl get ARGS -o json`.
    pub fn items(&self, args: &[&str]) -> Vec<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        match self.json(&a)["items"].take() {
            Value::Array(items) => items,
            other => panic!("no items in {other}"),
        }
    }

    /// Waits until `ready` holds, failing after `within` with the control
    /// plane's state.
    pub fn wait_for(&self, what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + within;
        while !ready() {
            if Instant::now() > deadline {
                panic!(
                    "timed out after {within:?} waiting for {what}\n{}",
                    self.describe()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// What a failing test prints: nodes, claims, pods, and the
    /// registrar's last lines.
    pub fn describe(&self) -> String {
        let get = |args: &[&str]| {
            let out = self.kubectl(args);
            format!(
                "$ kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        [
            get(&["get", "nodes", "-o", "wide"]),
            get(&["get", "nodeclaims", "-o", "wide"]),
            get(&["get", "deployments,replicasets", "-A"]),
            get(&["get", "pods", "-A", "-o", "wide"]),
            format!("registrar:\n{}", self.log_tail("registrar", 20)),
        ]
        .join("\n")
    }

    /// The last `n` lines of a component's log.
    pub fn log_tail(&self, component: &str, n: usize) -> String {
        let text = std::fs::read_to_string(
            self.dir
                .path()
                .join("logs")
                .join(format!("{component}.log")),
        )
        .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// `controlplane stop|kill|start DIR COMPONENT`.
    pub fn control(&self, verb: &str, component: &str) {
        let out = Command::new(bin().join("controlplane"))
            .arg(verb)
            .arg(self.dir.path())
            .arg(component)
            .output()
            .expect("controlplane runs");
        assert!(
            out.status.success(),
            "controlplane {verb} {component}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The API server's audit events (metadata of every write, and of
    /// every request of dovetail's service account).
    pub fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// A kubeconfig that authenticates as `namespace/account` with a token
    /// from the TokenRequest API (`kubectl create token`), so every request
    /// passes the real RBAC authorizer.
    pub fn service_account_kubeconfig(&self, namespace: &str, account: &str) -> PathBuf {
        let token = self.kubectl_ok(&[
            "create",
            "token",
            account,
            "-n",
            namespace,
            "--duration=24h",
        ]);
        let admin: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(&self.kubeconfig).expect("admin kubeconfig"),
        )
        .expect("kubeconfig YAML");
        let cluster = &admin["clusters"][0]["cluster"];
        let path = self
            .dir
            .path()
            .join(format!("{namespace}-{account}.kubeconfig"));
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "testbed", "cluster": cluster}],
            "users": [{"name": account, "user": {"token": token.trim()}}],
            "contexts": [{"name": account, "context": {"cluster": "testbed", "user": account}}],
            "current-context": account,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&config).expect("JSON"))
            .expect("write kubeconfig");
        path
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = Command::new(bin().join("controlplane"))
            .arg("down")
            .arg(self.dir.path())
            .output();
        // DOVETAIL_KEEP_TESTBED=1 keeps the logs, the audit log and the
        // kubeconfigs of a failed test for a look.
        if std::thread::panicking() && std::env::var_os("DOVETAIL_KEEP_TESTBED").is_some() {
            let kept = std::mem::replace(
                &mut self.dir,
                tempfile::tempdir().expect("a placeholder directory"),
            )
            .keep();
            eprintln!("the testbed's files are kept in {}", kept.display());
        }
    }
}
