//! The injected clock.
//!
//! Every component that needs the time asks a [`Clock`] instead of the
//! operating system, so `dovetail simulate` can run the controller on a
//! virtual clock ([`ManualClock`]) and the in-cluster controller on the wall
//! clock ([`SystemClock`]). Times are [`Timestamp`]s, the type that
//! `k8s_openapi`'s `meta/v1` `Time` wraps, so a reading can go straight into
//! an object (`Time(clock.now())`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An instant in UTC with nanosecond precision: the type `meta/v1` `Time` wraps.
pub use k8s_openapi::jiff::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// Errors from setting a [`ManualClock`] or parsing a time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    /// The clock would have gone backwards.
    #[error("clock cannot go backwards from {from} to {to}")]
    Backwards { from: Timestamp, to: Timestamp },
    /// Advancing the clock would leave the range a [`Timestamp`] can hold.
    #[error("advancing {from} by {by:?} leaves the representable range")]
    OutOfRange { from: Timestamp, by: Duration },
    /// A string is not an RFC 3339 time.
    #[error("invalid RFC 3339 time {input:?}: {reason}")]
    Parse { input: String, reason: String },
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // Built from `SystemTime` directly so this works whatever jiff
        // features other crates happen to enable.
        let (second, nanosecond) = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => (
                i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                i32::try_from(d.subsec_nanos()).unwrap_or(0),
            ),
            // A wall clock set before 1970: count backwards from the epoch.
            Err(e) => {
                let d = e.duration();
                let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                match i32::try_from(d.subsec_nanos()).unwrap_or(0) {
                    0 => (-secs, 0),
                    n => (-secs - 1, 1_000_000_000 - n),
                }
            }
        };
        Timestamp::new(second, nanosecond).unwrap_or(Timestamp::UNIX_EPOCH)
    }
}

/// A virtual clock that only moves when told to, and never backwards.
///
/// Clones share the same time, so the simulator can hold one handle and
/// give another to the controller. [`ManualClock::follow_wall`] makes it
/// run on its own at a multiple of real time (`simulate --serve`); it can
/// still be set forward.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Reading>>,
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Timestamp,
    /// While following the wall: when `at` was read, and the speed.
    wall: Option<(std::time::Instant, f64)>,
}

impl Reading {
    fn now(&self) -> Timestamp {
        match self.wall {
            None => self.at,
            Some((since, speed)) => {
                let elapsed = since.elapsed().mul_f64(speed);
                self.at.checked_add(elapsed).unwrap_or(self.at)
            }
        }
    }

    /// Re-anchors at `to`, keeping the wall mode.
    fn anchor(&mut self, to: Timestamp) {
        self.at = to;
        if let Some((since, _)) = self.wall.as_mut() {
            *since = std::time::Instant::now();
        }
    }
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(Reading {
                at: start,
                wall: None,
            })),
        }
    }

    /// From now on the clock moves by itself, `speed` times as fast as the
    /// wall clock (1.0: real time).
    pub fn follow_wall(&self, speed: f64) {
        let mut r = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        let at = r.now();
        r.at = at;
        r.wall = Some((std::time::Instant::now(), speed.max(0.0)));
    }

    /// Sets the time. Setting the current time again is allowed; an earlier
    /// time is an error and leaves the clock unchanged.
    pub fn set(&self, to: Timestamp) -> Result<(), ClockError> {
        let mut r = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        let now = r.now();
        if to < now {
            return Err(ClockError::Backwards { from: now, to });
        }
        r.anchor(to);
        Ok(())
    }

    /// Moves the time forward by `by` and returns the new time.
    pub fn advance(&self, by: Duration) -> Result<Timestamp, ClockError> {
        let mut r = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        let now = r.now();
        let next = now
            .checked_add(by)
            .map_err(|_| ClockError::OutOfRange { from: now, by })?;
        r.anchor(next);
        Ok(next)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.now
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .now()
    }
}

/// Formats a time the way Kubernetes serialises `meta/v1` `Time`: RFC 3339
/// in UTC with whole seconds (`2026-11-21T13:00:00Z`). Sub-second precision
/// is truncated.
pub fn format_rfc3339(t: Timestamp) -> String {
    truncate_to_second(t).to_string()
}

/// Parses an RFC 3339 time with any offset (`Z`, `+02:00`) and optional
/// fractional seconds.
pub fn parse_rfc3339(s: &str) -> Result<Timestamp, ClockError> {
    s.parse()
        .map_err(|e: k8s_openapi::jiff::Error| ClockError::Parse {
            input: s.to_string(),
            reason: e.to_string(),
        })
}

/// `t` without its sub-second part (towards the past), the precision the
/// API server stores `creationTimestamp` and `deletionTimestamp` with.
pub fn truncate_to_second(t: Timestamp) -> Timestamp {
    let second = if t.subsec_nanosecond() < 0 {
        t.as_second() - 1
    } else {
        t.as_second()
    };
    Timestamp::new(second, 0).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        parse_rfc3339(s).expect("valid test time")
    }

    #[test]
    fn manual_clock_advances_and_clones_share_time() {
        let clock = ManualClock::new(ts("2026-01-01T00:00:00Z"));
        let other = clock.clone();
        let t = clock.advance(Duration::from_secs(90)).expect("in range");
        assert_eq!(t, ts("2026-01-01T00:01:30Z"));
        assert_eq!(other.now(), t);
    }

    #[test]
    fn manual_clock_never_goes_backwards() {
        let clock = ManualClock::new(ts("2026-01-01T00:00:00Z"));
        clock
            .set(ts("2026-01-01T00:00:00Z"))
            .expect("same time is fine");
        clock
            .set(ts("2026-01-02T00:00:00Z"))
            .expect("forward is fine");
        let err = clock.set(ts("2026-01-01T12:00:00Z")).unwrap_err();
        assert!(matches!(err, ClockError::Backwards { .. }), "{err}");
        assert_eq!(clock.now(), ts("2026-01-02T00:00:00Z"));
    }

    #[test]
    fn a_clock_following_the_wall_moves_by_itself_and_can_be_set_forward() {
        let start = ts("2026-01-01T00:00:00Z");
        let clock = ManualClock::new(start);
        clock.follow_wall(1000.0);
        std::thread::sleep(Duration::from_millis(20));
        let t = clock.now();
        assert!(t >= ts("2026-01-01T00:00:20Z"), "{t}");
        clock.set(ts("2026-01-02T00:00:00Z")).expect("forward");
        assert!(clock.now() >= ts("2026-01-02T00:00:00Z"));
        assert!(clock.set(start).is_err());
    }

    #[test]
    fn advance_out_of_range_is_an_error_and_keeps_time() {
        let clock = ManualClock::new(Timestamp::MAX);
        let err = clock.advance(Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, ClockError::OutOfRange { .. }), "{err}");
        assert_eq!(clock.now(), Timestamp::MAX);
    }

    #[test]
    fn rfc3339_round_trip_matches_kubernetes_format() {
        let t = ts("2026-11-21T14:45:07.123456789+01:00");
        assert_eq!(format_rfc3339(t), "2026-11-21T13:45:07Z");
        assert_eq!(ts(&format_rfc3339(t)), truncate_to_second(t));
        assert!(parse_rfc3339("yesterday").is_err());
    }

    #[test]
    fn truncation_goes_towards_the_past_before_the_epoch() {
        let t = Timestamp::new(-1, -500_000_000).expect("valid");
        assert_eq!(truncate_to_second(t), Timestamp::new(-2, 0).expect("valid"));
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > ts("2020-01-01T00:00:00Z"));
    }
}
