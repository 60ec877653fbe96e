//! The Lua scripts that make each permit operation one atomic step inside Redis.
//!
//! The scripts of the semaphore read the time from Redis's own `TIME`, never from a caller,
//! so replicas with different clocks agree on when a lease ends. Holders live in one sorted
//! set scored by the Redis time (ms) at which their lease ends, `+inf` for no lease; a holder
//! is held while `now < score`, so each of these scripts first removes the scores `<= now`,
//! and returns the Redis time it decided at, as evidence.
//!
//! Every script but `AGREE` takes the run's six keys, in this order: `KEYS[1]` the holders (a
//! sorted set), `KEYS[2]` the config (a hash), `KEYS[3]` each holder's permit slot (a hash),
//! `KEYS[4]` the fencing-token counter, `KEYS[5]` the dependency's newest accepted token per slot
//! (a hash), `KEYS[6]` the dependency's log of effects (a list).
//!
//! Every script that writes also sets the run's keys to expire ([`Scripts::new`]'s `ttl_ms`,
//! a little past the longest lease and run), so the keys of a run whose owner was killed
//! vanish on their own; a live run refreshes them with every call.

/// The Redis time in milliseconds, from `TIME` (seconds, microseconds).
const NOW: &str = "local t = redis.call('TIME')\n\
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n";

/// ARGV capacity, lease ms (0: none), holder.
/// Returns `{1, now, expiry|'inf', slot, token}` admitted, `{2, now}` already held, or
/// `{0, now, holder, score, ...}` refused, naming every holder with its expiry.
///
/// An admitted holder takes the lowest permit slot (0 to capacity − 1) no live holder has, and
/// the next fencing token: one counter for the whole run, so a token is newer than every
/// token issued before it, whatever its slot. A missing counter (first use, or lost from
/// Redis) starts at Redis's time in microseconds, so tokens still only grow after a loss.
const ACQUIRE: &str = "if redis.call('ZSCORE', KEYS[1], ARGV[3]) then\n\
  return {2, now}\n\
end\n\
local live = redis.call('ZRANGE', KEYS[1], 0, -1)\n\
if #live < tonumber(ARGV[1]) then\n\
  local used = {}\n\
  for _, h in ipairs(live) do\n\
    local s = redis.call('HGET', KEYS[3], h)\n\
    if s then used[tonumber(s)] = true end\n\
  end\n\
  local slot = 0\n\
  while used[slot] do slot = slot + 1 end\n\
  if redis.call('EXISTS', KEYS[4]) == 0 then\n\
    redis.call('SET', KEYS[4], t[1] .. string.format('%06d', tonumber(t[2])))\n\
  end\n\
  local token = redis.call('INCR', KEYS[4])\n\
  redis.call('HSET', KEYS[3], ARGV[3], slot)\n\
  local lease = tonumber(ARGV[2])\n\
  if lease > 0 then\n\
    redis.call('ZADD', KEYS[1], now + lease, ARGV[3])\n\
    return {1, now, now + lease, slot, token}\n\
  end\n\
  redis.call('ZADD', KEYS[1], '+inf', ARGV[3])\n\
  return {1, now, 'inf', slot, token}\n\
end\n\
local refused = {0, now}\n\
for _, v in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')) do\n\
  table.insert(refused, v)\n\
end\n\
return refused\n";

/// ARGV lease ms (0: none), holder.
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

/// ARGV holder. Returns `{removed (0|1), now}`; an expired holder was already swept, so it
/// counts as not held. Its slot is forgotten either way.
const RELEASE: &str = "redis.call('HDEL', KEYS[3], ARGV[1])\n\
return {redis.call('ZREM', KEYS[1], ARGV[1]), now}\n";

/// Returns `{now, holder, score, ...}`.
const HOLDERS: &str = "local held = {now}\n\
for _, v in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')) do\n\
  table.insert(held, v)\n\
end\n\
return held\n";

/// Returns `{live holders removed, now}` after deleting all six keys: the only keys a run has.
const CLEANUP: &str = "local live = redis.call('ZCARD', KEYS[1])\n\
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])\n\
return {live, now}\n";

/// The shared dependency every replica's work lands on: ARGV slot, token, holder, phase
/// (`begin` or `end`), fencing (`1` checks tokens, `0` accepts any). With fencing, an effect
/// whose token is older than the newest the dependency has accepted for its slot is refused;
/// the dependency knows only the tokens it was shown, never the holders. Every effect is
/// logged as JSON (tokens as text: Lua's numbers would print them rounded). Returns
/// `{1|0 accepted, newest accepted for the slot before it ('0': none)}`.
const EFFECT: &str = "local newest = redis.call('HGET', KEYS[5], ARGV[1]) or '0'\n\
local accepted = ARGV[5] ~= '1' or tonumber(ARGV[2]) >= tonumber(newest)\n\
if accepted and tonumber(ARGV[2]) > tonumber(newest) then\n\
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[2])\n\
end\n\
redis.call('RPUSH', KEYS[6], cjson.encode({holder = ARGV[3], phase = ARGV[4], \
  slot = ARGV[1], token = ARGV[2], accepted = accepted, newest = newest}))\n\
return {accepted and 1 or 0, newest}\n";

/// Returns the dependency's log, oldest first.
const EFFECTS: &str = "return redis.call('LRANGE', KEYS[6], 0, -1)\n";

/// `KEYS[1]` config; ARGV capacity, lease ms, key ttl ms. Records the run's settings if it has
/// none yet, and returns the recorded ones `{capacity, lease}` so a replica with other settings
/// is caught.
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
    pub(super) effect: redis::Script,
    pub(super) effects: redis::Script,
    sources: [String; 8],
}

impl Scripts {
    /// The scripts of one run whose keys expire `ttl_ms` after their last write.
    pub(super) fn new(ttl_ms: u64) -> Scripts {
        // The body runs as a function so that every return path refreshes every key's expiry.
        let kept = |prelude: &str, body: &str| {
            format!(
                "{prelude}local function decide()\n{body}end\n\
                 local reply = decide()\n\
                 for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, {ttl_ms}) end\n\
                 return reply\n"
            )
        };
        let sources = [
            kept(NOW, ACQUIRE),
            kept(NOW, RENEW),
            kept(NOW, RELEASE),
            kept(NOW, HOLDERS),
            // Deletes every key: nothing is left to expire.
            format!("{NOW}{CLEANUP}"),
            // Reads no time and sweeps nothing: KEYS[1] is the config hash, not the holders.
            AGREE.to_owned(),
            // The dependency is not the semaphore: it sweeps no holder and reads no time.
            kept("", EFFECT),
            EFFECTS.to_owned(),
        ];
        let [
            acquire,
            renew,
            release,
            holders,
            cleanup,
            agree,
            effect,
            effects,
        ] = sources.each_ref().map(|source| redis::Script::new(source));
        Scripts {
            acquire,
            renew,
            release,
            holders,
            cleanup,
            agree,
            effect,
            effects,
            sources,
        }
    }

    /// Every script's source, to load them all at once.
    pub(super) fn sources(&self) -> &[String] {
        &self.sources
    }
}
