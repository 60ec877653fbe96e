//! `hold`'s model, the preflight: a pure function of the ceilings read, saying what each front
//! can reach here and which (front, count) pairs run. A count beyond a front's ceiling is not
//! run on that front, and says which ceiling and its value.

use std::collections::BTreeMap;

use super::report::{FrontReach, MachineLimits, Preflight};
use crate::limits::{self, Limits, TooMany};
use crate::policy::Front;

/// What the preflight decided for one count on one front.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HoldPlan {
    pub(crate) front: Front,
    pub(crate) held: u32,
    /// The accept queue the front's listener asks for: room for every caller, and at least
    /// the 128 `std` asks for, within `net.core.somaxconn`.
    pub(crate) backlog: u32,
    /// `Err` names the ceiling that refuses it.
    pub(crate) runs: Result<(), TooMany>,
}

/// The accept queue for `held` callers that connect at once: at least 128, and as many as
/// `somaxconn` allows (the kernel cuts a longer one short, so a lower `somaxconn` wins).
pub(crate) fn backlog(held: u32, somaxconn: u64) -> u32 {
    let most = u32::try_from(somaxconn).unwrap_or(u32::MAX).max(1);
    held.max(128).min(most)
}

/// The preflight of `fronts` holding each of `counts` under `limits`.
pub(crate) fn plan(
    limits: &Limits,
    fronts: &[Front],
    counts: &[u32],
) -> (Preflight, Vec<HoldPlan>) {
    let reach = Front::ALL
        .into_iter()
        .map(|front| {
            let reach = limits::reach(limits, front).map(|reach| FrontReach {
                held: reach.held,
                ceiling: reach.ceiling.name().to_owned(),
                value: reach.value,
            });
            (front, reach)
        })
        .collect::<BTreeMap<_, _>>();
    let preflight = Preflight {
        limits: MachineLimits {
            max_map_count: limits.max_map_count,
            pid_max: limits.pid_max,
            threads_max: limits.threads_max,
            threads_now: limits.threads_now,
            nproc: limits.nproc.soft,
            user_threads_now: limits.user_threads_now,
            nproc_enforced: limits.nproc_enforced,
            nofile: limits.nofile.soft,
            nofile_hard: limits.nofile.hard,
            local_ports: [limits.local_ports.0, limits.local_ports.1],
            somaxconn: limits.somaxconn,
            address_space: limits.address_space.soft,
            base_address_space_kib: limits.base_address_space_kib(),
            data: limits.data.soft,
        },
        reach,
        ports_per_address: limits::ports_per_address(limits),
    };
    let planned = fronts
        .iter()
        .flat_map(|&front| {
            counts.iter().map(move |&held| HoldPlan {
                front,
                held,
                backlog: backlog(held, limits.somaxconn),
                runs: limits::check(limits, front, u64::from(held)),
            })
        })
        .collect();
    (preflight, planned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Rlimit;
    use crate::limits::tests::UNLIMITED;

    /// A machine like the one of the limits' tests, with more pids, and tasks and descriptors
    /// plentiful so that memory maps bind first.
    fn limits() -> Limits {
        let plenty = Rlimit {
            soft: Some(1_048_576),
            hard: Some(1_048_576),
        };
        Limits {
            pid_max: 4_194_304,
            nproc: plenty,
            nofile: plenty,
            ..crate::limits::tests::limits()
        }
    }

    /// `vm.max_map_count` refuses 20 000 held threads, naming itself and its value, while the
    /// async front runs the same count; counts within the ceiling run on both.
    #[test]
    fn a_count_beyond_max_map_count_is_not_run_on_threads() {
        let (preflight, planned) = plan(&limits(), &Front::ALL, &[10, 14_680, 14_681, 20_000]);
        let threaded = preflight.reach[&Front::Threaded]
            .clone()
            .expect("a ceiling");
        assert_eq!(
            (threaded.held, threaded.ceiling.as_str(), threaded.value),
            (14_680, "vm.max_map_count", 65_530)
        );
        let runs = |front, held| {
            let found = planned.iter().find(|p| p.front == front && p.held == held);
            found.expect("planned").runs
        };
        for held in [10, 14_680, 14_681, 20_000] {
            assert_eq!(runs(Front::Async, held), Ok(()), "async {held}");
        }
        assert_eq!(runs(Front::Threaded, 14_680), Ok(()));
        let refused = runs(Front::Threaded, 20_000)
            .expect_err("beyond the maps")
            .to_string();
        assert!(refused.contains("vm.max_map_count = 65530"), "{refused}");
        assert!(refused.contains("at most 14680"), "{refused}");
        assert!(runs(Front::Threaded, 14_681).is_err());
        assert_eq!(planned.len(), 8, "every front and count is planned once");
    }

    /// With this machine's RLIMIT_NOFILE (20 000) descriptors bind the async front first and
    /// memory maps the threaded one, which takes one descriptor per held request as measured:
    /// 10 000 held threads run here; 18 000 held tasks do not. The report keeps every ceiling
    /// read.
    #[test]
    fn descriptors_bind_tasks_and_maps_bind_threads_here() {
        let twenty = Rlimit {
            soft: Some(20_000),
            hard: Some(20_000),
        };
        let limits = Limits {
            nofile: twenty,
            ..limits()
        };
        let (preflight, planned) = plan(&limits, &Front::ALL, &[10_000, 18_000]);
        let reach = |front| preflight.reach[&front].clone().expect("a ceiling");
        assert_eq!(
            (reach(Front::Async).held, reach(Front::Threaded).held),
            (17_936, 14_680)
        );
        assert_eq!(reach(Front::Async).ceiling, "RLIMIT_NOFILE");
        assert_eq!(reach(Front::Threaded).ceiling, "vm.max_map_count");
        assert_eq!(preflight.limits.nofile, Some(20_000));
        assert_eq!(preflight.limits.local_ports, [32_768, 60_999]);
        assert_eq!(preflight.ports_per_address, 12_705);
        let runs = |front, held| {
            let found = planned.iter().find(|p| p.front == front && p.held == held);
            found.expect("planned").runs
        };
        assert_eq!(runs(Front::Threaded, 10_000), Ok(()));
        assert_eq!(runs(Front::Async, 10_000), Ok(()));
        let refused = runs(Front::Async, 18_000)
            .expect_err("beyond the descriptors")
            .to_string();
        assert!(refused.contains("RLIMIT_NOFILE = 20000"), "{refused}");
    }

    /// A narrow ephemeral-port range is a ceiling too: the callers go out from at most 254
    /// source addresses, so a count that would need more is not run (before, it started a
    /// front and then failed the lab when the callers could not be made).
    #[test]
    fn a_count_beyond_the_source_ports_is_not_run() {
        let limits = Limits {
            local_ports: (60_000, 60_099),
            ..limits()
        };
        // 100 ports, 50 of them tried first, less a tenth: 45 per address, 11 430 over 254
        // addresses.
        let (preflight, planned) = plan(&limits, &[Front::Async], &[11_430, 11_431]);
        let reach = preflight.reach[&Front::Async].clone().expect("a ceiling");
        assert_eq!(
            (reach.held, reach.ceiling.as_str(), reach.value),
            (11_430, "net.ipv4.ip_local_port_range", 100)
        );
        assert_eq!(planned[0].runs, Ok(()));
        let refused = planned[1].runs.expect_err("beyond the ports").to_string();
        assert!(
            refused.contains("net.ipv4.ip_local_port_range = 100"),
            "{refused}"
        );
        assert!(limits::source_addresses_needed(11_430, &limits) <= 254);
    }

    /// The accept queue holds every caller, and at least std's 128, up to `somaxconn`.
    #[test]
    fn the_backlog_is_sized_for_the_count() {
        assert_eq!(backlog(10, 4_096), 128);
        assert_eq!(backlog(1_000, 4_096), 1_000);
        assert_eq!(backlog(10_000, 4_096), 4_096);
        assert_eq!(backlog(10_000, 100), 100);
        assert_eq!(backlog(10, 0), 1);
        let (_, planned) = plan(&limits(), &[Front::Async], &[10_000]);
        assert_eq!(planned[0].backlog, 4_096);
    }

    /// With the rlimits unlimited only the ephemeral ports bind, far beyond any count.
    #[test]
    fn unlimited_ceilings_run_everything() {
        let limits = Limits {
            nofile: UNLIMITED,
            ..limits()
        };
        let (preflight, planned) = plan(&limits, &[Front::Async], &[50_000]);
        let reach = preflight.reach[&Front::Async].clone().expect("the ports");
        // 12 705 ports per address, 254 addresses.
        assert_eq!(
            (reach.held, reach.ceiling.as_str()),
            (3_227_070, "net.ipv4.ip_local_port_range")
        );
        assert_eq!(planned[0].runs, Ok(()));
    }
}
