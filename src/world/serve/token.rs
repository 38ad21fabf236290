//! `serviceaccounts/{name}/token`: a TokenRequest answered with a token
//! for the account, as `kubectl create token` asks for one.
//!
//! The served cluster authenticates no one, so its tokens are not signed
//! (`"alg": "none"`); their claims are those kube-apiserver's service
//! account tokens carry (issuer, audiences, subject, expiry, the account and
//! the object the token is bound to), so a tool that reads them sees what
//! it would see on a cluster.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::clock::Timestamp;
use crate::cluster::{ApiError, ObjectKey};

/// The issuer and default audience, as EKS's API server sets them.
const ISSUER: &str = "https://kubernetes.default.svc";
/// The API server's default and bounds of `spec.expirationSeconds`.
const DEFAULT_SECONDS: i64 = 3600;
const MIN_SECONDS: i64 = 600;
const MAX_SECONDS: i64 = 1 << 32;

/// The TokenRequest answered: `request` (JSON) for `account` (a served
/// ServiceAccount), at `now`.
pub(super) fn issue(account: &Value, request: &Value, now: Timestamp) -> Result<Value, ApiError> {
    let name = account
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let namespace = account
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let uid = account
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let invalid = |message: String| ApiError::Invalid {
        resource: "TokenRequest.authentication.k8s.io".into(),
        key: ObjectKey::new(namespace, name),
        messages: vec![message],
    };
    let spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            invalid(format!(
                "spec.expirationSeconds: Invalid value: {v}: must be an integer"
            ))
        })?,
    };
    if seconds < MIN_SECONDS {
        return Err(invalid(format!(
            "spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 minutes"
        )));
    }
    if seconds > MAX_SECONDS {
        return Err(invalid(format!(
            "spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds"
        )));
    }
    let audiences = match spec.get("audiences").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!([ISSUER]),
    };
    let issued = now.as_second();
    let expires = issued + seconds;
    let mut kubernetes = json!({
        "namespace": namespace,
        "serviceaccount": {"name": name, "uid": uid},
    });
    let bound = spec.get("boundObjectRef").filter(|b| !b.is_null()).cloned();
    if let Some(b) = &bound {
        let kind = b
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_ascii_lowercase();
        if !kind.is_empty() {
            kubernetes[kind] = json!({"name": b.get("name"), "uid": b.get("uid")});
        }
    }
    let claims = json!({
        "aud": audiences,
        "exp": expires,
        "iat": issued,
        "nbf": issued,
        "iss": ISSUER,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "kubernetes.io": kubernetes,
    });
    let token = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let expiry = Timestamp::from_second(expires).unwrap_or(now);
    let mut out_spec = json!({"audiences": audiences, "expirationSeconds": seconds});
    if let Some(b) = bound {
        out_spec["boundObjectRef"] = b;
    }
    Ok(json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": crate::clock::format_rfc3339(now),
        },
        "spec": out_spec,
        "status": {
            "token": token,
            "expirationTimestamp": crate::clock::format_rfc3339(expiry),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> Value {
        json!({"metadata": {"name": "builder", "namespace": "ci", "uid": "u-1"}})
    }

    #[test]
    fn a_token_names_the_account_and_expires_when_asked() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let out = issue(
            &account(),
            &json!({"spec": {"expirationSeconds": 600}}),
            now,
        )
        .unwrap();
        assert_eq!(out["spec"]["expirationSeconds"], 600);
        assert_eq!(out["spec"]["audiences"], json!([ISSUER]));
        assert_eq!(
            out["status"]["expirationTimestamp"],
            crate::clock::format_rfc3339(Timestamp::from_second(1_800_000_600).unwrap())
        );
        let token = out["status"]["token"].as_str().unwrap();
        let claims = token.split('.').nth(1).unwrap();
        let claims: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
        assert_eq!(claims["sub"], "system:serviceaccount:ci:builder");
        assert_eq!(claims["exp"], 1_800_000_600);
        assert_eq!(claims["kubernetes.io"]["serviceaccount"]["uid"], "u-1");
    }

    #[test]
    fn expirations_outside_the_api_servers_bounds_are_invalid() {
        let now = Timestamp::from_second(0).unwrap();
        let err = issue(&account(), &json!({"spec": {"expirationSeconds": 60}}), now).unwrap_err();
        assert!(
            err.to_string()
                .contains("may not specify a duration less than 10 minutes"),
            "{err}"
        );
        let default = issue(&account(), &Value::Null, now).unwrap();
        assert_eq!(default["spec"]["expirationSeconds"], DEFAULT_SECONDS);
    }
}
