//! The injected clock.
//!
//! Every component that needs the time asks a [`Clock`] instead of the
//! operating system, so `dovetail simulate` can run the controller on a
//! virtual clock ([`ManualClock`]) and the in-cluster controller on the wall
//! clock ([`SystemClock`]). Times are [`Timestamp`]s, the type that
//! `k8s_openapi`'s `meta/v1` `Time` wraps, so a reading can go straight into
//! an object (`Time(clock.now())`).
//!
//! `SystemClock` sleeps on tokio's timer. A `ManualClock` wakes its sleepers
//! when it is set past their deadlines; `ManualClock::run` drives a future on
//! virtual time, setting the clock to the earliest sleeper whenever the future
//! waits, as tokio's paused clock does (so the simulated EC2's call latency
//! passes in virtual time), and `ManualClock::follow_wall` makes it follow the
//! wall clock at a given speed (`simulate --serve`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An instant in UTC with nanosecond precision: the type `meta/v1` `Time` wraps.
pub use k8s_openapi::jiff::Timestamp;

/// A wait on a [`Clock`].
pub type Sleep = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>;

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;

    /// Resolves once `d` has passed on this clock: the wall clock sleeps
    /// (tokio's timer); a [`ManualClock`] wakes the sleeper when it is set
    /// to or past the deadline.
    fn sleep(&self, d: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(d))
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }

    fn sleep(&self, d: Duration) -> Sleep {
        (**self).sleep(d)
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Timestamp {
        (**self).now()
    }

    fn sleep(&self, d: Duration) -> Sleep {
        (**self).sleep(d)
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
    /// Sleepers on virtual time: deadline and id, and the waker to call
    /// when the clock reaches it.
    timers: Arc<Mutex<Timers>>,
}

#[derive(Debug, Default)]
struct Timers {
    next_id: u64,
    waiting: std::collections::BTreeMap<(Timestamp, u64), std::task::Waker>,
}

/// A [`ManualClock::sleep`] on virtual time.
struct VirtualSleep {
    clock: ManualClock,
    deadline: Timestamp,
    id: u64,
}

impl std::future::Future for VirtualSleep {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.clock.now() >= self.deadline {
            self.clock
                .timers()
                .waiting
                .remove(&(self.deadline, self.id));
            return std::task::Poll::Ready(());
        }
        self.clock
            .timers()
            .waiting
            .insert((self.deadline, self.id), cx.waker().clone());
        std::task::Poll::Pending
    }
}

impl Drop for VirtualSleep {
    fn drop(&mut self) {
        self.clock
            .timers()
            .waiting
            .remove(&(self.deadline, self.id));
    }
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
            timers: Arc::new(Mutex::new(Timers::default())),
        }
    }

    fn follows_wall(&self) -> bool {
        self.now
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .wall
            .is_some()
    }

    fn timers(&self) -> std::sync::MutexGuard<'_, Timers> {
        self.timers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The earliest deadline a sleeper waits for, if any.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.timers().waiting.keys().next().map(|(t, _)| *t)
    }

    /// Wakes the sleepers whose deadline has come.
    fn wake_due(&self) {
        let now = self.now();
        let due: Vec<std::task::Waker> = {
            let mut timers = self.timers();
            let later = timers.waiting.split_off(&(now, u64::MAX));
            std::mem::replace(&mut timers.waiting, later)
                .into_values()
                .collect()
        };
        for w in due {
            w.wake();
        }
    }

    /// Runs `fut` to completion on virtual time: whenever it waits and a
    /// sleeper is registered, the clock is set to the earliest sleeper's
    /// deadline (as tokio's paused clock auto-advances), so a future that
    /// sleeps takes virtual time and no wall time. A future waiting on
    /// anything else (or a clock that follows the wall) waits to be woken,
    /// as any future does.
    pub async fn run<F: std::future::Future>(&self, fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            loop {
                if let std::task::Poll::Ready(v) = fut.as_mut().poll(cx) {
                    return std::task::Poll::Ready(v);
                }
                match self.next_deadline() {
                    Some(t) if !self.follows_wall() => {
                        // Wakes the sleepers due; poll again at once.
                        let _ = self.set(t.max(self.now()));
                    }
                    _ => return std::task::Poll::Pending,
                }
            }
        })
        .await
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
        drop(r);
        self.wake_due();
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
        drop(r);
        self.wake_due();
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

    /// On virtual time, a sleeper that [`ManualClock::run`] (or whoever
    /// sets the clock) wakes; following the wall, a tokio sleep of `d`
    /// divided by the speed.
    fn sleep(&self, d: Duration) -> Sleep {
        let wall = self.now.lock().unwrap_or_else(PoisonError::into_inner).wall;
        if let Some((_, speed)) = wall {
            let real = if speed > 0.0 { d.div_f64(speed) } else { d };
            return Box::pin(tokio::time::sleep(real));
        }
        let now = self.now();
        let deadline = now.checked_add(d).unwrap_or(now);
        let id = {
            let mut t = self.timers();
            t.next_id += 1;
            t.next_id
        };
        Box::pin(VirtualSleep {
            clock: self.clone(),
            deadline,
            id,
        })
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
