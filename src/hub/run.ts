/**
 * The command-line side of the hub role and of runtime folders: `hub` (run), `check` and `flags`
 * on a hub config, and `check` on a runtime folder.
 *
 * @module
 */
import { auditBeforeBoot } from "../boot/audit.ts";
import { diagnostics } from "../observe/diag.ts";
import { formatFlags } from "../boot/flags.ts";
import { formatAddress } from "../config/load.ts";
import { hashFileSet, readFileSet, runtimeTextsOf } from "../config/file_set.ts";
import { ConfigError } from "../config/problems.ts";
import { buildRegistry, type TenantRegistry } from "../proxy/tenants.ts";
import type { HubConfig } from "./config.ts";
import { hubGrants } from "./grants.ts";
import { startHub } from "./hub.ts";

/**
 * Validates a runtime folder the way an edge or a hub loading it would.
 *
 * @returns the registry, and the folder's file count and file-set hash (what a hub would serve)
 * @throws {ConfigError} naming file, field and value of every problem found
 */
export async function checkRuntimeFolder(
  dir: string,
): Promise<{ registry: TenantRegistry; files: number; hash: string }> {
  const read = await readFileSet(dir);
  if (read.problems.length > 0) throw new ConfigError(read.problems);
  const built = await buildRegistry(dir, runtimeTextsOf(read.files));
  if (!built.registry) throw new ConfigError(built.problems);
  return { registry: built.registry, files: read.files.size, hash: await hashFileSet(read.files) };
}

/** The lines `check` prints for a valid runtime folder. */
export function summarizeFolder(
  dir: string,
  checked: { registry: TenantRegistry; files: number; hash: string },
): string[] {
  const hosts = checked.registry.tenants.map((t) => t.host);
  return [
    `  runtime folder ${dir}: ${hosts.length} tenants, ${checked.files} files, ` +
    `hash ${checked.hash.slice(0, 12)}`,
    ...(hosts.length > 0 ? [`    ${hosts.join(" ")}`] : []),
  ];
}

/**
 * Runs a verb on a hub config.
 *
 * @returns the exit status
 */
export async function runHubVerb(
  verb: string,
  config: HubConfig,
  version: string,
): Promise<number> {
  const grants = hubGrants(config);
  if (verb === "flags") {
    console.log(formatFlags(grants));
    return 0;
  }
  if (verb === "serve") {
    console.error(
      `portcullis: ${config.file} is a hub config (role: hub); run: portcullis hub ${config.file}`,
    );
    return 2;
  }
  if (verb === "check") {
    const checked = await checkRuntimeFolder(config.runtimeDir);
    const auth = config.api.tls ? "mutual TLS" : `tokens in ${config.api.tokensDir}`;
    console.log([
      `portcullis: ${config.file} is valid`,
      `  hub ${config.nodeId}`,
      `  api: ${config.api.listen.map(formatAddress).join(", ")} (${auth})`,
      `  health: ${config.health.map(formatAddress).join(", ") || "none"}`,
      ...(config.socks5Tls
        ? [
          `  socks5_tls: ${formatAddress(config.socks5Tls.listen)} (mutual TLS) → pool ` +
          `${config.pool!.hostname} ports ${config.pool!.ports.join(", ")}`,
        ]
        : []),
      ...summarizeFolder(config.runtimeDir, checked),
      `  permissions: ${formatFlags(grants)}`,
    ].join("\n"));
    return 0;
  }
  if (!auditBeforeBoot(grants)) return 1;
  const log = diagnostics();
  const hub = await startHub(config, { log: (line) => log.line(line) });
  const onSignal = () => hub.close();
  Deno.addSignalListener("SIGTERM", onSignal);
  Deno.addSignalListener("SIGINT", onSignal);
  const live = hub.store.current;
  log.info(
    `hub ready: ${config.nodeId} ${version}, generation ${live.number} ` +
      `(${live.registry.tenants.length} tenants, ${live.hash.slice(0, 12)})`,
  );
  await hub.finished;
  Deno.removeSignalListener("SIGTERM", onSignal);
  Deno.removeSignalListener("SIGINT", onSignal);
  return 0;
}
