/**
 * The fleet-wide rate decision, made atomically on the store: one script call per decision, so
 * two edges deciding for one client at the same instant cannot both spend its last token. The
 * bucket is a hash — `t`, the client's theoretical arrival time, and `d`, its denials in a row —
 * under a key that is a salted hash of tenant and client. The script reads the store's own clock
 * (`TIME`), so the edges' clocks never have to agree. Every write sets the key to expire when the
 * arrival time has passed: by then the bucket is full again, a fresh key decides the same, and the
 * store cleans itself. Times are whole microseconds (Lua numbers are doubles: exact to 2^53, ~285
 * years of epoch microseconds).
 *
 * The rule is `ClientTable.take()`'s: allowed when `max(tat, now) + interval - now <= tolerance`.
 *
 * @module
 */

/** KEYS[1] the bucket; ARGV interval and tolerance (µs). Returns {allowed, ahead µs, denials}. */
export const GCRA_SCRIPT = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local state = redis.call('HMGET', KEYS[1], 't', 'd')
local tat = tonumber(state[1]) or now
local denials = tonumber(state[2]) or 0
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local base = math.max(tat, now)
local next = base + interval
if next - now > tolerance then
  denials = denials + 1
  redis.call('HSET', KEYS[1], 'd', denials)
  redis.call('PEXPIRE', KEYS[1], math.ceil((base - now) / 1000) + 1)
  return {0, base - now, denials}
end
redis.call('HSET', KEYS[1], 't', next, 'd', 0)
redis.call('PEXPIRE', KEYS[1], math.ceil((next - now) / 1000) + 1)
return {1, next - now, 0}
`;
