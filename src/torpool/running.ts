/**
 * A pool brought up whole: its API socket claimed, its instances spawned, its onion client keys
 * installed and its API serving — or, when the socket is a running pool's, a key or the socket
 * fails, nothing left running. The socket is claimed before any Tor is spawned, so a second pool
 * started on a live pool's socket spawns nothing (its Tors would fight the first's for the ports).
 * The command line and the hub (which embeds the pool) start it the same way.
 *
 * @module
 */
import { dirname } from "node:path";
import { type PoolApi, serveApi } from "./api.ts";
import { claimSocket, privateFolder } from "./api_socket.ts";
import type { PoolConfig } from "./config.ts";
import { type PoolOptions, TorPool } from "./supervisor.ts";

/**
 * One of the pool's log lines under a prefix, its level marker (`warning: `) kept in front where
 * the diagnostic log reads it.
 *
 * @example
 * ```ts
 * import { prefixLine } from "./running.ts";
 * prefixLine("torpool: ", "warning: api socket deleted"); // "warning: torpool: api socket deleted"
 * prefixLine("torpool: ", "instance 0 ready"); // "torpool: instance 0 ready"
 * ```
 */
export function prefixLine(prefix: string, line: string): string {
  const marker = /^(warning|error|info): /.exec(line)?.[0] ?? "";
  return `${marker}${prefix}${line.slice(marker.length)}`;
}

/** A pool and its API, and how to stop both. */
export interface RunningPool {
  readonly pool: TorPool;
  readonly api: PoolApi;
  /** Closes the API, then stops every instance. */
  close(): Promise<void>;
}

/** How a pool is run, and how long its API socket's owner has to answer (tests shorten it). */
export interface RunOptions extends PoolOptions {
  readonly answerMs?: number;
  readonly watchMs?: number;
}

/**
 * Claims the API socket, starts the pool, installs `client_auth_dir`, serves the API.
 *
 * @throws {Error} the socket's or the client keys' problem, after stopping the instances
 */
export async function runPool(config: PoolConfig, options: RunOptions = {}): Promise<RunningPool> {
  const log = options.log ?? ((line: string) => console.error(`portcullis: torpool: ${line}`));
  await privateFolder(dirname(config.apiSocket));
  const stale = await claimSocket(config.apiSocket, options.answerMs);
  if (stale) log(`warning: api socket: ${stale}`);
  const pool = TorPool.start(config, { ...options, log });
  let api: PoolApi;
  try {
    await pool.loadClientAuth();
    api = await serveApi(pool, config.apiSocket, { ...options, log });
  } catch (error) {
    await pool.stop();
    throw error;
  }
  return {
    pool,
    api,
    async close() {
      await api.close();
      await pool.stop();
    },
  };
}
