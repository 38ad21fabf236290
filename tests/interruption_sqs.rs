//! The interruption poller against moto's SQS (a moto server on
//! 127.0.0.1): messages are received, handed to the handler, acted on and
//! deleted; undecodable ones are deleted and counted; a handler error
//! leaves the message for redelivery after the visibility timeout; and
//! `dovetail controller`'s runtime polls its queue while it leads.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;

use dovetail::api::{
    EC2NodeClass, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE, NodeClaim, NodePool,
};
use dovetail::clock::{Clock, ManualClock, SystemClock};
use dovetail::cloud::OfferingKey;
use dovetail::cluster::{Cluster, ObjectKey};
use dovetail::controller::Settings;
use dovetail::controller::http::Health;
use dovetail::controller::metrics::Metrics as ControllerMetrics;
use dovetail::controller::runtime::{EventRecorder, Interruption, InterruptionQueue, Runtime};
use dovetail::interruption::{
    Action, InstanceState, Metrics, PollSettings, Poller, Queue, SqsError, events,
};
use dovetail::world::MemoryCluster;
use dovetail::world::ec2::{SimConfig, SimEc2};
use k8s_openapi::api::core::v1::Pod;

use crate::interruption::{Recorder, index, t0};
use crate::moto;

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";
/// The region of these tests' queues: moto's state is per region, shared
/// by every suite of the process.
const SQS_REGION: &str = "eu-west-3";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn create_queue(client: &Client, name: &str, visibility_timeout: u32) -> String {
    client
        .create_queue()
        .queue_name(name)
        .attributes(
            QueueAttributeName::VisibilityTimeout,
            visibility_timeout.to_string(),
        )
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .expect("a queue URL")
        .to_string()
}

async fn send(client: &Client, url: &str, body: &str) {
    client
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .expect("SendMessage");
}

/// (visible, in flight) messages of the queue.
async fn depth(client: &Client, url: &str) -> (u64, u64) {
    let out = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("GetQueueAttributes");
    let get = |name| {
        out.attributes()
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse().ok())
            .expect("a count")
    };
    (
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    )
}

fn settings() -> PollSettings {
    PollSettings {
        wait: Duration::from_secs(1),
        ..PollSettings::default()
    }
}

#[test]
fn messages_are_received_acted_on_and_deleted() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let client = moto::sqs_client(&moto.endpoint(), SQS_REGION).await;
        let url = create_queue(&client, "interruption-acted-on", 30).await;
        let bodies = [
            events::spot_interruption("i-00000000000000001", REGION, ACCOUNT, t0()),
            events::state_change(
                "i-00000000000000003",
                InstanceState::Terminated,
                REGION,
                ACCOUNT,
                t0(),
            ),
            events::state_change(
                "i-00000000000000002",
                InstanceState::Running,
                REGION,
                ACCOUNT,
                t0(),
            ),
            "this is not an EventBridge event".to_string(),
        ];
        for body in &bodies {
            send(&client, &url, body).await;
        }
        let metrics = Metrics::new();
        // By name: the poller resolves the URL with GetQueueUrl.
        let poller = Poller::connect(
            client.clone(),
            Queue::new("interruption-acted-on"),
            Recorder::new(index(), metrics.clone()),
            metrics.clone(),
            Arc::new(SystemClock),
            settings(),
        )
        .await
        .expect("the queue resolves");
        assert_eq!(poller.queue_url(), url);
        let mut received = 0;
        for _ in 0..20 {
            if received == bodies.len() {
                break;
            }
            let batch = poller.poll_once().await.expect("a receive");
            assert_eq!(batch.failed + batch.not_deleted, 0, "{batch:?}");
            assert_eq!(batch.deleted, batch.received);
            received += batch.received;
        }
        assert_eq!(received, bodies.len());

        let actions = poller.handler().actions();
        assert!(actions.contains(&Action::MarkUnavailable(OfferingKey {
            instance_type: "c5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "spot".into(),
        })));
        let deleted: Vec<&str> = actions
            .iter()
            .filter_map(|a| match a {
                Action::DeleteNodeClaim { name, reason, .. } => {
                    assert_eq!(*reason, "Interrupted");
                    Some(name.as_str())
                }
                _ => None,
            })
            .collect();
        let mut deleted = deleted;
        deleted.sort_unstable();
        assert_eq!(deleted, ["a", "c"]);
        assert_eq!(actions.len(), 3, "{actions:?}");

        assert_eq!(metrics.received("spot_interrupted"), 1);
        assert_eq!(metrics.received("instance_terminated"), 1);
        assert_eq!(metrics.received("no_op"), 1);
        assert_eq!(metrics.received("undecodable"), 0);
        assert_eq!(metrics.undecodable("envelope"), 1);
        assert_eq!(metrics.deleted(), 4);
        assert_eq!(metrics.handling().0, 2);
        // Queue time comes from SQS's SentTimestamp (moments ago), not the
        // events' time (t0, long past).
        let text = metrics.text();
        let sum = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("karpenter_interruption_message_queue_duration_seconds_sum ")
            })
            .and_then(|v| v.parse::<f64>().ok())
            .expect("a queue-duration sum");
        assert!(sum < 60.0, "{text}");
        assert_eq!(depth(&client, &url).await, (0, 0));
    });
}

#[test]
fn a_handler_error_leaves_the_message_for_redelivery() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let client = moto::sqs_client(&moto.endpoint(), SQS_REGION).await;
        let url = create_queue(&client, "interruption-redelivery", 2).await;
        let metrics = Metrics::new();
        let recorder = Recorder::new(index(), metrics.clone());
        recorder.fail("i-00000000000000001", 1);
        let poller = Arc::new(
            Poller::connect(
                client.clone(),
                Queue::new(&url),
                recorder,
                metrics.clone(),
                Arc::new(SystemClock),
                settings(),
            )
            .await
            .expect("a poller"),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn({
            let poller = poller.clone();
            async move {
                poller
                    .run(async {
                        let _ = stopped.await;
                    })
                    .await;
            }
        });
        let sent = Instant::now();
        send(
            &client,
            &url,
            &events::spot_interruption("i-00000000000000001", REGION, ACCOUNT, t0()),
        )
        .await;

        let wait_for = |calls: usize| {
            let poller = poller.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(20);
                while poller.handler().calls.load(Ordering::SeqCst) < calls {
                    assert!(
                        Instant::now() < deadline,
                        "the handler was not called {calls} times"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        wait_for(1).await;
        // Failed: not deleted, invisible until the visibility timeout.
        assert_eq!(metrics.handler_errors("failed"), 1);
        assert_eq!(metrics.deleted(), 0);
        assert_eq!(depth(&client, &url).await, (0, 1));
        assert!(poller.handler().actions().is_empty());

        wait_for(2).await;
        let redelivered = sent.elapsed();
        assert!(
            redelivered >= Duration::from_millis(1900),
            "received again after {redelivered:?}, before the 2 s visibility timeout"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while metrics.deleted() < 1 {
            assert!(Instant::now() < deadline, "the message was not deleted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(poller.handler().actions().len(), 2);
        assert_eq!(depth(&client, &url).await, (0, 0));

        // Shutdown ends the long poll in flight.
        let asked = Instant::now();
        stop.send(()).expect("the poller is running");
        running.await.expect("the poller stops cleanly");
        assert!(asked.elapsed() < Duration::from_secs(1));
        assert_eq!(poller.handler().calls.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn a_missing_queue_is_an_error_naming_it() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let metrics = Metrics::new();
        let result = Poller::connect(
            moto::sqs_client(&moto.endpoint(), SQS_REGION).await,
            Queue::new("no-such-queue"),
            Recorder::new(index(), metrics.clone()),
            metrics,
            Arc::new(SystemClock),
            settings(),
        )
        .await;
        let Err(e @ SqsError::GetQueueUrl { .. }) = result else {
            panic!("expected GetQueueUrl to fail");
        };
        assert_eq!(
            e.to_string(),
            "cannot resolve the URL of queue \"no-such-queue\""
        );
    });
    assert_eq!(
        Queue::new("https://sqs.us-east-1.amazonaws.com/1/q"),
        Queue::Url("https://sqs.us-east-1.amazonaws.com/1/q".into())
    );
    assert_eq!(Queue::new("q"), Queue::Name("q".into()));
}

fn from_yaml<K: serde::de::DeserializeOwned>(text: &str) -> K {
    let value: serde_json::Value = serde_saphyr::from_str(text).expect("YAML");
    serde_json::from_value(value).expect("the object")
}

/// The first NodeClaim but `except`, not being deleted, whose launch is
/// recorded: `tick` (the controller's clock a second on, and a change
/// signalled) runs every 100 ms until there is one, for at most 30 s.
async fn launched_claim(
    cluster: &MemoryCluster,
    except: Option<&str>,
    tick: impl Fn(),
) -> Arc<NodeClaim> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let launched = Cluster::list::<NodeClaim>(cluster).into_iter().find(|c| {
            c.metadata.deletion_timestamp.is_none()
                && c.metadata.name.as_deref() != except
                && c.status.as_ref().is_some_and(|s| s.provider_id.is_some())
        });
        if let Some(c) = launched {
            return c;
        }
        assert!(Instant::now() < deadline, "no NodeClaim was launched");
        tick();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The offering a launched NodeClaim runs on, from its labels.
fn offering_of(claim: &NodeClaim) -> (String, String, String) {
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
    (
        label(LABEL_INSTANCE_TYPE),
        label(LABEL_ZONE),
        label(LABEL_CAPACITY_TYPE),
    )
}

/// A memory cluster holding the examples' NodePool and node class and a
/// pending pod (`web`), the simulated EC2 on a manual clock, and
/// `dovetail controller`'s runtime polling `queue` through `client`, with
/// its interruption metrics.
fn queue_world(
    client: &Client,
    queue: &str,
) -> (
    Arc<ManualClock>,
    Arc<MemoryCluster>,
    Metrics,
    Runtime<MemoryCluster, SimEc2>,
) {
    let clock = Arc::new(ManualClock::new(t0()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
    let catalog = SimEc2::builtin_catalog().expect("the built-in catalog");
    let cloud = Arc::new(SimEc2::new(SimConfig::new(catalog), dyn_clock.clone()));
    let class: EC2NodeClass = from_yaml(include_str!("../examples-repo/nodeclasses/default.yaml"));
    let pool: NodePool = from_yaml(include_str!("../examples-repo/nodepools/general.yaml"));
    cluster.create(class).expect("created");
    cluster.create(pool).expect("created");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .expect("a pod");
    cluster.create(pod).expect("created");
    let interruption_metrics = dovetail::interruption::Metrics::new();
    let runtime = Runtime {
        cluster: cluster.clone(),
        cloud,
        clock: dyn_clock,
        settings: Settings::default(),
        metrics: ControllerMetrics::new(),
        interruption_metrics: interruption_metrics.clone(),
        health: Arc::new(Health::default()),
        events: EventRecorder::new("replica-a"),
        sync: None,
        interruption: Some(Interruption::Queue(InterruptionQueue {
            queue: queue.into(),
            sqs: client.clone(),
            poll: settings(),
        })),
    };
    (clock, cluster, interruption_metrics, runtime)
}

/// `dovetail controller`'s runtime with an interruption queue: while it
/// leads, a spot interruption sent to moto's queue reaches the term's
/// controller, which deletes the NodeClaim of that instance and marks its
/// offering unavailable (the replacement runs on another one); the message
/// is then deleted from the queue.
#[test]
fn the_runtime_polls_its_queue_while_leading_and_deletes_the_interrupted_nodeclaim() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let client = moto::sqs_client(&moto.endpoint(), SQS_REGION).await;
        let url = create_queue(&client, "interruption-runtime", 30).await;

        let (clock, cluster, interruption_metrics, mut runtime) =
            queue_world(&client, "interruption-runtime");
        let (changes_tx, changes) = tokio::sync::watch::channel(0u64);
        let (leading_tx, leading) = tokio::sync::watch::channel(false);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let run = runtime.run(changes, leading, async {
            let _ = stop_rx.await;
        });
        let drive = async {
            let tick = || {
                clock.advance(Duration::from_secs(1)).expect("forward");
                changes_tx.send_modify(|v| *v += 1);
            };
            // Standing by, a message stays in the queue.
            send(
                &client,
                &url,
                &events::spot_interruption("i-0000000000000dead", REGION, ACCOUNT, t0()),
            )
            .await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(interruption_metrics.received("spot_interrupted"), 0);
            assert_eq!(depth(&client, &url).await, (1, 0));

            // Leading: the pod's NodeClaim is launched; the stale message
            // (no NodeClaim has that instance) is handled and deleted.
            leading_tx.send(true).expect("the runtime listens");
            let claim = launched_claim(&cluster, None, &tick).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            let name = claim.metadata.name.clone().expect("a name");
            let offering = offering_of(&claim);
            assert_eq!(offering.2, "spot", "{offering:?}");
            let provider_id = claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.clone())
                .expect("a provider id");
            let instance = provider_id.rsplit('/').next().expect("an instance id");
            while interruption_metrics.deleted() < 1 {
                assert!(
                    Instant::now() < deadline,
                    "the stale message was not deleted"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(interruption_metrics.handling().0, 0);

            // The warning for the NodeClaim's instance.
            send(
                &client,
                &url,
                &events::spot_interruption(instance, REGION, ACCOUNT, clock.now()),
            )
            .await;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let gone = Cluster::get::<NodeClaim>(cluster.as_ref(), &ObjectKey::cluster(&name))
                    .is_none_or(|c| c.metadata.deletion_timestamp.is_some());
                if gone && interruption_metrics.deleted() == 2 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "NodeClaim {name} was not deleted for the interruption of {instance}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(interruption_metrics.received("spot_interrupted"), 2);
            assert_eq!(interruption_metrics.handling().0, 1, "one NodeClaim marked");
            assert_eq!(depth(&client, &url).await, (0, 0));

            // The pod's replacement avoids the reclaimed offering.
            let replacement = launched_claim(&cluster, Some(&name), &tick).await;
            assert_ne!(offering_of(&replacement), offering);
            stop_tx.send(()).expect("the runtime runs");
        };
        tokio::join!(run, drive);
    });
}

/// The production runtime polling through the fault proxy in front of
/// moto's SQS. A spot warning delivered twice, a state change that arrives
/// before it (out of order), a body that is not an event, and a warning
/// for another cluster's instance: the NodeClaim is marked once, the
/// others are ignored or counted undecodable, and all are deleted from
/// the queue. ReceiveMessage denied, then the queue deleted: the
/// queue-health gauge drops to 0, errors are counted, the poller backs
/// off (no tight loop) and the controller keeps running; once the queue
/// answers again, its messages are handled again.
#[test]
fn the_poller_survives_duplicates_disorder_garbage_foreign_instances_and_outages() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = crate::aws_proxy::start(moto.addr).await;
        let client = moto::sqs_client(&proxy.endpoint(), SQS_REGION).await;
        let url = create_queue(&client, "interruption-faults", 30).await;
        let (clock, cluster, metrics, mut runtime) = queue_world(&client, "interruption-faults");
        let health = runtime.health.clone();
        let (changes_tx, changes) = tokio::sync::watch::channel(0u64);
        let (_leading_tx, leading) = tokio::sync::watch::channel(true);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let run = runtime.run(changes, leading, async {
            let _ = stop_rx.await;
        });
        let drive = async {
            let tick = || {
                clock.advance(Duration::from_secs(1)).expect("forward");
                changes_tx.send_modify(|v| *v += 1);
            };
            let claim = launched_claim(&cluster, None, &tick).await;
            let name = claim.metadata.name.clone().expect("a name");
            let provider_id = claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.clone())
                .expect("a provider id");
            let instance = provider_id.rsplit('/').next().expect("an instance id");
            let later = t0() + jiff::SignedDuration::from_secs(30);
            for body in [
                events::state_change(instance, InstanceState::ShuttingDown, REGION, ACCOUNT, later),
                events::spot_interruption(instance, REGION, ACCOUNT, t0()),
                events::spot_interruption(instance, REGION, ACCOUNT, t0()),
                "{\"not\": \"an event\"".to_string(),
                events::spot_interruption("i-0fffffffffffffff0", REGION, ACCOUNT, t0()),
            ] {
                send(&client, &url, &body).await;
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while metrics.deleted() < 5 {
                assert!(Instant::now() < deadline, "deleted {} of 5", metrics.deleted());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let claim = Cluster::get::<NodeClaim>(cluster.as_ref(), &ObjectKey::cluster(&name));
            assert!(
                claim.is_none_or(|c| c.metadata.deletion_timestamp.is_some()),
                "NodeClaim {name} is deleted"
            );
            assert_eq!(metrics.handling().0, 1, "marked once");
            assert_eq!(metrics.received("spot_interrupted"), 3);
            assert_eq!(metrics.received("instance_terminated"), 1);
            assert_eq!(metrics.undecodable("envelope"), 1);
            assert_eq!(depth(&client, &url).await, (0, 0));
            assert!(metrics.queue_healthy());

            // ReceiveMessage denied for 8 s.
            proxy.faults.lock().unwrap().deny.insert("ReceiveMessage".into());
            let receives = proxy.count("ReceiveMessage");
            let errors = metrics.sqs_errors("receive");
            tokio::time::sleep(Duration::from_secs(8)).await;
            let denied = proxy.count("ReceiveMessage") - receives;
            assert!(!metrics.queue_healthy());
            assert!(metrics.sqs_errors("receive") > errors);
            // Backing off from 1 s, doubling: 1 + 2 + 4 s, so at most five
            // calls in 8 s (the long poll in flight included).
            assert!((1..=5).contains(&denied), "{denied} receives while denied");
            assert!(health.leading.load(Ordering::Relaxed), "the controller runs");
            proxy.faults.lock().unwrap().deny.remove("ReceiveMessage");
            let foreign = events::spot_interruption("i-0fffffffffffffff1", REGION, ACCOUNT, t0());
            send(&client, &url, &foreign).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            while metrics.deleted() < 6 {
                assert!(Instant::now() < deadline, "not received after access came back");
                tick();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(metrics.queue_healthy());

            // The queue deleted: the same, until it is there again.
            client
                .delete_queue()
                .queue_url(&url)
                .send()
                .await
                .expect("DeleteQueue");
            let errors = metrics.sqs_errors("receive");
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert!(!metrics.queue_healthy());
            assert!(metrics.sqs_errors("receive") > errors);
            assert!(health.leading.load(Ordering::Relaxed), "the controller runs");
            let again = create_queue(&client, "interruption-faults", 30).await;
            assert_eq!(again, url);
            send(&client, &url, &foreign).await;
            let deadline = Instant::now() + Duration::from_secs(40);
            while metrics.deleted() < 7 {
                assert!(Instant::now() < deadline, "not received once the queue was back");
                tick();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(metrics.queue_healthy());
            println!(
                "SQS faults: ReceiveMessage {} in all ({denied} in 8 s denied), receive errors {}, deleted {}",
                proxy.count("ReceiveMessage"),
                metrics.sqs_errors("receive"),
                metrics.deleted()
            );
            stop_tx.send(()).expect("the runtime runs");
        };
        tokio::join!(run, drive);
    });
}
