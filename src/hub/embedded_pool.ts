/**
 * The hub's embedded Tor pool (`pool.torpool`): the pool supervisor runs inside the hub and its
 * JSON API listens on the pool's own Unix socket, visible only on the hub's machine. The relay
 * serves the instances that are ready now — an edge that names a port whose instance is dead or
 * still bootstrapping is refused at the handshake and its breaker moves on — and reports each
 * port's relayed streams to the pool, which is what its scaler reads.
 *
 * A pool that cannot start (its API socket is a running pool's, its folder open to others, a client
 * key bad) refuses the hub's boot as a {@link BootError}: the operator gets the diagnostic JSON line
 * naming the socket and `boot refused`, never a stack trace.
 *
 * @module
 */
import { BootError } from "../boot/boot_error.ts";
import type { PoolConfig } from "../torpool/config.ts";
import { prefixLine, type RunningPool, runPool } from "../torpool/running.ts";
import type { TorPool } from "../torpool/supervisor.ts";
import type { PoolPorts } from "./socks_relay.ts";

/** A running embedded pool: what the relay serves, and how to stop it. */
export interface EmbeddedPool {
  readonly pool: TorPool;
  readonly ports: PoolPorts;
  close(): Promise<void>;
}

/**
 * Starts the pool's instances and its API; on a failure to serve the API, stops the instances.
 *
 * @throws {BootError} naming the pool config and why the pool cannot start
 */
export async function startEmbeddedPool(
  config: PoolConfig,
  log: (line: string) => void,
): Promise<EmbeddedPool> {
  let running: RunningPool;
  try {
    running = await runPool(config, {
      log: (line) => log(`portcullis: ${prefixLine("hub torpool: ", line)}`),
    });
  } catch (error) {
    throw new BootError([`pool.torpool (${config.file}): ${(error as Error).message}`]);
  }
  const pool = running.pool;
  return {
    pool,
    ports: {
      hostname: config.listen,
      ports: () => pool.backends().map((backend) => backend.port),
      report: (port, load) => void pool.report(port, load),
    },
    close: () => running.close(),
  };
}
