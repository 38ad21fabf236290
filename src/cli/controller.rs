//! `dovetail controller`: the autoscaler in a cluster. Wires the
//! [`crate::controller::runtime::Runtime`] to kube-rs (through
//! [`KubeCluster`]), the AWS provider, the config sync, leader election and
//! the HTTP endpoints, then runs until SIGTERM or Ctrl-C.
//!
//! Order of start-up, so that each step fails early with a clear error:
//! the flags and the repository are checked; the kube client is built;
//! the HTTP endpoints start (`/healthz` answers, `/readyz` does not yet);
//! every watch lists (the controller acts only after every initial list);
//! the AWS provider is built; then the election and the loops start. On
//! SIGTERM the loops stop first, then the Lease is released.
//!
//! Every flag has a `DOVETAIL_*` variable. The caches: Pods (as `SlimPod`s)
//! and Nodes (slimmed by `cluster::slim`), NodePools, NodeClaims,
//! EC2NodeClasses, DaemonSets, PodDisruptionBudgets, PersistentVolumes and
//! their claims, StorageClasses and VolumeAttachments; NodeOverlays,
//! CapacityBuffers and the workloads buffers name when their gates (or the
//! sync) need them; and, each by name in the controller's namespace, the
//! election's Lease and the sync's status ConfigMap. The AWS provider is
//! `AwsProvider::from_sdk_config` (the Kubernetes version read from the API
//! server unless a flag gives it), wrapped in `controller::metrics::Metered`,
//! and the SQS client of `--interruption-queue` is built from the same SDK
//! configuration. `--cloud kwok` puts `world::kwok` in AWS's place.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, PodTemplate,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::args::{CloudArg, ControllerArgs};
use super::{Io, exit};
use crate::api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool, SlimPod};
use crate::clock::{Clock, SystemClock};
use crate::cloud::aws::{AwsProvider, Background, Registered, VersionSource};
use crate::cluster::{Cluster, Fenced, KubeCluster, WatchOptions, slim};
use crate::controller::Settings;
use crate::controller::http::{Endpoints, Health, serve};
use crate::controller::leader::{Elector, LeaseConfig};
use crate::controller::metrics::{Metered, Metrics};
use crate::controller::runtime::{
    EventRecorder, Interruption, InterruptionQueue, Runtime, gather_metrics,
};
use crate::interruption::{Metrics as InterruptionMetrics, PollSettings};
use crate::sync::{STATUS_CONFIGMAP, SyncEngine, resolve_head};
use crate::world::ec2::SimEc2;
use crate::world::kwok::KwokProvider;

/// The controller's settings from its flags.
/// The controller's settings from its flags; an error when `FEATURE_GATES`
/// is not a list of known gates (the flag is checked as it is parsed).
pub fn settings(a: &ControllerArgs) -> Result<Settings, String> {
    let gates = super::feature_gates(a.feature_gates.as_deref(), Default::default())?;
    Ok(Settings {
        spot_to_spot_consolidation: gates.spot_to_spot_consolidation || a.feature_spot_to_spot,
        static_capacity: gates.static_capacity,
        node_repair: gates.node_repair,
        node_overlay: gates.node_overlay,
        capacity_buffer: gates.capacity_buffer,
        rebalance_as_interruption: a.feature_rebalance,
        batch_idle: a.batch_idle_duration,
        batch_max: a.batch_max_duration,
        preferences: a.preference_policy.into(),
        ..Settings::default()
    })
}

/// The config sync's settings, if a repository is configured.
fn sync_settings(a: &ControllerArgs, namespace: &str) -> Option<crate::sync::Settings> {
    let path = a.config_repo.as_ref()?;
    let mut s = crate::sync::Settings::new(path);
    s.git_ref.clone_from(&a.config_branch);
    s.prune = a.prune;
    s.namespace = namespace.to_string();
    if let Ok(c) = settings(a) {
        s.static_capacity = c.static_capacity;
        s.node_overlay = c.node_overlay;
        s.capacity_buffer = c.capacity_buffer;
    }
    Some(s)
}

fn identity(a: &ControllerArgs) -> String {
    a.identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| format!("dovetail-{}", std::process::id()))
}

/// Resolves on SIGTERM or Ctrl-C.
pub(super) async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Resolves once `stop` turns true.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

pub fn run(a: &ControllerArgs, io: &mut Io) -> u8 {
    if a.batch_idle_duration > a.batch_max_duration {
        io.log("error: --batch-idle-duration is longer than --batch-max-duration");
        io.log("hint: the defaults are 1s and 10s");
        return exit::ERROR;
    }
    let controller_settings = match settings(a) {
        Ok(s) => s,
        Err(e) => {
            io.log(&format!("error: {e}"));
            io.log("hint: Karpenter's spelling, e.g. FEATURE_GATES=StaticCapacity=true,SpotToSpotConsolidation=false");
            return exit::ERROR;
        }
    };
    let mut aws = match super::aws::aws_config(&a.aws, Some(&a.cluster)) {
        Ok(c) => c,
        Err(e) => {
            io.log(&format!("error: {e}"));
            return exit::ERROR;
        }
    };
    if let Some(s) = sync_settings(a, "-")
        && let Err(e) = resolve_head(&s)
    {
        io.error(&e, e.hint().as_deref());
        return exit::ERROR;
    }
    let Some(runtime) = super::runtime(2, io) else {
        return exit::ERROR;
    };
    runtime.block_on(async {
        let kube_config = crate::cluster::kube_client::load_config(a.kubeconfig.as_deref()).await;
        // The certificate authority the controller trusts is the one nodes
        // get when --cluster-ca-bundle is not given (Karpenter's rule).
        let kube_ca = kube_config
            .as_ref()
            .ok()
            .and_then(crate::cloud::aws::config::kube_ca_bundle);
        let client = match kube_config.and_then(|c| crate::cluster::kube_client::build(c, Some(&identity(a)))) {
            Ok(c) => c,
            Err(e) => {
                io.error(&e, Some("run inside a cluster, or give --kubeconfig, or set KUBECONFIG or ~/.kube/config"));
                return exit::ERROR;
            }
        };
        let namespace = a
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        // Without --kubernetes-version, the version is read from the API
        // server now and again every 5 minutes (AMI aliases follow an
        // upgrade of the control plane).
        let follow_version = aws.kubernetes_version.is_none();
        let version_client = client.clone();
        if aws.kubernetes_version.is_none() {
            match crate::cloud::aws::kubernetes_version(&client).await {
                Ok(v) => aws.kubernetes_version = Some(v),
                Err(e) => {
                    io.log(&format!("error: {e}"));
                    io.log("hint: pass --kubernetes-version (DOVETAIL_KUBERNETES_VERSION)");
                    return exit::ERROR;
                }
            }
        }
        let (stop_tx, stop) = watch::channel(false);
        tokio::spawn(async move {
            terminated().await;
            tracing::info!("shutting down");
            let _ = stop_tx.send(true);
        });

        // The caches: what the controller and the sync read.
        let sync = sync_settings(a, &namespace);
        // The sync applies NodeOverlays and CapacityBuffers whatever their
        // gates, so it watches them wherever their CRDs are served: without
        // a cache, every pass would find them missing, apply them again and
        // never prune them.
        let (sync_overlays, sync_buffers) = if sync.is_some() {
            (
                crate::cluster::kube_client::serves(&client, "karpenter.sh/v1alpha1", "nodeoverlays").await,
                crate::cluster::kube_client::serves(&client, "autoscaling.x-k8s.io/v1beta1", "capacitybuffers")
                    .await,
            )
        } else {
            (false, false)
        };
        let mut cluster = KubeCluster::new(client);
        let watched = (|| {
            cluster
                .watch_with::<SlimPod>(WatchOptions::default().transform(slim::pod))?
                .watch_with::<Node>(WatchOptions::default().transform(slim::node))?
                .watch::<NodePool>()?
                .watch::<NodeClaim>()?
                .watch::<EC2NodeClass>()?
                .watch::<DaemonSet>()?
                .watch::<PodDisruptionBudget>()?
                .watch::<PersistentVolume>()?
                .watch::<PersistentVolumeClaim>()?
                .watch::<StorageClass>()?
                // Termination waits for the node's volumes to detach.
                .watch::<VolumeAttachment>()?;
            // The gated kinds only with their gates on: a cluster without
            // their CRDs (Karpenter's defaults) never lists them.
            let gated = settings(a).unwrap_or_default();
            if gated.node_overlay || sync_overlays {
                cluster.watch::<NodeOverlay>()?;
            }
            if gated.capacity_buffer {
                cluster
                    .watch::<CapacityBuffer>()?
                    .watch::<PodTemplate>()?
                    .watch::<Deployment>()?
                    .watch::<StatefulSet>()?
                    .watch::<ReplicaSet>()?;
            } else if sync_buffers {
                cluster.watch::<CapacityBuffer>()?;
            }
            if a.leader_elect {
                cluster.watch_in::<Lease>(
                    &namespace,
                    WatchOptions::default().fields(format!("metadata.name={}", a.lease_name)),
                )?;
            }
            if sync.is_some() {
                cluster.watch_in::<ConfigMap>(
                    &namespace,
                    WatchOptions::default().fields(format!("metadata.name={STATUS_CONFIGMAP}")),
                )?;
            }
            Ok::<(), tokio::runtime::TryCurrentError>(())
        })();
        if let Err(e) = watched {
            io.error(&e, None);
            return exit::ERROR;
        }
        let cluster = Arc::new(cluster);

        // The endpoints answer from the start; /readyz once synced.
        let health = Arc::new(Health::with_liveness_timeout(a.liveness_timeout));
        let metrics = Metrics::new();
        let interruption_metrics = InterruptionMetrics::new();
        let sync_registry: Arc<OnceLock<Registry>> = Arc::new(OnceLock::new());
        let endpoints = {
            let (cluster, registry, interruption_registry, sync_registry) = (
                cluster.clone(),
                metrics.registry().clone(),
                interruption_metrics.registry().clone(),
                sync_registry.clone(),
            );
            Arc::new(Endpoints {
                health: health.clone(),
                metrics: Box::new(move || {
                    let mut registries = vec![&registry, &interruption_registry];
                    if let Some(r) = sync_registry.get() {
                        registries.push(r);
                    }
                    gather_metrics(cluster.as_ref(), &registries)
                }),
            })
        };
        let mut ports = vec![a.metrics_port];
        if a.health_port != a.metrics_port {
            ports.push(a.health_port);
        }
        for port in ports {
            match TcpListener::bind(("0.0.0.0", port)).await {
                Ok(listener) => {
                    tokio::spawn(serve(listener, endpoints.clone(), stopped(stop.clone())));
                }
                Err(e) => {
                    io.log(&format!("error: cannot listen on port {port}: {e}"));
                    io.log("hint: choose other ports with --metrics-port and --health-port");
                    return exit::ERROR;
                }
            }
        }

        tracing::info!("listing the cluster's objects");
        tokio::select! {
            () = stopped(stop.clone()) => return exit::OK,
            synced = tokio::time::timeout(a.cache_sync_timeout, cluster.wait_until_synced()) => match synced {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    io.error(&e, None);
                    return exit::ERROR;
                }
                Err(_) => {
                    io.log(&format!(
                        "error: the cluster's objects could not all be listed within {}s",
                        a.cache_sync_timeout.as_secs()
                    ));
                    io.log("hint: check that the CRDs are installed (`dovetail crds | kubectl apply -f -`) and that the service account may list and watch every kind deploy/ grants");
                    return exit::ERROR;
                }
            }
        }
        health.synced.store(true, Ordering::Relaxed);
        tracing::info!("caches synced");

        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        // Only the leader writes, and only while its last renewal vouches
        // for it: every write of the loops, the sync and the cloud's
        // background work passes the fence.
        let fence = a
            .leader_elect
            .then(|| Arc::new(crate::cluster::Fence::new(clock.clone())));
        let writer = Arc::new(Fenced::new(cluster.clone(), fence.clone()));
        let sync = sync.map(|s| {
            let engine = SyncEngine::new(writer.clone(), clock.clone(), s);
            let _ = sync_registry.set(engine.metrics().registry().clone());
            (engine, a.poll_interval)
        });
        let identity = identity(a);
        let (leading, elector) = if a.leader_elect {
            let elector = Elector::new(
                cluster.clone(),
                clock.clone(),
                LeaseConfig::new(&namespace, &a.lease_name, &identity),
            )
            .with_health(health.clone());
            let elector = match &fence {
                Some(f) => elector.with_fence(f.clone()),
                None => elector,
            };
            let leading = elector.leading();
            let (release_tx, release) = watch::channel(false);
            let task = tokio::spawn(elector.run(stopped(release)));
            (leading, Some((release_tx, task)))
        } else {
            (watch::channel(true).1, None)
        };
        // Whether this replica may do leader-only work now.
        let may_write: Leading = {
            let (fence, leading) = (fence.clone(), leading.clone());
            Arc::new(move || match &fence {
                Some(f) => f.check().is_ok(),
                None => *leading.borrow(),
            })
        };
        let term = Term {
            writer,
            clock,
            settings: controller_settings,
            metrics,
            interruption_metrics,
            health,
            identity,
            sync,
            changes: cluster.changes(),
            leading,
            stop: stop.clone(),
        };
        let code = match a.cloud {
            CloudArg::Aws => {
                let access = AwsAccess { aws, kube_ca, version_client, follow_version };
                run_aws(a, access, cluster.clone(), may_write, term, io).await
            }
            CloudArg::Kwok => run_kwok(a, aws.kubernetes_version, may_write, term, io).await,
        };
        // The loops have stopped writing: now the Lease may go.
        if let Some((release, task)) = elector {
            let _ = release.send(true);
            let _ = task.await;
        }
        if code == exit::OK {
            tracing::info!("stopped");
        }
        code
    })
}

/// Whether this replica may do leader-only work now.
type Leading = Arc<dyn Fn() -> bool + Send + Sync>;

/// What every cloud's controller runs with.
struct Term {
    writer: Arc<Fenced<KubeCluster>>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    metrics: Metrics,
    interruption_metrics: InterruptionMetrics,
    health: Arc<Health>,
    identity: String,
    sync: Option<(SyncEngine<Fenced<KubeCluster>>, std::time::Duration)>,
    changes: watch::Receiver<u64>,
    leading: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
}

impl Term {
    /// Runs the controller on `cloud` until SIGTERM, then waits for the
    /// cloud's background work.
    async fn run<P: crate::cloud::CloudProvider + 'static>(
        self,
        cloud: Arc<P>,
        interruption: Option<Interruption>,
        background: tokio::task::JoinHandle<()>,
    ) {
        let mut rt = Runtime {
            cluster: self.writer,
            cloud,
            clock: self.clock,
            settings: self.settings,
            metrics: self.metrics,
            interruption_metrics: self.interruption_metrics,
            health: self.health,
            events: EventRecorder::new(&self.identity),
            sync: self.sync,
            interruption,
        };
        rt.run(self.changes, self.leading, stopped(self.stop.clone()))
            .await;
        let _ = background.await;
    }
}

/// What the AWS provider is built from.
struct AwsAccess {
    aws: crate::cloud::aws::AwsConfig,
    kube_ca: Option<String>,
    version_client: kube::Client,
    /// The Kubernetes version is read from the API server again every 5
    /// minutes (no --kubernetes-version).
    follow_version: bool,
}

/// `--cloud aws`: the AWS provider, its interruption queue and its
/// periodic work.
async fn run_aws(
    a: &ControllerArgs,
    access: AwsAccess,
    cluster: Arc<KubeCluster>,
    leading: Leading,
    term: Term,
    io: &mut Io<'_>,
) -> u8 {
    let AwsAccess {
        aws,
        kube_ca,
        version_client,
        follow_version,
    } = access;
    let sdk = aws.sdk_config().await;
    // The interruption queue, in the provider's region and endpoint.
    let interruption = a.interruption_queue.clone().map(|queue| {
        Interruption::Queue(InterruptionQueue {
            queue,
            sqs: aws_sdk_sqs::Client::new(&sdk),
            poll: PollSettings::default(),
        })
    });
    let provider = match AwsProvider::from_sdk_config(aws, &sdk, term.clock.clone()) {
        Ok(p) => p,
        Err(e) => {
            io.error(
                &e,
                Some("check the region and the credentials (EKS Pod Identity or IRSA)"),
            );
            return exit::ERROR;
        }
    };
    // The cluster DNS address nodes use: the kube-dns Service's ClusterIP
    // (a custom DNS setup without one keeps the service CIDR's .10, as
    // Karpenter carries on without it).
    let dns_ip = match crate::cloud::aws::config::kube_dns_ip(&version_client).await {
        Ok(ip) => Some(ip),
        Err(e) => {
            tracing::info!(error = %e, "no kube-dns cluster IP; nodes use the service CIDR's .10");
            None
        }
    };
    // What nodes need to join, from eks:DescribeCluster where the flags do
    // not say.
    if let Err(e) = provider.discover_cluster(kube_ca.as_deref(), dns_ip).await {
        io.error(&e, Some("allow eks:DescribeCluster on the cluster (deploy/iam-policy.json), or pass --cluster-endpoint"));
        return exit::ERROR;
    }
    let cloud = Arc::new(Metered::new(provider, "aws", &term.metrics));

    // The provider's periodic work: prices and types refreshed, the
    // Kubernetes version followed, and, while leading, launch templates no
    // node class uses deleted. Leader-only work (tagging, deleting launch
    // templates) goes through the same fence as the loops' writes.
    let background = {
        let cloud = cloud.clone();
        let source: Option<VersionSource> = follow_version.then(|| {
            let client = version_client.clone();
            Arc::new(move || {
                let client = client.clone();
                Box::pin(async move { crate::cloud::aws::kubernetes_version(&client).await })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
            }) as VersionSource
        });
        let (claims_cluster, claims_leading) = (cluster.clone(), leading.clone());
        let work = Background {
            kubernetes_version: source,
            registered: Box::new(move || {
                if !claims_leading() {
                    return Vec::new();
                }
                Cluster::list::<NodeClaim>(claims_cluster.as_ref())
                    .iter()
                    .filter_map(|c| {
                        let status = c.status.as_ref()?;
                        Some(Registered {
                            nodeclaim: c.metadata.name.clone()?,
                            provider_id: status.provider_id.clone()?,
                            node_name: status.node_name.clone()?,
                        })
                    })
                    .collect()
            }),
            nodeclasses: Box::new(move || {
                leading().then(|| {
                    Cluster::list::<EC2NodeClass>(cluster.as_ref())
                        .iter()
                        .map(|c| (**c).clone())
                        .collect()
                })
            }),
        };
        let stop = stopped(term.stop.clone());
        tokio::spawn(async move { cloud.inner().run_background(work, stop).await })
    };
    term.run(cloud, interruption, background).await;
    exit::OK
}

/// `--cloud kwok`: capacity from a catalog as Nodes that KWOK keeps alive
/// ([`crate::world::kwok`]); scripted interruptions reach the controller
/// in process.
async fn run_kwok(
    a: &ControllerArgs,
    kubernetes_version: Option<String>,
    leading: Leading,
    term: Term,
    io: &mut Io<'_>,
) -> u8 {
    if a.interruption_queue.is_some() {
        io.log("error: --interruption-queue is for --cloud aws");
        io.log("hint: with --cloud kwok, script an interruption with `kubectl annotate node NAME kwok.dovetail.dev/interrupt=spot-interruption`");
        return exit::ERROR;
    }
    let catalog = match &a.catalog {
        Some(path) => SimEc2::load_catalog(path),
        None => SimEc2::builtin_catalog(),
    };
    let catalog = match catalog {
        Ok(c) => c,
        Err(e) => {
            io.error(&e, Some("a catalog in the shared format: instanceTypes[] with offerings (see `dovetail instance-types --output json`)"));
            return exit::ERROR;
        }
    };
    let (region, zones, cloud) = match &a.cloud_scenario {
        Some(path) => match crate::simulate::scenario::load_cloud(path) {
            Ok(c) => c,
            Err(d) => {
                let style = super::render::Style::for_stream(io.err_is_terminal);
                let _ =
                    std::io::Write::write_all(io.err, super::render::text(&[*d], style).as_bytes());
                return exit::ERROR;
            }
        },
        None => {
            let region = a
                .aws
                .region
                .clone()
                .unwrap_or_else(|| crate::world::ec2::DEFAULT_REGION.to_string());
            let zones = crate::world::ec2::default_zones(&region);
            (region, zones, Default::default())
        }
    };
    let mut config = cloud.sim_config(catalog, &region, &zones, term.clock.now());
    // Aliases resolve for the cluster's own version.
    if let Some(v) = kubernetes_version {
        config.kubernetes_version = v;
    }
    let (provider, events) = KwokProvider::new(
        config,
        term.writer.clone(),
        term.clock.clone(),
        a.registration_delay,
    );
    tracing::info!(
        %region,
        zones = %zones.join(","),
        instance_types = provider.sim().catalog().len(),
        registration_delay = ?a.registration_delay,
        "launching KWOK nodes"
    );
    let cloud = Arc::new(Metered::new(provider, "kwok", &term.metrics));
    let background = {
        let (cloud, stop) = (cloud.clone(), stopped(term.stop.clone()));
        tokio::spawn(async move { cloud.inner().run(|| leading(), stop).await })
    };
    let interruption = Interruption::Local(Arc::new(tokio::sync::Mutex::new(events)));
    term.run(cloud, Some(interruption), background).await;
    exit::OK
}
