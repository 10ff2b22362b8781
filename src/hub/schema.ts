/**
 * The hub's config file (`hub.yaml`). It says `role: hub` so `check` and `flags` can tell it from an
 * edge's bootstrap config. Unknown keys are errors, as in every Portcullis file.
 *
 * @module
 */
import * as v from "valibot";
import { Listener, RuntimeWatch } from "../config/bootstrap.ts";
import { AlpnProtocols, IpLiteral, Port, Text, wholeNumber } from "../config/fields.ts";
import { DoorsSchema } from "./mirrors/schema.ts";
import { ErrorsSchema } from "../config/errors_schema.ts";

const NodeId = v.pipe(
  v.string("Expected text"),
  v.regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, "Expected 1-63 letters, digits, '.', '_' or '-'"),
);

const Listeners = v.pipe(
  v.array(Listener, "Expected a list of listeners"),
  v.minLength(1, "Expected at least one listener"),
);

/** The edge-facing API: the config stream, authenticated per node. */
const Api = v.strictObject({
  listen: Listeners,
  /** Mutual TLS: the hub's certificate, and the CA that signs edges' client certificates. */
  tls: v.optional(v.strictObject({
    cert_file: Text,
    key_file: Text,
    /**
     * Client certificates must chain to this CA and carry the node id as their CN (default with
     * `ca`: the fleet root, `<ca.dir>/root.crt`).
     */
    client_ca_file: v.optional(Text),
  })),
  /** Without TLS: `<node_id>.token` per node in this folder, sent as `Authorization: Bearer`. */
  tokens_dir: v.optional(Text),
  /** Only these nodes may follow the stream (default: any node that authenticates). */
  nodes: v.optional(v.array(NodeId, "Expected a list of node ids")),
});

/**
 * SOCKS5 inside mutual TLS: edges dial this listener with their node certificate and name a pool
 * port in the stream's first four bytes; the relay pipes the rest of the stream to that port.
 */
const Socks5Tls = v.strictObject({
  listen: v.strictObject({ hostname: IpLiteral, port: Port }),
  cert_file: Text,
  key_file: Text,
  /**
   * The ALPN protocols the relay selects, when a client offers one of them (default `[http/1.1]`,
   * what edges offer by default; `[]`: none, whatever is offered). Edges' `egress.transport.alpn` must
   * offer one of them, or none.
   */
  alpn: v.optional(AlpnProtocols, ["http/1.1"]),
  /**
   * Client certificates must chain to this CA; their one CN is the node id (`api.nodes` applies).
   * Default with `ca`: the fleet root.
   */
  client_ca_file: v.optional(Text),
});

/**
 * One mutual-TLS HTTPS endpoint: edges open a WebSocket per SOCKS connection on `/v1/tunnel` and
 * name a pool port in its first message; ordinary requests are the api's (the config stream).
 */
const HttpsTunnel = v.strictObject({
  listen: v.strictObject({ hostname: IpLiteral, port: Port }),
  cert_file: Text,
  key_file: Text,
  /**
   * Client certificates must chain to this CA; their one CN is the node id (`api.nodes` applies).
   * Default with `ca`: the fleet root.
   */
  client_ca_file: v.optional(Text),
});

/**
 * The hub's SOCKS pool: a static list of instances (`socks`), or an embedded Tor pool (`torpool`:
 * the path of its `pool.yaml`, `role: torpool`), supervised inside the hub. Exactly one of them.
 */
const Pool = v.pipe(
  v.strictObject({
    socks: v.optional(
      v.pipe(
        v.array(
          v.strictObject({ hostname: IpLiteral, port: Port }),
          "Expected a list of instances",
        ),
        v.minLength(1, "Expected at least one SOCKS instance"),
      ),
    ),
    torpool: v.optional(Text),
  }),
  v.check(
    (pool) => (pool.socks === undefined) !== (pool.torpool === undefined),
    "Expected exactly one of pool.socks (a static list) and pool.torpool (a pool.yaml to embed)",
  ),
);

/**
 * The fleet's certificate authority (made by `portcullis hub init-ca`): the hub signs nodes'
 * certificates from its intermediate (the root key may be kept offline), registers nodes with
 * one-time secrets, and refuses certificates its CRL revokes.
 */
const Ca = v.strictObject({
  /** The folder `init-ca` made: certificates, the intermediate's key, the CRL, issued/, secrets/. */
  dir: Text,
  /** How long a node certificate is valid. */
  lifetime_days: v.optional(wholeNumber(1, 3650), 365),
  /**
   * Renewal is answered only while the certificate presented has at most this many days left
   * (`renewal_too_early` with Retry-After before); the nodes' default `renew_before_days` is 30.
   */
  renew_before_days: v.optional(wholeNumber(1, 3650), 30),
  /** At most one certificate per node per this many seconds (registration included); 0: no limit. */
  renew_interval_seconds: v.optional(wholeNumber(0, 31_536_000), 3600),
  /**
   * A registration whose answer was lost may be asked again with the same secret and key for this
   * long, and gets the same certificate; 0: never.
   */
  registration_retry_seconds: v.optional(wholeNumber(0, 86_400), 600),
});

/** How often revocations are looked for (the CRL, removed token files), besides on change. */
const Revocation = v.optional(
  v.strictObject({ reload_ms: v.optional(wholeNumber(100, 3_600_000), 60_000) }),
  {},
);

/** How long a relay or tunnel stream stays open unless `transport.max_stream_seconds` says. */
export const DEFAULT_MAX_STREAM_SECONDS = 3600;

/** The hub config schema. */
export const HubConfigSchema = v.strictObject({
  /** Marks the file as a hub's. */
  role: v.literal("hub", 'Expected "hub"'),
  node_id: NodeId,
  /** The runtime folder served to edges: `globals.yaml`, one file per tenant, body files. */
  runtime_dir: Text,
  /** Reload the folder when it changes. */
  runtime: RuntimeWatch,
  api: Api,
  ca: v.optional(Ca),
  revocation: Revocation,
  /** Local operations (`/healthz`, `/v1/config`, `/v1/nodes`, reload): loopback only. */
  health: v.optional(v.strictObject({ listen: Listeners })),
  /** How edges reach the pool (remote mode's egress). */
  transport: v.optional(
    v.strictObject({
      socks5_tls: v.optional(Socks5Tls),
      https_tunnel: v.optional(HttpsTunnel),
      /**
       * The longest a relay or tunnel stream stays open: the hub then closes it, and the edge
       * dials a new one for its next request (default one hour, at most a week).
       */
      max_stream_seconds: v.optional(wholeNumber(1, 604_800), DEFAULT_MAX_STREAM_SECONDS),
    }),
  ),
  pool: v.optional(Pool),
  /** Doors: the mirror registry, the slugs, the prober, and which nodes follow as doors. */
  doors: v.optional(DoorsSchema),
  /** How the hub's failure replies read to a caller it has not authenticated (errors_schema.ts). */
  errors: ErrorsSchema,
  stream: v.optional(
    v.strictObject({
      /** How long a stream request with nothing new is held before it is answered `current`. */
      hold_ms: v.optional(wholeNumber(100, 300_000), 25_000),
      /** Generations kept to answer with a delta (older `have` hashes get a snapshot). */
      history: v.optional(wholeNumber(1, 1000), 32),
    }),
    {},
  ),
  timeouts: v.optional(
    v.strictObject({
      header_ms: v.optional(wholeNumber(100, 600_000), 10_000),
      idle_ms: v.optional(wholeNumber(100, 3_600_000), 30_000),
    }),
    {},
  ),
});

/** The hub config as validated (defaults applied, paths as written). */
export type HubConfigInput = v.InferOutput<typeof HubConfigSchema>;
