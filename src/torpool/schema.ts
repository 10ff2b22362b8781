/**
 * The Tor pool's config file (`pool.yaml`). It says `role: torpool` so `check` and `flags` can tell
 * it from an edge's or a hub's config. Unknown keys are errors, as in every Portcullis file; the
 * rules that span fields (port ranges, min ≤ max, thresholds) are checked in `config.ts`.
 *
 * @module
 */
import { isIP } from "node:net";
import * as v from "valibot";
import { Port, SocketPath, Text, wholeNumber } from "../config/fields.ts";

/** The most Tor instances one pool runs (each is a process with its own circuits and cache). */
export const MAX_POOL_INSTANCES = 64;

/** An absolute path: the run grant names exactly this file, so nothing is looked up on `PATH`. */
const AbsolutePath = v.pipe(
  v.string("Expected an absolute path"),
  v.check((text) => text.startsWith("/"), "Expected an absolute path (run is granted per path)"),
  v.check((text) => !/[,\0\n]/.test(text), "A path here cannot hold a comma, NUL or newline"),
);

/** A loopback IP literal: the SOCKS and control ports are the pool's own, never the network's. */
const Loopback = v.pipe(
  v.string("Expected an IP address"),
  v.check(
    (text) => isLoopbackLiteral(text),
    "Expected a loopback address literal (127.0.0.0/8 or ::1): Tor's ports serve this host only",
  ),
);

/** A fraction from 0 to 1. */
const Fraction = v.pipe(
  v.number("Expected a number from 0 to 1"),
  v.minValue(0, "Expected a number from 0 to 1"),
  v.maxValue(1, "Expected a number from 0 to 1"),
);

const Instances = wholeNumber(1, MAX_POOL_INSTANCES, "a number of instances");

/** The pool config schema. */
export const PoolConfigSchema = v.strictObject({
  /** Marks the file as a Tor pool's. */
  role: v.literal("torpool", 'Expected "torpool"'),
  /** The Tor binary; the only program the role may run. */
  tor_binary: v.optional(AbsolutePath, "/usr/sbin/tor"),
  /** One `instance-<i>` folder per instance (mode 0700) below this one. */
  data_dir: Text,
  /** The pool's JSON API (`/backends`, `/health`, `/scale`, `/stats`), mode 0600. */
  api_socket: SocketPath,
  /** Where every instance's SOCKS and control ports listen. */
  listen: v.optional(Loopback, "127.0.0.1"),
  /** Instance i's SOCKS port is `socks_base_port + i`. */
  socks_base_port: Port,
  /** Instance i's control port is `control_base_port + i`. */
  control_base_port: Port,
  min_instances: Instances,
  max_instances: Instances,
  /** How often each instance is asked over its control port how it is doing. */
  probe_interval_ms: v.optional(wholeNumber(50, 3_600_000), 30_000),
  /** An instance whose SOCKS port refuses connections for longer than this is dead. */
  dead_refusal_ms: v.optional(wholeNumber(50, 600_000), 5_000),
  /** An instance is busy at or above this many active streams. */
  busy_streams: v.optional(wholeNumber(1, 1_000_000), 32),
  /** Add an instance when this fraction of live instances was busy for one probe interval. */
  scale_up_threshold: v.optional(Fraction, 0.8),
  /** Remove one when fewer than this fraction were busy for `scale_cooldown_ms`. */
  scale_down_threshold: v.optional(Fraction, 0.2),
  scale_cooldown_ms: v.optional(wholeNumber(0, 86_400_000), 300_000),
  /**
   * Onion client authorization: a folder of `<onion address>.key` files, each holding that onion
   * service's base32 x25519 private key (mode 0600), written into every instance's
   * `ClientOnionAuthDir`. Kept beside the pool, never in the runtime folder a hub serves to edges.
   */
  client_auth_dir: v.optional(Text),
});

/** The pool config as validated (defaults applied, paths as written). */
export type PoolConfigInput = v.InferOutput<typeof PoolConfigSchema>;

/**
 * True for a loopback IP literal: 127.0.0.0/8 or ::1.
 *
 * @example
 * ```ts
 * import { isLoopbackLiteral } from "./schema.ts";
 * isLoopbackLiteral("127.0.0.1"); // true
 * isLoopbackLiteral("10.0.0.1"); // false
 * ```
 */
export function isLoopbackLiteral(text: string): boolean {
  if (isIP(text) === 4) return text.startsWith("127.");
  if (isIP(text) === 6) return /^(0{0,4}:){2,7}0{0,3}1$|^::1$/.test(text) && !text.includes("%");
  return false;
}
