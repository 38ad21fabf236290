//! The AWS failure modes moto never shows, injected by the fault proxy
//! (`tests/aws_proxy.rs`) in front of moto: EC2's eventual consistency,
//! throttling that lasts, expired credentials. The table of what dovetail
//! does for each is in docs/aws.md ("When AWS misbehaves").

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
use dovetail::api::{EC2NodeClass, NodeClaim};
use dovetail::clock::SystemClock;
use dovetail::cloud::aws::{AwsProvider, RetrySettings};
use dovetail::cloud::{CloudError, CloudProvider, InstanceState};
use dovetail::cluster::{Cluster, ObjectKey};
use dovetail::controller::Settings;
use dovetail::controller::http::Health;
use dovetail::controller::metrics::Metrics as ControllerMetrics;
use dovetail::controller::runtime::{EventRecorder, Runtime};
use dovetail::interruption::Metrics as InterruptionMetrics;
use dovetail::world::MemoryCluster;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::aws::{
    Env, controller_for, pending_pod, provision_and_launch, runtime, store_class_and_pool,
};
use crate::aws_proxy;
use crate::moto;

/// A NodePool of one instance type, on demand (moto gives on-demand
/// instances their template's security groups).
const POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
     nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      \
     - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n      \
     - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n";

fn provider_id(claim: &NodeClaim) -> Option<String> {
    claim.status.as_ref()?.provider_id.clone()
}

/// EC2 does not list an instance for 10 s after CreateFleet launched it
/// (and answers `InvalidInstanceID.NotFound` for it). In that window the
/// NodeClaim is neither collected nor launched again, and a NodeClaim
/// deleted in it keeps its finalizer until its instance is really
/// terminated: nothing leaks.
#[test]
fn an_instance_ec2_does_not_list_yet_is_neither_collected_launched_again_nor_leaked() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "unlisted").await;
        let aws = Arc::new(env.provider(&proxy.endpoint(), env.config()).await);
        let class = env.resolved(&aws).await;
        proxy.faults.lock().unwrap().unlisted_for = Some(Duration::from_secs(10));
        let (clock, cluster, mut controller) = controller_for(&env, &aws, &class, POOL).await;
        cluster.create(pending_pod("web")).expect("created");
        let launched_at = Instant::now();
        provision_and_launch(&clock, &mut controller).await;
        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1);
        let pid = provider_id(&claims[0]).expect("the launch is recorded");
        let name = claims[0].metadata.name.clone().expect("named");

        // EC2 does not know the instance yet.
        assert!(aws.list().await.expect("lists").is_empty());
        // Passes in the window (garbage collection included: the first
        // pass ran it) neither delete the claim nor launch again.
        for _ in 0..3 {
            clock.advance(Duration::from_secs(2)).expect("forward");
            controller.reconcile_provisioning().await;
            controller.reconcile_nodeclaims().await;
        }
        assert_eq!(proxy.count("CreateFleet"), 1);
        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1, "{claims:?}");
        assert!(claims[0].metadata.deletion_timestamp.is_none());

        // Deleted while EC2 still says the instance does not exist: the
        // termination waits for it instead of taking it as gone.
        cluster
            .delete::<NodeClaim>(&ObjectKey::cluster(&name))
            .expect("deleted");
        controller.reconcile_nodeclaims().await;
        assert!(
            proxy.count("TerminateInstances") >= 1,
            "the termination was tried"
        );
        assert!(
            cluster.get_opt::<NodeClaim>(&ObjectKey::cluster(&name)).is_some(),
            "the claim keeps its finalizer while its instance is unknown to EC2"
        );
        let events = controller.drain_events();
        assert!(
            events.iter().any(|e| e.reason == "TerminationWaiting"),
            "{events:?}"
        );

        // Once EC2 lists it, the instance is terminated and the claim goes.
        let listed = launched_at + Duration::from_secs(11);
        tokio::time::sleep(listed.saturating_duration_since(Instant::now())).await;
        for _ in 0..3 {
            clock.advance(Duration::from_secs(5)).expect("forward");
            controller.reconcile_nodeclaims().await;
        }
        assert!(
            cluster.get_opt::<NodeClaim>(&ObjectKey::cluster(&name)).is_none(),
            "the claim is released once its instance is terminated"
        );
        let state = aws.get(&pid).await.map(|i| i.state);
        assert!(
            matches!(
                state,
                Ok(InstanceState::ShuttingDown | InstanceState::Terminated)
                    | Err(CloudError::NotFound(_))
            ),
            "{state:?}"
        );
        assert_eq!(proxy.count("CreateFleet"), 1);
        println!(
            "eventual consistency: CreateFleet {}, DescribeInstances {}, TerminateInstances {}, CreateTags {}",
            proxy.count("CreateFleet"),
            proxy.count("DescribeInstances"),
            proxy.count("TerminateInstances"),
            proxy.count("CreateTags"),
        );
    });
}

/// The production loop ([`Runtime::run`]) with the AWS provider through
/// the proxy and `cluster` in memory, its passes woken by the cluster's
/// changes as a watch wakes them; leading until `stop` resolves.
async fn run_controller(
    cluster: Arc<MemoryCluster>,
    aws: Arc<AwsProvider>,
    stop: impl std::future::Future<Output = ()>,
) {
    let (changes_tx, changes) = tokio::sync::watch::channel(0u64);
    let changes_tx = Arc::new(changes_tx);
    let mut forwards = Vec::new();
    for mut kind in [
        cluster.subscribe::<NodeClaim>().expect("subscribes"),
        cluster.subscribe::<Pod>().expect("subscribes"),
        cluster.subscribe::<Node>().expect("subscribes"),
    ] {
        let tx = changes_tx.clone();
        forwards.push(tokio::spawn(async move {
            while kind.changed().await.is_ok() {
                tx.send_modify(|v| *v += 1);
            }
        }));
    }
    let (_leading_tx, leading) = tokio::sync::watch::channel(true);
    let mut runtime = Runtime {
        cluster: cluster.clone(),
        cloud: aws,
        clock: Arc::new(SystemClock),
        settings: Settings::default(),
        metrics: ControllerMetrics::new(),
        interruption_metrics: InterruptionMetrics::new(),
        health: Arc::new(Health::default()),
        events: EventRecorder::new("replica-a"),
        sync: None,
        interruption: None,
    };
    runtime.run(changes, leading, stop).await;
    for f in forwards {
        f.abort();
    }
}

/// Waits for `done`, looking every 200 ms, failing with `what` after
/// `within`.
async fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The actions a throttled minute hits.
const THROTTLED: [&str; 3] = ["CreateFleet", "DescribeInstances", "TerminateInstances"];
/// At most this many calls of a throttled action reach AWS in the minute
/// it throttles (the production retry settings: six attempts a call, then
/// a cool-down from 2 s doubling to 30 s).
const THROTTLED_CALLS_PER_MINUTE: usize = 40;

/// CreateFleet, DescribeInstances and TerminateInstances answer
/// `RequestLimitExceeded` for a minute while four pods wait for nodes and
/// three NodeClaims are being deleted. The controller (the production loop,
/// with the production retry settings) backs off: each action's calls in
/// that minute stay bounded, and are printed per minute. When the minute
/// is over it catches up: the pods' NodeClaims are launched, once each,
/// and the deleted NodeClaims' instances are terminated.
#[test]
fn a_minute_of_throttling_is_backed_off_and_caught_up() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "throttled").await;
        let mut config = env.config();
        config.retry = RetrySettings::default();
        let aws = Arc::new(env.provider(&proxy.endpoint(), config).await);
        let class = env.resolved(&aws).await;
        let cluster = Arc::new(MemoryCluster::new(Arc::new(SystemClock)));
        store_class_and_pool(&cluster, &env, &class, POOL).await;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let run = run_controller(cluster.clone(), aws.clone(), async {
            let _ = stop_rx.await;
        });
        let claims = || Cluster::list::<NodeClaim>(cluster.as_ref());
        let drive = async {
            for name in ["old-1", "old-2", "old-3"] {
                cluster.create(pending_pod(name)).expect("created");
            }
            wait_for("three NodeClaims launched", Duration::from_secs(30), || {
                let c = claims();
                c.len() == 3 && c.iter().all(|c| provider_id(c).is_some())
            })
            .await;
            let old: Vec<(String, String)> = claims()
                .iter()
                .map(|c| {
                    let name = c.metadata.name.clone().expect("named");
                    (name, provider_id(c).expect("launched"))
                })
                .collect();

            // A minute of throttling; meanwhile the three NodeClaims are
            // deleted and four pods wait.
            let start = Instant::now();
            let throttled_until = start + Duration::from_secs(60);
            {
                let mut f = proxy.faults.lock().unwrap();
                for action in THROTTLED {
                    f.throttle_until.insert(action.to_string(), throttled_until);
                }
            }
            let before: Vec<usize> = THROTTLED.iter().map(|a| proxy.count(a)).collect();
            for (name, _) in &old {
                cluster
                    .delete::<NodeClaim>(&ObjectKey::cluster(name))
                    .expect("deleted");
            }
            for name in ["a", "b", "c", "d"] {
                cluster.create(pending_pod(name)).expect("created");
            }
            wait_for(
                "the controller caught up",
                Duration::from_secs(60 + 90),
                || {
                    let now = claims();
                    now.iter().all(|c| {
                        old.iter()
                            .all(|(name, _)| c.metadata.name.as_ref() != Some(name))
                    }) && !now.is_empty()
                        && now.iter().all(|c| provider_id(c).is_some())
                },
            )
            .await;
            let caught_up = Instant::now().saturating_duration_since(throttled_until);
            assert!(
                Instant::now() > throttled_until,
                "nothing could be done while throttled"
            );

            println!("a minute of RequestLimitExceeded: calls per minute from its start");
            for (action, before) in THROTTLED.iter().zip(before) {
                let per_minute = proxy.per_minute(action, start);
                println!("  {action:<20} {per_minute:?} (throttled in the first)");
                assert!(
                    per_minute[0] <= THROTTLED_CALLS_PER_MINUTE,
                    "{action}: {} calls in the throttled minute",
                    per_minute[0]
                );
                // DescribeInstances is asked by garbage collection every two
                // minutes and once per leadership term: the minute may see
                // none of it.
                if *action != "DescribeInstances" {
                    assert!(proxy.count(action) > before, "{action} was tried");
                }
            }
            println!(
                "  caught up {:.1} s after the throttling ended",
                caught_up.as_secs_f64()
            );
            assert!(caught_up < Duration::from_secs(60), "{caught_up:?}");

            // Every pod's NodeClaim launched once; the old instance is gone.
            let launched: Vec<String> = claims().iter().filter_map(|c| provider_id(c)).collect();
            let mut running: Vec<String> = aws
                .list()
                .await
                .expect("lists")
                .into_iter()
                .filter(|i| matches!(i.state, InstanceState::Running | InstanceState::Pending))
                .map(|i| i.provider_id.clone())
                .collect();
            running.sort();
            let mut expected = launched.clone();
            expected.sort();
            assert_eq!(running, expected, "one instance per NodeClaim, no more");
            for (name, pid) in &old {
                assert!(
                    matches!(aws.get(pid).await, Err(CloudError::NotFound(_))),
                    "the instance of the deleted {name} is terminated"
                );
            }
            stop_tx.send(()).expect("the runtime runs");
        };
        tokio::join!(run, drive);
    });
}

/// Session credentials as STS hands them out: `key-1`, `key-2`, ... for
/// each load (or the same key every time when `rotate` is false), valid
/// for an hour as far as they know.
#[derive(Debug)]
struct Sts {
    loads: std::sync::atomic::AtomicU32,
    rotate: bool,
}

impl ProvideCredentials for Sts {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        let n = self.loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let key = if self.rotate {
            format!("ASIASESSION{n:09}")
        } else {
            "ASIASESSION000000001".to_string()
        };
        future::ProvideCredentials::ready(Ok(Credentials::new(
            key,
            "secret",
            Some("session-token".to_string()),
            Some(std::time::SystemTime::now() + Duration::from_secs(3600)),
            "sts",
        )))
    }
}

/// The session keys requests were signed with (the test's own set-up
/// signs with moto's), in first-seen order.
fn session_keys(proxy: &aws_proxy::Proxy) -> Vec<String> {
    proxy
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("ASIASESSION"))
        .collect()
}

/// A provider signing with `sts`'s credentials behind dovetail's
/// refreshing cache (as `AwsConfig::sdk_config` sets it up).
async fn provider_with(env: &Env, endpoint: &str, sts: Sts) -> AwsProvider {
    let sdk = moto::sdk_config(endpoint, &env.region)
        .await
        .to_builder()
        .credentials_provider(SharedCredentialsProvider::new(sts))
        .build();
    let sdk = dovetail::cloud::aws::credentials::refreshing(&sdk);
    AwsProvider::from_sdk_config(env.config(), &sdk, Arc::new(SystemClock)).expect("provider")
}

/// The session token expires mid-run (EC2 answers `ExpiredToken`, though
/// the credentials said they had an hour left): the credentials are
/// loaded again and the call goes through with the new ones, a launch
/// included. Credentials refused again after a reload are an error, not
/// a loop.
#[test]
fn credentials_that_expire_mid_run_are_loaded_again() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "expiring").await;
        let sts = Sts {
            loads: Default::default(),
            rotate: true,
        };
        let aws = Arc::new(provider_with(&env, &proxy.endpoint(), sts).await);
        aws.list().await.expect("lists");
        assert_eq!(session_keys(&proxy), ["ASIASESSION000000001"]);

        // The first session expires: the call is sent again, signed anew.
        proxy
            .faults
            .lock()
            .unwrap()
            .expired_keys
            .insert("ASIASESSION000000001".into());
        let calls = proxy.count("DescribeInstances");
        aws.list().await.expect("lists with the new session");
        assert_eq!(proxy.count("DescribeInstances"), calls + 2);
        assert_eq!(
            session_keys(&proxy),
            ["ASIASESSION000000001", "ASIASESSION000000002"]
        );

        // The second expires during a launch.
        let class = env.resolved(&aws).await;
        proxy
            .faults
            .lock()
            .unwrap()
            .expired_keys
            .insert("ASIASESSION000000002".into());
        let (clock, cluster, mut controller) = controller_for(&env, &aws, &class, POOL).await;
        cluster.create(pending_pod("web")).expect("created");
        provision_and_launch(&clock, &mut controller).await;
        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1);
        assert!(provider_id(&claims[0]).is_some(), "{:?}", claims[0].status);
        assert_eq!(session_keys(&proxy).len(), 3, "{:?}", session_keys(&proxy));

        // Credentials that stay refused: one reload, then the error.
        let stuck = provider_with(
            &env,
            &proxy.endpoint(),
            Sts {
                loads: Default::default(),
                rotate: false,
            },
        )
        .await;
        let calls = proxy.count("DescribeInstances");
        let err = stuck.list().await.unwrap_err();
        assert!(err.to_string().contains("ExpiredToken"), "{err}");
        assert_eq!(proxy.count("DescribeInstances"), calls + 2);
    });
}

/// SSM (the alias's image parameters), DescribeImages, the Pricing API and
/// the spot price history answer 503 for a while. The node class keeps
/// the resolution it had (a `ResolutionFailed` event, no status change),
/// so no node drifts and none is replaced; prices stay those last read;
/// and a launch in the meantime goes ahead with both.
#[test]
fn ssm_images_and_pricing_down_replace_no_node_and_launches_go_on() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "services-down").await;
        let mut config = env.config();
        // Every pass asks again (nothing is served from the provider's caches).
        config.resolution_ttl = Duration::ZERO;
        config.on_demand_prices_ttl = Duration::ZERO;
        config.spot_prices_ttl = Duration::ZERO;
        config.isolated_vpc = false;
        let aws = Arc::new(env.provider(&proxy.endpoint(), config).await);
        let class = env.resolved(&aws).await;
        let (clock, cluster, mut controller) = controller_for(&env, &aws, &class, POOL).await;
        cluster.create(pending_pod("web")).expect("created");
        provision_and_launch(&clock, &mut controller).await;
        controller.reconcile_disruption().await;
        let before = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(before.len(), 1);
        let class_before = Cluster::list::<EC2NodeClass>(cluster.as_ref())[0].status.clone();
        assert!(class_before.is_some());

        let down = [
            "GetParameters",
            "GetParameter",
            "DescribeImages",
            "GetProducts",
            "DescribeSpotPriceHistory",
        ];
        proxy
            .faults
            .lock()
            .unwrap()
            .unavailable
            .extend(down.iter().map(|a| a.to_string()));
        let calls: usize = down.iter().map(|a| proxy.count(a)).sum();
        for _ in 0..3 {
            clock.advance(Duration::from_secs(120)).expect("forward");
            controller.reconcile_disruption().await;
            controller.reconcile_nodeclaims().await;
        }
        let failed: usize = down.iter().map(|a| proxy.count(a)).sum::<usize>() - calls;
        assert!(failed > 0, "the services were asked while down");
        let events = controller.drain_events();
        assert!(
            events.iter().any(|e| e.reason == "ResolutionFailed"),
            "{events:?}"
        );
        assert_eq!(
            Cluster::list::<EC2NodeClass>(cluster.as_ref())[0].status,
            class_before,
            "the resolution stands"
        );
        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].metadata.name, before[0].metadata.name);
        assert!(claims[0].metadata.deletion_timestamp.is_none());
        assert!(
            !events.iter().any(|e| e.reason.starts_with("Disrupt")
                || e.reason == "Drifted"
                || e.reason.contains("Replac")),
            "{events:?}"
        );

        // A pod arriving meanwhile gets its node.
        cluster.create(pending_pod("late")).expect("created");
        provision_and_launch(&clock, &mut controller).await;
        let launched = Cluster::list::<NodeClaim>(cluster.as_ref())
            .iter()
            .filter(|c| provider_id(c).is_some())
            .count();
        assert_eq!(launched, 2);
        println!("SSM, DescribeImages and pricing down: {failed} calls failed, no node replaced, 1 launch");
    });
}

/// Three identical launches share one CreateFleet, and EC2 has capacity
/// for two: the fleet launches two (each tagged with its NodeClaim) and
/// reports the shortfall; the third launch fails with the offering EC2
/// refused, which the controller marks unavailable for its TTL (three
/// minutes, `insufficient_capacity_marks_offerings_unavailable...` in
/// tests/aws.rs) and its next solve avoids.
#[test]
fn a_create_fleet_filled_in_part_launches_what_it_can_and_refuses_the_rest() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "partial").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let class = env.resolved(&aws).await;
        proxy.faults.lock().unwrap().fleet_capacity = Some(2);
        let claims: Vec<NodeClaim> = (0..3)
            .map(|n| crate::aws::claim(&format!("partial-{n}"), &["m5.large"]))
            .collect();
        let none = std::collections::BTreeSet::new();
        let launched =
            futures::future::join_all(claims.iter().map(|c| aws.create(c, &class, &none))).await;
        assert_eq!(proxy.count("CreateFleet"), 1, "one fleet for the three");
        let body = &proxy.bodies("CreateFleet")[0];
        assert!(body.contains("TotalTargetCapacity=3"), "{body}");
        let mut instances = Vec::new();
        let mut refused = Vec::new();
        for (claim, result) in claims.iter().zip(launched) {
            match result {
                Ok(l) => instances.push((claim.metadata.name.clone().expect("named"), l.instance)),
                Err(CloudError::InsufficientCapacity { offerings }) => refused.push(offerings),
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(instances.len(), 2, "two launched");
        assert_eq!(refused.len(), 1, "one refused");
        let offering = &refused[0][0];
        assert_eq!(
            (
                offering.instance_type.as_str(),
                offering.capacity_type.as_str()
            ),
            ("m5.large", "on-demand")
        );
        for (name, instance) in &instances {
            assert_eq!(&instance.nodeclaim, name);
            assert_eq!(
                env.tags(&instance.id).await.get("karpenter.sh/nodeclaim"),
                Some(name)
            );
        }
        println!(
            "partial CreateFleet: 3 asked, 2 launched, refused {}/{}/{}",
            offering.instance_type, offering.zone, offering.capacity_type
        );
    });
}
