/**
 * The bootstrap config (`config.yaml`): read once at start. Unknown keys are errors, so a typo never
 * silently falls back to a default.
 *
 * @module
 */
import * as v from "valibot";
import { parseCidr } from "../request/cidr.ts";
import { EgressSchema } from "./egress_schema.ts";
import { ForwardingSchema } from "./forwarding_schema.ts";
import { ErrorsSchema } from "./errors_schema.ts";
import { IpLiteral, Port, Realm, SocketPath, Text, wholeNumber } from "./fields.ts";
import { HostName } from "./tenant_schema.ts";
import { RedisUrl } from "./policy_schema.ts";

const TcpListener = v.strictObject({ hostname: IpLiteral, port: Port });
const UnixListener = v.strictObject({ path: SocketPath });

/** One listener: `{hostname, port}` or `{path}` (a Unix socket). */

/**
 * A pace of collections in relayed bytes: 0 (none) or at least 1 MiB. A smaller pace would run a
 * forced collection for nearly every chunk relayed — tens of milliseconds each under load — and let
 * any client's body stall the isolate.
 */
const collectionPace = v.pipe(
  wholeNumber(0, 2 ** 40),
  v.check(
    (bytes) => bytes <= 0 || bytes >= 1024 * 1024,
    "Expected 0 (off) or at least 1048576 bytes (1 MiB)",
  ),
);

export const Listener = v.lazy((input) =>
  typeof input === "object" && input !== null && "path" in input ? UnixListener : TcpListener
);

const LaneListeners = v.strictObject({
  listen: v.pipe(
    v.array(Listener, "Expected a list of listeners"),
    v.minLength(1, "A lane needs at least one listener (leave the lane out to disable it)"),
  ),
  /** Narrows the lane's built-in route allowlist to these paths. */
  allow: v.optional(v.array(Text, "Expected a list of paths")),
});

const TlsConfig = v.strictObject({
  /** Certificate and key files (PEM); the leaf first in `cert_file`, then its chain. */
  certificates: v.optional(
    v.array(
      v.strictObject({
        cert_file: Text,
        key_file: Text,
        /** Serve this certificate when no name matches the SNI. */
        default: v.optional(v.boolean("Expected true or false"), false),
      }),
      "Expected a list of certificates",
    ),
    [],
  ),
  min_version: v.optional(
    v.picklist(["TLSv1.2", "TLSv1.3"], 'Expected "TLSv1.2" or "TLSv1.3"'),
    "TLSv1.2",
  ),
  /**
   * Offer HTTP/2 (ALPN h2) beside HTTP/1.1. Off by default: Deno 2.9.6's node:http2 aborted the
   * process under concurrent h2 load in our tests (docs/decisions.md §8).
   */
  http2: v.optional(v.boolean("Expected true or false"), false),
  /**
   * The name the bootstrap certificate is issued for (default: a random name under `.invalid`,
   * new each boot — never the node id, which would name the node to every prober).
   */
  name: v.optional(HostName),
  /** Reload certificates when their files change. */
  watch: v.optional(v.boolean("Expected true or false"), true),
});

const AcmeHttp = v.strictObject({
  hostname: IpLiteral,
  port: Port,
  /** Folder of challenge files, named by token (what an ACME client writes). */
  challenge_dir: Text,
  /** Everything but a challenge: a fixed 404, or a redirect to https. */
  otherwise: v.optional(v.picklist(["404", "redirect"], 'Expected "404" or "redirect"'), "404"),
});

const Passthrough = v.strictObject({
  listen: v.pipe(
    v.array(Listener, "Expected a list of listeners"),
    v.minLength(1, "Passthrough needs at least one listener"),
  ),
  /** Deadline for a complete ClientHello, from accept. */
  hello_timeout_ms: v.optional(wholeNumber(10, 600_000), 5000),
});

/**
 * The admin gate: a file (owner-only) holding the one line `/<slug>/<t1>/<t2>/`, read at boot
 * (src/pipeline/admin_gate.ts says what a hit is and why nothing observes one).
 */
const AdminGate = v.strictObject({ file: Text });

/** The public lane: listeners, plus TLS, the ACME companion, SNI passthrough and the admin gate. */
const PublicLane = v.strictObject({
  ...LaneListeners.entries,
  tls: v.optional(TlsConfig),
  acme_http: v.optional(AcmeHttp),
  passthrough: v.optional(Passthrough),
  admin_gate: v.optional(AdminGate),
});

const Rate = v.strictObject({
  per_second: v.pipe(v.number("Expected a number"), v.gtValue(0, "Expected a rate above 0")),
  burst: wholeNumber(1, 1_000_000),
});

const LaneLedger: v.GenericSchema<unknown, LaneLedgerConfig> = v.strictObject({
  reserve: v.optional(wholeNumber(0)),
  max_slots: v.optional(wholeNumber(1)),
  max_connections: v.optional(wholeNumber(1)),
  footprint_bytes: v.optional(
    wholeNumber(1, 0x7fffffff, "a byte count above 0 (zero is an error, never unbounded)"),
  ),
  deadline_ms: v.optional(wholeNumber(1, 3_600_000)),
  rate: v.optional(Rate),
  /** Public lane: slots at the top of its ceiling only routes with priority ≥ 8 may fill. */
  priority_reserve: v.optional(wholeNumber(0)),
});

/** Watching a runtime folder: on or off, and the quiet time before a changed folder is read. */
export const RuntimeWatch = v.optional(
  v.strictObject({
    watch: v.optional(v.boolean("Expected true or false"), true),
    debounce_ms: v.optional(wholeNumber(10, 60_000), 250),
  }),
  {},
);

/**
 * Remote mode's hub: `https` with a client certificate (mTLS), or `http` with a token file. A door
 * follows its hub with the same block (src/door/schema.ts).
 */
export const HubClient = v.strictObject({
  url: v.pipe(
    v.string("Expected a URL"),
    v.regex(
      /^https?:\/\/(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/,
      "Expected http(s)://host:port, with the port and without a path",
    ),
  ),
  /** The CA that signed the hub's certificate (https). */
  ca_file: v.optional(Text),
  /** This node's client certificate and key, signed by the hub's client CA (https). */
  cert_file: v.optional(Text),
  key_file: v.optional(Text),
  /** This node's token (http): the file holds the token, nothing else. */
  token_file: v.optional(Text),
  /** Longest a stream request waits for the hub's answer before asking again. */
  poll_timeout_ms: v.optional(wholeNumber(1000, 600_000), 35_000),
  /** Reconnection backoff: doubles from the first delay up to the cap. */
  backoff_initial_ms: v.optional(wholeNumber(1, 60_000), 250),
  backoff_max_ms: v.optional(wholeNumber(1, 600_000), 30_000),
  /**
   * Registration with the hub's fleet CA (https): while `cert_file` does not exist, the node makes
   * a key and a certificate request and presents this one-time secret (`portcullis hub
   * add-node`); the hub's certificate is then written to `cert_file` and `key_file` (0600), and
   * the secret file removed.
   */
  register: v.optional(v.strictObject({ secret_file: Text })),
  /** A certificate from the fleet CA is renewed when it has fewer days than this left. */
  renew_before_days: v.optional(wholeNumber(1, 3650), 30),
  /**
   * When the hub says this node is revoked: the public lane keeps serving this long, then stops
   * taking connections; in-flight requests finish, the cache is deleted, the edge stops.
   */
  grace_seconds: v.optional(wholeNumber(0, 86_400), 30),
});

/** The bootstrap config schema. */
export const BootstrapSchema = v.strictObject({
  /** Optional marker; a hub's config says `role: hub`. */
  role: v.optional(
    v.literal("edge", 'Expected "edge" (a hub config is run with `portcullis hub`)'),
  ),
  node_id: v.pipe(
    v.string("Expected text"),
    v.regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, "Expected 1-63 letters, digits, '.', '_' or '-'"),
  ),
  /**
   * Request workers: isolates that each serve every lane over one shared ledger. `auto` is one per
   * available core.
   */
  workers: v.optional(
    v.union(
      [v.literal("auto"), wholeNumber(1, 64)],
      'Expected "auto" or a whole number of workers from 1 to 64',
    ),
    1,
  ),
  /**
   * Serve the public lane on the same event loop as the protected lanes (one isolate, only with
   * `workers: 1`). Off by default: a public flood could then delay health probes.
   */
  shared_event_loop: v.optional(v.boolean("Expected true or false"), false),
  /** `local`: tenants from `tenants_dir`, watched; `remote`: tenants from the hub's stream. */
  mode: v.picklist(["local", "remote"], 'Expected "local" or "remote"'),
  /** Local mode: the runtime folder (`globals.yaml` and one file per tenant). */
  tenants_dir: v.optional(Text),
  /** Local mode: reload the folder when it changes. */
  runtime: RuntimeWatch,
  /** Remote mode: the hub and how this node proves who it is. */
  hub: v.optional(HubClient),
  /**
   * Who may act on the edge through `local_health` (drain, reloads): a bearer token read from
   * `token_file`. Without it, only a client of a Unix socket listener may act.
   */
  admin: v.optional(
    v.strictObject({
      token_file: v.optional(Text),
      /** The realm of the `Bearer` challenge a refused request gets (default: none). */
      realm: v.optional(Realm),
    }),
    {},
  ),
  /** Remote mode: where the last good generation is kept across restarts. */
  cache_dir: v.optional(Text),
  lanes: v.strictObject({
    public: PublicLane,
    local_health: v.optional(LaneListeners),
    provider_health: v.optional(LaneListeners),
  }),
  timeouts: v.optional(
    v.strictObject({
      header_ms: v.optional(wholeNumber(100, 600_000), 10_000),
      idle_ms: v.optional(wholeNumber(100, 3_600_000), 30_000),
      request_ms: v.optional(wholeNumber(100, 3_600_000), 300_000),
      /**
       * Delivery: a reply whose waiting bytes the client does not take for this long is cut off
       * (its slot and bytes released, counted cancelled with outcome `send_timeout`).
       */
      send_ms: v.optional(wholeNumber(100, 3_600_000), 30_000),
      /** While bytes wait, the client must take at least this many per second (0: any). */
      min_send_rate: v.optional(wholeNumber(0, 1_073_741_824), 1024),
      /** An Upgrade tunnel with no byte either way for this long is closed (default: never). */
      tunnel_idle_ms: v.optional(wholeNumber(100, 86_400_000)),
    }),
    {},
  ),
  /** How request paths are made canonical before routing (decode, dot segments, slashes). */
  paths: v.optional(
    v.strictObject({
      /** Merge runs of "/" into one. */
      merge_slashes: v.optional(v.boolean("Expected true or false"), true),
      /** An encoded slash or backslash (%2F, %5C) or a raw "\": refuse, keep as data, or decode. */
      escaped_slashes: v.optional(
        v.picklist(["reject", "keep", "decode"], 'Expected "reject", "keep" or "decode"'),
        "reject",
      ),
    }),
    {},
  ),
  /**
   * How forwarded messages and health probes are marked (forwarding_schema.ts): by default nothing
   * in them names the gateway.
   */
  forwarding: v.optional(ForwardingSchema, {}),
  limits: v.optional(
    v.strictObject({
      header_bytes: v.optional(wholeNumber(1024, 1_048_576), 16_384),
      headers: v.optional(wholeNumber(1, 10_000), 100),
      target_bytes: v.optional(wholeNumber(256, 1_048_576), 8192),
    }),
    {},
  ),
  drain: v.optional(
    v.strictObject({
      timeout_ms: v.optional(wholeNumber(0, 600_000), 30_000),
      /**
       * The lame-duck window: readiness reports the drain this long before public admission
       * stops, so a load balancer polling `/readyz` moves traffic away first (0: stop at once).
       */
      lame_duck_ms: v.optional(wholeNumber(0, 600_000), 5000),
    }),
    {},
  ),
  /** What `/readyz` reports beside boot, drain and live workers (src/live/readiness.ts). */
  readiness: v.optional(
    v.strictObject({
      /**
       * A live tenant set with no tenant, where every host is a miss: `not_ready` (the default) or
       * `ready` all the same (an edge that is meant to start empty).
       */
      empty_tenants: v.optional(
        v.picklist(["not_ready", "ready"], 'Expected "not_ready" or "ready"'),
        "not_ready",
      ),
    }),
    {},
  ),
  /**
   * Collections paced by relayed bytes (request/relay_memory.ts): a full one when the relays go
   * quiet after `quiet_collect_bytes`, and optionally a young one every `collect_every_bytes`.
   */
  memory: v.optional(
    v.strictObject({
      quiet_collect_bytes: v.optional(collectionPace, 64 * 1024 * 1024),
      collect_every_bytes: v.optional(collectionPace, 0),
    }),
    {},
  ),
  /** Metrics labels, the access log and diagnostics. */
  observe: v.optional(
    v.strictObject({
      /**
       * The salt of tenant labels (`sha256(host + salt)`, 16 hex digits). Without a readable salt
       * no series or log field carries a tenant at all.
       */
      salt_file: v.optional(Text),
      access_log: v.optional(
        v.strictObject({
          enabled: v.optional(v.boolean("Expected true or false"), true),
          /** The share of ordinary requests logged (errors and outcomes always are). */
          sample: v.optional(
            v.pipe(
              v.number("Expected a number from 0 to 1"),
              v.minValue(0, "Expected a number from 0 to 1"),
              v.maxValue(1, "Expected a number from 0 to 1"),
            ),
            1,
          ),
          /**
           * Write the request's query beside its path. Off by default: a query often carries
           * tokens and personal data.
           */
          query: v.optional(v.boolean("Expected true or false"), false),
        }),
        {},
      ),
      log_level: v.optional(
        v.picklist(
          ["error", "warn", "info", "debug"],
          'Expected "error", "warn", "info" or "debug"',
        ),
        "info",
      ),
    }),
    {},
  ),
  /**
   * The fleet stores (Redis-protocol servers) tenant policies may name in `store.redis.url`: each
   * is one more net grant in `flags`. Their keys are hashed with `observe.salt_file`.
   */
  /** How the gateway's own failure replies read (default: the reason phrase, nothing more). */
  errors: ErrorsSchema,
  policy_stores: v.optional(v.array(RedisUrl, "Expected a list of redis:// URLs"), []),
  /** Peers whose X-Forwarded-For is believed (CIDRs); empty trusts nobody. */
  trusted_proxies: v.optional(
    v.array(
      v.pipe(
        v.string("Expected a CIDR such as 10.0.0.0/8"),
        v.check(
          (text) => typeof parseCidr(text) !== "string",
          "Expected a CIDR such as 10.0.0.0/8",
        ),
      ),
      "Expected a list of CIDRs",
    ),
    [],
  ),
  egress: EgressSchema,
  ledger: v.strictObject({
    application_slots: wholeNumber(1),
    inflight_bytes: wholeNumber(1),
    per_connection: wholeNumber(1),
    /** One connection's request rate: a token bucket per connection (default: unbounded). */
    connection_rate: v.optional(Rate),
    lanes: v.optional(
      v.strictObject({
        public: v.optional(LaneLedger),
        local_health: v.optional(LaneLedger),
        provider_health: v.optional(LaneLedger),
      }),
      {},
    ),
  }),
});

/** The bootstrap config as validated (defaults applied, paths as written). */
export type BootstrapConfig = v.InferOutput<typeof BootstrapSchema>;
/** One lane's listener settings. */
export type LaneListenConfig = v.InferOutput<typeof LaneListeners>;
/** The public lane's TLS settings. */
export type TlsConfigInput = v.InferOutput<typeof TlsConfig>;
/**
 * One lane's ledger settings, as written (the profile applies the defaults).
 *
 * @internal
 */
export interface LaneLedgerConfig {
  /** Slots kept for this lane alone. */
  reserve?: number;
  /** The lane's ceiling: its reserve plus the general-pool slots it may borrow. */
  max_slots?: number;
  /** Connections this lane may hold at most. */
  max_connections?: number;
  /** Bytes one admitted request is charged against the byte budget. */
  footprint_bytes?: number;
  /** How long a request on this lane may take. */
  deadline_ms?: number;
  /** The lane's rate budget: a token bucket. */
  rate?: { per_second: number; burst: number };
  /** Public lane: slots at the top of its ceiling only routes with priority ≥ 8 may fill. */
  priority_reserve?: number;
}
/** One listener as written. */
export type ListenerConfig = { hostname: string; port: number } | { path: string };
