/**
 * The runtime folder as the hub serves it: read whole (sharing the live set's buffers for files
 * that did not change, so the generations kept for deltas cost only what changed), validated as an
 * edge validates it, and checked against the hub's own listeners — no tenant it serves may aim at
 * them (edges check theirs).
 *
 * @module
 */
import { type FileSet, hashFileSet, readFileSet, runtimeTextsOf } from "../config/file_set.ts";
import { ConfigStore } from "../live/generations.ts";
import { ConfigError } from "../config/problems.ts";
import { inwardProblems, inwardProblemsNow } from "../proxy/inward.ts";
import type { OwnListener } from "../egress/own_listener.ts";
import { readLocalMachine } from "../egress/local_machine.ts";
import { Tracing } from "../observe/tracing.ts";
import { type FolderRead, readStableFolder } from "../live/runtime_watch.ts";
import { BootError } from "../boot/boot_error.ts";
import { buildRegistry } from "../proxy/tenants.ts";
import type { HubConfig } from "./config.ts";
import { sameBytes } from "./feed.ts";

/**
 * Reads, validates and stores the runtime folder as generation 1. Deno's own spans are refused
 * first: the hub makes none, but Deno's would carry node ids and hashes in URLs.
 *
 * @throws {BootError} when tracing is configured
 * @throws {ConfigError} when the folder is not a valid generation, or a tenant aims at the hub
 */
export async function loadFirstGeneration(config: HubConfig): Promise<ConfigStore> {
  const tracing = Tracing.detect("hub");
  if (tracing.refusal) throw new BootError([tracing.refusal]);
  const first = await readStableFolder(config.runtimeDir, readHubFolder, config.debounceMs);
  if (first.problems.length > 0) throw new ConfigError(first.problems);
  const texts = first.texts;
  const built = await buildRegistry(config.runtimeDir, texts);
  if (!built.registry) throw new ConfigError(built.problems);
  const own = ownListeners(config);
  const inward = inwardProblems(built.registry, own, await readLocalMachine());
  if (inward.length > 0) throw new ConfigError(inward);
  return new ConfigStore({
    number: 1,
    hash: first.hash,
    loadedAt: Date.now(),
    source: "directory",
    dir: config.runtimeDir,
    registry: built.registry,
    texts,
    files: first.files,
  }, (registry) => inwardProblemsNow(registry, own));
}

/** The hub's own TCP listeners, which no tenant set it serves may aim at (edges check theirs). */
function ownListeners(config: HubConfig): OwnListener[] {
  return [
    ...config.api.listen.map((address, i) => ({ address, name: `api.listen[${i}]` })),
    ...config.health.map((address, i) => ({ address, name: `health.listen[${i}]` })),
    ...(config.socks5Tls
      ? [{ address: config.socks5Tls.listen, name: "transport.socks5_tls.listen" }]
      : []),
    ...(config.httpsTunnel
      ? [{ address: config.httpsTunnel.listen, name: "transport.https_tunnel.listen" }]
      : []),
  ].flatMap(({ address, name }) =>
    address.kind === "tcp" ? [{ hostname: address.hostname, port: address.port, name }] : []
  );
}

/** Reads the runtime folder whole, sharing the live set's buffers for unchanged files. */
export async function readHubFolder(dir: string, live?: FileSet): Promise<FolderRead> {
  const read = await readFileSet(dir);
  const files = shareUnchanged(read.files, live);
  return {
    texts: runtimeTextsOf(files),
    hash: await hashFileSet(files),
    problems: read.problems,
    files,
  };
}

/**
 * Reuses the live set's buffer for every file whose bytes did not change, so the generations kept
 * for deltas cost the changed files, not a full copy of the folder each.
 */
function shareUnchanged(files: Map<string, Uint8Array>, live: FileSet | undefined): FileSet {
  if (!live) return files;
  for (const [name, data] of files) {
    const before = live.get(name);
    if (before && sameBytes(before, data)) files.set(name, before);
  }
  return files;
}
