/**
 * The metrics page's families for a remote edge's pending set: a set received from the hub that
 * the edge could not write to its cache (a full or read-only disk) and so does not serve yet
 * (live/followed_sets.ts). An edge in that state serves its old set and says so nowhere else a
 * scraper looks; issue 32 found one that the hub, too, believed current. The error is a fixed kind
 * (`no_space`, `read_only`, `permission`, `quota`, `io`), so its label stays bounded; the message is
 * in `/v1/config`.
 *
 * @module
 */
import { counter, escapeLabel, type Family, gauge, only } from "./exposition.ts";

/** A remote edge's pending set, as its follower reports it. */
export interface PendingFacts {
  /** The waiting set's hash; absent when none waits. */
  readonly hash?: string;
  /** Why its last try failed (a fixed kind). */
  readonly fault?: string;
  /** Tries after the first that failed. */
  readonly retries: number;
  /** When its first try failed (ms since the epoch). */
  readonly since?: number;
  /** Cache writes that failed since start. */
  readonly failures: number;
}

/**
 * The pending set's families.
 *
 * @example
 * ```ts
 * import { pendingFamilies } from "./metrics_pending.ts";
 * pendingFamilies({ retries: 0, failures: 0 })[0].samples; // [["", 0]]
 * ```
 */
export function pendingFamilies(facts: PendingFacts): Family[] {
  const waiting = facts.hash !== undefined;
  const info: [string, number][] = waiting
    ? [[`{hash="${escapeLabel(facts.hash!)}",error="${escapeLabel(facts.fault ?? "io")}"}`, 1]]
    : [];
  return [
    gauge(
      "config_pending",
      "1 while a set received from the hub waits for its cache folder to be writable.",
      only(waiting ? 1 : 0),
    ),
    gauge(
      "config_pending_info",
      "The waiting set's hash and why its last try failed (1; no sample when none waits).",
      info,
    ),
    gauge(
      "config_pending_retries",
      "Tries of the waiting set after the first that failed (0 when none waits).",
      only(waiting ? facts.retries : 0),
    ),
    gauge(
      "config_pending_since_timestamp_seconds",
      "When the waiting set's first try failed, Unix time (0 when none waits).",
      only(waiting && facts.since ? Math.floor(facts.since / 1000) : 0),
    ),
    counter(
      "config_cache_write_failures_total",
      "Writes of a received set to the cache folder that failed.",
      only(facts.failures),
    ),
  ];
}
