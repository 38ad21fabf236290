//! The interruption poller against moto's SQS (a moto server on
//! 127.0.0.1): messages are received, handed to the handler, acted on and
//! deleted; undecodable ones are deleted and counted; a handler error
//! leaves the message for redelivery after the visibility timeout.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;

use dovetail::clock::SystemClock;
use dovetail::cloud::OfferingKey;
use dovetail::interruption::{
    Action, InstanceState, Metrics, PollSettings, Poller, Queue, SqsError, events,
};

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

        assert_eq!(metrics.received("spot-interruption"), 1);
        assert_eq!(metrics.received("state-change"), 1);
        assert_eq!(metrics.received("ignored-state-change"), 1);
        assert_eq!(metrics.received("undecodable"), 1);
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
