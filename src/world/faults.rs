//! Faults on demand for the served API: latency, error statuses (429
//! with `Retry-After`, 500, 503), dropped watch streams and writes that
//! time out after they were applied. Each rule matches requests by verb
//! and resource, and fires for every match or for its first `times`.

use std::sync::Mutex;
use std::time::Duration;

use crate::timing::parse_go_duration;

/// One fault.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultRule {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or
    /// `evict`; empty: every verb.
    pub verbs: Vec<String>,
    /// Plural resource names, with a subresource as `pods/eviction`;
    /// empty: every resource.
    pub resources: Vec<String>,
    /// Added before the request is handled.
    pub latency: Option<Duration>,
    /// Answer with this status instead of handling the request.
    pub status: Option<u16>,
    /// With `status`: the `Retry-After` header and
    /// `details.retryAfterSeconds`.
    pub retry_after: Option<u32>,
    /// A watch stream ends this long after it starts, without a final
    /// event, as a dropped connection does.
    pub drop_watch_after: Option<Duration>,
    /// A write is applied, then answered with 504 after this long.
    pub write_timeout: Option<Duration>,
    /// How many matching requests the rule hits; `None`: all.
    pub times: Option<u32>,
}

impl FaultRule {
    /// Parses `key=value,...`: `verb`, `resource` (each repeatable, or
    /// `|`-separated), `latency`, `status`, `retryAfter`, `dropWatchAfter`,
    /// `writeTimeout`, `times`.
    pub fn parse(spec: &str) -> Result<FaultRule, String> {
        let mut rule = FaultRule::default();
        let duration = |key: &str, v: &str| match parse_go_duration(v) {
            Ok(ns) if ns >= 0 => Ok(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))),
            Ok(_) => Err(format!("fault {key}={v:?} is negative")),
            Err(e) => Err(format!("fault {key}: {e}")),
        };
        for term in spec.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (key, value) = term
                .split_once('=')
                .ok_or_else(|| format!("fault term {term:?} is not key=value"))?;
            let value = value.trim();
            let number = |what: &str| {
                value
                    .parse::<u32>()
                    .map_err(|_| format!("fault {what}={value:?} is not a whole number"))
            };
            match key.trim() {
                "verb" => rule.verbs.extend(value.split('|').map(String::from)),
                "resource" => rule.resources.extend(value.split('|').map(String::from)),
                "latency" => rule.latency = Some(duration(key, value)?),
                "status" => {
                    let code = number("status")?;
                    if !(400..=599).contains(&code) {
                        return Err(format!("fault status={code} is not an error status"));
                    }
                    rule.status = Some(code as u16);
                }
                "retryAfter" => rule.retry_after = Some(number("retryAfter")?),
                "dropWatchAfter" => rule.drop_watch_after = Some(duration(key, value)?),
                "writeTimeout" => rule.write_timeout = Some(duration(key, value)?),
                "times" => rule.times = Some(number("times")?),
                other => {
                    return Err(format!(
                        "unknown fault key {other:?}: expected verb, resource, latency, status, retryAfter, dropWatchAfter, writeTimeout or times"
                    ));
                }
            }
        }
        for v in &rule.verbs {
            if !VERBS.contains(&v.as_str()) {
                return Err(format!(
                    "unknown fault verb {v:?}: expected one of {VERBS:?}"
                ));
            }
        }
        if rule.latency.is_none()
            && rule.status.is_none()
            && rule.drop_watch_after.is_none()
            && rule.write_timeout.is_none()
        {
            return Err(format!(
                "fault {spec:?} does nothing: give latency, status, dropWatchAfter or writeTimeout"
            ));
        }
        Ok(rule)
    }

    fn matches(&self, verb: &str, resource: &str) -> bool {
        (self.verbs.is_empty() || self.verbs.iter().any(|v| v == verb))
            && (self.resources.is_empty() || self.resources.iter().any(|r| r == resource))
    }
}

const VERBS: [&str; 8] = [
    "get", "list", "watch", "create", "update", "patch", "delete", "evict",
];

/// What the armed faults do to one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effect {
    pub latency: Duration,
    pub status: Option<(u16, Option<u32>)>,
    pub drop_watch_after: Option<Duration>,
    pub write_timeout: Option<Duration>,
}

/// The armed faults.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<(FaultRule, u32)>>,
}

impl Faults {
    pub fn new(rules: Vec<FaultRule>) -> Faults {
        Faults {
            rules: Mutex::new(rules.into_iter().map(|r| (r, 0)).collect()),
        }
    }

    /// The effect on a request, counting it against each matching rule.
    pub fn hit(&self, verb: &str, resource: &str) -> Effect {
        let mut rules = self
            .rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut effect = Effect::default();
        for (rule, hits) in rules.iter_mut() {
            if !rule.matches(verb, resource) || rule.times.is_some_and(|t| *hits >= t) {
                continue;
            }
            *hits += 1;
            effect.latency += rule.latency.unwrap_or_default();
            if effect.status.is_none() {
                effect.status = rule.status.map(|s| (s, rule.retry_after));
            }
            effect.drop_watch_after = effect.drop_watch_after.or(rule.drop_watch_after);
            effect.write_timeout = effect.write_timeout.or(rule.write_timeout);
        }
        effect
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_fire_as_often_as_armed() {
        let rule =
            FaultRule::parse("verb=evict,resource=pods/eviction,status=429,retryAfter=2,times=2")
                .unwrap();
        let faults = Faults::new(vec![rule]);
        assert_eq!(
            faults.hit("evict", "pods/eviction").status,
            Some((429, Some(2)))
        );
        assert_eq!(faults.hit("get", "pods").status, None);
        assert!(faults.hit("evict", "pods/eviction").status.is_some());
        assert_eq!(faults.hit("evict", "pods/eviction").status, None);
        let slow = FaultRule::parse("resource=nodes|pods,latency=250ms").unwrap();
        assert_eq!(slow.resources, ["nodes", "pods"]);
        assert_eq!(slow.latency, Some(Duration::from_millis(250)));
        for bad in [
            "status=200",
            "verb=explode,status=500",
            "resource=pods",
            "nonsense",
        ] {
            assert!(FaultRule::parse(bad).is_err(), "{bad}");
        }
    }
}
