/**
 * The door's config file (`role: door`). A door holds less than an edge on purpose: public
 * listeners (TLS only for the door's own hostname), a cover page, the hub it follows and where it
 * caches the view — no tenants, no upstreams, no pool, so there is nothing else to leak. Unknown
 * keys are errors, as in every Portcullis file.
 *
 * @module
 */
import * as v from "valibot";
import { HubClient, Listener } from "../config/bootstrap.ts";
import { IpLiteral, Port, Text, wholeNumber } from "../config/fields.ts";

const NodeId = v.pipe(
  v.string("Expected text"),
  v.regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, "Expected 1-63 letters, digits, '.', '_' or '-'"),
);

/** A public listener: TCP, with TLS for the door's own hostname when `tls` is set. */
const PublicListener = v.strictObject({
  hostname: IpLiteral,
  port: Port,
  tls: v.optional(v.strictObject({ cert_file: Text, key_file: Text })),
});

/**
 * The hub the door follows: the edge's hub block (`https` with a client certificate, or `http`
 * with a token file; registration, renewal, the grace after a revocation), its backoff capped at
 * 30 s — a door that lost its hub should not wait longer to hear of a new view or a revocation.
 */
const DoorHub = v.strictObject({
  ...HubClient.entries,
  /** Reconnection backoff: doubles from the first delay up to the cap (30 s at most). */
  backoff_initial_ms: v.optional(wholeNumber(1, 30_000), 250),
  backoff_max_ms: v.optional(wholeNumber(1, 30_000), 30_000),
});

/** The door config schema. */
export const DoorConfigSchema = v.strictObject({
  /** Marks the file as a door's. */
  role: v.literal("door", 'Expected "door"'),
  node_id: NodeId,
  listen: v.pipe(
    v.array(PublicListener, "Expected a list of listeners"),
    v.minLength(1, "A door needs at least one public listener"),
  ),
  /** The HTML answered on `/` and on every path that is not a slug. */
  cover_file: Text,
  /** Local operations (`/healthz`, `/v1/status`): loopback or a Unix socket only. */
  health: v.optional(
    v.strictObject({
      listen: v.pipe(
        v.array(Listener, "Expected a list of listeners"),
        v.minLength(1, "Expected at least one listener (leave health out to disable it)"),
      ),
    }),
  ),
  hub: DoorHub,
  /** Where the last good view (and a revocation record) is kept across restarts. */
  cache_dir: Text,
  timeouts: v.optional(
    v.strictObject({
      header_ms: v.optional(wholeNumber(100, 600_000), 10_000),
      idle_ms: v.optional(wholeNumber(100, 3_600_000), 30_000),
    }),
    {},
  ),
  limits: v.optional(
    v.strictObject({ header_bytes: v.optional(wholeNumber(1024, 1_048_576), 8192) }),
    {},
  ),
});

/** The door config as validated (defaults applied, paths as written). */
export type DoorConfigInput = v.InferOutput<typeof DoorConfigSchema>;
