//! The instrument's inputs, each checked once, before any process or socket exists: how many
//! replicas, their permits, the requests to hold, where permits come from, and the lease.

use std::fmt;
use std::str::FromStr;

use anyhow::{anyhow, bail};
use serde::{Deserialize, Serialize, Serializer};

use crate::policy::{Bounded, Slots, digits_only};
use crate::redis_pool::{Lease, LoopbackUrl};

/// Replica servers, each its own child process: 2 through 4.
pub type ReplicaCount = Bounded<2, 4>;

/// Slow requests sent round robin over the replicas: 1 through 16 (4 replicas × 4 slots).
pub type Requests = Bounded<1, 16>;

/// Where the replicas' permits come from: `--global`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Each replica has its own pool of `slots` permits.
    Off,
    /// One Redis-backed semaphore on a private `redis-server` the run starts and stops.
    Local,
    /// One Redis-backed semaphore on the Redis at this loopback URL.
    Url(LoopbackUrl),
}

impl Engine {
    /// Whether the permits are global (one Redis-backed semaphore).
    pub(crate) fn is_global(&self) -> bool {
        !matches!(self, Engine::Off)
    }
}

impl FromStr for Engine {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Engine> {
        match text {
            "off" => Ok(Engine::Off),
            "local" => Ok(Engine::Local),
            url if url.contains("://") => match LoopbackUrl::parse(url) {
                Ok(url) => Ok(Engine::Url(url)),
                // clap and serde print this error with `{}`, which shows anyhow's outermost
                // context alone: the URL's refusal goes whole, as one message.
                Err(refused) => Err(anyhow!("{refused:#}")),
            },
            other => bail!("`{other}`: expected off, local, or redis://127.0.0.1:PORT"),
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Engine::Off => f.write_str("off"),
            Engine::Local => f.write_str("local"),
            Engine::Url(url) => url.fmt(f),
        }
    }
}

impl Serialize for Engine {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Engine {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A holder's lease in milliseconds: 0 (no lease: a dead holder's permit leaks) or 200
/// through 60 000. Shorter leases would be renewed every few tens of milliseconds; longer
/// ones would make a student wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u32")]
pub struct LeaseMs(u32);

impl LeaseMs {
    /// The shortest lease.
    pub(crate) const MIN: u32 = 200;
    /// The longest lease.
    pub const MAX: u32 = 60_000;

    /// The lease, if allowed.
    pub fn new(ms: u32) -> Option<LeaseMs> {
        (ms == 0 || (Self::MIN..=Self::MAX).contains(&ms)).then_some(LeaseMs(ms))
    }

    /// The lease in milliseconds; 0 for none.
    pub fn get(self) -> u32 {
        self.0
    }

    /// Whether holders have a lease at all.
    pub(crate) fn leased(self) -> bool {
        self.0 > 0
    }

    pub(crate) fn lease(self) -> Lease {
        Lease::from_millis(u64::from(self.0))
    }
}

impl Default for LeaseMs {
    fn default() -> Self {
        LeaseMs(2000)
    }
}

impl TryFrom<u32> for LeaseMs {
    type Error = anyhow::Error;

    fn try_from(ms: u32) -> anyhow::Result<LeaseMs> {
        LeaseMs::new(ms).ok_or_else(|| anyhow!(LEASE_RANGE))
    }
}

const LEASE_RANGE: &str = "expected 0 (no lease) or a whole number from 200 through 60000";

impl FromStr for LeaseMs {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<LeaseMs> {
        digits_only::<u32>(text)
            .and_then(LeaseMs::new)
            .ok_or_else(|| anyhow!(LEASE_RANGE))
    }
}

impl fmt::Display for LeaseMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Whether the shared dependency checks fencing tokens: `--fencing`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Fencing {
    /// It refuses an effect whose token is older than the newest it accepted for the slot.
    #[default]
    On,
    /// It accepts every effect, as a resource that trusts the lock alone.
    Off,
}

impl Fencing {
    /// Whether tokens are checked.
    pub fn on(self) -> bool {
        self == Fencing::On
    }
}

impl fmt::Display for Fencing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.on() { "on" } else { "off" })
    }
}

/// The checked inputs of one `replicas` run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicasInputs {
    /// Replica servers.
    pub replicas: ReplicaCount,
    /// Permits: each replica's own with `--global off`, the one global limit otherwise.
    pub slots: Slots,
    /// Slow requests sent round robin, each until held or refused.
    pub held: Requests,
    /// Where the permits come from.
    pub global: Engine,
    /// Each global holder's lease; 0 for none.
    pub lease_ms: LeaseMs,
    /// Whether the dependency checks fencing tokens.
    #[serde(default)]
    pub fencing: Fencing,
}

impl Default for ReplicasInputs {
    fn default() -> Self {
        ReplicasInputs {
            replicas: ReplicaCount::new(2).expect("2 is an allowed replica count"),
            slots: Slots::new(2).expect("2 is an allowed number of slots"),
            held: Requests::new(4).expect("4 is an allowed number of requests"),
            global: Engine::Off,
            lease_ms: LeaseMs::default(),
            fencing: Fencing::On,
        }
    }
}

/// A replica: `r1` through `r4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplicaId(pub u8);

impl ReplicaId {
    /// `r1..r<count>`.
    pub fn all(count: ReplicaCount) -> impl Iterator<Item = ReplicaId> {
        (1..=count.get()).map(|n| ReplicaId(n as u8))
    }

    /// The replica the `n`-th request (from 1) goes to, round robin.
    pub(crate) fn round_robin(n: usize, count: ReplicaCount) -> ReplicaId {
        ReplicaId(((n - 1) % count.get() + 1) as u8)
    }

    /// The replica `text` names as [`ReplicaId`]'s `Display` writes it (`r1`..`r4`).
    pub(crate) fn named(text: &str) -> Option<ReplicaId> {
        text.strip_prefix('r')
            .and_then(|n| n.parse::<u8>().ok())
            .filter(|n| (1..=4).contains(n))
            .map(ReplicaId)
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

impl Serialize for ReplicaId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ReplicaId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ReplicaId::named(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("not a replica: {text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--lease-ms` takes 0 or 200 through 60 000, digits only.
    #[test]
    fn leases_take_zero_or_their_range() {
        for good in ["0", "200", "2000", "60000"] {
            assert!(good.parse::<LeaseMs>().is_ok(), "{good}");
        }
        for bad in ["1", "199", "60001", "-1", "+200", "", "2e3", "two"] {
            let why = bad.parse::<LeaseMs>().expect_err("refused");
            assert_eq!(why.to_string(), LEASE_RANGE, "{bad}");
        }
        assert!(!LeaseMs::new(0).expect("0 is allowed").leased());
    }

    /// `--global` takes off, local, or a loopback redis:// URL; anything else says why.
    #[test]
    fn engines_are_off_local_or_a_loopback_url() {
        assert_eq!("off".parse::<Engine>().ok(), Some(Engine::Off));
        assert_eq!("local".parse::<Engine>().ok(), Some(Engine::Local));
        let url = "redis://127.0.0.1:6379"
            .parse::<Engine>()
            .expect("loopback");
        assert_eq!(url.to_string(), "redis://127.0.0.1:6379");
        for (bad, says) in [
            ("redis://10.0.0.1:6379", "loopback"),
            ("redis://example.com:6379", "example.com"),
            ("redis://127.0.0.1", "port"),
            ("rediss://127.0.0.1:6379", "TLS"),
            ("http://127.0.0.1:6379", "scheme"),
            ("on", "expected off, local"),
        ] {
            // Whole in `{}`, as clap prints it.
            let why = bad.parse::<Engine>().expect_err("refused").to_string();
            assert!(why.contains(says), "{bad}: {why}");
        }
    }

    /// Requests go round robin: S1 to r1, S2 to r2, S3 to r1 with two replicas.
    #[test]
    fn round_robin_over_the_replicas() {
        let two = ReplicaCount::new(2).expect("allowed");
        let sent: Vec<_> = (1..=4).map(|n| ReplicaId::round_robin(n, two).0).collect();
        assert_eq!(sent, [1, 2, 1, 2]);
        let id: ReplicaId = serde_json::from_str("\"r3\"").expect("a replica");
        assert_eq!(id, ReplicaId(3));
        assert!(serde_json::from_str::<ReplicaId>("\"r5\"").is_err());
    }
}
