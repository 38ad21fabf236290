//! A moto server (the AWS API mock) on 127.0.0.1 for the suites and
//! benchmarks that call AWS: `Moto::start()` spawns one on a free port and
//! the value stops it when dropped. Nothing is ever pointed at another
//! address.
//!
//! Without python3 the caller skips its test after a loud message; with
//! python3 but without moto it fails, naming the install command.

#![allow(dead_code)] // benches include this file and use part of it

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PYTHON: &str = "python3";
const INSTALL: &str = "python3 -m pip install 'moto[server]'";
/// How long moto may take to import and bind.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Ports are chosen free, but another process may take one before moto
/// binds it; then moto exits and another port is tried.
const ATTEMPTS: usize = 5;

/// A running moto server; stopped on drop.
pub struct Moto {
    child: Child,
    port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

impl Moto {
    /// Starts moto, or returns `None` (after saying so on stderr) when
    /// python3 is absent.
    pub fn start() -> Option<Moto> {
        match Command::new(PYTHON)
            .args(["-c", "import moto.server"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!(
                    "\n==========\nSKIPPED: {PYTHON} is not installed, so the moto tests do not run. Install python3, then {INSTALL}.\n==========\n"
                );
                return None;
            }
            Err(e) => panic!("cannot run {PYTHON}: {e}"),
            Ok(status) if !status.success() => {
                panic!("moto is not installed for {PYTHON}; install it with: {INSTALL}")
            }
            Ok(_) => {}
        }
        for _ in 0..ATTEMPTS {
            if let Some(moto) = Moto::spawn(free_port()) {
                return Some(moto);
            }
        }
        panic!("moto did not start on 127.0.0.1 after {ATTEMPTS} attempts");
    }

    /// Spawns moto on `port` and waits for it to say it is listening (it
    /// logs ` * Running on http://127.0.0.1:PORT` once bound). `None` when
    /// it exits first (the port was taken).
    fn spawn(port: u16) -> Option<Moto> {
        let mut child = Command::new(PYTHON)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start moto: {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let ready = format!("Running on http://127.0.0.1:{port}");
        // Reads moto's log: reports readiness, then drains it so moto
        // never blocks on a full pipe (it logs every request).
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stderr);
            let mut line = String::new();
            let mut said = false;
            while !said {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(false);
                        return;
                    }
                    Ok(_) if line.contains(&ready) => {
                        let _ = tx.send(true);
                        said = true;
                    }
                    Ok(_) => {}
                }
            }
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let deadline = Instant::now() + START_TIMEOUT;
        let up = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or(false);
        let moto = Moto { child, port };
        // Dropping `moto` stops a server that did not come up.
        up.then_some(moto)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An SQS client for this server (region us-east-1, test credentials).
    pub fn sqs_client(&self) -> aws_sdk_sqs::Client {
        use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(self.endpoint())
            .credentials_provider(Credentials::new("testing", "testing", None, None, "moto"))
            .build();
        aws_sdk_sqs::Client::from_conf(config)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
