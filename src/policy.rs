//! The two policies: which pools exist, how many permits each holds, and which route draws
//! from which (`docs/contract.md`, "Policies").

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use anyhow::anyhow;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// A policy for sharing the work permits between slow and fast work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One pool of `slots` permits, drawn from by `/slow` and `/fast` alike.
    Shared,
    /// A `slow` pool of `slots − 1` permits and a `fast` pool of one, reserved for `/fast`.
    Partitioned,
}

impl Mode {
    /// Both modes, in the order `--mode both` runs them.
    pub const ALL: [Mode; 2] = [Mode::Shared, Mode::Partitioned];

    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Partitioned => "partitioned",
        }
    }
}

/// A pool of work permits. The declaration order is the order pools are reported in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pool {
    /// The single pool of shared mode.
    Shared,
    /// Partitioned mode's pool for `/slow`.
    Slow,
    /// Partitioned mode's pool reserved for `/fast`.
    Fast,
}

impl Pool {
    /// The pool's name in the report and in 503 bodies.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Shared => "shared",
            Pool::Slow => "slow",
            Pool::Fast => "fast",
        }
    }
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One of the two fixture routes. They select a work class, not a tenant or an identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Route {
    /// `GET /slow`: work that waits at the slow gate once admitted.
    #[serde(rename = "/slow")]
    Slow,
    /// `GET /fast`: work that enters and leaves its permit at once.
    #[serde(rename = "/fast")]
    Fast,
}

impl Route {
    /// The URL path of the route.
    pub fn path(self) -> &'static str {
        match self {
            Route::Slow => "/slow",
            Route::Fast => "/fast",
        }
    }

    /// The route a URL path names, if any.
    pub(crate) fn from_path(path: &str) -> Option<Route> {
        match path {
            "/slow" => Some(Route::Slow),
            "/fast" => Some(Route::Fast),
            _ => None,
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}

/// Which server front serves a run: `--server`. The variants' docs are the command line's help.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Front {
    /// Hyper on Tokio: a held request parks a task
    #[default]
    Async,
    /// std::net with an OS thread per connection: a held request blocks a thread
    Threaded,
}

impl Front {
    /// Both fronts, async first.
    pub const ALL: [Front; 2] = [Front::Async, Front::Threaded];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Front::Async => "async",
            Front::Threaded => "threaded",
        }
    }

    /// The report's description of the front.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Front::Async => "Hyper 1, HTTP/1.1 on 127.0.0.1: a Tokio task per connection",
            Front::Threaded => {
                "std::net and httparse, HTTP/1.1 on 127.0.0.1: an OS thread per connection"
            }
        }
    }
}

/// A small whole number that is valid only from `MIN` through `MAX`. A value of this type is
/// already checked: the command line, the tests and the library all go through `new` or `parse`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(into = "u8", try_from = "u8")]
pub struct Bounded<const MIN: u8, const MAX: u8>(u8);

/// Total work permits of a policy: 2 through 4.
pub type Slots = Bounded<2, 4>;

/// Slow requests sent and held at the gate: 1 through 4.
pub type Held = Bounded<1, 4>;

impl<const MIN: u8, const MAX: u8> Bounded<MIN, MAX> {
    /// The largest allowed value.
    pub const MAX: u8 = MAX;

    /// The value, if it is within the allowed range.
    pub fn new(value: u8) -> Option<Self> {
        (MIN..=MAX).contains(&value).then_some(Self(value))
    }

    /// Every allowed value, smallest first.
    pub fn all() -> impl Iterator<Item = Self> {
        (MIN..=MAX).map(Self)
    }

    /// The value as a count.
    pub fn get(self) -> usize {
        usize::from(self.0)
    }
}

impl<const MIN: u8, const MAX: u8> From<Bounded<MIN, MAX>> for u8 {
    fn from(value: Bounded<MIN, MAX>) -> u8 {
        value.0
    }
}

impl<const MIN: u8, const MAX: u8> TryFrom<u8> for Bounded<MIN, MAX> {
    type Error = anyhow::Error;

    /// A saved report's value, checked again: a report read back holds only allowed inputs.
    fn try_from(value: u8) -> anyhow::Result<Self> {
        Self::new(value).ok_or_else(|| anyhow!("expected a whole number from {MIN} through {MAX}"))
    }
}

impl<const MIN: u8, const MAX: u8> FromStr for Bounded<MIN, MAX> {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        digits_only::<u8>(text)
            .and_then(Self::new)
            .ok_or_else(|| anyhow!("expected a whole number from {MIN} through {MAX}"))
    }
}

/// `text` as a number if it is digits only: the integers' own parsers would also take a
/// leading `+`. `None` for anything else, or a number too large for `N`.
pub(crate) fn digits_only<N: FromStr>(text: &str) -> Option<N> {
    Some(text)
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
}

impl<const MIN: u8, const MAX: u8> fmt::Display for Bounded<MIN, MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Which policies one invocation runs: `--mode`. Each runs on its own fresh server. The
/// variants' docs are the command line's help.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ModeChoice {
    /// One pool of all permits, for /slow and /fast alike
    Shared,
    /// A slow pool of all permits but one, and one permit reserved for /fast
    Partitioned,
    /// Shared, then partitioned
    #[default]
    Both,
}

impl ModeChoice {
    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            ModeChoice::Shared => "shared",
            ModeChoice::Partitioned => "partitioned",
            ModeChoice::Both => "both",
        }
    }

    /// The modes to run, in order.
    pub fn modes(self) -> &'static [Mode] {
        match self {
            ModeChoice::Shared => &[Mode::Shared],
            ModeChoice::Partitioned => &[Mode::Partitioned],
            ModeChoice::Both => &Mode::ALL,
        }
    }
}

/// The inputs of one invocation, already checked: the report's `inputs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    /// Which policies to run.
    pub mode: ModeChoice,
    /// Total work permits of each policy.
    pub slots: Slots,
    /// Slow requests sent and held at the gate.
    pub held: Held,
}

impl Inputs {
    /// The policy these inputs give `mode`: the command line's permits, shared as `mode` says.
    pub(crate) fn policy(&self, mode: Mode) -> Policy {
        Policy {
            mode,
            slots: self.slots,
        }
    }

    /// The command-line flags that give these inputs: `--mode both --slots 2 --held 2`.
    pub(crate) fn flags(&self) -> String {
        format!(
            "--mode {} --slots {} --held {}",
            self.mode.name(),
            self.slots,
            self.held
        )
    }
}

impl Default for Inputs {
    /// The workshop's default run: both policies, two permits, two held slow requests.
    fn default() -> Self {
        Inputs {
            mode: ModeChoice::Both,
            slots: Bounded(2),
            held: Bounded(2),
        }
    }
}

/// A mode with its total number of permits: everything the server needs to build its pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// How the permits are shared.
    pub mode: Mode,
    /// The total number of permits.
    pub slots: Slots,
}

impl Policy {
    /// The pools of this policy, in report order.
    pub fn pools(self) -> &'static [Pool] {
        match self.mode {
            Mode::Shared => &[Pool::Shared],
            Mode::Partitioned => &[Pool::Slow, Pool::Fast],
        }
    }

    /// How many permits `pool` holds under this policy (0 for a pool it does not have).
    pub fn capacity(self, pool: Pool) -> usize {
        match (self.mode, pool) {
            (Mode::Shared, Pool::Shared) => self.slots.get(),
            // One permit is reserved for fast work; `Slots` starts at 2, so the slow pool keeps one.
            (Mode::Partitioned, Pool::Slow) => self.slots.get() - 1,
            (Mode::Partitioned, Pool::Fast) => 1,
            _ => 0,
        }
    }

    /// A count for each pool of this policy, in report order.
    pub(crate) fn per_pool(self, count: impl Fn(Pool) -> usize) -> BTreeMap<Pool, usize> {
        self.pools()
            .iter()
            .map(|&pool| (pool, count(pool)))
            .collect()
    }

    /// Permits per pool.
    pub fn capacities(self) -> BTreeMap<Pool, usize> {
        self.per_pool(|pool| self.capacity(pool))
    }

    /// The pool a route draws its permit from.
    pub(crate) fn pool_for(self, route: Route) -> Pool {
        Policy::route_pool(self.mode, route)
    }

    /// The pool `route` draws from under `mode`, whatever the capacities.
    fn route_pool(mode: Mode, route: Route) -> Pool {
        match (mode, route) {
            (Mode::Shared, _) => Pool::Shared,
            (Mode::Partitioned, Route::Slow) => Pool::Slow,
            (Mode::Partitioned, Route::Fast) => Pool::Fast,
        }
    }
}

/// The pools of one work section, their capacities and which route draws from which: a lab
/// policy's, or a shared pool of any size for an instrument that measures holding rather than
/// refusing (`hold`), or a replica's own pool (`replicas`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Allocation {
    mode: Mode,
    capacities: BTreeMap<Pool, usize>,
}

impl Allocation {
    /// One shared pool of `capacity` permits for both routes.
    pub(crate) fn shared(capacity: usize) -> Self {
        Allocation {
            mode: Mode::Shared,
            capacities: BTreeMap::from([(Pool::Shared, capacity)]),
        }
    }

    /// The pools, in report order.
    pub(crate) fn pools(&self) -> impl Iterator<Item = Pool> + '_ {
        self.capacities.keys().copied()
    }

    /// Permits per pool.
    pub(crate) fn capacities(&self) -> BTreeMap<Pool, usize> {
        self.capacities.clone()
    }

    /// A count for each pool, in report order.
    pub(crate) fn per_pool(&self, count: impl Fn(Pool) -> usize) -> BTreeMap<Pool, usize> {
        self.pools().map(|pool| (pool, count(pool))).collect()
    }

    /// The pool a route draws its permit from.
    pub(crate) fn pool_for(&self, route: Route) -> Pool {
        Policy::route_pool(self.mode, route)
    }
}

impl From<Policy> for Allocation {
    fn from(policy: Policy) -> Self {
        Allocation {
            mode: policy.mode,
            capacities: policy.capacities(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_mode_has_one_pool_of_all_slots_for_both_routes() {
        for slots in Slots::all() {
            let policy = Policy {
                mode: Mode::Shared,
                slots,
            };
            assert_eq!(policy.pools(), &[Pool::Shared]);
            assert_eq!(policy.capacity(Pool::Shared), slots.get());
            assert_eq!(policy.pool_for(Route::Slow), Pool::Shared);
            assert_eq!(policy.pool_for(Route::Fast), Pool::Shared);
        }
    }

    #[test]
    fn partitioned_mode_reserves_one_permit_for_fast_work() {
        for slots in Slots::all() {
            let policy = Policy {
                mode: Mode::Partitioned,
                slots,
            };
            assert_eq!(policy.pools(), &[Pool::Slow, Pool::Fast]);
            assert_eq!(policy.capacity(Pool::Slow), slots.get() - 1);
            assert_eq!(policy.capacity(Pool::Fast), 1);
            assert_eq!(policy.capacity(Pool::Shared), 0);
            assert_eq!(policy.pool_for(Route::Slow), Pool::Slow);
            assert_eq!(policy.pool_for(Route::Fast), Pool::Fast);
        }
    }

    #[test]
    fn bounded_values_accept_only_their_range() {
        let slots: Vec<_> = Slots::all().map(Slots::get).collect();
        assert_eq!(slots, [2, 3, 4]);
        let held: Vec<_> = Held::all().map(Held::get).collect();
        assert_eq!(held, [1, 2, 3, 4]);
        for bad in [
            "0", "1", "5", "-1", "+2", "256", "", " 2", "2.0", "two", "٣",
        ] {
            assert!(
                bad.parse::<Slots>().is_err(),
                "--slots {bad:?} was accepted"
            );
        }
        for bad in ["0", "5", "-1", "", "1e0", "４"] {
            assert!(bad.parse::<Held>().is_err(), "--held {bad:?} was accepted");
        }
        assert_eq!("3".parse::<Slots>().ok(), Some(Bounded(3)));
        assert_eq!("1".parse::<Held>().ok(), Some(Bounded(1)));
        assert_eq!(
            "9".parse::<Held>().map_err(|e| e.to_string()),
            Err("expected a whole number from 1 through 4".to_owned())
        );
    }

    #[test]
    fn routes_round_trip_through_their_paths() {
        for route in [Route::Slow, Route::Fast] {
            assert_eq!(Route::from_path(route.path()), Some(route));
        }
        assert_eq!(Route::from_path("/"), None);
        assert_eq!(Route::from_path("/slow/"), None);
    }
}
