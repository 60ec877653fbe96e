//! Global permits against a real `redis-server`, one private server per test.

use std::collections::BTreeSet;
use std::future::Future;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::lease::{Confirmed, LeaseState};
use super::permits::{Holding, MAX_LEASE_MS, REDIS_TIMEOUT, Renewal, TryAcquire};
use super::*;

/// A guard against a hang: every test here ends well within it.
const TEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Between probes of a lease that has not lapsed yet; the probe's answer, not this pace,
/// decides when a probing loop ends.
const PROBE_PACE: Duration = Duration::from_millis(5);

/// Whether a `redis-server` executable is on `PATH`, for tests that need one to skip cleanly.
fn redis_server_available() -> bool {
    let Some(paths) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&paths).any(|dir| {
        std::fs::metadata(dir.join("redis-server"))
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    })
}

/// Starts a private Redis, or prints one line and returns `None` when `redis-server` is missing.
async fn redis_or_skip(test: &str) -> Option<LocalRedis> {
    if !redis_server_available() {
        let _ = writeln!(
            std::io::stderr(),
            "skipped {test}: redis-server is not on PATH"
        );
        return None;
    }
    Some(
        LocalRedis::start()
            .await
            .expect("redis-server is on PATH, so a private one starts"),
    )
}

/// Fails the test instead of hanging it.
async fn guarded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .expect("the test finished within its guard")
}

fn holder(replica: &str, request: &str) -> Holder {
    Holder::new(replica, request).expect("test names are valid")
}

fn names(holdings: &[Holding]) -> BTreeSet<String> {
    holdings.iter().map(|h| h.holder.to_string()).collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

async fn connect(redis: &LocalRedis, run: &str, capacity: u32, lease: Lease) -> GlobalPermits {
    GlobalPermits::connect(redis.url(), Some(redis.password()), run, capacity, lease)
        .await
        .expect("the private Redis accepts connections")
}

/// An admission at Redis time `at_ms`, its lease ending at `expires_at_ms`, as if its request
/// had been sent `ago` before now by this process's clock.
fn confirmed_ago(at_ms: u64, expires_at_ms: u64, ago: Duration) -> Confirmed {
    let sent = tokio::time::Instant::now().checked_sub(ago);
    Confirmed {
        at_ms,
        expires_at_ms: Some(expires_at_ms),
        sent: sent.expect("the clock has run for longer than the time asked for"),
    }
}

/// One permit, no lease, giving up on each command within 200 ms once set up.
async fn impatient(redis: &LocalRedis, run: &str) -> GlobalPermits {
    GlobalPermits::connect_within(
        redis.url(),
        Some(redis.password()),
        run,
        1,
        Lease::None,
        Duration::from_millis(200),
    )
    .await
    .expect("the private Redis accepts connections")
}

async fn admitted(permits: &GlobalPermits, who: &Holder) -> Option<u64> {
    match permits.try_acquire(who).await.expect("Redis answers") {
        TryAcquire::Admitted { expires_at_ms, .. } => expires_at_ms,
        refused => panic!("expected {who} to be admitted, got {refused:?}"),
    }
}

async fn refused(permits: &GlobalPermits, who: &Holder) -> (u64, Vec<Holding>) {
    match permits.try_acquire(who).await.expect("Redis answers") {
        TryAcquire::Refused { at_ms, holders } => (at_ms, holders),
        admitted => panic!("expected {who} to be refused, got {admitted:?}"),
    }
}

/// A connection of the test's own, beside the module's.
async fn own_connection(redis: &LocalRedis) -> redis::aio::MultiplexedConnection {
    let client = super::permits::client(redis.url(), Some(redis.password()));
    let client = client.expect("a TCP address is a valid client");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("the private Redis accepts connections")
}

/// Every key of `run`, read with a connection of its own.
async fn keys_of_run(redis: &LocalRedis, run: &str) -> Vec<String> {
    let mut conn = own_connection(redis).await;
    redis::cmd("KEYS")
        .arg(format!("isolation-lab:{{{run}}}:*"))
        .query_async(&mut conn)
        .await
        .expect("KEYS answers")
}

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The private server serves only who has its password, which is on no command line: a
/// connection without it is refused every command, and `/proc/PID/cmdline` (readable by every
/// user) does not hold it.
#[tokio::test]
async fn the_private_server_asks_for_a_password_no_command_line_shows() {
    let test = "the_private_server_asks_for_a_password_no_command_line_shows";
    let Some(redis) = redis_or_skip(test).await else {
        return;
    };
    guarded(async {
        let stranger = super::permits::client(redis.url(), None).expect("a client");
        let mut stranger = (stranger.get_multiplexed_async_connection().await)
            .expect("the port accepts a connection");
        let keys: Result<Vec<String>, _> =
            redis::cmd("KEYS").arg("*").query_async(&mut stranger).await;
        let refused = keys.expect_err("a stranger is refused");
        assert!(refused.to_string().contains("NOAUTH"), "{refused}");
        let mut own = own_connection(&redis).await;
        let pong: String = redis::cmd("PING")
            .query_async(&mut own)
            .await
            .expect("PING");
        assert_eq!(pong, "PONG");
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", redis.pid())).expect("cmdline");
        let password = redis.password().as_str().as_bytes();
        assert!(!cmdline.windows(password.len()).any(|w| w == password));
        assert_eq!(format!("{:?}", redis.password()), "Password(..)");
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// A Redis that asks for a password the lab does not have is named in one sentence, not once
/// for each command the lab would have sent.
#[tokio::test]
async fn a_redis_that_asks_for_a_password_is_named_once() {
    let test = "a_redis_that_asks_for_a_password_is_named_once";
    let Some(redis) = redis_or_skip(test).await else {
        return;
    };
    guarded(async {
        let connected = GlobalPermits::connect(redis.url(), None, "nokey", 2, Lease::None).await;
        let Err(refused) = connected else {
            panic!("connected without the password");
        };
        let said = refused.to_string();
        assert_eq!(
            said,
            "connecting: that Redis asks for a password (NOAUTH), and the lab gives one only to \
             the Redis it starts itself (--global local)"
        );
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// With capacity 2, exactly the first 2 of 5 holders are admitted, and each refusal names both
/// holders with their lease ends.
#[tokio::test]
async fn capacity_two_admits_two_of_five() {
    let Some(redis) = redis_or_skip("capacity_two_admits_two_of_five").await else {
        return;
    };
    guarded(async {
        let permits = connect(&redis, "cap", 2, Lease::Millis(60_000)).await;
        let shown = format!("{permits:?}");
        assert!(
            shown.contains(r#"run: "cap""#) && shown.contains("capacity: 2"),
            "{shown}"
        );
        let mut admitted_at = Vec::new();
        let mut refusals = Vec::new();
        for n in 1..=5 {
            let who = holder("r1", &format!("S{n}"));
            match permits.try_acquire(&who).await.expect("Redis answers") {
                TryAcquire::Admitted {
                    at_ms,
                    expires_at_ms,
                    ..
                } => {
                    assert_eq!(expires_at_ms, Some(at_ms + 60_000), "lease from Redis time");
                    admitted_at.push(who.to_string());
                }
                TryAcquire::Refused { at_ms, holders } => {
                    for h in &holders {
                        let expiry = h.expires_at_ms.expect("leased holders have an expiry");
                        assert!(expiry > at_ms, "a named holder is live: {h:?} at {at_ms}");
                    }
                    refusals.push(names(&holders));
                }
            }
        }
        assert_eq!(admitted_at, ["r1/S1", "r1/S2"]);
        assert_eq!(refusals, vec![set(&["r1/S1", "r1/S2"]); 3]);
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// A release frees a permit for the next holder at once; releasing again finds nothing held.
#[tokio::test]
async fn release_admits_the_next() {
    let Some(redis) = redis_or_skip("release_admits_the_next").await else {
        return;
    };
    guarded(async {
        let permits = connect(&redis, "rel", 2, Lease::None).await;
        let (s1, s2, s3) = (holder("r1", "S1"), holder("r2", "S2"), holder("r1", "S3"));
        admitted(&permits, &s1).await;
        admitted(&permits, &s2).await;
        refused(&permits, &s3).await;
        assert!(permits.release(&s1).await.expect("Redis answers"));
        assert!(!permits.release(&s1).await.expect("Redis answers"));
        admitted(&permits, &s3).await;
        let (_, holders) = permits.holders().await.expect("Redis answers");
        assert_eq!(names(&holders), set(&["r2/S2", "r1/S3"]));
        let (_, holders) = refused(&permits, &s1).await;
        assert_eq!(names(&holders), set(&["r2/S2", "r1/S3"]));
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// A holder that already holds a permit cannot be admitted twice.
#[tokio::test]
async fn a_holder_is_admitted_once() {
    let Some(redis) = redis_or_skip("a_holder_is_admitted_once").await else {
        return;
    };
    guarded(async {
        let permits = connect(&redis, "twice", 2, Lease::None).await;
        let s1 = holder("r1", "S1");
        admitted(&permits, &s1).await;
        match permits.try_acquire(&s1).await {
            Err(GlobalError::AlreadyHeld(h)) => assert_eq!(h, s1),
            other => panic!("expected AlreadyHeld, got {other:?}"),
        }
        let (_, holders) = permits.holders().await.expect("Redis answers");
        assert_eq!(names(&holders), set(&["r1/S1"]));
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// Two replicas of one run share one limit; a replica given other settings is refused at
/// connect; another run has its own limit.
#[tokio::test]
async fn replicas_share_one_limit() {
    let Some(redis) = redis_or_skip("replicas_share_one_limit").await else {
        return;
    };
    guarded(async {
        let r1 = connect(&redis, "shared", 2, Lease::Millis(60_000)).await;
        let r2 = connect(&redis, "shared", 2, Lease::Millis(60_000)).await;
        admitted(&r1, &holder("r1", "S1")).await;
        admitted(&r2, &holder("r2", "S1")).await;
        let (_, holders) = refused(&r1, &holder("r1", "S2")).await;
        assert_eq!(names(&holders), set(&["r1/S1", "r2/S1"]));
        for (capacity, lease) in [(3, Lease::Millis(60_000)), (2, Lease::None)] {
            match GlobalPermits::connect(
                redis.url(),
                Some(redis.password()),
                "shared",
                capacity,
                lease,
            )
            .await
            {
                Err(GlobalError::Mismatch { recorded, .. }) => {
                    assert_eq!(recorded, "capacity 2, 60000 ms");
                }
                other => panic!("expected a mismatch, got {other:?}"),
            }
        }
        let other_run = connect(&redis, "other", 1, Lease::None).await;
        admitted(&other_run, &holder("r1", "S2")).await;
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// An unrenewed lease lapses: the next holder is refused, naming it, until Redis time reaches
/// its expiry, and then admitted.
#[tokio::test]
async fn a_lease_expires_and_the_next_is_admitted() {
    let Some(redis) = redis_or_skip("a_lease_expires_and_the_next_is_admitted").await else {
        return;
    };
    guarded(async {
        let permits = connect(&redis, "expiry", 1, Lease::Millis(200)).await;
        let (a, b) = (holder("r1", "S1"), holder("r2", "S2"));
        let expiry = admitted(&permits, &a).await.expect("a leased admission");
        let mut pace = tokio::time::interval(PROBE_PACE);
        let mut refusals = 0;
        let admitted_at = loop {
            pace.tick().await;
            match permits.try_acquire(&b).await.expect("Redis answers") {
                TryAcquire::Refused { at_ms, holders } => {
                    assert!(
                        at_ms < expiry,
                        "refused at {at_ms}, after {a}'s expiry {expiry}"
                    );
                    assert_eq!(names(&holders), set(&["r1/S1"]));
                    refusals += 1;
                }
                TryAcquire::Admitted { at_ms, .. } => break at_ms,
            }
        };
        assert!(refusals > 0, "the first probe came before the lease lapsed");
        assert!(
            admitted_at >= expiry,
            "admitted at {admitted_at} < expiry {expiry}"
        );
        assert!(
            !permits.release(&a).await.expect("Redis answers"),
            "{a} lost its lease"
        );
        let renewal = permits.renew(&a).await.expect("Redis answers");
        assert!(
            matches!(renewal, Renewal::Lost { at_ms } if at_ms >= admitted_at),
            "a lapsed lease must not renew: {renewal:?}"
        );
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// A held lease is renewed every third of the lease: past the end of its first lease another
/// holder is still refused, naming it; released, the permit is free at once.
#[tokio::test]
async fn renewal_keeps_a_lease_alive() {
    let Some(redis) = redis_or_skip("renewal_keeps_a_lease_alive").await else {
        return;
    };
    guarded(async {
        const LEASE: u64 = 300;
        let permits = connect(&redis, "renew", 1, Lease::Millis(LEASE)).await;
        assert_eq!(permits.lease(), Lease::Millis(LEASE));
        let b = holder("r2", "S2");
        let held: HeldLease = match permits
            .try_hold(holder("r1", "S1"), None)
            .await
            .expect("answers")
        {
            Hold::Held(held) => held,
            refused => panic!("expected a held lease, got {refused:?}"),
        };
        assert_eq!(held.holder().to_string(), "r1/S1");
        match permits
            .try_hold(b.clone(), None)
            .await
            .expect("Redis answers")
        {
            Hold::Refused { holders } => assert_eq!(names(&holders), set(&["r1/S1"])),
            Hold::Held(held) => panic!("capacity 1 admitted a second holder: {held:?}"),
        }
        let LeaseState::Held {
            expires_at_ms: Some(first_expiry),
            ..
        } = held.state()
        else {
            panic!("a fresh lease is held: {:?}", held.state());
        };
        let mut renewals = held.subscribe();
        loop {
            renewals.changed().await.expect("the renewal task runs");
            let state = renewals.borrow_and_update().clone();
            let LeaseState::Held {
                at_ms,
                expires_at_ms,
                renewals: count,
            } = state
            else {
                panic!("the lease was lost while renewed: {state:?}");
            };
            assert_eq!(expires_at_ms, Some(at_ms + LEASE));
            let (refused_at, holders) = refused(&permits, &b).await;
            assert_eq!(names(&holders), set(&["r1/S1"]));
            // Held past its first lease's end by renewals alone (the third is due as it ends).
            if refused_at > first_expiry {
                assert!(count >= 2, "{count} renewals over one lease period");
                break;
            }
        }
        assert!(held.release().await.expect("Redis answers"), "still held");
        admitted(&permits, &b).await;
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// The renewals keep the clock the lease is judged by, counted from when the admission was
/// sent, not from when its answer was read: an answer read late (here 2.2 s of a 3 s lease
/// after it was sent, with 0.8 s left by Redis's clock) is renewed at once, not a period
/// later, after the lease has ended.
#[tokio::test]
async fn an_admission_read_late_is_renewed_at_once() {
    let Some(redis) = redis_or_skip("an_admission_read_late_is_renewed_at_once").await else {
        return;
    };
    guarded(async {
        const LEASE: u64 = 3_000;
        const LEFT: u64 = 800;
        let permits = connect(&redis, "late", 1, Lease::Millis(LEASE)).await;
        let who = holder("r1", "S1");
        let TryAcquire::Admitted { at_ms, fence, .. } =
            permits.try_acquire(&who).await.expect("Redis answers")
        else {
            panic!("the first holder is admitted");
        };
        let _: i64 = redis::cmd("ZADD")
            .arg("isolation-lab:{late}:holders")
            .arg("XX")
            .arg(at_ms + LEFT)
            .arg(who.to_string())
            .query_async(&mut own_connection(&redis).await)
            .await
            .expect("ZADD answers");
        let admitted = confirmed_ago(at_ms, at_ms + LEFT, Duration::from_millis(LEASE - LEFT));
        let held = HeldLease::start(permits.clone(), who, admitted, fence, None);
        let mut renewals = held.subscribe();
        renewals.changed().await.expect("the renewal task runs");
        let state = renewals.borrow_and_update().clone();
        assert!(
            matches!(state, LeaseState::Held { renewals: 1, .. }),
            "renewed before the lease ended: {state:?}"
        );
        assert!(held.release().await.expect("Redis answers"), "still held");
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// A held lease dropped without release (a replica that dies) stops renewing and lapses; a
/// held lease removed by cleanup reports it was lost.
#[tokio::test]
async fn a_dropped_lease_lapses_and_a_removed_one_is_lost() {
    let Some(redis) = redis_or_skip("a_dropped_lease_lapses_and_a_removed_one_is_lost").await
    else {
        return;
    };
    guarded(async {
        let permits = connect(&redis, "drop", 1, Lease::Millis(200)).await;
        let b = holder("r2", "S2");
        let Hold::Held(held) = permits
            .try_hold(holder("r1", "S1"), None)
            .await
            .expect("answers")
        else {
            panic!("the first holder is admitted");
        };
        drop(held);
        let mut pace = tokio::time::interval(PROBE_PACE);
        let admitted_at = loop {
            pace.tick().await;
            if let TryAcquire::Admitted { at_ms, .. } = permits.try_acquire(&b).await.expect("ok") {
                break at_ms;
            }
        };
        assert!(permits.release(&b).await.expect("Redis answers"));

        let Hold::Held(mut held) = permits
            .try_hold(holder("r1", "S3"), None)
            .await
            .expect("answers")
        else {
            panic!("the permit is free again");
        };
        assert_eq!(permits.cleanup().await.expect("Redis answers"), 1);
        match held.lost().await {
            LeaseState::Lost { at_ms, .. } => assert!(at_ms >= admitted_at),
            other => panic!("expected the lease lost, got {other:?}"),
        }
        assert!(!held.release().await.expect("Redis answers"));
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// Without a lease the permit never lapses: a holder that is gone keeps refusing others;
/// cleanup removes it and leaves no key of the run.
#[tokio::test]
async fn no_lease_leaks_until_cleanup() {
    let Some(redis) = redis_or_skip("no_lease_leaks_until_cleanup").await else {
        return;
    };
    guarded(async {
        let permits = connect(&redis, "leak", 1, Lease::None).await;
        let b = holder("r2", "S2");
        let held = match permits
            .try_hold(holder("r1", "S1"), None)
            .await
            .expect("answers")
        {
            Hold::Held(held) => held,
            refused => panic!("expected a held permit, got {refused:?}"),
        };
        let LeaseState::Held {
            at_ms: start,
            expires_at_ms: None,
            ..
        } = held.state()
        else {
            panic!("no lease, no expiry: {:?}", held.state());
        };
        // The holder dies without releasing.
        drop(held);
        let mut pace = tokio::time::interval(PROBE_PACE);
        loop {
            pace.tick().await;
            let (at_ms, holders) = refused(&permits, &b).await;
            assert_eq!(holders.len(), 1);
            assert_eq!(holders[0].holder.to_string(), "r1/S1");
            assert_eq!(holders[0].expires_at_ms, None);
            if at_ms > start + 300 {
                break;
            }
        }
        assert!(!keys_of_run(&redis, "leak").await.is_empty());
        assert_eq!(permits.cleanup().await.expect("Redis answers"), 1);
        assert_eq!(keys_of_run(&redis, "leak").await, Vec::<String>::new());
        assert_eq!(permits.cleanup().await.expect("Redis answers"), 0);
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// A renewal that fails at once (Redis killed: the connection breaks) says when it failed,
/// by this process's clock, and never that Redis was silent past the lease's end (it was not
/// waited for): well before the end, how long before; sent only after the end (this process
/// did not run in time, here a lease admitted two leases ago), how long after.
#[tokio::test]
async fn a_renewal_that_fails_at_once_says_when_not_silence() {
    let Some(mut redis) = redis_or_skip("a_renewal_that_fails_at_once_says_when_not_silence").await
    else {
        return;
    };
    guarded(async {
        const LEASE: u64 = 600;
        let permits = connect(&redis, "broken", 2, Lease::Millis(LEASE)).await;
        let mut admissions = Vec::new();
        for (request, ago) in [("S1", 0), ("S2", 2 * LEASE)] {
            let who = holder("r1", request);
            let TryAcquire::Admitted { at_ms, fence, .. } =
                permits.try_acquire(&who).await.expect("Redis answers")
            else {
                panic!("{request} is admitted");
            };
            admissions.push((who, at_ms, fence, Duration::from_millis(ago)));
        }
        redis.kill();
        let (losses, mut lost) = tokio::sync::mpsc::unbounded_channel();
        // Each admission is dated by this process's clock only now, as its lease starts: the
        // setup before does not eat into S1's lease.
        let _held: Vec<HeldLease> = admissions
            .into_iter()
            .map(|(who, at_ms, fence, ago)| {
                let admitted = confirmed_ago(at_ms, at_ms + LEASE, ago);
                HeldLease::start(permits.clone(), who, admitted, fence, Some(losses.clone()))
            })
            .collect();
        // S2's renewal is due at once; S1's a third of the lease after its admission, or at
        // once too if setting up took that long: each loss is matched by its holder.
        let mut told = BTreeSet::new();
        for _ in 0..2 {
            let loss = lost.recv().await.expect("the loss is reported");
            let request = ["S1", "S2"]
                .into_iter()
                .find(|&r| loss.holder == holder("r1", r).to_string())
                .unwrap_or_else(|| panic!("a loss of neither holder: {loss:?}"));
            assert!(
                told.insert(request),
                "{request}'s loss told twice: {loss:?}"
            );
            let words = loss.cause.to_string();
            match (request, loss.cause) {
                ("S1", LossCause::RenewalFailed { before_end_ms }) => {
                    assert!(before_end_ms < LEASE, "{loss:?}");
                    assert!(words.contains("ms before the lease's end"), "{words}");
                }
                ("S2", LossCause::RenewalFailedLate { after_end_ms }) => {
                    assert!(after_end_ms >= LEASE, "{loss:?}");
                    assert!(words.contains("ms after the lease had ended"), "{words}");
                }
                (_, other) => panic!("{request}: not a failed renewal of its time: {other:?}"),
            }
        }
    })
    .await;
    redis
        .stop()
        .await
        .expect("stopping a killed redis only removes its directory");
}

/// Redis killed mid-run: every operation fails fast, with an error rather than a hang, and a
/// held lease's renewal reports the failure.
#[tokio::test]
async fn redis_killed_mid_run_fails_fast() {
    let Some(mut redis) = redis_or_skip("redis_killed_mid_run_fails_fast").await else {
        return;
    };
    guarded(async {
        let permits = connect(&redis, "killed", 2, Lease::Millis(300)).await;
        let Hold::Held(mut held) = permits
            .try_hold(holder("r1", "S1"), None)
            .await
            .expect("answers")
        else {
            panic!("the first holder is admitted");
        };
        redis.kill();
        assert!(!process_exists(redis.pid()));
        match permits.try_acquire(&holder("r1", "S2")).await {
            Err(GlobalError::Redis { .. }) => {}
            other => panic!("expected a Redis error, got {other:?}"),
        }
        assert!(permits.holders().await.is_err());
        assert!(permits.cleanup().await.is_err());
        match held.lost().await {
            LeaseState::Failed { error, .. } => assert!(error.contains("renewing")),
            other => panic!("expected a failed renewal, got {other:?}"),
        }
        assert!(held.release().await.is_err());
        let url = *redis.url();
        assert!(
            GlobalPermits::connect(&url, Some(redis.password()), "killed", 2, Lease::None)
                .await
                .is_err()
        );
    })
    .await;
    let dir = redis.dir().to_owned();
    redis
        .stop()
        .await
        .expect("stopping a killed redis only removes its directory");
    assert!(!dir.exists());
}

/// A Redis that stops answering (SIGSTOP) fails a try-acquire after the response timeout
/// (here a short one) rather than hanging it.
#[tokio::test]
async fn a_silent_redis_times_out() {
    let Some(redis) = redis_or_skip("a_silent_redis_times_out").await else {
        return;
    };
    guarded(async {
        let permits = impatient(&redis, "silent").await;
        admitted(&permits, &holder("r1", "S1")).await;
        redis.stall(true).expect("SIGSTOP");
        match permits.try_acquire(&holder("r1", "S2")).await {
            Err(GlobalError::Redis { source, .. }) => {
                assert!(source.is_timeout(), "a timeout, got {source}");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        redis.stall(false).expect("SIGCONT");
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// A try-hold whose answer timed out may still have been admitted once a stalled Redis
/// catches up: the failed try-hold gives that permit back, so nothing is leaked by it.
#[tokio::test]
async fn a_timed_out_try_hold_leaves_no_holder() {
    let Some(redis) = redis_or_skip("a_timed_out_try_hold_leaves_no_holder").await else {
        return;
    };
    guarded(async {
        let permits = impatient(&redis, "stalled").await;
        // Loads the scripts, so that the stalled acquire below is one EVALSHA that will run.
        admitted(&permits, &holder("r9", "S9")).await;
        assert!(
            permits
                .release(&holder("r9", "S9"))
                .await
                .expect("Redis answers")
        );
        redis.stall(true).expect("SIGSTOP");
        let held = permits.try_hold(holder("r1", "S1"), None).await;
        redis.stall(false).expect("SIGCONT");
        assert!(
            matches!(held, Err(GlobalError::Redis { .. })),
            "expected a timeout, got {held:?}"
        );
        // Queued behind everything sent before on the one connection, so it reads the state
        // after the stalled commands have run.
        let (_, holders) = permits.holders().await.expect("Redis answers again");
        assert!(
            holders.is_empty(),
            "the timed-out try-hold left a holder: {holders:?}"
        );
    })
    .await;
    redis.stop().await.expect("redis-server stops cleanly");
}

/// Connecting where nothing listens fails at once.
#[tokio::test]
async fn connecting_to_a_closed_port_fails() {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = probe.local_addr().expect("a bound address");
    drop(probe);
    let url = LoopbackUrl::parse(&format!("redis://{addr}")).expect("a loopback URL");
    let result = guarded(GlobalPermits::connect(&url, None, "closed", 1, Lease::None)).await;
    match result {
        Err(GlobalError::Redis { doing, .. }) => assert_eq!(doing, "connecting"),
        other => panic!("expected a connection error, got {other:?}"),
    }
}

/// Settings the module cannot honour are refused before any connection is made.
#[tokio::test]
async fn invalid_settings_are_refused_before_connecting() {
    // Nothing listens on port 1; validation must fail first.
    let url = LoopbackUrl::parse("redis://127.0.0.1:1").expect("a loopback URL");
    let cases = [
        ("r", 0, Lease::None, "capacity"),
        ("r", 1, Lease::Millis(0), "lease 0 ms"),
        ("r", 1, Lease::Millis(MAX_LEASE_MS + 1), "lease"),
        ("", 1, Lease::None, "run id"),
        ("a*b", 1, Lease::None, "run id"),
        ("{x}", 1, Lease::None, "run id"),
    ];
    for (run, capacity, lease, names) in cases {
        match GlobalPermits::connect(&url, None, run, capacity, lease).await {
            Err(GlobalError::Invalid(why)) => assert!(why.contains(names), "{why}"),
            other => panic!("expected {run:?}/{capacity}/{lease} refused, got {other:?}"),
        }
    }
    assert!(REDIS_TIMEOUT <= Duration::from_secs(2));
}

/// Dropping a `LocalRedis` kills and reaps the server and removes its directory; stopping it
/// does the same in order.
#[tokio::test]
async fn local_redis_leaves_nothing_behind() {
    let Some(redis) = redis_or_skip("local_redis_leaves_nothing_behind").await else {
        return;
    };
    let (pid, dir) = (redis.pid(), redis.dir().to_owned());
    assert!(process_exists(pid), "pid {pid} runs");
    assert!(!dir.exists(), "{} is removed once ready", dir.display());
    drop(redis);
    assert!(!process_exists(pid), "pid {pid} is gone after drop");
    assert!(!dir.exists(), "{} is removed after drop", dir.display());

    let redis = LocalRedis::start().await.expect("a second server starts");
    let (pid, dir) = (redis.pid(), redis.dir().to_owned());
    guarded(redis.stop())
        .await
        .expect("redis-server stops cleanly");
    assert!(!process_exists(pid), "pid {pid} is gone after stop");
    assert!(!dir.exists(), "{} is removed after stop", dir.display());
}

/// A server stopped (SIGSTOP) when the run stops it would never act on SIGTERM: it is found
/// stopped and killed at once, and the stop says so, rather than waiting out its 10 s.
#[tokio::test]
async fn a_stopped_local_redis_is_killed_at_once() {
    let Some(redis) = redis_or_skip("a_stopped_local_redis_is_killed_at_once").await else {
        return;
    };
    let pid = redis.pid();
    redis.stall(true).expect("SIGSTOP");
    let stopped = guarded(redis.stop()).await;
    let said = format!("{:#}", stopped.expect_err("a killed server is a problem"));
    assert_eq!(
        said,
        "redis-server was found stopped (SIGSTOP or another stop signal); killed"
    );
    assert!(!process_exists(pid), "pid {pid} is gone after stop");
}

/// Measures one try-acquire round trip on loopback (not a test of anything):
/// `cargo test --lib redis_pool::tests::measure -- --ignored --nocapture`
#[tokio::test]
#[ignore = "a measurement, not a test"]
async fn measure_try_acquire_round_trip() {
    let Some(redis) = redis_or_skip("measure_try_acquire_round_trip").await else {
        return;
    };
    const CALLS: usize = 1000;
    let permits = connect(&redis, "measure", 1, Lease::Millis(60_000)).await;
    let (a, b) = (holder("r1", "S1"), holder("r2", "S2"));
    let median = |mut samples: Vec<Duration>| {
        samples.sort();
        (samples[samples.len() / 2], samples[samples.len() * 9 / 10])
    };
    let mut admitted_times = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        admitted(&permits, &a).await;
        admitted_times.push(started.elapsed());
        permits.release(&a).await.expect("Redis answers");
    }
    admitted(&permits, &a).await;
    let mut refused_times = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        refused(&permits, &b).await;
        refused_times.push(started.elapsed());
    }
    let (admit_median, admit_p90) = median(admitted_times);
    let (refuse_median, refuse_p90) = median(refused_times);
    println!(
        "try_acquire over {CALLS} calls each: admitted median {admit_median:?} (p90 \
         {admit_p90:?}), refused median {refuse_median:?} (p90 {refuse_p90:?})"
    );
    // The same script, keys and arguments as the refused try-acquire, sent by redis-benchmark
    // over one connection: the floor a client of this script can reach.
    let port = redis.url().socket_addr().port().to_string();
    let sha = permits.script_hashes()[0].clone();
    let mut args = vec![
        "-p".to_owned(),
        port,
        "-c".into(),
        "1".into(),
        "-n".into(),
        "20000".into(),
        "--csv".into(),
        "EVALSHA".into(),
        sha,
        "6".into(),
    ];
    args.extend(
        ["holders", "config", "slots", "token", "resource", "effects"]
            .map(|k| format!("isolation-lab:{{measure}}:{k}")),
    );
    args.extend(["1", "60000", "r2/S2"].map(str::to_owned));
    println!("redis-benchmark -a PASSWORD {}", args.join(" "));
    // The private server asks for its password, or every call would be refused unrun (NOAUTH).
    match std::process::Command::new("redis-benchmark")
        .args(["-a", redis.password().as_str()])
        .args(&args)
        .output()
    {
        Ok(out) => println!("{}", String::from_utf8_lossy(&out.stdout)),
        Err(e) => println!("redis-benchmark not run: {e}"),
    }
    redis.stop().await.expect("redis-server stops cleanly");
}

/// Every key a run writes expires a little past its lease (each call refreshes it), and every
/// script is loaded at connect, so a call left queued in a stalled Redis never meets
/// `NOSCRIPT` with nobody left to retry it.
#[tokio::test]
async fn a_runs_keys_expire_and_its_scripts_are_loaded_at_connect() {
    let Some(redis) =
        redis_or_skip("a_runs_keys_expire_and_its_scripts_are_loaded_at_connect").await
    else {
        return;
    };
    guarded(async {
        let permits = connect(&redis, "ttl", 2, Lease::Millis(500)).await;
        let mut conn = own_connection(&redis).await;
        let loaded: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(permits.script_hashes())
            .query_async(&mut conn)
            .await
            .expect("SCRIPT EXISTS answers");
        assert!(loaded.iter().all(|&l| l), "{loaded:?}");
        admitted(&permits, &holder("r1", "S1")).await;
        let keys = keys_of_run(&redis, "ttl").await;
        assert_eq!(keys.len(), 4, "holders, config, slots, token: {keys:?}");
        for key in keys {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .expect("PTTL answers");
            let most = 500 + super::permits::KEYS_OUTLIVE_LEASE.as_millis() as i64;
            assert!(
                ttl > 0 && ttl <= most,
                "{key}: PTTL {ttl}, expected 1..={most}"
            );
        }
        permits.cleanup().await.expect("cleanup");
    })
    .await;
    redis.stop().await.expect("stops");
}

/// A renewal Redis answered in time, but that this process read only after its deadline, is
/// read and not called Redis's silence: the process did not run past the deadline, and woke to
/// its timer before its connection's driver task had read the answer. Redis silent past a
/// deadline watched on time (woken at most 50 ms after it) is silence until then; woken later,
/// silence is what follows for another lease, counted from the wake; a renewal that failed
/// while the process did not run says nothing. On the paused clock: the driver and the renewal
/// are two tasks, as they are on a Redis connection.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_answer_read_after_the_deadline_is_not_redis_silence() {
    use super::lease::{Heard, answered_by};
    use tokio::sync::oneshot;
    use tokio::time::Instant;
    let lease = Duration::from_millis(400);
    let ms = Duration::from_millis;
    // A renewal asked now, its deadline 200 ms on: the socket Redis answers on, the driver that
    // reads the answer from it to the renewal, and the renewal's wait.
    let renewal = || {
        let (socket, arrived) = oneshot::channel::<u32>();
        let (read, answer) = oneshot::channel();
        let driver = tokio::spawn(async move {
            if let Ok(answer) = arrived.await {
                let _ = read.send(answer);
            }
        });
        let asked = Instant::now();
        let deadline = asked + ms(200);
        let waiting = tokio::spawn(answered_by(answer, asked, deadline, lease));
        (socket, driver, waiting, deadline)
    };

    // Read late: the answer came while the process did not run past the deadline.
    let (socket, driver, waiting, _) = renewal();
    tokio::task::yield_now().await;
    tokio::time::advance(ms(500)).await;
    socket.send(7).expect("the driver is reading");
    let heard = waiting.await.expect("joined");
    assert!(matches!(heard, Heard::Answer(Ok(7))), "{heard:?}");
    driver.await.expect("joined");

    // Watched on time, or woken 40 ms late: silent until the deadline (or the wake) is
    // silence, then.
    for late in [ms(0), ms(40)] {
        let (socket, driver, waiting, deadline) = renewal();
        tokio::task::yield_now().await;
        tokio::time::advance(ms(200) + late).await;
        let heard = waiting.await.expect("joined");
        assert!(
            matches!(heard, Heard::Silent(d) if d == ms(200) + late),
            "{heard:?}"
        );
        assert_eq!(Instant::now(), deadline + late);
        drop(socket);
        driver.await.expect("joined");
    }

    // Woken 60 ms late and still unanswered another lease on: silence, for that lease.
    let (socket, driver, waiting, deadline) = renewal();
    tokio::task::yield_now().await;
    tokio::time::advance(ms(260)).await;
    let heard = waiting.await.expect("joined");
    assert!(matches!(heard, Heard::Silent(d) if d == lease), "{heard:?}");
    assert_eq!(Instant::now(), deadline + ms(60) + lease);
    drop(socket);
    driver.await.expect("joined");

    // Failed while the process did not run (here the connection closed), or once it ran
    // again: nothing is known of Redis.
    let (socket, driver, waiting, _) = renewal();
    tokio::task::yield_now().await;
    drop(socket);
    tokio::time::advance(ms(500)).await;
    let heard = waiting.await.expect("joined");
    assert!(matches!(heard, Heard::Unknown), "{heard:?}");
    driver.await.expect("joined");
    let (socket, driver, waiting, _) = renewal();
    tokio::task::yield_now().await;
    tokio::time::advance(ms(260)).await;
    drop(socket);
    let heard = waiting.await.expect("joined");
    assert!(matches!(heard, Heard::Unknown), "{heard:?}");
    driver.await.expect("joined");
}
