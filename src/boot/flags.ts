/**
 * The permission flags a config needs, derived from the config alone: net for each listener (a
 * Unix socket is `unix:<path>` plus read and write on the path), for each SOCKS instance and each
 * `direct` upstream, and for the public lane's ACME and passthrough listeners; read for the config
 * file, the tenants folder, the certificate folders and the ACME challenge folder; and what the
 * own-listener check reads of the machine ({@link LOCAL_MACHINE_GRANTS}: `/etc/hosts`, the host
 * name, the interface addresses). Nothing else — no env, no run, no ffi, no unscoped anything. The `yaml` parser
 * looks at two debug variables (`LOG_STREAM`, `LOG_TOKENS`); `--ignore-env` makes those reads
 * return undefined without granting any environment access. The one run grant any role holds is
 * the Tor pool's, exactly its Tor binary (`poolGrants` in `src/torpool/config.ts`).
 *
 * @module
 */
import { dirname } from "node:path";
import { fileURLToPath as fromFileUrl } from "node:url";
import {
  type EdgeConfig,
  formatAddress,
  type HubClientConfig,
  type ListenerAddress,
  runsWorkers,
} from "../config/load.ts";
import { LANE_NAMES, type LaneName } from "../ledger/lane_names.ts";
import { templateFiles } from "../config/errors_schema.ts";

/** One permission the process must hold, and why. */
export interface Grant {
  /** The permission: `--allow-<name>`, or `--ignore-env`. */
  readonly name: "net" | "read" | "write" | "run" | "sys" | "ignore-env";
  /**
   * The flag value: `host:port`, `unix:/path`, a path (for run, the program's exact path), or a
   * kind of system information (sys).
   */
  readonly value: string;
  /** Who needs it, for diagnostics: `lane "public" listener`, `config file`, ... */
  readonly purpose: string;
}

/**
 * Lists every grant a config needs, in a stable order.
 *
 * @param config the validated config
 * @param options `embeddedCode` for a compiled binary, whose request-worker modules are inside it
 *   (no read grant for the checkout's code folders)
 */
export function requiredGrants(
  config: EdgeConfig,
  options: { readonly embeddedCode?: boolean } = {},
): Grant[] {
  const grants: Grant[] = [];
  for (const lane of LANE_NAMES) {
    const listen = config.lanes[lane]?.listen ?? [];
    for (const address of listen) {
      const purpose = `lane "${lane}" listener`;
      grants.push({ name: "net", value: formatAddress(address), purpose });
      if (address.kind === "unix") {
        grants.push({ name: "read", value: address.path, purpose });
        grants.push({ name: "write", value: address.path, purpose });
      }
    }
  }
  const companions: (readonly [string, ListenerAddress])[] = [];
  if (config.acme) companions.push(['lane "public" acme_http listener', config.acme.listen]);
  for (const address of config.passthrough?.listen ?? []) {
    companions.push(['lane "public" passthrough listener', address]);
  }
  for (const [purpose, address] of companions) {
    grants.push({ name: "net", value: formatAddress(address), purpose });
  }
  const transport = config.egress.transport;
  for (const socks of config.egress.socks) {
    const address = formatAddress({ kind: "tcp", hostname: socks.hostname, port: socks.port });
    const purpose = "pool_port" in socks ? `hub ${transport?.kind} endpoint` : "SOCKS instance";
    grants.push({ name: "net", value: address, purpose });
  }
  if (transport?.kind === "socks5_tls" || transport?.kind === "https_tunnel") {
    // The client certificate, its key and the hub's CA: read once when the egress starts.
    for (const file of [transport.cert_file, transport.key_file, transport.ca_file]) {
      grants.push({ name: "read", value: file, purpose: "hub transport credentials" });
    }
  }
  const torpool = config.egress.torpool;
  if (torpool) {
    // Reading the local Tor pool's view: Deno grants a Unix socket by net, read and write.
    const socket = torpool.api_socket;
    grants.push({ name: "net", value: `unix:${socket}`, purpose: "local Tor pool API" });
    grants.push({ name: "read", value: socket, purpose: "local Tor pool API" });
    grants.push({ name: "write", value: socket, purpose: "local Tor pool API" });
  }
  for (const target of config.egress.direct) {
    grants.push({ name: "net", value: target, purpose: "direct upstream" });
  }
  for (const url of config.policyStores) {
    grants.push({ name: "net", value: storeAddress(url), purpose: "fleet policy store" });
  }
  grants.push({ name: "read", value: config.file, purpose: "config file" });
  const runtime = config.runtime;
  if (runtime.kind === "local") {
    grants.push({ name: "read", value: runtime.dir, purpose: "tenants folder" });
  } else {
    grants.push({ name: "net", value: runtime.hub.address, purpose: "hub" });
    const hubFiles = runtime.hub.tls
      ? [runtime.hub.tls.caFile, runtime.hub.tls.certFile, runtime.hub.tls.keyFile]
      : [runtime.hub.tokenFile!];
    for (const file of hubFiles) {
      grants.push({ name: "read", value: file, purpose: "hub credentials" });
    }
    grants.push(...enrolmentGrants(runtime.hub));
    grants.push({ name: "read", value: runtime.cacheDir, purpose: "generation cache" });
    grants.push({ name: "write", value: runtime.cacheDir, purpose: "generation cache" });
  }
  // Certificate folders, not files: a reload watches the folder (editors replace files).
  const certDirs = new Set(
    (config.tls?.certificates ?? []).flatMap((c) => [dirname(c.certFile), dirname(c.keyFile)]),
  );
  for (const dir of certDirs) {
    grants.push({ name: "read", value: dir, purpose: "certificate folder" });
  }
  if (config.observe.saltFile) {
    grants.push({ name: "read", value: config.observe.saltFile, purpose: "tenant label salt" });
  }
  if (config.admin.tokenFile) {
    grants.push({ name: "read", value: config.admin.tokenFile, purpose: "admin token" });
  }
  if (config.adminGate) {
    grants.push({ name: "read", value: config.adminGate.file, purpose: "admin gate" });
  }
  for (const file of templateFiles(config.errors)) {
    grants.push({ name: "read", value: file, purpose: "error template" });
  }
  if (config.acme) {
    grants.push({
      name: "read",
      value: config.acme.challengeDir,
      purpose: "ACME challenge folder",
    });
  }
  if (runsWorkers(config) && !options.embeddedCode) {
    // A Worker loads its module graph from disk under the read permission (the main module's
    // graph needs none): the gateway's own code folders, nothing else.
    for (const folder of workerCode()) {
      grants.push({ name: "read", value: folder, purpose: "request worker code" });
    }
  }
  return [...grants, ...LOCAL_MACHINE_GRANTS, ...CODE_GRANTS];
}

/**
 * What the own-listener check reads of the machine at every load and before each upstream dial
 * (egress/local_machine.ts): the hosts file, the host name and the interface addresses, so that a
 * backend named by any name of this machine is refused like its address. Edges and hubs hold them.
 */
export const LOCAL_MACHINE_GRANTS: readonly Grant[] = [
  { name: "read", value: "/etc/hosts", purpose: "own-listener check (names of this machine)" },
  { name: "sys", value: "hostname", purpose: "own-listener check (the host name)" },
  {
    name: "sys",
    value: "networkInterfaces",
    purpose: "own-listener check (addresses of this machine)",
  },
];

/** The `host:port` a `redis://host:port[/db]` store URL names (IPv6 in brackets, as written). */
export function storeAddress(url: string): string {
  return url.slice("redis://".length).replace(/\/[0-9]+$/, "");
}

/**
 * The folders a request worker's modules load from (this checkout's `src/` and `lanes/`). A
 * compiled binary embeds them (its modules live under a `deno-compile-` folder) and needs none.
 */
const WORKER_CODE: readonly string[] = import.meta.url.startsWith("file:") &&
    !import.meta.url.includes("/deno-compile-")
  ? [
    fromFileUrl(new URL("../", import.meta.url)),
    fromFileUrl(new URL("../../lanes/", import.meta.url)),
  ]
    .map((path) => path.replace(/\/$/, ""))
  : [];

/**
 * The worker code folders, relative to the working directory when they are under it (as config
 * paths are printed), so the flags of a checkout read the same on every machine.
 */
function workerCode(): readonly string[] {
  let cwd: string | undefined;
  try {
    cwd = Deno.cwd();
  } catch {
    return WORKER_CODE;
  }
  return WORKER_CODE.map((folder) =>
    folder.startsWith(`${cwd}/`) ? folder.slice(cwd.length + 1) : folder
  );
}

/** What the code itself needs whatever the config: nothing but two ignored variable reads. */
export const CODE_GRANTS: readonly Grant[] = [
  { name: "ignore-env", value: "LOG_STREAM", purpose: "yaml parser debug switch" },
  { name: "ignore-env", value: "LOG_TOKENS", purpose: "yaml parser debug switch" },
];

/** True for grants that give authority (and so are audited); `ignore-env` gives none. */
export function isAuthority(
  grant: Grant,
): grant is Grant & { name: "net" | "read" | "write" | "run" | "sys" } {
  return grant.name !== "ignore-env";
}

/**
 * Renders grants as Deno flags on one line.
 *
 * @example
 * ```ts
 * import { formatFlags } from "./flags.ts";
 * formatFlags([
 *   { name: "net", value: "127.0.0.1:8080", purpose: "lane" },
 *   { name: "read", value: "config.yaml", purpose: "config file" },
 * ]); // "--allow-net=127.0.0.1:8080 --allow-read=config.yaml"
 * ```
 */
export function formatFlags(grants: readonly Grant[]): string {
  const flags: string[] = [];
  for (const name of ["net", "read", "write", "run", "sys", "ignore-env"] as const) {
    const values = [...new Set(grants.filter((g) => g.name === name).map((g) => g.value))];
    const flag = name === "ignore-env" ? "--ignore-env" : `--allow-${name}`;
    if (values.length > 0) flags.push(`${flag}=${values.join(",")}`);
  }
  return flags.join(" ");
}

/** The lanes a config serves, in ledger order. */
export function configuredLanes(config: EdgeConfig): LaneName[] {
  return LANE_NAMES.filter((lane) => config.lanes[lane] !== undefined);
}

/**
 * What registration and renewal with the fleet CA write (an https hub) — an edge's or a door's:
 * the key and certificate, and the `.new` files each is written to before it is renamed into place
 * (registration writes its key there before it asks, so a retry asks with the same key); with
 * registration, the secret file too (read, and removed once spent).
 */
export function enrolmentGrants(hub: Pick<HubClientConfig, "tls" | "secretFile">): Grant[] {
  if (!hub.tls) return [];
  const purpose = "node certificate (registration and renewal)";
  const grants: Grant[] = [hub.tls.certFile, hub.tls.keyFile].flatMap((file): Grant[] => [
    { name: "write", value: file, purpose },
    { name: "read", value: `${file}.new`, purpose },
    { name: "write", value: `${file}.new`, purpose },
  ]);
  if (hub.secretFile) {
    const secret = "one-time registration secret";
    grants.push({ name: "read", value: hub.secretFile, purpose: secret });
    grants.push({ name: "write", value: hub.secretFile, purpose: secret });
  }
  return grants;
}
