//! One Redis-backed semaphore of `capacity` permits shared by every replica of a run: a
//! try-acquire that admits or refuses at once, naming the holders, with optional per-holder
//! leases timed by Redis's own clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, RedisError, Value};
use serde::{Deserialize, Serialize};

use crate::draw::terminal::one_line;

use super::lease::{Confirmed, HeldLease, Losses};
use super::local::Password;
use super::scripts::Scripts;
use super::url::LoopbackUrl;

/// How long connecting, and then each command, may take before it fails: a Redis that is gone
/// or stopped must surface as an error, never as a hang. A try-acquire on loopback takes about
/// a tenth of a millisecond (`measure_try_acquire_round_trip` in the tests), so this only ever
/// fires on a dead or stopped server.
pub(crate) const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a run's keys outlive their last write beyond one lease: longer than any gap
/// between two calls of a live run (every call refreshes them; a run's longest quiet step is
/// bounded by a few safety timeouts of 5 s), short enough that a killed run's keys are gone
/// soon after.
pub(crate) const KEYS_OUTLIVE_LEASE: Duration = Duration::from_secs(30);

/// The longest lease accepted: expiries are Redis sorted-set scores (doubles), exact for
/// whole milliseconds far beyond this.
pub(crate) const MAX_LEASE_MS: u64 = 24 * 60 * 60 * 1000;

/// How long a holder keeps its permit without renewing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// The permit lapses this many milliseconds (Redis time) after the last admission or
    /// renewal: a holder that dies loses it then.
    Millis(u64),
    /// No expiry: the plain semaphore. A holder that dies without releasing leaks its permit
    /// for as long as the run goes on: until [`GlobalPermits::cleanup`], or until the run's
    /// keys expire, [`KEYS_OUTLIVE_LEASE`] after its last call.
    None,
}

impl Lease {
    /// The command line's reading of a lease in milliseconds: 0 means no lease.
    pub(crate) fn from_millis(ms: u64) -> Lease {
        if ms == 0 {
            Lease::None
        } else {
            Lease::Millis(ms)
        }
    }

    /// The lease in milliseconds as the scripts take it (0: none).
    fn script_arg(self) -> u64 {
        match self {
            Lease::Millis(ms) => ms,
            Lease::None => 0,
        }
    }
}

impl fmt::Display for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lease::Millis(ms) => write!(f, "{ms} ms"),
            Lease::None => f.write_str("no lease"),
        }
    }
}

/// Who holds a global permit: a replica and the request it admitted, written `r1/S3`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Holder {
    replica: String,
    request: String,
}

impl Holder {
    /// A holder; each part is 1 to 64 of `A-Z a-z 0-9 _ - .` so that `/` can separate them.
    pub(crate) fn new(replica: &str, request: &str) -> Result<Holder, GlobalError> {
        for (what, part) in [("replica", replica), ("request", request)] {
            if !valid_name(part, b"_-.") {
                // Read back from Redis, where any process that reaches it may have written it.
                let part = one_line(part);
                return Err(GlobalError::Invalid(format!(
                    "{what} `{part}` must be 1 to 64 of A-Z a-z 0-9 _ - ."
                )));
            }
        }
        Ok(Holder {
            replica: replica.to_owned(),
            request: request.to_owned(),
        })
    }

    /// Reads the `r1/S3` form back.
    pub(crate) fn parse(s: &str) -> Result<Holder, GlobalError> {
        let Some((replica, request)) = s.split_once('/') else {
            return Err(GlobalError::Invalid(format!(
                "holder `{}` is not of the form replica/request",
                one_line(s)
            )));
        };
        Holder::new(replica, request)
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.replica, self.request)
    }
}

/// Whether `s` is 1 to 64 of `A-Z a-z 0-9` and `also`.
fn valid_name(s: &str, also: &[u8]) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || also.contains(&b))
}

/// A holder and the Redis time (ms since the Unix epoch) its lease ends; `None`: no lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holding {
    pub(crate) holder: Holder,
    pub(crate) expires_at_ms: Option<u64>,
}

/// The answer of one try-acquire, with the Redis time it was decided at. A refusal is
/// immediate: nothing waits or queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TryAcquire {
    /// The holder now holds a permit.
    Admitted {
        /// The Redis time of the decision (ms since the Unix epoch).
        at_ms: u64,
        /// When the lease ends unless renewed; `None` with [`Lease::None`].
        expires_at_ms: Option<u64>,
        /// The permit's slot and fencing token.
        fence: Fence,
    },
    /// Every permit was held; these are the holders, in order of expiry (then of name).
    Refused {
        /// The Redis time of the decision (ms since the Unix epoch).
        at_ms: u64,
        /// The holders at that time.
        holders: Vec<Holding>,
    },
}

/// What an admitted holder shows the dependency: its permit slot (0 to capacity − 1) and its
/// fencing token, newer than every token the run issued before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The permit slot.
    pub slot: u64,
    /// The fencing token.
    pub token: u64,
}

/// Which end of its work an effect comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkEnd {
    /// Right after admission: the work starts writing.
    Begin,
    /// When the work ends, just before its permit is given back.
    End,
}

/// One effect as the dependency logged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effect {
    /// `replica/request`.
    pub holder: String,
    /// Begin or end.
    pub phase: WorkEnd,
    /// Its slot and token.
    #[serde(flatten)]
    pub fence: Fence,
    /// Whether the dependency accepted it.
    pub accepted: bool,
    /// The newest token the dependency had accepted for the slot before it; 0 for none.
    pub newest: u64,
}

/// The dependency's log as the script writes it: numbers as text.
#[derive(Deserialize)]
struct LoggedEffect {
    holder: String,
    phase: WorkEnd,
    slot: String,
    token: String,
    accepted: bool,
    newest: String,
}

/// The answer of one renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Still held; the lease now ends at `expires_at_ms` (`None`: no lease).
    Renewed {
        /// The Redis time of the renewal.
        at_ms: u64,
        /// The new end of the lease.
        expires_at_ms: Option<u64>,
    },
    /// The holder was gone: its lease had expired, or it was released or cleaned up.
    Lost {
        /// The Redis time the renewal found it gone.
        at_ms: u64,
    },
}

/// The answer of [`GlobalPermits::try_hold`].
#[derive(Debug)]
pub(crate) enum Hold {
    /// Admitted; the lease is renewed until it is released or dropped.
    Held(HeldLease),
    /// Refused, naming the holders (a replica's refusal names no time).
    Refused { holders: Vec<Holding> },
}

/// What went wrong with the global permits. A refusal is not an error: it is a [`TryAcquire::Refused`].
#[derive(Debug)]
pub(crate) enum GlobalError {
    /// A run id, capacity, lease or holder the module does not accept.
    Invalid(String),
    /// Redis could not be reached, or failed or timed out while `doing` something.
    Redis {
        doing: &'static str,
        source: RedisError,
    },
    /// Redis answered something the scripts never return.
    Reply {
        doing: &'static str,
        /// What was wrong with the answer.
        detail: String,
    },
    /// The holder already holds a permit: admitting it twice would let one release free both.
    AlreadyHeld(Holder),
    /// Another replica of the run recorded other settings.
    Mismatch {
        run: String,
        /// This replica's settings.
        ours: String,
        /// The settings recorded for the run.
        recorded: String,
    },
}

/// The error of a Redis call that failed while `doing` something: for `map_err`.
fn while_doing(doing: &'static str) -> impl Fn(RedisError) -> GlobalError + Copy {
    move |source| GlobalError::Redis { doing, source }
}

impl fmt::Display for GlobalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GlobalError::Invalid(why) => f.write_str(why),
            GlobalError::Redis { doing, source } => write!(f, "{doing}: {}", in_words(source)),
            GlobalError::Reply { doing, detail } => {
                write!(f, "Redis, {doing}: unexpected reply: {detail}")
            }
            GlobalError::AlreadyHeld(holder) => write!(f, "{holder} already holds a permit"),
            GlobalError::Mismatch {
                run,
                ours,
                recorded,
            } => write!(
                f,
                "run {run} is recorded with {recorded}, this replica was given {ours}"
            ),
        }
    }
}

/// What a Redis client error means, in one line of words: the client's own text can be a
/// parser's multi-line dump when something other than Redis answers.
fn in_words(error: &RedisError) -> String {
    if error.is_connection_refusal() {
        return "nothing listens there (connection refused)".to_owned();
    }
    if error.is_timeout() {
        return format!(
            "Redis did not answer within {} s (stopped or overloaded?)",
            REDIS_TIMEOUT.as_secs()
        );
    }
    if matches!(
        error.kind(),
        redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
    ) {
        return "what answers there does not speak Redis (its reply is not a Redis reply)"
            .to_owned();
    }
    if error.is_connection_dropped() {
        return "the connection to Redis was lost (did it exit?)".to_owned();
    }
    if error.code() == Some("NOAUTH") {
        return "that Redis asks for a password (NOAUTH), and the lab gives one only to the \
                Redis it starts itself (--global local)"
            .to_owned();
    }
    // The server's own words: any process may listen where the lab was told Redis is.
    let text = error.to_string();
    let first = text.lines().next().unwrap_or("an error without a message");
    one_line(first).into_owned()
}

/// A client of the Redis at `url`, which gives `password` if there is one.
pub(crate) fn client(
    url: &LoopbackUrl,
    password: Option<&Password>,
) -> redis::RedisResult<redis::Client> {
    let addr = url.socket_addr();
    let info = ConnectionAddr::Tcp(addr.ip().to_string(), addr.port()).into_connection_info()?;
    let settings = info.redis_settings().clone();
    let settings = match password {
        Some(password) => settings.set_password(password.as_str()),
        None => settings,
    };
    redis::Client::open(info.set_redis_settings(settings))
}

/// No source: the message already says in words what the client's error means, and the
/// client's own text can be a parser's multi-line dump that a chain (`{:#}`) would print.
impl std::error::Error for GlobalError {}

/// A semaphore of `capacity` permits in Redis, shared by every replica that connects with the
/// same run id. Cloning shares the connection.
///
/// Its six keys are `isolation-lab:{RUN}:NAME` (`src/redis_pool/scripts.rs` says what each
/// holds): among them `holders`, a sorted set of holders scored by the Redis time their lease
/// ends, and `config`, the run's capacity and lease, so a replica given other settings is
/// refused at connect. The braces are a Redis Cluster hash tag: every key of a run would land
/// on one node, as the multi-key scripts need.
///
/// A lease turns a leak into a possible double admission: with [`Lease::None`] a holder that
/// dies keeps its permit for as long as the run goes on, while with a lease a holder that is
/// merely paused (stopped, swapping, partitioned) past its lease loses its permit while it
/// still works, and another holder is admitted beside it. Renewing at a third of the lease narrows that window but
/// cannot close it; fencing tokens ([`Fence`], checked by the dependency) do.
#[derive(Clone)]
pub(crate) struct GlobalPermits {
    inner: Arc<Inner>,
    conn: MultiplexedConnection,
}

/// The run's keys, by name, in the order every script takes them.
const KEYS: [&str; 6] = ["holders", "config", "slots", "token", "resource", "effects"];
/// Where the holders key and the config key (all `agree` takes) stand in [`KEYS`].
const HOLDERS: usize = 0;
const CONFIG: usize = 1;

struct Inner {
    run: String,
    /// The run's keys, named as [`KEYS`] names them.
    keys: [String; 6],
    capacity: u32,
    lease: Lease,
    /// Milliseconds the run's keys outlive their last write.
    ttl_ms: u64,
    scripts: Scripts,
}

impl fmt::Debug for GlobalPermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalPermits")
            .field("run", &self.inner.run)
            .field("capacity", &self.inner.capacity)
            .field("lease", &self.inner.lease)
            .finish_non_exhaustive()
    }
}

impl GlobalPermits {
    /// Connects to the Redis at `url` (failing after [`REDIS_TIMEOUT`]), with `password` if it
    /// asks for one (the lab's private server does), and joins run `run`
    /// (1 to 64 of `A-Z a-z 0-9 _ -`) with `capacity` ≥ 1 permits and `lease`
    /// (`Millis` from 1 to [`MAX_LEASE_MS`]). The first replica records the settings; a later
    /// one with other settings gets [`GlobalError::Mismatch`].
    pub(crate) async fn connect(
        url: &LoopbackUrl,
        password: Option<&Password>,
        run: &str,
        capacity: u32,
        lease: Lease,
    ) -> Result<GlobalPermits, GlobalError> {
        Self::connect_within(url, password, run, capacity, lease, REDIS_TIMEOUT).await
    }

    /// [`GlobalPermits::connect`], with `timeout` instead of [`REDIS_TIMEOUT`] for each command
    /// once connected and set up (loading the scripts and agreeing on the settings take
    /// [`REDIS_TIMEOUT`], however loaded the machine).
    pub(crate) async fn connect_within(
        url: &LoopbackUrl,
        password: Option<&Password>,
        run: &str,
        capacity: u32,
        lease: Lease,
        timeout: Duration,
    ) -> Result<GlobalPermits, GlobalError> {
        // No `{`, `}`, `*` or `?`: the run id sits inside a hash tag and a `KEYS` pattern.
        if !valid_name(run, b"_-") {
            return Err(GlobalError::Invalid(format!(
                "run id `{run}` must be 1 to 64 of A-Z a-z 0-9 _ -"
            )));
        }
        if capacity == 0 {
            return Err(GlobalError::Invalid(
                "capacity must be at least 1".to_owned(),
            ));
        }
        if let Lease::Millis(ms) = lease
            && !(1..=MAX_LEASE_MS).contains(&ms)
        {
            return Err(GlobalError::Invalid(format!(
                "lease {ms} ms must be from 1 to {MAX_LEASE_MS} ms (or no lease)"
            )));
        }
        let redis_error = while_doing("connecting");
        let client = client(url, password).map_err(redis_error)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(REDIS_TIMEOUT))
            .set_response_timeout(Some(REDIS_TIMEOUT));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(redis_error)?;
        let ttl_ms = lease.script_arg() + KEYS_OUTLIVE_LEASE.as_millis() as u64;
        let mut permits = GlobalPermits {
            inner: Arc::new(Inner {
                run: run.to_owned(),
                keys: KEYS.map(|name| format!("isolation-lab:{{{run}}}:{name}")),
                capacity,
                lease,
                ttl_ms,
                scripts: Scripts::new(ttl_ms),
            }),
            conn,
        };
        // One command first, so a Redis that refuses every command (it asks for a password,
        // say) says so once, not once for each script of the pipeline.
        let _: String = redis::cmd("PING")
            .query_async(&mut permits.conn.clone())
            .await
            .map_err(redis_error)?;
        permits.load_scripts().await?;
        permits.agree().await?;
        permits.conn.set_response_timeout(timeout);
        Ok(permits)
    }

    /// Loads every script in one round trip, so no later `EVALSHA` can meet `NOSCRIPT`.
    async fn load_scripts(&self) -> Result<(), GlobalError> {
        let mut pipe = redis::pipe();
        for source in self.inner.scripts.sources() {
            pipe.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        let _: Vec<String> = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(while_doing("loading the scripts"))?;
        Ok(())
    }

    /// Records this run's settings, or checks them against those recorded.
    async fn agree(&self) -> Result<(), GlobalError> {
        const DOING: &str = "recording the run's settings";
        let inner = &self.inner;
        let reply = self
            .invoke(
                inner
                    .scripts
                    .agree
                    .key(&inner.keys[CONFIG])
                    .arg(inner.capacity)
                    .arg(inner.lease.script_arg())
                    .arg(inner.ttl_ms),
                DOING,
            )
            .await?;
        let [capacity, lease] = array(&reply, DOING)? else {
            return Err(reply_error(DOING, &reply));
        };
        let recorded = (uint(capacity, DOING)?, uint(lease, DOING)?);
        let ours = (u64::from(inner.capacity), inner.lease.script_arg());
        if recorded == ours {
            return Ok(());
        }
        let settings = |(capacity, lease): (u64, u64)| {
            format!("capacity {capacity}, {}", Lease::from_millis(lease))
        };
        Err(GlobalError::Mismatch {
            run: inner.run.clone(),
            ours: settings(ours),
            recorded: settings(recorded),
        })
    }

    /// The SHA1 of every script, as `EVALSHA` names them.
    #[cfg(test)]
    pub(crate) fn script_hashes(&self) -> Vec<String> {
        self.inner
            .scripts
            .sources()
            .iter()
            .map(|source| redis::Script::new(source).get_hash().to_owned())
            .collect()
    }

    /// The lease each holder gets.
    pub(crate) fn lease(&self) -> Lease {
        self.inner.lease
    }

    /// Tries to admit `holder` now, in one atomic script: expired holders are removed first,
    /// then the holder is admitted if fewer than `capacity` remain, or refused naming them.
    /// Never waits for a permit.
    pub(crate) async fn try_acquire(&self, holder: &Holder) -> Result<TryAcquire, GlobalError> {
        const DOING: &str = "trying to acquire a permit";
        let inner = &self.inner;
        let reply = self
            .invoke(
                self.keyed(&inner.scripts.acquire)
                    .arg(inner.capacity)
                    .arg(inner.lease.script_arg())
                    .arg(holder.to_string()),
                DOING,
            )
            .await?;
        let (code, at_ms, rest) = coded(&reply, DOING)?;
        match (code, rest) {
            (1, [expiry, slot, token]) => Ok(TryAcquire::Admitted {
                at_ms,
                expires_at_ms: expiry_of(expiry, DOING)?,
                fence: Fence {
                    slot: uint(slot, DOING)?,
                    token: uint(token, DOING)?,
                },
            }),
            (2, []) => Err(GlobalError::AlreadyHeld(holder.clone())),
            (0, pairs) => Ok(TryAcquire::Refused {
                at_ms,
                holders: holdings(pairs, DOING)?,
            }),
            _ => Err(reply_error(DOING, &reply)),
        }
    }

    /// Tries to admit `holder` now and, if admitted, keeps its lease renewed (every third of
    /// the lease) until the returned [`HeldLease`] is released or dropped.
    ///
    /// A try-hold that fails on Redis gives back whatever the script may have admitted.
    pub(crate) async fn try_hold(
        &self,
        holder: Holder,
        losses: Option<Losses>,
    ) -> Result<Hold, GlobalError> {
        let sent = tokio::time::Instant::now();
        let decision = match self.try_acquire(&holder).await {
            Ok(decision) => decision,
            Err(error @ (GlobalError::Redis { .. } | GlobalError::Reply { .. })) => {
                // The script may have run although its answer never came back (a stalled Redis
                // runs it late) or could not be read: nobody would release that permit. The
                // release goes out on the same connection, so Redis runs it after the acquire;
                // it removes this holder only, whose name no other attempt uses. If it fails
                // too, Redis is gone and the acquire's error is the news.
                let _ = self.release(&holder).await;
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        match decision {
            TryAcquire::Admitted {
                at_ms,
                expires_at_ms,
                fence,
            } => Ok(Hold::Held(HeldLease::start(
                self.clone(),
                holder,
                Confirmed {
                    at_ms,
                    expires_at_ms,
                    sent,
                },
                fence,
                losses,
            ))),
            TryAcquire::Refused { holders, .. } => Ok(Hold::Refused { holders }),
        }
    }

    /// Releases `holder`'s permit. `false` when it was not held any more: its lease had
    /// expired, or it was released or cleaned up already.
    pub(crate) async fn release(&self, holder: &Holder) -> Result<bool, GlobalError> {
        const DOING: &str = "releasing a permit";
        let inner = &self.inner;
        let reply = self
            .invoke(
                self.keyed(&inner.scripts.release).arg(holder.to_string()),
                DOING,
            )
            .await?;
        match array(&reply, DOING)? {
            [removed, _at] => Ok(uint(removed, DOING)? == 1),
            _ => Err(reply_error(DOING, &reply)),
        }
    }

    /// Resets `holder`'s lease to a full lease from now (Redis time), only if it still holds
    /// its permit; [`Renewal::Lost`] if it had expired or been removed. Never re-admits.
    pub(crate) async fn renew(&self, holder: &Holder) -> Result<Renewal, GlobalError> {
        const DOING: &str = "renewing a lease";
        let inner = &self.inner;
        let reply = self
            .invoke(
                self.keyed(&inner.scripts.renew)
                    .arg(inner.lease.script_arg())
                    .arg(holder.to_string()),
                DOING,
            )
            .await?;
        let (code, at_ms, rest) = coded(&reply, DOING)?;
        match (code, rest) {
            (1, [expiry]) => Ok(Renewal::Renewed {
                at_ms,
                expires_at_ms: expiry_of(expiry, DOING)?,
            }),
            (0, []) => Ok(Renewal::Lost { at_ms }),
            _ => Err(reply_error(DOING, &reply)),
        }
    }

    /// The current holders, in order of expiry, after removing the expired ones, with the Redis
    /// time they were read at.
    pub(crate) async fn holders(&self) -> Result<(u64, Vec<Holding>), GlobalError> {
        const DOING: &str = "reading the holders";
        let inner = &self.inner;
        let reply = self
            .invoke(&mut self.keyed(&inner.scripts.holders), DOING)
            .await?;
        match array(&reply, DOING)? {
            [at, pairs @ ..] => Ok((uint(at, DOING)?, holdings(pairs, DOING)?)),
            [] => Err(reply_error(DOING, &reply)),
        }
    }

    /// Deletes every key of the run, and returns how many holders still held a permit then:
    /// a holder without a lease that died is removed here, at the end of a run.
    pub(crate) async fn cleanup(&self) -> Result<usize, GlobalError> {
        const DOING: &str = "deleting the run's keys";
        let inner = &self.inner;
        let reply = self
            .invoke(&mut self.keyed(&inner.scripts.cleanup), DOING)
            .await?;
        match array(&reply, DOING)? {
            [live, _at] => {
                usize::try_from(uint(live, DOING)?).map_err(|_| reply_error(DOING, &reply))
            }
            _ => Err(reply_error(DOING, &reply)),
        }
    }

    /// Applies `holder`'s effect to the run's dependency, which (with `fencing`) refuses a
    /// token older than the newest it has accepted for the slot. `Ok(true)`: accepted.
    pub(crate) async fn effect(
        &self,
        holder: &Holder,
        fence: Fence,
        phase: WorkEnd,
        fencing: bool,
    ) -> Result<bool, GlobalError> {
        const DOING: &str = "applying an effect to the dependency";
        let inner = &self.inner;
        let phase = match phase {
            WorkEnd::Begin => "begin",
            WorkEnd::End => "end",
        };
        let reply = self
            .invoke(
                self.keyed(&inner.scripts.effect)
                    .arg(fence.slot)
                    .arg(fence.token)
                    .arg(holder.to_string())
                    .arg(phase)
                    .arg(u8::from(fencing)),
                DOING,
            )
            .await?;
        match array(&reply, DOING)? {
            [accepted, _newest] => Ok(uint(accepted, DOING)? == 1),
            _ => Err(reply_error(DOING, &reply)),
        }
    }

    /// The dependency's log of every effect, oldest first.
    pub(crate) async fn effects(&self) -> Result<Vec<Effect>, GlobalError> {
        const DOING: &str = "reading the dependency's log";
        let inner = &self.inner;
        let reply = self
            .invoke(&mut self.keyed(&inner.scripts.effects), DOING)
            .await?;
        let number = |text: &str| text.parse::<u64>().map_err(|_| reply_error(DOING, &reply));
        array(&reply, DOING)?
            .iter()
            .map(|line| {
                let logged: LoggedEffect = serde_json::from_str(text(line, DOING)?)
                    .map_err(|_| reply_error(DOING, line))?;
                Ok(Effect {
                    holder: logged.holder,
                    phase: logged.phase,
                    fence: Fence {
                        slot: number(&logged.slot)?,
                        token: number(&logged.token)?,
                    },
                    accepted: logged.accepted,
                    newest: number(&logged.newest)?,
                })
            })
            .collect()
    }

    /// Deletes the holders key, as a lost or flushed Redis would: every permit is forgotten
    /// while its holders still work. A fault for tests of the lab.
    pub(crate) async fn forget_holders(&self) -> Result<(), GlobalError> {
        let _: i64 = redis::cmd("DEL")
            .arg(&self.inner.keys[HOLDERS])
            .query_async(&mut self.conn.clone())
            .await
            .map_err(while_doing("deleting the holders"))?;
        Ok(())
    }

    /// How many keys of the run exist now, by a pattern over every key, not only the six this
    /// module writes: the evidence that a cleanup left nothing.
    pub(crate) async fn keys_left(&self) -> Result<usize, GlobalError> {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("isolation-lab:{{{}}}:*", self.inner.run))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(while_doing("listing the run's keys"))?;
        Ok(keys.len())
    }

    /// `script` with the run's six keys.
    fn keyed<'a>(&'a self, script: &'a redis::Script) -> redis::ScriptInvocation<'a> {
        let mut invocation = script.prepare_invoke();
        for key in &self.inner.keys {
            invocation.key(key);
        }
        invocation
    }

    async fn invoke(
        &self,
        invocation: &mut redis::ScriptInvocation<'_>,
        doing: &'static str,
    ) -> Result<Value, GlobalError> {
        // A multiplexed connection is a cheap handle: each call sends through its own clone.
        invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(while_doing(doing))
    }
}

fn reply_error(doing: &'static str, reply: &Value) -> GlobalError {
    GlobalError::Reply {
        doing,
        detail: format!("{reply:?}"),
    }
}

fn array<'a>(reply: &'a Value, doing: &'static str) -> Result<&'a [Value], GlobalError> {
    match reply {
        Value::Array(items) => Ok(items),
        other => Err(reply_error(doing, other)),
    }
}

/// Splits a `{code, now, ...}` reply.
fn coded<'a>(
    reply: &'a Value,
    doing: &'static str,
) -> Result<(u64, u64, &'a [Value]), GlobalError> {
    match array(reply, doing)? {
        [code, at, rest @ ..] => Ok((uint(code, doing)?, uint(at, doing)?, rest)),
        _ => Err(reply_error(doing, reply)),
    }
}

fn text<'a>(value: &'a Value, doing: &'static str) -> Result<&'a str, GlobalError> {
    match value {
        Value::BulkString(bytes) => {
            std::str::from_utf8(bytes).map_err(|_| reply_error(doing, value))
        }
        Value::SimpleString(s) => Ok(s),
        other => Err(reply_error(doing, other)),
    }
}

/// A whole non-negative number: a Lua number comes back as an integer, a stored field or a
/// score as text.
fn uint(value: &Value, doing: &'static str) -> Result<u64, GlobalError> {
    match value {
        Value::Int(n) => u64::try_from(*n).map_err(|_| reply_error(doing, value)),
        _ => {
            let s = text(value, doing)?;
            s.parse::<u64>()
                .ok()
                .or_else(|| {
                    // Redis may print a whole score as a double (e.g. `1.7e12`).
                    let f = s.parse::<f64>().ok()?;
                    (f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < 2f64.powi(53))
                        .then_some(f as u64)
                })
                .ok_or_else(|| reply_error(doing, value))
        }
    }
}

/// A lease's end: a number, or `inf` for no lease.
fn expiry_of(value: &Value, doing: &'static str) -> Result<Option<u64>, GlobalError> {
    if let Value::BulkString(bytes) = value
        && bytes.eq_ignore_ascii_case(b"inf")
    {
        return Ok(None);
    }
    uint(value, doing).map(Some)
}

/// `holder, score, holder, score, ...` from `ZRANGE ... WITHSCORES`.
fn holdings(pairs: &[Value], doing: &'static str) -> Result<Vec<Holding>, GlobalError> {
    if !pairs.len().is_multiple_of(2) {
        return Err(GlobalError::Reply {
            doing,
            detail: format!("{} holder fields, not pairs", pairs.len()),
        });
    }
    pairs
        .chunks_exact(2)
        .map(|pair| {
            Ok(Holding {
                holder: Holder::parse(text(&pair[0], doing)?)?,
                expires_at_ms: expiry_of(&pair[1], doing)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holders print and parse as `replica/request`, and names that would break that are refused.
    #[test]
    fn holder_round_trip_and_validation() {
        let holder = Holder::new("r1", "S3").expect("valid names");
        assert_eq!(holder.to_string(), "r1/S3");
        assert_eq!(Holder::parse("r1/S3").expect("valid form"), holder);
        assert_eq!(
            (holder.replica.as_str(), holder.request.as_str()),
            ("r1", "S3")
        );
        for (replica, request) in [("", "S1"), ("r1", ""), ("r/1", "S1"), ("r1", "S 1")] {
            assert!(
                Holder::new(replica, request).is_err(),
                "{replica:?}/{request:?} should be refused"
            );
        }
        assert!(Holder::parse("r1S3").is_err());
        assert!(Holder::parse("r1/S3/x").is_err());
        assert!(Holder::new(&"r".repeat(65), "S1").is_err());
    }

    /// 0 ms on the command line means no lease.
    #[test]
    fn lease_from_millis() {
        assert_eq!(Lease::from_millis(0), Lease::None);
        assert_eq!(Lease::from_millis(200), Lease::Millis(200));
        assert_eq!(Lease::Millis(200).to_string(), "200 ms");
    }

    /// Replies are read strictly: scores as integers or whole doubles, `inf` as no expiry.
    #[test]
    fn reply_parsing() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(uint(&Value::Int(7), "t").ok(), Some(7));
        assert_eq!(
            uint(&bulk("1764512345678"), "t").ok(),
            Some(1_764_512_345_678)
        );
        assert_eq!(uint(&bulk("1.5e3"), "t").ok(), Some(1500));
        assert!(uint(&bulk("1.5"), "t").is_err());
        assert!(uint(&Value::Int(-1), "t").is_err());
        assert_eq!(expiry_of(&bulk("inf"), "t").ok(), Some(None));
        let pairs = [bulk("r1/S1"), bulk("inf"), bulk("r2/S2"), bulk("10")];
        let held = holdings(&pairs, "t").expect("well-formed pairs");
        assert_eq!(held[0].holder.to_string(), "r1/S1");
        assert_eq!(held[0].expires_at_ms, None);
        assert_eq!(held[1].expires_at_ms, Some(10));
        assert!(holdings(&pairs[..3], "t").is_err());
    }
}
