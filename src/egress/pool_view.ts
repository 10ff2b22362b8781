/**
 * What a supervised pool says of its own instances, applied to the edge's SOCKS instances: a port
 * the pool does not list as live (dead, respawning, still bootstrapping) has its breaker opened at
 * once, so requests go to the other instances instead of finding the death by failing. The
 * breaker's half-open probe brings the instance back once the pool has respawned it on its port.
 *
 * In local mode the view comes from a `portcullis torpool` on the same machine: its `/backends`,
 * read over its Unix socket every probe interval (`egress.torpool.api_socket`).
 *
 * @module
 */
import http from "node:http";

/** One live port of the pool, as its `/backends` lists it. */
export interface LivePort {
  readonly port: number;
  readonly latencyMs?: number | null;
}

/** Reads `/backends` from a pool's API socket; undefined when it cannot be read. */
export function readPoolView(
  socketPath: string,
  timeoutMs: number,
): Promise<LivePort[] | undefined> {
  return new Promise((resolve) => {
    const request = http.get({ socketPath, path: "/backends", timeout: timeoutMs }, (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        if (text.length < 1 << 20) text += chunk;
      });
      response.on("end", () => resolve(response.statusCode === 200 ? parseView(text) : undefined));
      response.on("error", () => resolve(undefined));
    });
    request.on("timeout", () => request.destroy());
    request.on("error", () => resolve(undefined));
  });
}

/** The live ports of a `/backends` answer; undefined when it is not one. */
export function parseView(text: string): LivePort[] | undefined {
  try {
    const body = JSON.parse(text) as { backends?: unknown };
    if (!Array.isArray(body.backends)) return undefined;
    return body.backends.filter((entry): entry is LivePort =>
      typeof entry === "object" && entry !== null && Number.isInteger(entry.port)
    );
  } catch {
    return undefined;
  }
}

/**
 * Polls a pool's view every `intervalMs` and hands each one to `apply`; a pool that cannot be read
 * changes nothing (and is logged once until it answers again).
 *
 * @returns stops the polling
 */
export function watchPoolView(
  socketPath: string,
  intervalMs: number,
  apply: (live: readonly LivePort[]) => void,
  log: (line: string) => void,
): () => void {
  let unreadable = false;
  let stopped = false;
  const poll = async () => {
    const view = await readPoolView(socketPath, Math.max(100, Math.min(intervalMs, 5000)));
    if (stopped) return;
    if (view === undefined) {
      if (!unreadable) log(`portcullis: egress: the Tor pool at ${socketPath} cannot be read`);
      unreadable = true;
      return;
    }
    unreadable = false;
    apply(view);
  };
  const timer = setInterval(poll, intervalMs);
  Deno.unrefTimer(timer as unknown as number);
  poll();
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}

/** What the view acts on: the edge's instance pool. */
export interface ViewedInstances {
  trip(index: number): void;
  seedLatency(index: number, latencyMs: number): void;
}

/**
 * The edge's side of a pool view: which of its SOCKS instances a view names (by the pool port
 * behind a transport, else the instance's own port), what a view does to them, and the one
 * follower of a view source (a local pool's socket, or the hub) it runs.
 */
export class PoolView {
  readonly #entries: readonly { readonly port: number; readonly poolPort?: number }[];
  readonly #instances: ViewedInstances;
  readonly #intervalMs: number;
  #stop?: () => void;

  constructor(
    entries: readonly { readonly port: number; readonly poolPort?: number }[],
    instances: ViewedInstances,
    intervalMs: number,
  ) {
    this.#entries = entries;
    this.#instances = instances;
    this.#intervalMs = intervalMs;
  }

  /**
   * Applies a view: every instance whose port is not live has its breaker opened now; a live
   * one's latency, as the pool measured it, seeds its score until the edge has measured its own.
   *
   * @returns the instance indexes whose port is not live
   */
  apply(live: readonly LivePort[]): number[] {
    const ports = new Map(live.map((entry) => [entry.port, entry.latencyMs]));
    const down: number[] = [];
    this.#entries.forEach((entry, index) => {
      const port = entry.poolPort ?? entry.port;
      if (!ports.has(port)) {
        this.#instances.trip(index);
        down.push(index);
        return;
      }
      const latency = ports.get(port);
      if (typeof latency === "number") this.#instances.seedLatency(index, latency);
    });
    return down;
  }

  /** Follows a local `portcullis torpool` through its API socket (`egress.torpool`). */
  followLocal(socketPath: string, log: (line: string) => void): void {
    this.follow((interval, apply) => watchPoolView(socketPath, interval, apply, log));
  }

  /**
   * Follows a view source: `start` gets the interval and the function that applies a view, and
   * returns how to stop. One source at a time; {@link stop} ends it.
   */
  follow(start: (intervalMs: number, apply: (live: readonly LivePort[]) => void) => () => void) {
    if (this.#stop) return;
    this.#stop = start(this.#intervalMs, (live) => void this.apply(live));
  }

  stop(): void {
    this.#stop?.();
    this.#stop = undefined;
  }
}
