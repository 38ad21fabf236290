//! EventBridge events as EC2 and AWS Health send them, built from a few
//! facts: the simulated EC2 delivers these to the controller (the
//! `interrupt` step of a scenario), and the tests and the benchmark send
//! them to SQS. The shapes are the documented ones; [`super::parse`] reads
//! every one of them back.
//!
//! Event ids are derived from the event's content (a hash shaped as a
//! UUID), so a simulation that sends the same events produces the same
//! report.

use std::hash::Hasher;

use serde_json::{Value, json};

use super::message::{
    DETAIL_TYPE_HEALTH, DETAIL_TYPE_REBALANCE, DETAIL_TYPE_SPOT_INTERRUPTION,
    DETAIL_TYPE_STATE_CHANGE, InstanceState, SOURCE_EC2, SOURCE_HEALTH,
};
use crate::clock::{Timestamp, format_rfc3339};

/// How long before a scheduled change AWS Health announces it (about two
/// weeks for retirements and maintenance).
const SCHEDULED_CHANGE_NOTICE: std::time::Duration = std::time::Duration::from_secs(14 * 86_400);

/// The AWS partition of a region (`aws`, `aws-cn`, `aws-us-gov`), for ARNs.
pub fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

/// The ARN of an instance.
pub fn instance_arn(instance_id: &str, region: &str, account: &str) -> String {
    format!(
        "arn:{}:ec2:{region}:{account}:instance/{instance_id}",
        partition(region)
    )
}

/// A UUID-shaped id from the event's content.
fn event_id(parts: &[&str]) -> String {
    let hash = |seed: u8| {
        let mut h = fnv::FnvHasher::default();
        h.write_u8(seed);
        for p in parts {
            h.write(p.as_bytes());
            h.write_u8(0);
        }
        h.finish()
    };
    let (a, b) = (hash(1), hash(2));
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

fn envelope(
    source: &str,
    detail_type: &str,
    region: &str,
    account: &str,
    time: Timestamp,
    resources: Vec<String>,
    detail: Value,
) -> String {
    let time = format_rfc3339(time);
    let mut id_parts = vec![detail_type, time.as_str(), region, account];
    id_parts.extend(resources.iter().map(String::as_str));
    let id = event_id(&id_parts);
    json!({
        "version": "0",
        "id": id,
        "detail-type": detail_type,
        "source": source,
        "account": account,
        "time": time,
        "region": region,
        "resources": resources,
        "detail": detail,
    })
    .to_string()
}

/// `EC2 Spot Instance Interruption Warning`: EC2 terminates the instance
/// two minutes after `time`.
pub fn spot_interruption(
    instance_id: &str,
    region: &str,
    account: &str,
    time: Timestamp,
) -> String {
    envelope(
        SOURCE_EC2,
        DETAIL_TYPE_SPOT_INTERRUPTION,
        region,
        account,
        time,
        vec![instance_arn(instance_id, region, account)],
        json!({"instance-id": instance_id, "instance-action": "terminate"}),
    )
}

/// `EC2 Instance Rebalance Recommendation`.
pub fn rebalance_recommendation(
    instance_id: &str,
    region: &str,
    account: &str,
    time: Timestamp,
) -> String {
    envelope(
        SOURCE_EC2,
        DETAIL_TYPE_REBALANCE,
        region,
        account,
        time,
        vec![instance_arn(instance_id, region, account)],
        json!({"instance-id": instance_id}),
    )
}

/// `EC2 Instance State-change Notification` for any state (the parser
/// acts on stopping, stopped, shutting-down and terminated).
pub fn state_change(
    instance_id: &str,
    state: InstanceState,
    region: &str,
    account: &str,
    time: Timestamp,
) -> String {
    envelope(
        SOURCE_EC2,
        DETAIL_TYPE_STATE_CHANGE,
        region,
        account,
        time,
        vec![instance_arn(instance_id, region, account)],
        json!({"instance-id": instance_id, "state": state.as_str()}),
    )
}

/// The date format of AWS Health's `startTime`, `endTime` and
/// `lastUpdatedTime` (`Sat, 05 Jun 2021 15:10:09 GMT`).
fn health_date(t: Timestamp) -> String {
    t.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// `AWS Health Event`: an EC2 scheduled change (an instance retirement,
/// `upcoming`) for the instances, announced at `time` for two weeks later.
pub fn scheduled_change(
    instance_ids: &[&str],
    region: &str,
    account: &str,
    time: Timestamp,
) -> String {
    const CODE: &str = "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED";
    let start = time
        .checked_add(SCHEDULED_CHANGE_NOTICE)
        .unwrap_or(Timestamp::MAX);
    let time_text = format_rfc3339(time);
    let mut id_parts = vec![CODE, time_text.as_str(), region, account];
    id_parts.extend(instance_ids.iter().copied());
    let suffix = event_id(&id_parts).replace('-', "");
    let event_arn = format!(
        "arn:{}:health:{region}::event/EC2/{CODE}/{CODE}_{suffix}",
        partition(region)
    );
    let entities: Vec<Value> = instance_ids
        .iter()
        .map(|id| json!({"entityValue": id}))
        .collect();
    envelope(
        SOURCE_HEALTH,
        DETAIL_TYPE_HEALTH,
        region,
        account,
        time,
        instance_ids.iter().map(|id| (*id).to_string()).collect(),
        json!({
            "eventArn": event_arn,
            "service": "EC2",
            "eventTypeCode": CODE,
            "eventTypeCategory": "scheduledChange",
            "eventScopeCode": "ACCOUNT_SPECIFIC",
            "communicationId": suffix,
            "startTime": health_date(start),
            "lastUpdatedTime": health_date(time),
            "statusCode": "upcoming",
            "eventRegion": region,
            "eventDescription": [{
                "language": "en_US",
                "latestDescription": "EC2 has detected degradation of the underlying hardware hosting your instance. The instance is scheduled for retirement.",
            }],
            "affectedEntities": entities,
            "affectedAccount": account,
        }),
    )
}
