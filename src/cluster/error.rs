//! The errors the in-memory API server returns, with the HTTP status codes
//! and reasons a real API server would use for the same failure.

use kube::core::Status;
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};

use super::ObjectKey;

/// An API request that failed.
///
/// `resource` is the plural resource name with its group, as in the real
/// API server's messages (`pods`, `nodepools.karpenter.sh`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 404: the object does not exist.
    #[error("{resource} {:?} not found", .key.name)]
    NotFound { resource: String, key: ObjectKey },
    /// 409: an object with this name already exists.
    #[error("{resource} {:?} already exists", .key.name)]
    AlreadyExists { resource: String, key: ObjectKey },
    /// 409: a stale `resourceVersion` or a mismatched precondition.
    #[error("Operation cannot be fulfilled on {resource} {:?}: {message}", .key.name)]
    Conflict {
        resource: String,
        key: ObjectKey,
        message: String,
    },
    /// 422: the object failed validation or admission. `resource` is the
    /// qualified kind (`NodePool.karpenter.sh`) as the API server names it
    /// here; each message is `field: what is wrong`, or only what is wrong.
    #[error("{resource} {:?} is invalid: {}", .key.name, invalid_list(.messages))]
    Invalid {
        resource: String,
        key: ObjectKey,
        messages: Vec<String>,
    },
    /// 400: the request itself is malformed.
    #[error("bad request: {message}")]
    BadRequest { message: String },
    /// 410: a watch asked for events that have been compacted away; relist.
    #[error("too old resource version: {requested} ({oldest})")]
    Gone { requested: u64, oldest: u64 },
    /// 429: an eviction would violate a PodDisruptionBudget (`cause`: the
    /// budget and its counts, as the `DisruptionBudget` cause of the
    /// API server's `Status` says them), or the server is overloaded.
    #[error("{message}{}", .cause.as_ref().map(|c| format!(" {c}")).unwrap_or_default())]
    TooManyRequests {
        message: String,
        cause: Option<String>,
    },
    /// 415: the request's content type is not one the resource takes
    /// (a strategic merge patch of a custom resource).
    #[error("{message}")]
    UnsupportedMediaType { message: String },
    /// 500: the server cannot handle the request, e.g. a pod covered by more
    /// than one PodDisruptionBudget.
    #[error("internal error: {message}")]
    Internal { message: String },
}

impl ApiError {
    /// The HTTP status code the API server answers with.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } => 404,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } => 409,
            ApiError::Invalid { .. } => 422,
            ApiError::BadRequest { .. } => 400,
            ApiError::Gone { .. } => 410,
            ApiError::TooManyRequests { .. } => 429,
            ApiError::UnsupportedMediaType { .. } => 415,
            ApiError::Internal { .. } => 500,
        }
    }

    /// The `reason` of the `meta/v1` `Status` the API server answers with.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::BadRequest { .. } => "BadRequest",
            ApiError::Gone { .. } => "Expired",
            ApiError::TooManyRequests { .. } => "TooManyRequests",
            ApiError::UnsupportedMediaType { .. } => "UnsupportedMediaType",
            ApiError::Internal { .. } => "InternalError",
        }
    }

    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } => "not_found",
            ApiError::AlreadyExists { .. } => "already_exists",
            ApiError::Conflict { .. } => "conflict",
            ApiError::Invalid { .. } => "invalid",
            ApiError::BadRequest { .. } => "bad_request",
            ApiError::Gone { .. } => "gone",
            ApiError::TooManyRequests { .. } => "too_many_requests",
            ApiError::UnsupportedMediaType { .. } => "unsupported_media_type",
            ApiError::Internal { .. } => "internal",
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::NotFound { .. })
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, ApiError::Conflict { .. })
    }
}

impl From<ApiError> for Status {
    /// The `meta/v1` `Status` a real API server would answer with, so code
    /// written against kube can treat both servers' errors alike.
    fn from(e: ApiError) -> Status {
        let details = match &e {
            ApiError::NotFound { resource, key }
            | ApiError::AlreadyExists { resource, key }
            | ApiError::Conflict { resource, key, .. } => Some(details(resource, key, Vec::new())),
            ApiError::Invalid {
                resource,
                key,
                messages,
            } => {
                let causes = messages.iter().map(|m| cause(m)).collect();
                Some(details(resource, key, causes))
            }
            ApiError::TooManyRequests {
                cause: Some(cause), ..
            } => Some(StatusDetails {
                causes: vec![StatusCause {
                    reason: "DisruptionBudget".into(),
                    message: cause.clone(),
                    field: String::new(),
                }],
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                retry_after_seconds: 0,
            }),
            _ => None,
        };
        let message = match &e {
            ApiError::TooManyRequests { message, .. } | ApiError::BadRequest { message } => {
                message.clone()
            }
            _ => e.to_string(),
        };
        Status {
            status: Some(StatusSummary::Failure),
            code: e.code(),
            message,
            reason: e.reason().into(),
            details,
            metadata: None,
        }
    }
}

impl From<ApiError> for kube::Error {
    fn from(e: ApiError) -> kube::Error {
        kube::Error::Api(Box::new(Status::from(e)))
    }
}

/// The messages of a validation failure as the API server lists them:
/// one alone, several in brackets.
fn invalid_list(messages: &[String]) -> String {
    match messages {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The `StatusCause` of one validation message, `field: what is wrong`: the
/// field named as the API server names it, and the reason of its kind of
/// error (a missing field is `FieldValueRequired` at the field itself).
fn cause(message: &str) -> StatusCause {
    let (field, what) = match message.split_once(": ") {
        Some((field, what)) if field.is_empty() || is_field_path(field) => (field, what),
        _ => ("", message),
    };
    let required = what
        .strip_prefix("missing required field `")
        .and_then(|m| m.strip_suffix('`'));
    let (field, reason) = match required {
        Some(name) if field.is_empty() => (name.to_string(), "FieldValueRequired"),
        Some(name) => (format!("{field}.{name}"), "FieldValueRequired"),
        None if what.starts_with("Required value") => (field.to_string(), "FieldValueRequired"),
        None if what.starts_with("Forbidden") => (field.to_string(), "FieldValueForbidden"),
        None if what.contains(" is not one of ") || what.starts_with("Unsupported value") => {
            (field.to_string(), "FieldValueNotSupported")
        }
        None if what.starts_with("expected ") && what.contains(", found ") => {
            (field.to_string(), "FieldValueTypeInvalid")
        }
        None => (field.to_string(), "FieldValueInvalid"),
    };
    StatusCause {
        reason: reason.into(),
        message: what.to_string(),
        field,
    }
}

/// Whether `s` reads as a field path (`spec.template.spec.requirements[0].key`,
/// `metadata.labels["a/b"]`), not prose.
fn is_field_path(s: &str) -> bool {
    let head = s.split('[').next().unwrap_or_default();
    head.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && !head.contains(char::is_whitespace)
}

fn details(resource: &str, key: &ObjectKey, causes: Vec<StatusCause>) -> StatusDetails {
    let (kind, group) = resource.split_once('.').unwrap_or((resource, ""));
    StatusDetails {
        name: key.name.clone(),
        group: group.into(),
        kind: kind.into(),
        uid: String::new(),
        causes,
        retry_after_seconds: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_reasons_and_messages_follow_the_api_server() {
        let key = ObjectKey::new("default", "web-1");
        let e = ApiError::NotFound {
            resource: "pods".into(),
            key: key.clone(),
        };
        assert_eq!(
            (e.code(), e.reason(), e.metric_label()),
            (404, "NotFound", "not_found")
        );
        assert_eq!(e.to_string(), "pods \"web-1\" not found");
        let e = ApiError::Invalid {
            resource: "NodePool.karpenter.sh".into(),
            key,
            messages: vec!["a".into(), "b".into()],
        };
        assert_eq!((e.code(), e.reason()), (422, "Invalid"));
        assert_eq!(
            e.to_string(),
            "NodePool.karpenter.sh \"web-1\" is invalid: [a, b]"
        );
        let e = ApiError::Gone {
            requested: 3,
            oldest: 9,
        };
        assert_eq!((e.code(), e.reason()), (410, "Expired"));
    }

    /// Each cause names its field, as the API server's do, so a client
    /// can tell which field is wrong (found against a real API server,
    /// tests/differential).
    #[test]
    fn an_invalid_object_names_the_kind_and_each_field() {
        let e = ApiError::Invalid {
            resource: "NodePool.karpenter.sh".into(),
            key: ObjectKey::cluster("web"),
            messages: vec![
                "spec.weight: 1000 is greater than the maximum of 100".into(),
                "spec.template.spec: missing required field `requirements`".into(),
                "spec.disruption.consolidationPolicy: \"x\" is not one of \"WhenEmpty\"".into(),
                "spec.limits[\"cpu\"]: expected string, found integer 1".into(),
                "spec.tags.eks:eks-cluster-name: tag contains a restricted tag".into(),
                "a message without a field".into(),
            ],
        };
        let status = Status::from(e);
        assert_eq!(
            status.message,
            "NodePool.karpenter.sh \"web\" is invalid: [spec.weight: 1000 is greater than the maximum of 100, spec.template.spec: missing required field `requirements`, spec.disruption.consolidationPolicy: \"x\" is not one of \"WhenEmpty\", spec.limits[\"cpu\"]: expected string, found integer 1, spec.tags.eks:eks-cluster-name: tag contains a restricted tag, a message without a field]"
        );
        let details = status.details.expect("details");
        assert_eq!(
            (details.kind.as_str(), details.group.as_str()),
            ("NodePool", "karpenter.sh")
        );
        let causes: Vec<(&str, &str, &str)> = details
            .causes
            .iter()
            .map(|c| (c.field.as_str(), c.reason.as_str(), c.message.as_str()))
            .collect();
        assert_eq!(
            causes,
            [
                (
                    "spec.weight",
                    "FieldValueInvalid",
                    "1000 is greater than the maximum of 100"
                ),
                (
                    "spec.template.spec.requirements",
                    "FieldValueRequired",
                    "missing required field `requirements`"
                ),
                (
                    "spec.disruption.consolidationPolicy",
                    "FieldValueNotSupported",
                    "\"x\" is not one of \"WhenEmpty\""
                ),
                (
                    "spec.limits[\"cpu\"]",
                    "FieldValueTypeInvalid",
                    "expected string, found integer 1"
                ),
                (
                    "spec.tags.eks:eks-cluster-name",
                    "FieldValueInvalid",
                    "tag contains a restricted tag"
                ),
                ("", "FieldValueInvalid", "a message without a field"),
            ]
        );
    }

    #[test]
    fn converts_to_the_status_kube_clients_see() {
        let e = ApiError::Conflict {
            resource: "nodeclaims.karpenter.sh".into(),
            key: ObjectKey::cluster("default-abcde"),
            message: "the object has been modified".into(),
        };
        let kube::Error::Api(status) = kube::Error::from(e.clone()) else {
            panic!("an API error converts to kube::Error::Api");
        };
        assert_eq!(status.code, 409);
        assert_eq!(status.reason, "Conflict");
        assert_eq!(status.message, e.to_string());
        let details = status.details.expect("named object");
        assert_eq!(
            (
                details.name.as_str(),
                details.kind.as_str(),
                details.group.as_str()
            ),
            ("default-abcde", "nodeclaims", "karpenter.sh")
        );
    }
}
