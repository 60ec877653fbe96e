//! The Lua scripts that make each permit operation one atomic step inside Redis.
//!
//! Every script reads the time from Redis's own `TIME`, never from a caller, so replicas with
//! different clocks agree on when a lease ends. Holders live in one sorted set scored by the
//! Redis time (ms) at which their lease ends, `+inf` for no lease; a holder is held while
//! `now < score`, so every script first removes the scores `<= now`. Each returns the Redis
//! time it decided at, as evidence.

/// The Redis time in milliseconds, from `TIME` (seconds, microseconds).
const NOW: &str = "local t = redis.call('TIME')\n\
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n";

/// KEYS[1] holders; ARGV capacity, lease ms (0: none), holder.
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

/// KEYS[1] holders; ARGV lease ms (0: none), holder.
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

/// KEYS[1] holders; ARGV holder. Returns `{removed (0|1), now}`; an expired holder was already
/// swept, so it counts as not held.
const RELEASE: &str = "return {redis.call('ZREM', KEYS[1], ARGV[1]), now}\n";

/// KEYS[1] holders. Returns `{now, holder, score, ...}`.
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

/// KEYS[1] config; ARGV capacity, lease ms. Records the run's settings if it has none yet, and
/// returns the recorded ones `{capacity, lease}` so a replica with other settings is caught.
const AGREE: &str = "local cur = redis.call('HMGET', KEYS[1], 'capacity', 'lease_ms')\n\
if cur[1] then\n\
  return cur\n\
end\n\
redis.call('HSET', KEYS[1], 'capacity', ARGV[1], 'lease_ms', ARGV[2])\n\
return {ARGV[1], ARGV[2]}\n";

/// The loaded scripts; `redis::Script` sends `EVALSHA` and loads the script on a miss.
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) acquire: redis::Script,
    pub(super) renew: redis::Script,
    pub(super) release: redis::Script,
    pub(super) holders: redis::Script,
    pub(super) cleanup: redis::Script,
    pub(super) agree: redis::Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        let swept = |body: &str| redis::Script::new(&format!("{NOW}{body}"));
        Scripts {
            acquire: swept(ACQUIRE),
            renew: swept(RENEW),
            release: swept(RELEASE),
            holders: swept(HOLDERS),
            cleanup: swept(CLEANUP),
            // Reads no time and sweeps nothing: KEYS[1] is the config hash, not the holders.
            agree: redis::Script::new(AGREE),
        }
    }
}
