/**
 * Where an edge's tenant set comes from, as the bootstrap config says it: a watched tenants folder
 * (`mode: local`) or a hub's stream with a cache on disk (`mode: remote`).
 *
 * The schema checks each field's shape; the rules that tie `mode`, `tenants_dir`, `hub` and
 * `cache_dir` together are checked here, all of them before any is reported, so the operator sees
 * every mismatch at once and in the same order every time (tests/config_test.ts pins the order).
 *
 * @module
 */
import type { BootstrapConfig } from "./bootstrap.ts";
import { ConfigError, type ConfigProblem } from "./problems.ts";
import type { YamlFile } from "./yaml_file.ts";

/** Remote mode's hub connection, paths resolved. */
export interface HubClientConfig {
  /** `http(s)://host:port`. */
  readonly url: string;
  /** `host:port` as `--allow-net` spells it. */
  readonly address: string;
  readonly tls?: { readonly caFile: string; readonly certFile: string; readonly keyFile: string };
  readonly tokenFile?: string;
  /** Registration with the fleet CA: the one-time secret, while `tls.certFile` does not exist. */
  readonly secretFile?: string;
  /** Renew a fleet certificate with fewer days than this left. */
  readonly renewBeforeDays: number;
  /** How long the public lane keeps serving after the hub says this node is revoked. */
  readonly graceSeconds: number;
  readonly pollTimeoutMs: number;
  readonly backoffInitialMs: number;
  readonly backoffMaxMs: number;
}

/**
 * Where the tenant set comes from.
 *
 * @internal
 */
export type RuntimeSource =
  | {
    readonly kind: "local";
    /** The tenants folder. */
    readonly dir: string;
    readonly watch: boolean;
    readonly debounceMs: number;
  }
  | {
    readonly kind: "remote";
    readonly hub: HubClientConfig;
    /** The last good generation is kept here (read and written). */
    readonly cacheDir: string;
  };

/** Turns a path written in the config file into one that does not depend on the working folder. */
type Resolve = (path: string) => string;

/** Records one problem about a field of the file being resolved. */
export type Report = (path: (string | number)[], message: string, value?: unknown) => void;

/**
 * The mode's fields, checked together: a tenants folder for local, a hub and cache for remote.
 *
 * @param raw the config as the schema parsed it
 * @param resolve the config file's path resolver (`pathResolver` in load.ts)
 * @param source the parsed file, to locate each problem
 * @returns the runtime source, paths resolved
 * @throws {ConfigError} naming every mismatch between the mode and its fields, in check order
 */
export function runtimeSource(
  raw: BootstrapConfig,
  resolve: Resolve,
  source: YamlFile,
): RuntimeSource {
  const problems: ConfigProblem[] = [];
  const report: Report = (path, message, value) =>
    problems.push({ file: source.file, path, value, message, at: source.locate(path) });
  if (raw.mode === "local") checkLocalMode(raw, report);
  else checkRemoteMode(raw, report);
  if (problems.length > 0) throw new ConfigError(problems);
  return raw.mode === "local" ? localSource(raw, resolve) : remoteSource(raw, resolve);
}

/** Local mode reads a tenants folder: it needs one, and takes neither a hub nor a cache. */
function checkLocalMode(raw: BootstrapConfig, report: Report): void {
  if (raw.tenants_dir === undefined) report(["tenants_dir"], "Local mode needs tenants_dir");
  if (raw.hub) report(["hub"], 'hub is for mode "remote"');
  if (raw.cache_dir !== undefined) report(["cache_dir"], 'cache_dir is for mode "remote"');
}

/** Remote mode follows a hub: it needs the hub and a cache, and takes no tenants folder. */
function checkRemoteMode(raw: BootstrapConfig, report: Report): void {
  if (raw.tenants_dir !== undefined) {
    report(["tenants_dir"], "Remote mode takes its tenants from the hub, not a folder");
  }
  if (!raw.hub) report(["hub"], "Remote mode needs hub: {url, ...}");
  if (raw.cache_dir === undefined) report(["cache_dir"], "Remote mode needs cache_dir");
  if (raw.hub) checkHubSettings(raw.hub, report);
}

/** A hub connection's fields as a schema parsed them (an edge's `hub`, a door's). */
export interface HubSettings {
  readonly url: string;
  readonly ca_file?: string;
  readonly cert_file?: string;
  readonly key_file?: string;
  readonly token_file?: string;
  readonly register?: unknown;
  readonly backoff_initial_ms: number;
  readonly backoff_max_ms: number;
}

/**
 * A hub connection's fields, checked together (an edge's, a door's): one way to authenticate,
 * matching its scheme; registration only over https; a backoff under its cap.
 *
 * @param report where each problem goes, with its path from the config's root
 */
export function checkHubSettings(hub: HubSettings, report: Report): void {
  const https = hub.url.startsWith("https:");
  const missing = https
    ? (["ca_file", "cert_file", "key_file"] as const).filter((k) => hub[k] === undefined)
    : hub.token_file === undefined
    ? ["token_file"]
    : [];
  for (const key of missing) {
    report(
      ["hub", key],
      https
        ? "An https hub authenticates this node by client certificate: set ca_file, cert_file " +
          "and key_file"
        : "An http hub authenticates this node by token: set token_file",
    );
  }
  if (https && hub.token_file !== undefined) {
    report(["hub", "token_file"], "An https hub uses the client certificate, not a token");
  }
  if (!https && hub.register !== undefined) {
    report(["hub", "register"], "Registration gives a client certificate: it needs an https hub");
  }
  if (hub.backoff_initial_ms > hub.backoff_max_ms) {
    report(
      ["hub", "backoff_initial_ms"],
      `The first delay is longer than the cap (${hub.backoff_max_ms} ms)`,
      hub.backoff_initial_ms,
    );
  }
}

/** A checked local mode: the tenants folder, resolved, and how it is watched. */
function localSource(raw: BootstrapConfig, resolve: Resolve): RuntimeSource {
  return {
    kind: "local",
    dir: resolve(raw.tenants_dir!),
    watch: raw.runtime.watch,
    debounceMs: raw.runtime.debounce_ms,
  };
}

/** A checked remote mode: the hub connection and the cache folder, paths resolved. */
function remoteSource(raw: BootstrapConfig, resolve: Resolve): RuntimeSource {
  const hub = raw.hub!;
  const url = new URL(hub.url);
  return {
    kind: "remote",
    hub: {
      url: hub.url,
      address: url.host,
      tls: hub.ca_file
        ? {
          caFile: resolve(hub.ca_file),
          certFile: resolve(hub.cert_file!),
          keyFile: resolve(hub.key_file!),
        }
        : undefined,
      tokenFile: hub.token_file === undefined ? undefined : resolve(hub.token_file),
      secretFile: hub.register && resolve(hub.register.secret_file),
      renewBeforeDays: hub.renew_before_days,
      graceSeconds: hub.grace_seconds,
      pollTimeoutMs: hub.poll_timeout_ms,
      backoffInitialMs: hub.backoff_initial_ms,
      backoffMaxMs: hub.backoff_max_ms,
    },
    cacheDir: resolve(raw.cache_dir!),
  };
}
