//! `dovetail simulate --serve`: the simulation in real time, its cluster
//! served as a Kubernetes API on a loopback address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Io;
use super::args::SimulateArgs;
use crate::cloud::aws::AwsConfig;
use crate::simulate::driver::{ExternalEc2, Served, SimError, Simulation};
use crate::simulate::report::Report;
use crate::world::faults::Faults;
use crate::world::serve::{ApiServer, ServeOptions, kubeconfig};

fn setup(message: String) -> SimError {
    SimError::Setup(message)
}

/// The address to serve on: loopback only, since the served API has no
/// authentication.
fn loopback(addr: &str) -> Result<SocketAddr, SimError> {
    let parsed: SocketAddr = addr.parse().map_err(|_| {
        setup(format!(
            "--serve {addr:?} is not an address such as 127.0.0.1:8443"
        ))
    })?;
    if !parsed.ip().is_loopback() {
        return Err(setup(format!(
            "--serve {addr} is not a loopback address: the served API has no authentication, so it only listens on 127.0.0.1 or ::1"
        )));
    }
    Ok(parsed)
}

/// Serves the simulation's cluster while the simulation runs in real time;
/// returns its report when the scenario ends or on Ctrl-C or SIGTERM.
pub fn run(a: &SimulateArgs, addr: &str, sim: Simulation, io: &mut Io) -> Result<Report, SimError> {
    let addr = loopback(addr)?;
    let in_process = a.controller != "none";
    if a.ec2_endpoint.is_some() && in_process {
        return Err(setup(
            "--ec2-endpoint needs --controller none: the in-process controller launches into the simulated EC2".into(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| setup(format!("cannot start the server's runtime: {e}")))?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| setup(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| setup(format!("cannot read the listening address: {e}")))?;
    let scenario = sim.scenario();
    let mut rules = scenario.faults.clone();
    rules.extend(a.fault.iter().cloned());
    let audit = match &a.audit_log {
        None => None,
        Some(path) => Some(std::sync::Arc::new(std::sync::Mutex::new(
            std::fs::File::create(path).map_err(|e| {
                setup(format!(
                    "cannot write the audit log {}: {e}",
                    path.display()
                ))
            })?,
        ))),
    };
    if let Some(events) = a.watch_log {
        sim.cluster().set_watch_log_capacity(events);
    }
    let server = ApiServer::new(
        sim.cluster(),
        ServeOptions {
            kubernetes_version: scenario.cloud.kubernetes_version.clone(),
            audit,
            ..ServeOptions::default()
        },
        Faults::new(rules),
    );
    let ec2 = match &a.ec2_endpoint {
        None => None,
        Some(url) => {
            let mut config = AwsConfig::new(&a.cluster_name);
            config.endpoint_url = Some(url.clone());
            let region = a
                .region
                .clone()
                .or_else(|| std::env::var("AWS_REGION").ok())
                .unwrap_or_else(|| scenario.region.clone());
            config.region = Some(region.clone());
            let sdk = runtime.block_on(config.sdk_config());
            Some(ExternalEc2 {
                client: aws_sdk_ec2::Client::new(&sdk),
                region,
                cluster: a.cluster_name.clone(),
            })
        }
    };
    if let Some(path) = &a.kubeconfig_out {
        crate::fsutil::write_file(path, kubeconfig(&bound.to_string()).as_bytes())
            .map_err(|e| setup(format!("cannot write the kubeconfig: {e}")))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    runtime.spawn(server.run(listener, async {
        let _ = shutdown_rx.await;
    }));
    {
        let stop = stop.clone();
        runtime.spawn(async move {
            super::controller::terminated().await;
            stop.store(true, Ordering::Relaxed);
        });
    }
    io.log(&format!(
        "simulate: serving the cluster at http://{bound}{} ({}, {}); Ctrl-C stops",
        a.kubeconfig_out
            .as_ref()
            .map(|p| format!(", kubeconfig {}", p.display()))
            .unwrap_or_default(),
        if in_process {
            "dovetail's controller in this process"
        } else {
            "no controller: run `dovetail controller` against it"
        },
        if in_process && a.speed != 1.0 {
            format!("{}x real time", a.speed)
        } else {
            "real time".to_string()
        }
    ));
    let report = sim.run_served(Served {
        speed: a.speed,
        in_process,
        ec2,
        stop,
    });
    let _ = shutdown_tx.send(());
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_served() {
        assert!(loopback("127.0.0.1:0").is_ok());
        assert!(loopback("[::1]:8443").is_ok());
        let err = loopback("0.0.0.0:8443").unwrap_err().to_string();
        assert!(err.contains("loopback"), "{err}");
        assert!(loopback("localhost").is_err());
    }
}
