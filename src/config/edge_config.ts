/**
 * The bootstrap config as the rest of the edge reads it: validated, renamed to the code's spelling,
 * every path resolved. Types only; `load.ts` builds the value from the file, and re-exports these
 * so a caller imports the loader and what it returns from one place.
 *
 * @module
 */
import type { LaneName } from "../ledger/lane_names.ts";
import type { PathRules } from "../request/canonical_path.ts";
import type { LaneLedgerConfig } from "./bootstrap.ts";
import type { EgressConfig } from "./egress_schema.ts";
import type { Forwarding } from "./forwarding_schema.ts";
import type { ErrorsConfig } from "./errors_schema.ts";
import type { RuntimeSource } from "./runtime_source.ts";
import type { YamlFile } from "./yaml_file.ts";
import type { RelayPacing } from "../request/relay_memory.ts";

/** A listener with its path (if any) resolved. */
export type ListenerAddress =
  | { readonly kind: "tcp"; readonly hostname: string; readonly port: number }
  | { readonly kind: "unix"; readonly path: string };

/**
 * One configured lane.
 *
 * @internal
 */
export interface LaneConfig {
  readonly listen: readonly ListenerAddress[];
  readonly allow?: readonly string[];
}

/**
 * TLS settings of the public lane, paths resolved.
 *
 * @internal
 */
export interface PublicTls {
  readonly certificates: readonly CertificateSource[];
  readonly minVersion: "TLSv1.2" | "TLSv1.3";
  readonly http2: boolean;
  /** The bootstrap certificate's name (absent: a random name under `.invalid`, new each boot). */
  readonly name?: string;
  readonly watch: boolean;
}

/** One configured certificate. */
export interface CertificateSource {
  readonly certFile: string;
  readonly keyFile: string;
  /** Serve this one when no name matches. */
  readonly isDefault: boolean;
}

/** The bootstrap config, validated and resolved. */
export interface EdgeConfig {
  /** The config file, as named on the command line. */
  readonly file: string;
  /** This edge's node id (`node_id`), as the hub and the logs know it. */
  readonly nodeId: string;
  /** `local`: tenants from a watched folder; `remote`: streamed from a hub. */
  readonly mode: "local" | "remote";
  /** Request workers to run (`auto` resolved to the available cores). */
  readonly workers: number;
  /** `workers` as written. */
  readonly workersSetting: "auto" | number;
  /** One isolate for every lane (`shared_event_loop`, only with one worker). */
  readonly sharedEventLoop: boolean;
  /** The tenant set's source: a watched folder, or a hub. */
  readonly runtime: RuntimeSource;
  /** Configured lanes only; an absent lane is not served. */
  readonly lanes: Readonly<Partial<Record<LaneName, LaneConfig>>>;
  /** Connection and request timeouts (ms), and the slowest send rate tolerated. */
  readonly timeouts: {
    readonly headerMs: number;
    readonly idleMs: number;
    readonly requestMs: number;
    readonly sendMs: number;
    readonly minSendRate: number;
    readonly tunnelIdleMs?: number;
  };
  /** How request paths are made canonical. */
  readonly paths: PathRules;
  /**
   * The Via pseudonyms, the headers naming tenant, route and request id to backends, the
   * client-address headers kept only from trusted proxies, the health probes' User-Agent.
   */
  readonly forwarding: Forwarding;
  /** How the gateway's own failure replies read (`errors`), template paths resolved. */
  readonly errors: ErrorsConfig;
  /** Request-head limits: header bytes, header count, request-target bytes. */
  readonly limits: {
    readonly headerBytes: number;
    readonly headers: number;
    readonly targetBytes: number;
  };
  /** How long a drain waits for in-flight public requests once admission has stopped. */
  readonly drainMs: number;
  /** How long readiness reports the drain while the public lane still admits (ms). */
  readonly lameDuckMs: number;
  /** What readiness says of a live set with no tenant (`readiness.empty_tenants`). */
  readonly emptyTenants: "not_ready" | "ready";
  /** Collections paced by relayed bytes (request/relay_memory.ts). */
  readonly memory: RelayPacing;
  /** TLS on the public lane's listeners, when configured. */
  readonly tls?: PublicTls;
  /** The plain-HTTP ACME http-01 companion listener of the public lane. */
  readonly acme?: {
    readonly listen: ListenerAddress;
    readonly challengeDir: string;
    readonly otherwise: "404" | "redirect";
  };
  /** The SNI passthrough listeners of the public lane. */
  readonly passthrough?: {
    readonly listen: readonly ListenerAddress[];
    readonly helloTimeoutMs: number;
  };
  /** The public lane's admin gate: the file holding its line (a secret, read at boot). */
  readonly adminGate?: { readonly file: string };
  /** CIDRs whose X-Forwarded-For is believed. */
  readonly trustedProxies: readonly string[];
  /** Fleet stores tenant policies may use (`redis://host:port[/db]`). */
  readonly policyStores: readonly string[];
  /** The admin credential for `local_health`'s acting endpoints. */
  readonly admin: {
    readonly tokenFile?: string;
    /** The realm of the Bearer challenge; absent: a challenge without one. */
    readonly realm?: string;
  };
  /** Tenant-label salt, access log and diagnostics. */
  readonly observe: {
    readonly saltFile?: string;
    readonly accessLog: {
      readonly enabled: boolean;
      readonly sample: number;
      /** Write the query beside the path (off: a query often carries tokens). */
      readonly query: boolean;
    };
    readonly logLevel: "error" | "warn" | "info" | "debug";
  };
  /** The ways out to backends: the SOCKS pool, direct targets, breakers, retries. */
  readonly egress: EgressConfig;
  /** The admission ledger's totals and each lane's settings. */
  readonly ledger: {
    readonly application_slots: number;
    readonly inflight_bytes: number;
    readonly per_connection: number;
    readonly connection_rate?: { readonly per_second: number; readonly burst: number };
    readonly lanes: Readonly<Partial<Record<LaneName, LaneLedgerConfig>>>;
  };
  /** Where a field sits in the file, for later cross-field diagnostics. */
  readonly source: YamlFile;
}
