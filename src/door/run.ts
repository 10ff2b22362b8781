/**
 * The command-line side of the door role: `serve` (audit the permissions, boot, run until SIGTERM
 * or SIGINT — or until a revocation closes the door, which exits 3 as a revoked edge does: not a
 * clean stop, and nothing a restart can mend), `check` (validate, read the cover and the cache, print a summary) and `flags`
 * on a door config (`role: door`).
 *
 * @module
 */
import { join } from "node:path";
import { auditBeforeBoot } from "../boot/audit.ts";
import { diagnostics } from "../observe/diag.ts";
import { formatFlags } from "../boot/flags.ts";
import { formatAddress } from "../config/load.ts";
import { readCover } from "./boot.ts";
import { readCachedView, readRevocation, REVOKED_FILE } from "./cache.ts";
import { type DoorConfig, doorGrants } from "./config.ts";
import { startDoor } from "./door.ts";

export { type DoorConfig, doorGrants, isDoorFile, loadDoorConfig } from "./config.ts";

/**
 * Runs a verb on a door config.
 *
 * @returns the exit status: 0 done, 1 refused (audit, boot), 3 stopped because the hub revoked it
 *   (as an edge's)
 * @throws {BootError} when the boot is refused after the audit (main.ts reports it)
 */
export async function runDoorVerb(
  verb: "serve" | "check" | "flags",
  config: DoorConfig,
  version: string,
): Promise<number> {
  const grants = doorGrants(config);
  if (verb === "flags") {
    await checkLines(config); // flags refuses what check refuses (a cover page it cannot read)
    console.log(formatFlags(grants));
    return 0;
  }
  if (verb === "check") {
    console.log((await checkLines(config)).join("\n"));
    console.log(`  permissions: ${formatFlags(grants)}`);
    return 0;
  }
  if (!auditBeforeBoot(grants)) return 1;
  const log = diagnostics();
  const door = await startDoor(config, { log: (line) => log.line(line) });
  const onSignal = () => void door.close();
  Deno.addSignalListener("SIGTERM", onSignal);
  Deno.addSignalListener("SIGINT", onSignal);
  log.info(`door ready: ${config.nodeId} ${version}`);
  const how = await door.finished;
  await door.close();
  Deno.removeSignalListener("SIGTERM", onSignal);
  Deno.removeSignalListener("SIGINT", onSignal);
  return how === "revoked" ? 3 : 0;
}

/** What `check` prints: the door's listeners, hub, cover and cache. */
async function checkLines(config: DoorConfig): Promise<string[]> {
  const cover = await readCover(config.coverFile);
  const cached = await readCachedView(config.cacheDir);
  const revoked = await readRevocation(config.cacheDir);
  const { hub } = config;
  const auth = hub.tls
    ? `mutual TLS${hub.register ? `, registers with ${hub.register.secretFile}` : ""}`
    : "token";
  const listeners = config.listen.map((l) => `${formatAddress(l.address)}${l.tls ? " (TLS)" : ""}`);
  const cache = cached.state === "verified"
    ? `view ${cached.held.hash.slice(0, 12)} (${cached.held.view.slugs.length} slugs, ` +
      `${cached.held.view.mirrors.length} mirrors)`
    : cached.state === "refused"
    ? `refused: ${cached.reason}`
    : "empty";
  return [
    `portcullis: ${config.file} is valid`,
    `  door ${config.nodeId}`,
    `  public: ${listeners.join(", ")}`,
    `  health: ${config.health.map(formatAddress).join(", ") || "none"}`,
    `  hub: ${hub.url} (${auth}), grace ${hub.graceMs / 1000} s after a revocation`,
    `  cover: ${config.coverFile} (${cover.byteLength} bytes)`,
    `  cache: ${config.cacheDir}: ${cache}`,
    ...(revoked
      ? [`  REVOKED at ${revoked.at} (${join(config.cacheDir, REVOKED_FILE)}): it will not start`]
      : []),
  ];
}
