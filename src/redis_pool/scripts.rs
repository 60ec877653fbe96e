//! The Lua scripts that make each permit operation one atomic step inside Redis.
//!
//! Every script reads the time from Redis's own `TIME`, never from a caller, so replicas with
//! different clocks agree on when a lease ends. Holders live in one sorted set scored by the
//! Redis time (ms) at which their lease ends, `+inf` for no lease; a holder is held while
//! `now < score`, so every script first removes the scores `<= now`. Each returns the Redis
//! time it decided at, as evidence.
//!
//! Every script that writes also sets the run's keys to expire ([`Scripts::new`]'s `ttl_ms`,
//! a little past the longest lease and run), so the keys of a run whose owner was killed
//! vanish on their own; a live run refreshes them with every call.

/// The Redis time in milliseconds, from `TIME` (seconds, microseconds).
const NOW: &str = "local t = redis.call('TIME')\n\
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n";

/// KEYS[1] holders, KEYS[2] config; ARGV capacity, lease ms (0: none), holder.
/// Returns `{1, now, expiry|'inf'}` admitted, `{2, now}` already held, or
/// `{0, now, holder, score, ...}` refused, naming every holder with its expiry.
const ACQUIRE: &str = "if redis.call('ZSCORE', KEYS[1], ARGV[3]) then\n\
  return {2, now}\n\
end\n\
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then\n\
  local lease = tonumber(ARGV[2])\n\
  if lease > 0 then\n\
    redis.call('ZADD', KEYS[1], now + lease, ARGV[3])\n\
    return {1, now, now + lease}\n\
  end\n\
  redis.call('ZADD', KEYS[1], '+inf', ARGV[3])\n\
  return {1, now, 'inf'}\n\
end\n\
local refused = {0, now}\n\
for _, v in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')) do\n\
  table.insert(refused, v)\n\
end\n\
return refused\n";

/// KEYS[1] holders, KEYS[2] config; ARGV lease ms (0: none), holder.
/// Returns `{1, now, expiry|'inf'}` if the holder was still held (its expiry reset to now +
/// lease), or `{0, now}` if it had expired or been removed. `XX` never re-adds a holder.
const RENEW: &str = "if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then\n\
  return {0, now}\n\
end\n\
local lease = tonumber(ARGV[1])\n\
if lease > 0 then\n\
  redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[2])\n\
  return {1, now, now + lease}\n\
end\n\
return {1, now, 'inf'}\n";

/// KEYS[1] holders, KEYS[2] config; ARGV holder. Returns `{removed (0|1), now}`; an expired holder was already
/// swept, so it counts as not held.
const RELEASE: &str = "return {redis.call('ZREM', KEYS[1], ARGV[1]), now}\n";

/// KEYS[1] holders, KEYS[2] config. Returns `{now, holder, score, ...}`.
const HOLDERS: &str = "local held = {now}\n\
for _, v in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')) do\n\
  table.insert(held, v)\n\
end\n\
return held\n";

/// KEYS[1] holders, KEYS[2] config. Returns `{live holders removed, now}` after deleting both
/// keys: the only keys a run has.
const CLEANUP: &str = "local live = redis.call('ZCARD', KEYS[1])\n\
redis.call('DEL', KEYS[1], KEYS[2])\n\
return {live, now}\n";

/// KEYS[1] config; ARGV capacity, lease ms, key ttl ms. Records the run's settings if it has none yet, and
/// returns the recorded ones `{capacity, lease}` so a replica with other settings is caught.
const AGREE: &str = "local cur = redis.call('HMGET', KEYS[1], 'capacity', 'lease_ms')\n\
if cur[1] then\n\
  return cur\n\
end\n\
redis.call('HSET', KEYS[1], 'capacity', ARGV[1], 'lease_ms', ARGV[2])\n\
redis.call('PEXPIRE', KEYS[1], ARGV[3])\n\
return {ARGV[1], ARGV[2]}\n";

/// The scripts; `redis::Script` sends `EVALSHA` and loads the script on a miss. All of them
/// are loaded once when a replica connects ([`Scripts::sources`]), so that a call left queued in a
/// stalled Redis after its caller is gone (the compensating release of a timed-out acquire)
/// never meets `NOSCRIPT`, whose retry nobody would make.
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) acquire: redis::Script,
    pub(super) renew: redis::Script,
    pub(super) release: redis::Script,
    pub(super) holders: redis::Script,
    pub(super) cleanup: redis::Script,
    pub(super) agree: redis::Script,
    sources: [String; 6],
}

impl Scripts {
    /// The scripts of one run whose keys expire `ttl_ms` after their last write.
    pub(super) fn new(ttl_ms: u64) -> Scripts {
        // The body runs as a function so that every return path refreshes both keys' expiry.
        let kept = |body: &str| {
            format!(
                "{NOW}local function decide()\n{body}end\n\
                 local reply = decide()\n\
                 redis.call('PEXPIRE', KEYS[1], {ttl_ms})\n\
                 redis.call('PEXPIRE', KEYS[2], {ttl_ms})\n\
                 return reply\n"
            )
        };
        let sources = [
            kept(ACQUIRE),
            kept(RENEW),
            kept(RELEASE),
            kept(HOLDERS),
            // Deletes both keys: nothing is left to expire.
            format!("{NOW}{CLEANUP}"),
            // Reads no time and sweeps nothing: KEYS[1] is the config hash, not the holders.
            AGREE.to_owned(),
        ];
        let [acquire, renew, release, holders, cleanup, agree] =
            sources.each_ref().map(|source| redis::Script::new(source));
        Scripts {
            acquire,
            renew,
            release,
            holders,
            cleanup,
            agree,
            sources,
        }
    }

    /// Every script's source, to load them all at once.
    pub(super) fn sources(&self) -> &[String] {
        &self.sources
    }
}
