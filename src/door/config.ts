/**
 * Loading a door config: parse, validate, resolve paths against the file's folder, and check what
 * ties fields together before anything binds — one way to authenticate to the hub matching its
 * scheme, registration only over https, a backoff under its cap, health on loopback, no two
 * listeners alike. Then the permissions the door needs, derived from the config alone.
 *
 * @module
 */
import { isLoopback, overlaps } from "../boot/distinct.ts";
import { CODE_GRANTS, enrolmentGrants, type Grant } from "../boot/flags.ts";
import {
  formatAddress,
  type ListenerAddress,
  listenerAddress,
  pathResolver,
} from "../config/load.ts";
import { ConfigError, type ConfigProblem, formatPath } from "../config/problems.ts";
import { validateFile } from "../config/validate.ts";
import { checkHubSettings } from "../config/runtime_source.ts";
import type { YamlFile } from "../config/yaml_file.ts";
import { type DoorConfigInput, DoorConfigSchema } from "./schema.ts";

/** The hub a door follows, paths resolved (the edge's hub connection, plus the door's parts). */
export interface DoorHubConfig {
  /** `http(s)://host:port`. */
  readonly url: string;
  /** `host:port` as `--allow-net` spells it. */
  readonly address: string;
  readonly tls?: { readonly caFile: string; readonly certFile: string; readonly keyFile: string };
  readonly tokenFile?: string;
  readonly pollTimeoutMs: number;
  readonly backoffInitialMs: number;
  readonly backoffMaxMs: number;
  /** Registration with a one-time secret, when cert_file is missing (https only). */
  readonly register?: { readonly secretFile: string };
  /** Renew a fleet certificate with fewer days than this left. */
  readonly renewBeforeDays: number;
  /** How long the door keeps serving after the hub says `node_revoked`. */
  readonly graceMs: number;
}

/** One public listener, with the door's own certificate when it speaks TLS. */
export interface DoorListener {
  readonly address: ListenerAddress;
  readonly tls?: { readonly certFile: string; readonly keyFile: string };
}

/** A door config, validated and resolved. */
export interface DoorConfig {
  readonly file: string;
  readonly nodeId: string;
  readonly listen: readonly DoorListener[];
  readonly coverFile: string;
  readonly health: readonly ListenerAddress[];
  readonly hub: DoorHubConfig;
  readonly cacheDir: string;
  readonly timeouts: { readonly headerMs: number; readonly idleMs: number };
  readonly limits: { readonly headerBytes: number };
}

/** True when a parsed YAML file says `role: door`. */
export function isDoorFile(source: YamlFile): boolean {
  const value = source.value as Record<string, unknown> | null;
  return typeof value === "object" && value !== null && value.role === "door";
}

/**
 * Validates and resolves a parsed door config file.
 *
 * @throws {ConfigError} naming file, field and value of every problem found
 */
export function loadDoorConfig(source: YamlFile): DoorConfig {
  const checked = validateFile(DoorConfigSchema, source);
  if (!checked.ok) throw new ConfigError(checked.problems);
  const raw = checked.value;
  const resolve = pathResolver(source.file);
  const problems: ConfigProblem[] = [];
  const report: Report = (path, message, value) =>
    problems.push({ file: source.file, path, value, message, at: source.locate(path) });
  checkHubSettings(raw.hub, report);
  const listen = raw.listen.map((l) => ({
    address: listenerAddress(l, resolve),
    ...(l.tls
      ? { tls: { certFile: resolve(l.tls.cert_file), keyFile: resolve(l.tls.key_file) } }
      : {}),
  }));
  const health = (raw.health?.listen ?? []).map((l) => listenerAddress(l, resolve));
  checkListeners(listen.map((l) => l.address), health, report);
  if (problems.length > 0) throw new ConfigError(problems);
  return {
    file: source.file,
    nodeId: raw.node_id,
    listen,
    coverFile: resolve(raw.cover_file),
    health,
    hub: hubOf(raw.hub, resolve),
    cacheDir: resolve(raw.cache_dir),
    timeouts: { headerMs: raw.timeouts.header_ms, idleMs: raw.timeouts.idle_ms },
    limits: { headerBytes: raw.limits.header_bytes },
  };
}

/** Records one problem about a field of the door config. */
type Report = (path: (string | number)[], message: string, value?: unknown) => void;

/** Health only on loopback or a Unix socket, and no two listeners alike. */
function checkListeners(
  open: readonly ListenerAddress[],
  health: readonly ListenerAddress[],
  report: Report,
): void {
  const all = [
    ...open.map((address, i) => ({ address, path: ["listen", i] })),
    ...health.map((address, i) => ({ address, path: ["health", "listen", i] })),
  ];
  for (const [i, address] of health.entries()) {
    if (address.kind === "tcp" && !isLoopback(address.hostname)) {
      report(
        ["health", "listen", i, "hostname"],
        "The health listener shows the door's state: bind it to loopback or a Unix socket",
        address.hostname,
      );
    }
  }
  for (const [i, a] of all.entries()) {
    for (const b of all.slice(i + 1)) {
      if (!overlaps(a.address, b.address)) continue;
      report(
        b.path,
        `Overlaps ${formatPath(a.path)} (${formatAddress(a.address)}): each listener must be its ` +
          "own socket",
        formatAddress(b.address),
      );
    }
  }
}

/** The hub connection, paths resolved. */
function hubOf(hub: DoorConfigInput["hub"], resolve: (path: string) => string): DoorHubConfig {
  return {
    url: hub.url,
    address: new URL(hub.url).host,
    tls: hub.ca_file
      ? {
        caFile: resolve(hub.ca_file),
        certFile: resolve(hub.cert_file!),
        keyFile: resolve(hub.key_file!),
      }
      : undefined,
    tokenFile: hub.token_file === undefined ? undefined : resolve(hub.token_file),
    pollTimeoutMs: hub.poll_timeout_ms,
    backoffInitialMs: hub.backoff_initial_ms,
    backoffMaxMs: hub.backoff_max_ms,
    ...(hub.register ? { register: { secretFile: resolve(hub.register.secret_file) } } : {}),
    renewBeforeDays: hub.renew_before_days,
    graceMs: hub.grace_seconds * 1000,
  };
}

/**
 * Every permission a door needs: net for its listeners and the hub's host:port; read for its
 * config, cover, cache folder and credential files (and its own TLS files); write for the cache
 * folder and, with a fleet certificate, what registration and renewal write (the certificate, the
 * key, their `.new` files, and the secret file: `enrolmentGrants` in src/boot/flags.ts). Nothing
 * else: no run, no env, no net but the hub.
 */
export function doorGrants(config: DoorConfig): Grant[] {
  const grants: Grant[] = [];
  const listeners: [string, ListenerAddress][] = [
    ...config.listen.map((l): [string, ListenerAddress] => ["door public listener", l.address]),
    ...config.health.map((a): [string, ListenerAddress] => ["door health listener", a]),
  ];
  for (const [purpose, address] of listeners) {
    grants.push({ name: "net", value: formatAddress(address), purpose });
    if (address.kind === "unix") {
      grants.push({ name: "read", value: address.path, purpose });
      grants.push({ name: "write", value: address.path, purpose });
    }
  }
  const { hub } = config;
  grants.push({ name: "net", value: hub.address, purpose: "hub" });
  grants.push({ name: "read", value: config.file, purpose: "config file" });
  grants.push({ name: "read", value: config.coverFile, purpose: "cover page" });
  for (const l of config.listen) {
    for (const file of l.tls ? [l.tls.certFile, l.tls.keyFile] : []) {
      grants.push({ name: "read", value: file, purpose: "door TLS files" });
    }
  }
  const credentials = hub.tls
    ? [hub.tls.caFile, hub.tls.certFile, hub.tls.keyFile]
    : [hub.tokenFile!];
  for (const file of credentials) {
    grants.push({ name: "read", value: file, purpose: "hub credentials" });
  }
  grants.push({ name: "read", value: config.cacheDir, purpose: "view cache" });
  grants.push({ name: "write", value: config.cacheDir, purpose: "view cache" });
  // The edge's own rule: registration and renewal write the pair through `.new` files (issue 31:
  // a door's registration needed `<key>.new`, which its flags did not grant).
  grants.push(...enrolmentGrants({ tls: hub.tls, secretFile: hub.register?.secretFile }));
  return [...grants, ...CODE_GRANTS];
}
