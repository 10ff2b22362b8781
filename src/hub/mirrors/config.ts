/**
 * The `doors:` fragment resolved: paths against the hub config file's folder, names in the
 * project's camelCase, and the permissions it adds to the hub's. The prober's one outbound grant
 * (`check-host.net:443`) exists only while the prober is enabled with that client, so a hub that
 * serves doors without probing makes no third-party call and `flags` says so.
 *
 * @module
 */
import type { Grant } from "../../boot/flags.ts";
import type { DoorsInput } from "./schema.ts";

/** Where the check-host.net client connects: its only grant. */
export const CHECK_HOST_ADDRESS = "check-host.net:443";

/**
 * The `doors:` fragment, validated and resolved.
 *
 * @internal
 */
export interface DoorsConfig {
  /** The folder of `<host>.yaml` mirror files. */
  readonly mirrorsDir: string;
  readonly slugsFile: string;
  /**
   * Where probe results are remembered across restarts (`doors.state_dir`); none: not remembered
   * (a service built by hand in a test).
   */
  readonly stateDir?: string;
  /** Nodes that are doors (`doors.nodes`; a list only narrows: hub/node_standing.ts). */
  readonly nodes?: readonly string[];
  readonly watch: boolean;
  readonly debounceMs: number;
  readonly history: number;
  readonly prober: {
    readonly enabled: boolean;
    readonly client: "check_host";
    readonly intervalMs: number;
    readonly regions: readonly string[];
    readonly timeoutMs: number;
  };
}

/**
 * Resolves a validated `doors:` fragment.
 *
 * @param raw the fragment as `DoorsSchema` parsed it
 * @param resolvePath the hub config file's path resolver (relative to its folder)
 * @example
 * ```ts
 * import { resolveDoorsConfig } from "./config.ts";
 * const config = resolveDoorsConfig({
 *   mirrors_dir: "mirrors",
 *   slugs_file: "doors.yaml",
 *   reload: { watch: true, debounce_ms: 250 },
 *   state_dir: "doors-state",
 *   history: 16,
 *   prober: {
 *     enabled: false,
 *     client: "check_host",
 *     interval_ms: 900000,
 *     regions: [],
 *     timeout_ms: 60000,
 *   },
 * }, (path) => `/etc/portcullis/${path}`);
 * config.mirrorsDir; // "/etc/portcullis/mirrors"
 * ```
 */
export function resolveDoorsConfig(
  raw: DoorsInput,
  resolvePath: (path: string) => string,
): DoorsConfig {
  return {
    mirrorsDir: resolvePath(raw.mirrors_dir),
    slugsFile: resolvePath(raw.slugs_file),
    stateDir: resolvePath(raw.state_dir),
    nodes: raw.nodes,
    watch: raw.reload.watch,
    debounceMs: raw.reload.debounce_ms,
    history: raw.history,
    prober: {
      enabled: raw.prober.enabled,
      client: raw.prober.client,
      intervalMs: raw.prober.interval_ms,
      regions: raw.prober.regions,
      timeoutMs: raw.prober.timeout_ms,
    },
  };
}

/**
 * The grants serving doors adds to a hub's: read for the mirrors folder and the slugs file; with
 * the prober enabled, read and write for the folder its results are remembered in
 * (`doors.state_dir`); and net to check-host.net:443 only while the prober is enabled with the
 * check_host client.
 */
export function doorsGrants(config: DoorsConfig): Grant[] {
  const grants: Grant[] = [
    { name: "read", value: config.mirrorsDir, purpose: "door mirrors folder" },
    { name: "read", value: config.slugsFile, purpose: "door slugs file" },
  ];
  if (config.prober.enabled && config.stateDir !== undefined) {
    const purpose = "remembered mirror probe results";
    grants.push({ name: "read", value: config.stateDir, purpose });
    grants.push({ name: "write", value: config.stateDir, purpose });
  }
  if (config.prober.enabled && config.prober.client === "check_host") {
    grants.push({
      name: "net",
      value: CHECK_HOST_ADDRESS,
      purpose: "mirror prober (check-host.net)",
    });
  }
  return grants;
}
