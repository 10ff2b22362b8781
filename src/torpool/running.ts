/**
 * A pool brought up whole: its instances spawned, its onion client keys installed and its API
 * serving, or — when a key or the socket fails — nothing left running. The command line and the
 * hub (which embeds the pool) start it the same way.
 *
 * @module
 */
import { type PoolApi, serveApi } from "./api.ts";
import type { PoolConfig } from "./config.ts";
import { type PoolOptions, TorPool } from "./supervisor.ts";

/** A pool and its API, and how to stop both. */
export interface RunningPool {
  readonly pool: TorPool;
  readonly api: PoolApi;
  /** Closes the API, then stops every instance. */
  close(): Promise<void>;
}

/**
 * Starts the pool, installs `client_auth_dir`, serves the API.
 *
 * @throws {Error} the client keys' or the socket's problem, after stopping the instances
 */
export async function runPool(config: PoolConfig, options: PoolOptions = {}): Promise<RunningPool> {
  const pool = TorPool.start(config, options);
  let api: PoolApi;
  try {
    await pool.loadClientAuth();
    api = await serveApi(pool, config.apiSocket);
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
