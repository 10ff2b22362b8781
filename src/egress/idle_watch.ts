/**
 * Idle upstream connections, found by one periodic sweep over the agents' sockets instead of a
 * timer per request:
 *
 * - an in-use socket whose response body is still arriving and that read nothing for `bodyIdleMs`
 *   has that response destroyed (the streaming code then cuts the client response off);
 * - a pooled keep-alive socket left unused for `socketIdleMs` is closed — or sooner, before the
 *   upstream said it would close it (`Keep-Alive: timeout=N` on its last response,
 *   see {@link IdleWatch.honour}): a request written to a connection the upstream is closing at
 *   that moment can neither be known unsent nor be answered.
 *
 * Nothing is registered per request: the sweep reads node's own bookkeeping (the agent's in-use
 * and free socket lists, and each socket's current request and response). Per-request timers and
 * per-request entries in long-lived collections both measurably cost proxy throughput. A limit
 * fires between 1× and 1.5× its value.
 *
 * @module
 */
import type http from "node:http";
import { WayAgent } from "./agents.ts";

/** What the sweep reads from an upstream socket (node's `_httpMessage` is its request). */
interface UpstreamSocket {
  readonly bytesRead: number;
  readonly _httpMessage?: { readonly res?: http.IncomingMessage | null } | null;
  destroy(): void;
}

interface Progress {
  seen: number;
  quietSweeps: number;
}

/** Watches the sockets of some agents. */
export class IdleWatch {
  readonly #agents: () => Iterable<http.Agent>;
  readonly #progress = new WeakMap<object, Progress>();
  readonly #freeSince = new WeakMap<object, number>();
  /** Sockets whose upstream announced a shorter keep-alive time: how long they may stay idle. */
  readonly #announced = new WeakMap<object, number>();
  readonly #intervalMs: number;
  readonly #bodySweeps: number;
  readonly #bodyIdleMs: number;
  readonly #socketIdleMs: number;
  readonly #clock: () => number;
  #timer: number | undefined;

  /**
   * @param agents the agents whose sockets are watched, or a function that lists them at each
   *   sweep (agents made later, such as one per tenant, are watched from then on)
   * @param limits the longest silence inside a body, and the longest unused keep-alive time
   * @param clock milliseconds, monotonic
   */
  constructor(
    agents: readonly http.Agent[] | (() => Iterable<http.Agent>),
    limits: { readonly bodyIdleMs: number; readonly socketIdleMs: number },
    clock: () => number,
  ) {
    this.#agents = typeof agents === "function" ? agents : () => agents;
    // At least once a second: an upstream's announced keep-alive time is seconds.
    this.#intervalMs = Math.max(
      5,
      Math.min(1000, Math.floor(Math.min(limits.bodyIdleMs, limits.socketIdleMs) / 2)),
    );
    this.#bodySweeps = Math.max(1, Math.round(limits.bodyIdleMs / this.#intervalMs));
    this.#bodyIdleMs = limits.bodyIdleMs;
    this.#socketIdleMs = limits.socketIdleMs;
    this.#clock = clock;
  }

  /** Starts sweeping (idempotent). */
  start(): void {
    if (this.#timer !== undefined) return;
    // Deno's timers are numbers (node's types say Timeout); unref: it must not keep a process up.
    const timer = setInterval(() => this.sweep(), this.#intervalMs) as unknown as number;
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  /** Stops sweeping. */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * Takes an upstream's `Keep-Alive` header into account for `socket`: with `timeout=N`, the
   * socket is closed within N seconds unused (N − 2 after it was first seen idle: the sweep sees it
   * up to a second late and runs once a second), never later than `socketIdleMs`; with N ≤ 2 it is
   * closed as soon as it is seen idle.
   *
   * @param header the response's `Keep-Alive` value, if any
   */
  honour(socket: object | null | undefined, header: string | undefined): void {
    if (!socket || header === undefined) return;
    const match = /(?:^|[,;\s])timeout\s*=\s*(\d{1,9})/i.exec(header);
    if (!match) return;
    const ms = Number(match[1]) * 1000 - 2000;
    if (ms < this.#socketIdleMs) this.#announced.set(socket, Math.max(0, ms));
  }

  /** One sweep (exposed for tests). */
  sweep(): void {
    const now = this.#clock();
    const owned = {
      bodyIdleMs: this.#bodyIdleMs,
      idleLimit: (conn: object) => this.#announced.get(conn) ?? this.#socketIdleMs,
    };
    for (const agent of this.#agents()) {
      if (agent instanceof WayAgent) agent.owned.sweep(now, owned);
      for (const list of Object.values(agent.sockets)) {
        for (const socket of (list ?? []) as unknown as UpstreamSocket[]) {
          this.#freeSince.delete(socket);
          this.#checkBody(socket);
        }
      }
      for (const list of Object.values(agent.freeSockets)) {
        for (const socket of (list ?? []) as unknown as UpstreamSocket[]) {
          this.#progress.delete(socket);
          const since = this.#freeSince.get(socket);
          const limit = this.#announced.get(socket) ?? this.#socketIdleMs;
          if (limit === 0) socket.destroy();
          else if (since === undefined) this.#freeSince.set(socket, now);
          else if (now - since >= limit) socket.destroy();
        }
      }
    }
  }

  #checkBody(socket: UpstreamSocket): void {
    const response = socket._httpMessage?.res;
    if (!response || response.complete || response.destroyed) {
      this.#progress.delete(socket);
      return;
    }
    const progress = this.#progress.get(socket);
    if (!progress || progress.seen !== socket.bytesRead) {
      this.#progress.set(socket, { seen: socket.bytesRead, quietSweeps: 0 });
      return;
    }
    if (++progress.quietSweeps >= this.#bodySweeps) {
      this.#progress.delete(socket);
      response.destroy(new Error("Upstream body idle"));
    }
  }
}
