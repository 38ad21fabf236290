//! EventBridge events as they arrive on the interruption queue, and the
//! parser that turns a message body into a typed [`Message`].
//!
//! Pure: no I/O, no clock. The parser is bounded: a body larger than an
//! EventBridge event can be is refused before it is read, serde_json's
//! recursion limit bounds nesting, and no input makes it panic (a property
//! test feeds it arbitrary bytes and mutated events).
//!
//! Bodies over `MAX_MESSAGE_BYTES` (256 KiB) and malformed ones are typed
//! errors; events of other kinds are ignored by kind (`IgnoredKind`).

use std::collections::HashSet;

use serde::Deserialize;

use crate::clock::{ClockError, Timestamp, parse_rfc3339};

/// The largest body accepted: an EventBridge event is at most 256 KiB, as
/// is an SQS message by default, so anything larger is not one of ours.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// How much of an offending value an error message repeats.
const MAX_QUOTED_CHARS: usize = 64;

/// The longest instance id accepted after `i-` (EC2 uses 8 or 17 hex digits).
const MAX_INSTANCE_ID_CHARS: usize = 32;

/// The EventBridge source of EC2 events.
pub const SOURCE_EC2: &str = "aws.ec2";
/// The EventBridge source of AWS Health events.
pub const SOURCE_HEALTH: &str = "aws.health";
pub const DETAIL_TYPE_SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
pub const DETAIL_TYPE_REBALANCE: &str = "EC2 Instance Rebalance Recommendation";
pub const DETAIL_TYPE_STATE_CHANGE: &str = "EC2 Instance State-change Notification";
pub const DETAIL_TYPE_HEALTH: &str = "AWS Health Event";

/// The EventBridge envelope every event shares. `detail` is read by the
/// parser of the `source` and `detail-type` it names.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Envelope {
    /// `"0"` today; some documented examples leave it out.
    #[serde(default)]
    pub version: Option<String>,
    pub id: String,
    pub source: String,
    #[serde(rename = "detail-type")]
    pub detail_type: String,
    /// RFC 3339, when EventBridge received the event.
    pub time: String,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    /// ARNs of the resources concerned (may be absent or empty).
    #[serde(default)]
    pub resources: Option<Vec<String>>,
    pub detail: serde_json::Value,
}

/// The kinds of event dovetail acts on, spelled as the `interrupt` step of
/// a scenario names them (`../shared/CONVENTIONS.md`); the same spelling is
/// the `message_type` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    SpotInterruption,
    Rebalance,
    ScheduledChange,
    StateChange,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::SpotInterruption,
        Kind::Rebalance,
        Kind::ScheduledChange,
        Kind::StateChange,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SpotInterruption => "spot-interruption",
            Kind::Rebalance => "rebalance",
            Kind::ScheduledChange => "scheduled-change",
            Kind::StateChange => "state-change",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The EC2 instance states a state-change notification reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InstanceState {
    Pending,
    Running,
    Stopping,
    Stopped,
    ShuttingDown,
    Terminated,
}

impl InstanceState {
    pub const ALL: [InstanceState; 6] = [
        InstanceState::Pending,
        InstanceState::Running,
        InstanceState::Stopping,
        InstanceState::Stopped,
        InstanceState::ShuttingDown,
        InstanceState::Terminated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::Stopping => "stopping",
            InstanceState::Stopped => "stopped",
            InstanceState::ShuttingDown => "shutting-down",
            InstanceState::Terminated => "terminated",
        }
    }

    /// The state named `s`, as EC2 spells it.
    pub fn parse(s: &str) -> Option<InstanceState> {
        InstanceState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
    }

    /// Whether the instance is going away: stopping, stopped, shutting down
    /// or terminated. Its NodeClaim is then deleted.
    pub fn is_leaving(self) -> bool {
        !matches!(self, InstanceState::Pending | InstanceState::Running)
    }
}

impl std::fmt::Display for InstanceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an event says, for the kinds dovetail acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    /// EC2 reclaims a spot instance in two minutes (at once when it
    /// hibernates). `action` is `instance-action`: `terminate`, `stop` or
    /// `hibernate`, when the event says.
    SpotInterruption {
        instance_id: String,
        action: Option<String>,
    },
    /// The risk that EC2 reclaims a spot instance has risen.
    Rebalance { instance_id: String },
    /// An AWS Health scheduled change for EC2 (retirement, maintenance).
    /// `instance_ids` are the affected entities that are instance ids, in
    /// the event's order without repeats.
    ScheduledChange {
        instance_ids: Vec<String>,
        event_type_code: Option<String>,
    },
    /// An instance is stopping, stopped, shutting down or terminated (other
    /// states are [`IgnoredKind::StateChange`]).
    StateChange {
        instance_id: String,
        state: InstanceState,
    },
}

impl Detail {
    pub fn kind(&self) -> Kind {
        match self {
            Detail::SpotInterruption { .. } => Kind::SpotInterruption,
            Detail::Rebalance { .. } => Kind::Rebalance,
            Detail::ScheduledChange { .. } => Kind::ScheduledChange,
            Detail::StateChange { .. } => Kind::StateChange,
        }
    }

    /// The EC2 instances the event is about.
    pub fn instance_ids(&self) -> &[String] {
        match self {
            Detail::SpotInterruption { instance_id, .. }
            | Detail::Rebalance { instance_id }
            | Detail::StateChange { instance_id, .. } => std::slice::from_ref(instance_id),
            Detail::ScheduledChange { instance_ids, .. } => instance_ids,
        }
    }
}

/// An event dovetail acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The EventBridge event id.
    pub id: String,
    /// When EventBridge received the event (the envelope's `time`).
    pub time: Timestamp,
    pub detail: Detail,
}

impl Message {
    pub fn kind(&self) -> Kind {
        self.detail.kind()
    }

    /// The kind as the reference's metrics name it (its `messages.Kind`):
    /// the `message_type` of `karpenter_interruption_received_messages_total`
    /// and the `reason` of `karpenter_nodeclaims_disrupted_total` for the
    /// NodeClaims it deletes.
    pub fn metric_kind(&self) -> &'static str {
        match &self.detail {
            Detail::SpotInterruption { .. } => "spot_interrupted",
            Detail::Rebalance { .. } => "rebalance_recommendation",
            Detail::ScheduledChange { .. } => "scheduled_change",
            Detail::StateChange {
                state: InstanceState::Stopping | InstanceState::Stopped,
                ..
            } => "instance_stopped",
            Detail::StateChange { .. } => "instance_terminated",
        }
    }
}

/// Every `message_type` of `karpenter_interruption_received_messages_total`:
/// the reference's kinds of the messages dovetail acts on, and `no_op` for
/// those it ignores.
pub const METRIC_KINDS: [&str; 6] = [
    "spot_interrupted",
    "rebalance_recommendation",
    "scheduled_change",
    "instance_stopped",
    "instance_terminated",
    NO_OP,
];

/// The reference's kind of a message it does not act on.
pub const NO_OP: &str = "no_op";

/// Why a well-formed event is of no concern to dovetail. A bounded set: it
/// is the `message_type` label of the ignored messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IgnoredKind {
    /// A state change to `pending`, `running` or a state EC2 may add.
    StateChange,
    /// An AWS Health event that is not an EC2 scheduled change, or a
    /// scheduled change already closed.
    HealthEvent,
    /// Another `aws.ec2` detail type.
    Ec2Event,
    /// Any other source.
    Unknown,
}

impl IgnoredKind {
    pub const ALL: [IgnoredKind; 4] = [
        IgnoredKind::StateChange,
        IgnoredKind::HealthEvent,
        IgnoredKind::Ec2Event,
        IgnoredKind::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            IgnoredKind::StateChange => "ignored-state-change",
            IgnoredKind::HealthEvent => "ignored-health-event",
            IgnoredKind::Ec2Event => "ignored-ec2-event",
            IgnoredKind::Unknown => "ignored-unknown",
        }
    }
}

/// A well-formed event that dovetail does not act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// The EventBridge event id.
    pub id: String,
    pub kind: IgnoredKind,
}

/// A message body, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Message(Message),
    Ignored(Ignored),
}

impl Parsed {
    /// The bounded `message_type` label, as the reference spells it
    /// ([`Message::metric_kind`], or `no_op`).
    pub fn label(&self) -> &'static str {
        match self {
            Parsed::Message(m) => m.metric_kind(),
            Parsed::Ignored(_) => NO_OP,
        }
    }
}

/// Why a message body could not be decoded. Such a message is deleted
/// from the queue, never retried.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error(
        "message of {bytes} bytes is larger than an EventBridge event ({MAX_MESSAGE_BYTES} bytes)"
    )]
    TooLarge { bytes: usize },
    #[error("message is not an EventBridge event")]
    Envelope(#[source] serde_json::Error),
    #[error("invalid event time {value:?}")]
    Time {
        value: String,
        #[source]
        source: ClockError,
    },
    #[error("invalid detail in a {kind} event")]
    Detail {
        kind: Kind,
        #[source]
        source: serde_json::Error,
    },
    #[error("invalid instance id {value:?} in a {kind} event")]
    InstanceId { kind: Kind, value: String },
}

impl ParseError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ParseError::TooLarge { .. } => "too_large",
            ParseError::Envelope(_) => "envelope",
            ParseError::Time { .. } => "time",
            ParseError::Detail { .. } => "detail",
            ParseError::InstanceId { .. } => "instance_id",
        }
    }
}

#[derive(Deserialize)]
struct InstanceDetail {
    #[serde(rename = "instance-id")]
    instance_id: String,
    #[serde(rename = "instance-action", default)]
    instance_action: Option<String>,
}

#[derive(Deserialize)]
struct StateChangeDetail {
    #[serde(rename = "instance-id")]
    instance_id: String,
    state: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthDetail {
    service: String,
    event_type_category: String,
    #[serde(default)]
    event_type_code: Option<String>,
    #[serde(default)]
    status_code: Option<String>,
    #[serde(default)]
    affected_entities: Option<Vec<AffectedEntity>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AffectedEntity {
    #[serde(default)]
    entity_value: Option<String>,
}

/// Whether `s` has the form of an EC2 instance id: `i-` and up to 32 ASCII
/// letters and digits.
pub fn is_instance_id(s: &str) -> bool {
    s.strip_prefix("i-").is_some_and(|rest| {
        !rest.is_empty()
            && rest.len() <= MAX_INSTANCE_ID_CHARS
            && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// At most [`MAX_QUOTED_CHARS`] characters of `s`, for an error message.
fn quoted(s: &str) -> String {
    match s.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((end, _)) => format!("{}...", &s[..end]),
        None => s.to_string(),
    }
}

fn detail<T: serde::de::DeserializeOwned>(
    kind: Kind,
    value: serde_json::Value,
) -> Result<T, ParseError> {
    serde_json::from_value(value).map_err(|source| ParseError::Detail { kind, source })
}

fn instance_id(kind: Kind, id: String) -> Result<String, ParseError> {
    if is_instance_id(&id) {
        Ok(id)
    } else {
        Err(ParseError::InstanceId {
            kind,
            value: quoted(&id),
        })
    }
}

/// Decodes a message body: an EventBridge event of a kind dovetail acts
/// on, an event it ignores, or an error for anything else.
pub fn parse(body: &str) -> Result<Parsed, ParseError> {
    parse_bytes(body.as_bytes())
}

/// [`parse`] for a body that may not be UTF-8 (that is an error).
pub fn parse_bytes(body: &[u8]) -> Result<Parsed, ParseError> {
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(ParseError::TooLarge { bytes: body.len() });
    }
    let envelope: Envelope = serde_json::from_slice(body).map_err(ParseError::Envelope)?;
    classify(envelope)
}

/// Selects the parser of the envelope's source and detail type.
pub fn classify(envelope: Envelope) -> Result<Parsed, ParseError> {
    let Envelope {
        id,
        source,
        detail_type,
        time,
        detail: raw,
        ..
    } = envelope;
    let ignored = |kind| {
        Ok(Parsed::Ignored(Ignored {
            id: id.clone(),
            kind,
        }))
    };
    let detail = match (source.as_str(), detail_type.as_str()) {
        (SOURCE_EC2, DETAIL_TYPE_SPOT_INTERRUPTION) => {
            let kind = Kind::SpotInterruption;
            let d: InstanceDetail = detail(kind, raw)?;
            Detail::SpotInterruption {
                instance_id: instance_id(kind, d.instance_id)?,
                action: d.instance_action,
            }
        }
        (SOURCE_EC2, DETAIL_TYPE_REBALANCE) => {
            let kind = Kind::Rebalance;
            let d: InstanceDetail = detail(kind, raw)?;
            Detail::Rebalance {
                instance_id: instance_id(kind, d.instance_id)?,
            }
        }
        (SOURCE_EC2, DETAIL_TYPE_STATE_CHANGE) => {
            let kind = Kind::StateChange;
            let d: StateChangeDetail = detail(kind, raw)?;
            let instance_id = instance_id(kind, d.instance_id)?;
            match InstanceState::parse(&d.state) {
                Some(state) if state.is_leaving() => Detail::StateChange { instance_id, state },
                _ => return ignored(IgnoredKind::StateChange),
            }
        }
        (SOURCE_HEALTH, DETAIL_TYPE_HEALTH) => {
            let d: HealthDetail = detail(Kind::ScheduledChange, raw)?;
            if d.service != "EC2"
                || d.event_type_category != "scheduledChange"
                || d.status_code.as_deref() == Some("closed")
            {
                return ignored(IgnoredKind::HealthEvent);
            }
            let mut instance_ids: Vec<String> = Vec::new();
            let mut seen = HashSet::new();
            for value in d
                .affected_entities
                .into_iter()
                .flatten()
                .filter_map(|e| e.entity_value)
            {
                // Entities of other kinds (volumes, hosts) are not ours.
                if is_instance_id(&value) && seen.insert(value.clone()) {
                    instance_ids.push(value);
                }
            }
            Detail::ScheduledChange {
                instance_ids,
                event_type_code: d.event_type_code,
            }
        }
        (SOURCE_EC2, _) => return ignored(IgnoredKind::Ec2Event),
        (SOURCE_HEALTH, _) => return ignored(IgnoredKind::HealthEvent),
        _ => return ignored(IgnoredKind::Unknown),
    };
    let time = parse_rfc3339(&time).map_err(|source| ParseError::Time {
        value: quoted(&time),
        source,
    })?;
    Ok(Parsed::Message(Message { id, time, detail }))
}
