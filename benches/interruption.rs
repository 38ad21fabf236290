//! Interruption handling:
//!
//! 1. the cost of parsing and deciding on one message (a mix of spot
//!    interruptions, state changes, rebalance recommendations and
//!    scheduled changes, every instance backed by a NodeClaim);
//! 2. queued messages received, handed to a handler that decides on each,
//!    and deleted by the poller, timed from the poller's start to the last
//!    deletion, with one long poll in flight (the default) and with four:
//!    - against a minimal SQS stand-in in this process (the SQS JSON
//!      protocol over HTTP on 127.0.0.1; receive and delete are O(1)), up
//!      to 15,000 queued messages: what the poller itself sustains, the
//!      reference's fake-SQS benchmark;
//!    - against moto's SQS (a server on 127.0.0.1), at the depths moto
//!      can hold: moto checks every queued message's visibility on each
//!      call, so its cost per message grows with the queue and 15,000
//!      queued messages take it hours.
//!
//! 3. in `dovetail simulate`: a message's receipt to its NodeClaim marked
//!    for deletion, on the wall clock, for spot interruptions delivered by
//!    the simulated EC2 through `interruption::deliver` to the controller
//!    (parse, index lookup, the offering marked, the NodeClaim annotated,
//!    its node tainted, the NodeClaim deleted), in a cluster of
//!    [`SIM_NODES`] spot nodes, in waves of [`SIM_WAVE`] interruptions.
//!
//! Run: `cargo bench --bench interruption` (release; the moto part needs
//! python3 with moto: `python3 -m pip install 'moto[server]'`). Prints the
//! median of several runs of each. `-- sim` runs only the simulation part.

#[path = "../tests/moto.rs"]
#[allow(dead_code)] // the bench uses part of the test harness
mod moto;

use std::collections::{HashMap, HashSet, VecDeque};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use dovetail::clock::{Clock, SystemClock, Timestamp, parse_rfc3339};
use dovetail::interruption::{
    Action, ClaimInfo, HandlerError, InstanceState, Message, MessageHandler, Metrics, Options,
    Parsed, PollSettings, Poller, Queue, decide, events, parse,
};

/// Queue depths for the stand-in, up to the 15,000 of the reference.
const STAND_IN_SIZES: [usize; 3] = [1_000, 5_000, 15_000];
/// How long a drain may take.
const DEADLINE: Duration = Duration::from_secs(3600);
const STAND_IN_RUNS: usize = 5;
/// Queue depths moto holds in reasonable time.
const MOTO_SIZES: [usize; 3] = [100, 500, 1_000];
const MOTO_RUNS: usize = 3;
/// Long polls in flight.
const RECEIVERS: [usize; 2] = [1, 4];
/// Rounds over the messages for the per-message cost.
const ROUNDS: usize = 9;
/// SendMessageBatch calls in flight while filling moto's queue.
const SENDERS: usize = 4;
/// The largest number of messages any part uses.
const MESSAGES: usize = 15_000;

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";

fn instance_id(i: usize) -> String {
    format!("i-{i:017x}")
}

/// `n` events, four kinds in turn.
fn bodies(n: usize, time: Timestamp) -> Vec<String> {
    (0..n)
        .map(|i| {
            let id = instance_id(i);
            match i % 4 {
                0 => events::spot_interruption(&id, REGION, ACCOUNT, time),
                1 => events::state_change(&id, InstanceState::Terminated, REGION, ACCOUNT, time),
                2 => events::rebalance_recommendation(&id, REGION, ACCOUNT, time),
                _ => events::scheduled_change(&[&id], REGION, ACCOUNT, time),
            }
        })
        .collect()
}

/// Every instance backs a spot NodeClaim.
fn index() -> HashMap<String, ClaimInfo> {
    (0..MESSAGES)
        .map(|i| {
            (
                instance_id(i),
                ClaimInfo {
                    name: format!("claim-{i}"),
                    instance_type: "c5.large".into(),
                    zone: format!("us-east-1{}", ['a', 'b', 'c'][i % 3]),
                    capacity_type: "spot".into(),
                },
            )
        })
        .collect()
}

/// Decides on each message, as the controller would, and counts. A
/// message delivered again is a no-op, as deleting a NodeClaim already
/// being deleted is for the controller.
struct Counter {
    index: Arc<HashMap<String, ClaimInfo>>,
    metrics: Metrics,
    seen: Mutex<HashSet<String>>,
    duplicates: AtomicUsize,
    deletions: AtomicUsize,
}

impl MessageHandler for Counter {
    async fn handle(&self, message: Message, received_at: Timestamp) -> Result<(), HandlerError> {
        if !self
            .seen
            .lock()
            .expect("seen lock")
            .insert(message.id.clone())
        {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let actions = decide(
            &message,
            &|id: &str| self.index.get(id).cloned(),
            &Options::default(),
        );
        let now = SystemClock.now();
        for action in &actions {
            if let Action::DeleteNodeClaim { .. } = action {
                self.metrics.observe_marked(received_at, now);
                self.deletions.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn parse_and_decide(bodies: &[String], index: &HashMap<String, ClaimInfo>) {
    let lookup = |id: &str| index.get(id).cloned();
    let mut parse_ns = Vec::new();
    let mut both_ns = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for body in bodies {
            black_box(parse(black_box(body)).is_ok());
        }
        parse_ns.push(started.elapsed().as_nanos() as f64 / bodies.len() as f64);
        let started = Instant::now();
        let mut actions = 0;
        for body in bodies {
            if let Ok(Parsed::Message(m)) = parse(black_box(body)) {
                actions += decide(&m, &lookup, &Options::default()).len();
            }
        }
        both_ns.push(started.elapsed().as_nanos() as f64 / bodies.len() as f64);
        black_box(actions);
    }
    let mean_bytes = bodies.iter().map(String::len).sum::<usize>() / bodies.len();
    println!(
        "parse: median {:.2} µs/message; parse + decide: median {:.2} µs/message ({} messages of {mean_bytes} bytes on average, {ROUNDS} rounds)",
        median(parse_ns) / 1000.0,
        median(both_ns) / 1000.0,
        bodies.len(),
    );
}

/// Runs a poller on `url` until `expected` distinct messages are handled
/// and as many deleted. Returns the time from its start to then, and how
/// many deliveries were repeats.
async fn time_drain(
    client: &Client,
    url: &str,
    expected: usize,
    receivers: usize,
    index: &Arc<HashMap<String, ClaimInfo>>,
) -> (Duration, usize) {
    let metrics = Metrics::new();
    let counter = Counter {
        index: index.clone(),
        metrics: metrics.clone(),
        seen: Mutex::new(HashSet::new()),
        duplicates: AtomicUsize::new(0),
        deletions: AtomicUsize::new(0),
    };
    let poller = Arc::new(
        Poller::connect(
            client.clone(),
            Queue::new(url),
            counter,
            metrics.clone(),
            Arc::new(SystemClock),
            PollSettings {
                receivers,
                ..PollSettings::default()
            },
        )
        .await
        .expect("a poller"),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    let task = tokio::spawn({
        let poller = poller.clone();
        async move {
            poller
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        }
    });
    let deadline = started + DEADLINE;
    let handled = || poller.handler().seen.lock().expect("seen lock").len();
    while handled() < expected || metrics.deleted() < expected as u64 {
        assert!(
            Instant::now() < deadline,
            "not drained in an hour: {}",
            metrics.text()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = started.elapsed();
    let _ = stop.send(());
    task.await.expect("the poller stops");
    let counter = poller.handler();
    assert_eq!(handled(), expected);
    assert_eq!(metrics.handler_errors("failed"), 0);
    // Spot interruptions, state changes and scheduled changes delete
    // their claim; rebalance recommendations do not.
    let deleting = (0..expected).filter(|i| i % 4 != 2).count();
    assert_eq!(counter.deletions.load(Ordering::Relaxed), deleting);
    (took, counter.duplicates.load(Ordering::Relaxed))
}

// ---------------------------------------------------------------------
// The stand-in: ReceiveMessage and DeleteMessageBatch of the SQS JSON
// protocol, over HTTP/1.1 with keep-alive, on 127.0.0.1.

#[derive(Default)]
struct StandInQueue {
    visible: VecDeque<(u64, Arc<str>)>,
    in_flight: HashMap<String, Arc<str>>,
    next: u64,
}

#[derive(Clone, Default)]
struct StandIn(Arc<Mutex<StandInQueue>>);

impl StandIn {
    fn push(&self, bodies: &[String]) {
        let mut q = self.0.lock().expect("queue lock");
        for body in bodies {
            q.next += 1;
            let id = q.next;
            q.visible.push_back((id, Arc::from(body.as_str())));
        }
    }

    fn depth(&self) -> (usize, usize) {
        let q = self.0.lock().expect("queue lock");
        (q.visible.len(), q.in_flight.len())
    }

    fn receive(&self, max: usize, sent_ms: i64) -> Value {
        let mut q = self.0.lock().expect("queue lock");
        let mut messages = Vec::new();
        while messages.len() < max {
            let Some((id, body)) = q.visible.pop_front() else {
                break;
            };
            let handle = format!("receipt-{id}");
            messages.push(json!({
                "MessageId": format!("message-{id}"),
                "ReceiptHandle": handle,
                "MD5OfBody": "",
                "Body": &*body,
                "Attributes": {"SentTimestamp": sent_ms.to_string()},
            }));
            q.in_flight.insert(handle, body);
        }
        if messages.is_empty() {
            json!({})
        } else {
            json!({ "Messages": messages })
        }
    }

    fn delete(&self, entries: &[Value]) -> Value {
        let mut q = self.0.lock().expect("queue lock");
        let (mut ok, mut failed) = (Vec::new(), Vec::new());
        for e in entries {
            let id = e["Id"].clone();
            match e["ReceiptHandle"]
                .as_str()
                .and_then(|h| q.in_flight.remove(h))
            {
                Some(_) => ok.push(json!({ "Id": id })),
                None => failed.push(json!({
                    "Id": id, "SenderFault": true, "Code": "ReceiptHandleIsInvalid",
                })),
            }
        }
        json!({ "Successful": ok, "Failed": failed })
    }

    async fn answer(&self, target: &str, request: &Value) -> (u16, Value) {
        match target {
            "AmazonSQS.ReceiveMessage" => {
                let max = request["MaxNumberOfMessages"].as_u64().unwrap_or(1) as usize;
                let sent_ms = SystemClock.now().as_millisecond();
                let out = self.receive(max, sent_ms);
                if out.get("Messages").is_none() {
                    // An empty queue: a short long poll.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (200, out)
            }
            "AmazonSQS.DeleteMessageBatch" => {
                let entries = request["Entries"].as_array().cloned().unwrap_or_default();
                (200, self.delete(&entries))
            }
            _ => (
                400,
                json!({"__type": "com.amazonaws.sqs#InvalidAction", "message": target}),
            ),
        }
    }

    async fn serve(self, mut socket: TcpStream) {
        let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
        loop {
            let head_end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                match socket.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let header = |name: &str| {
                head.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_string())
                })
            };
            let length: usize = header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let target = header("x-amz-target").unwrap_or_default();
            while buf.len() < head_end + length {
                match socket.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
            let request: Value =
                serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
            buf.drain(..head_end + length);
            let (status, body) = self.answer(&target, &request).await;
            let body = body.to_string();
            let response = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{body}",
                if status == 200 { "OK" } else { "Bad Request" },
                body.len()
            );
            if socket.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    /// Serves on a free port of 127.0.0.1; returns the endpoint.
    async fn start(&self) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let endpoint = format!("http://{}", listener.local_addr().expect("an address"));
        let me = self.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let _ = socket.set_nodelay(true);
                tokio::spawn(me.clone().serve(socket));
            }
        });
        endpoint
    }
}

async fn bench_stand_in(bodies: &[String], index: &Arc<HashMap<String, ClaimInfo>>) {
    for size in STAND_IN_SIZES {
        for receivers in RECEIVERS {
            let mut rates = Vec::new();
            for _ in 0..STAND_IN_RUNS {
                // A new queue each run: a long poll the last run abandoned
                // at shutdown may still be answered, and the stand-in has
                // no visibility timeout to bring its messages back.
                let queue = StandIn::default();
                let endpoint = queue.start().await;
                let client = moto::sqs_client(&endpoint, REGION).await;
                let url = format!("{endpoint}/{ACCOUNT}/interruption");
                queue.push(&bodies[..size]);
                let (took, duplicates) = time_drain(&client, &url, size, receivers, index).await;
                assert_eq!(duplicates, 0);
                assert_eq!(queue.depth(), (0, 0));
                rates.push(size as f64 / took.as_secs_f64());
            }
            println!(
                "stand-in SQS: {size} queued messages handled and deleted, {receivers} long poll(s) in flight: median {:.0} messages/s over {STAND_IN_RUNS} runs (min {:.0}, max {:.0})",
                median(rates.clone()),
                rates.iter().copied().fold(f64::INFINITY, f64::min),
                rates.iter().copied().fold(0.0, f64::max),
            );
        }
    }
}

// ---------------------------------------------------------------------
// moto

async fn fill(client: &Client, url: &str, bodies: &[String]) {
    let sends = bodies.chunks(10).map(|chunk| {
        let entries: Vec<SendMessageBatchRequestEntry> = chunk
            .iter()
            .enumerate()
            .map(|(i, body)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .build()
                    .expect("an entry")
            })
            .collect();
        let client = client.clone();
        let url = url.to_string();
        async move {
            let out = client
                .send_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
                .expect("SendMessageBatch");
            assert!(out.failed().is_empty(), "{:?}", out.failed());
        }
    });
    futures::stream::iter(sends)
        .buffer_unordered(SENDERS)
        .collect::<Vec<()>>()
        .await;
}

async fn moto_depth(client: &Client, url: &str) -> (usize, usize) {
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

async fn bench_moto(moto: &moto::Moto, bodies: &[String], index: &Arc<HashMap<String, ClaimInfo>>) {
    let client = moto::sqs_client(&moto.endpoint(), REGION).await;
    for size in MOTO_SIZES {
        for receivers in RECEIVERS {
            let mut rates = Vec::new();
            for run in 0..MOTO_RUNS {
                let url = client
                    .create_queue()
                    .queue_name(format!("bench-{size}-{receivers}-{run}"))
                    .send()
                    .await
                    .expect("CreateQueue")
                    .queue_url()
                    .expect("a URL")
                    .to_string();
                let filled = Instant::now();
                fill(&client, &url, &bodies[..size]).await;
                assert_eq!(moto_depth(&client, &url).await, (size, 0));
                let fill_time = filled.elapsed();
                let (took, duplicates) = time_drain(&client, &url, size, receivers, index).await;
                assert_eq!(moto_depth(&client, &url).await, (0, 0));
                let rate = size as f64 / took.as_secs_f64();
                println!(
                    "  moto, {size} messages, {receivers} receiver(s), run {run}: sent in {:.1} s, drained in {:.2} s = {rate:.0} messages/s; {duplicates} delivered twice",
                    fill_time.as_secs_f64(),
                    took.as_secs_f64()
                );
                rates.push(rate);
            }
            println!(
                "moto SQS: {size} queued messages handled and deleted, {receivers} long poll(s) in flight: median {:.0} messages/s over {MOTO_RUNS} runs",
                median(rates)
            );
        }
    }
}

// ---------------------------------------------------------------------
// The simulation

/// Spot nodes in the simulated cluster (one pod each).
const SIM_NODES: usize = 600;
/// Interruptions per wave, and waves (ten minutes apart).
const SIM_WAVE: usize = 100;
const SIM_WAVES: usize = 4;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn bench_simulation() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // The scenarios' node class, and a NodePool of spot capacity large
    // enough for the whole cluster.
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).expect("the repository directory");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/scenarios/interruption/repo/nodeclass.yaml"),
        repo.join("nodeclass.yaml"),
    )
    .expect("the node class is copied");
    std::fs::write(
        repo.join("nodepool.yaml"),
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n        - key: kubernetes.io/arch\n          operator: In\n          values: [\"amd64\"]\n        - key: karpenter.sh/capacity-type\n          operator: In\n          values: [\"spot\"]\n        - key: karpenter.k8s.aws/instance-category\n          operator: In\n          values: [\"c\", \"m\"]\n  limits:\n    cpu: \"100000\"\n  disruption:\n    consolidationPolicy: WhenEmpty\n    consolidateAfter: 5m\n",
    )
    .expect("the node pool is written");
    let mut timeline = format!(
        "config: repo\ntimeline:\n  - at: 0s\n    apply:\n      - apiVersion: apps/v1\n        kind: Deployment\n        metadata: {{name: web, namespace: default}}\n        spec:\n          replicas: {SIM_NODES}\n          selector: {{matchLabels: {{app: web}}}}\n          template:\n            metadata: {{labels: {{app: web}}}}\n            spec:\n              affinity:\n                podAntiAffinity:\n                  requiredDuringSchedulingIgnoredDuringExecution:\n                    - labelSelector: {{matchLabels: {{app: web}}}}\n                      topologyKey: kubernetes.io/hostname\n              containers:\n                - name: web\n                  image: example/web:1\n                  resources: {{requests: {{cpu: \"1\", memory: 2Gi}}}}\n"
    );
    for wave in 0..SIM_WAVES {
        timeline.push_str(&format!(
            "  - at: {}m\n    interrupt: {{kind: spot-interruption, selector: karpenter.sh/capacity-type=spot, count: {SIM_WAVE}}}\n",
            10 * (wave + 1)
        ));
    }
    timeline.push_str(&format!("until: {}m\n", 10 * (SIM_WAVES + 1)));
    let path = dir.path().join("interruptions.yaml");
    std::fs::write(&path, timeline).expect("the scenario is written");
    let mut all = Vec::new();
    let mut marked = 0;
    for _ in 0..3 {
        let scenario = dovetail::simulate::scenario::load(&path).expect("the scenario loads");
        let started = Instant::now();
        let report = dovetail::simulate::driver::Simulation::new(scenario, None)
            .expect("the simulation starts")
            .run(None)
            .expect("the simulation runs");
        let took = started.elapsed();
        let metrics = report.interruption_metrics.as_ref().expect("metrics");
        marked = metrics.handling().0;
        assert_eq!(report.interruption_handling.len(), SIM_WAVE * SIM_WAVES);
        assert_eq!(marked as usize, SIM_WAVE * SIM_WAVES);
        assert_eq!(report.summary.pods_pending, 0);
        println!(
            "  simulation: {} nodes launched, {} messages in {:.1} s",
            report.summary.nodes_launched,
            report.interruption_handling.len(),
            took.as_secs_f64()
        );
        all.extend(report.interruption_handling);
    }
    all.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "simulation: receipt to NodeClaim marked for deletion over {} spot interruptions ({SIM_NODES} spot nodes, {SIM_WAVES} waves of {SIM_WAVE}, 3 runs; {marked} marked per run): p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        all.len(),
        ms(percentile(&all, 0.50)),
        ms(percentile(&all, 0.90)),
        ms(percentile(&all, 0.99)),
        ms(percentile(&all, 1.0)),
    );
}

fn main() {
    bench_simulation();
    if std::env::args().any(|a| a == "sim") {
        return;
    }
    let time = parse_rfc3339("2026-11-21T13:00:00Z").expect("a time");
    let bodies = bodies(MESSAGES, time);
    let index = Arc::new(index());
    parse_and_decide(&bodies, &index);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench_stand_in(&bodies, &index));

    let Some(moto) = moto::server() else {
        return;
    };
    runtime.block_on(bench_moto(moto, &bodies, &index));
}
