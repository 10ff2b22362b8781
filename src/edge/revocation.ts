/**
 * What a remote edge does about being revoked, and how it comes back.
 *
 * When the hub answers `node_revoked` (its certificate is on the CRL, or its token file was
 * removed), the edge writes `revoked.json` in its cache folder at once (when and why), keeps
 * serving for `hub.grace_seconds`, then drains: the public lane stops taking connections, requests
 * in flight finish, every listener closes and the process ends. The cached runtime sets (tenants,
 * onion addresses, bodies) are then deleted. The marker is written first so a crash or a restart
 * during the grace does not reconnect: a boot that finds it deletes the cache (again) and refuses
 * to start until the node is provisioned again — a new registration secret (`portcullis hub
 * add-node`) with the old certificate removed, which registers and clears the marker; a token
 * node's operator gives it a new token and removes the marker by hand.
 *
 * @module
 */
import { join } from "node:path";
import { BootError } from "../boot/boot_error.ts";
import type { HubClientConfig } from "../config/runtime_source.ts";
import { ensureNodeCertificate } from "../live/enrol.ts";
import type { HubFollower } from "../live/hub_client.ts";

/** The marker a revoked edge leaves in its cache folder. */
export const REVOKED_FILE = "revoked.json";

/** What the marker records. */
export interface RevokedMarker {
  readonly node_id: string;
  readonly at: string;
  readonly reason: string;
}

/** The marker in `cacheDir`, if the node was revoked. */
export async function readRevokedMarker(cacheDir: string): Promise<RevokedMarker | undefined> {
  try {
    return JSON.parse(await Deno.readTextFile(join(cacheDir, REVOKED_FILE)));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    // A marker that is there but unreadable still means revoked.
    return { node_id: "", at: "unknown", reason: `unreadable marker: ${error}` };
  }
}

/** Deletes every cached runtime set (everything in `cacheDir` but the marker). */
export async function deleteCachedSets(cacheDir: string): Promise<number> {
  let removed = 0;
  const gone = (error: unknown) => {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  };
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(cacheDir)) names.push(entry.name);
  } catch (error) {
    gone(error);
  }
  // Each entry on its own: the edge and its process's exit may both be deleting (either may win).
  for (const name of names.filter((name) => name !== REVOKED_FILE)) {
    await Deno.remove(join(cacheDir, name), { recursive: true }).then(() => removed++, gone);
  }
  return removed;
}

/**
 * Stops the edge when its follower hears it is revoked: the marker now, the drain after the grace,
 * the cache once drained.
 */
export function stopWhenRevoked(options: {
  readonly follower: HubFollower;
  readonly nodeId: string;
  readonly cacheDir: string;
  readonly graceSeconds: number;
  readonly drain: () => Promise<void>;
  readonly log: (line: string) => void;
}): void {
  const { follower, nodeId, cacheDir, graceSeconds, drain, log } = options;
  follower.whenRevoked(async (reason) => {
    const marker: RevokedMarker = { node_id: nodeId, at: new Date().toISOString(), reason };
    await Deno.mkdir(cacheDir, { recursive: true }).catch(() => {});
    await Deno.writeTextFile(join(cacheDir, REVOKED_FILE), JSON.stringify(marker) + "\n", {
      mode: 0o600,
    }).catch((error) => log(`portcullis: cannot record the revocation: ${error}`));
    log(
      `portcullis: revoked by the hub: the public lane stops taking connections in ` +
        `${graceSeconds} s, then the edge drains and deletes its cache`,
    );
    await new Promise((resolve) => setTimeout(resolve, graceSeconds * 1000));
    log("portcullis: revoked: grace over, draining");
    await drain();
    const removed = await deleteCachedSets(cacheDir).catch((error) => {
      log(`portcullis: revoked: cannot delete the cache ${cacheDir}: ${error}`);
      return 0;
    });
    log(
      `portcullis: revoked: ${removed} cached runtime set entries deleted from ${cacheDir}; ` +
        `re-provision this node to serve again`,
    );
  });
}

/**
 * The boot's step for a remote node, before anything is read from the cache: refuse a revoked
 * node (deleting its cache) unless it is being provisioned again, and register with the fleet CA
 * when the node has a secret and no certificate yet.
 *
 * @throws {BootError} when the node is revoked and not re-provisioned, or registration fails
 */
export async function prepareRemoteNode(options: {
  readonly nodeId: string;
  readonly nodeType: "edge" | "door";
  readonly hub: HubClientConfig;
  readonly cacheDir: string;
  readonly log: (line: string) => void;
}): Promise<void> {
  const { nodeId, nodeType, hub, cacheDir, log } = options;
  const marker = await readRevokedMarker(cacheDir);
  if (marker) await deleteCachedSets(cacheDir);
  const reprovisioned = marker && hub.tls && hub.secretFile && await exists(hub.secretFile) &&
    !await exists(hub.tls.certFile);
  if (marker && !reprovisioned) {
    throw new BootError([
      `This node was revoked by its hub at ${marker.at} (${marker.reason}); its cache is deleted`,
      hub.tls
        ? `To serve again, provision it anew: remove ${hub.tls.certFile}, make a secret with ` +
          "`portcullis hub add-node` and give it as hub.register.secret_file"
        : `To serve again, give it a new token (hub.token_file) and remove ${
          join(cacheDir, REVOKED_FILE)
        }`,
    ]);
  }
  if (!hub.tls) return;
  try {
    const tls = hub.tls;
    await ensureNodeCertificate({
      nodeId,
      nodeType,
      hub: { url: hub.url, ...tls, secretFile: hub.secretFile },
      log,
    });
  } catch (error) {
    throw new BootError([`Cannot register with the hub: ${(error as Error).message}`]);
  }
  if (marker) {
    await Deno.remove(join(cacheDir, REVOKED_FILE)).catch(() => {});
    log("portcullis: provisioned again after a revocation");
  }
}

async function exists(path: string): Promise<boolean> {
  return await Deno.lstat(path).then(() => true, () => false);
}
