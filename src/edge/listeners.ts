/**
 * Binding the listeners of a plan: a plain lane server, a TLS front over a lane server (the
 * public lane with `tls`), the ACME companion, or an SNI passthrough listener. Each bound listener
 * knows how to stop accepting, drop its idle connections, and close everything.
 *
 * @module
 */
import type { AddressInfo, Server, Socket } from "node:net";
import net from "node:net";
import type { ListenerRole } from "../boot/distinct.ts";
import { bindServer, probeUnshared } from "../server/bind.ts";
import { formatAddress, type ListenerAddress } from "../config/load.ts";
import type { LaneName } from "../ledger/lane_names.ts";
import { createLaneListener, type ServerLimits } from "../server/lane_listener.ts";
import { createPipeline, errorPagesFor } from "../pipeline/runner.ts";
import type { LaneTable } from "../pipeline/lane_table.ts";
import { servePassthrough } from "../tls/passthrough.ts";
import type { EdgeServices } from "../pipeline/services.ts";

/** A listener bound (or about to be) for one lane. */
export interface Bound {
  readonly lane: LaneName;
  readonly role?: ListenerRole;
  readonly index: number;
  readonly address: ListenerAddress;
  /** The object that listens (proven distinct from every other). */
  readonly server: Server;
  /** Stops accepting new connections (drain). */
  stopAccepting(): void;
  /** Closes connections with no request in flight (drain). */
  closeIdle(): void;
  /** Closes every connection now. */
  closeAll(): void;
}

/** What binding needs from the edge. */
export interface BindContext {
  readonly services: EdgeServices;
  readonly limits: ServerLimits;
  readonly armed: () => boolean;
  readonly tls?: { readonly minVersion: "TLSv1.2" | "TLSv1.3"; readonly http2: boolean };
  readonly helloTimeoutMs: number;
}

/**
 * Creates the listening object for one address of a planned lane (not yet listening).
 *
 * @param table the lane's route table
 * @param role `serve` for the lane's own listeners, else the companion role
 */
export function createListener(
  table: LaneTable<EdgeServices>,
  role: "serve" | ListenerRole,
  index: number,
  address: ListenerAddress,
  context: BindContext,
): Bound {
  const lane = table.descriptor.name;
  const { services } = context;
  const base = { lane, index, address, role: role === "serve" ? undefined : role };
  if (role === "passthrough") return passthroughListener(base, context);
  const store = services.tls;
  const tls = role === "serve" && lane === "public" && store && context.tls
    ? { store, minVersion: context.tls.minVersion, http2: context.tls.http2 }
    : undefined;
  // The edge hands the lane's pipeline to the transport; the transport never sees what it runs.
  const pipeline = createPipeline(table, services, context.limits);
  const listener = createLaneListener({
    lane,
    ledger: services.ledger,
    stats: services.stats,
    limits: context.limits,
    armed: context.armed,
    tls,
    serve: (arrival) => pipeline.serve(arrival),
    upgrades: table.descriptor.phases !== undefined,
    errorPages: errorPagesFor(lane, services),
  });
  listener.server.on("close", () => pipeline.stop());
  return {
    ...base,
    server: listener.server,
    stopAccepting: () => listener.server.close(),
    closeIdle: () => listener.closeIdle(),
    closeAll: () => listener.closeAll(),
  };
}

/** An SNI passthrough listener: accounted at accept, piped by SNI, never terminated. */
function passthroughListener(
  base: Omit<Bound, "server" | "stopAccepting" | "closeIdle" | "closeAll">,
  context: BindContext,
): Bound {
  const { services, armed } = context;
  const { ledger, egress } = services;
  const open = new Set<Socket>();
  const budgets = new WeakMap<Socket, { active: number }>();
  const server = net.createServer(function acceptPassthrough(socket) {
    if (!armed() || !ledger.openConnection("public")) {
      socket.destroy();
      return;
    }
    open.add(socket);
    budgets.set(socket, { active: 0 });
    socket.once("close", () => {
      open.delete(socket);
      ledger.closeConnection("public");
    });
    servePassthrough(socket, {
      helloTimeoutMs: context.helloTimeoutMs,
      lookup: (name) => services.tenants().get(name)?.passthrough,
      admit() {
        if (services.state.admissionStopped) return undefined;
        const ticket = ledger.admit("public", budgets.get(socket));
        if (!("complete" in ticket)) return undefined;
        return (ok) => ok ? ticket.complete() : ticket.cancel();
      },
      connect: (target) =>
        egress.connectRaw({ ...target, target: formatTarget(target.host, target.port) }),
      log: services.log,
    });
  });
  return {
    ...base,
    server,
    stopAccepting: () => server.close(),
    closeIdle: () => {},
    closeAll: () => {
      for (const socket of open) socket.destroy();
    },
  };
}

function formatTarget(host: string, port: number): string {
  return `${host.includes(":") ? `[${host}]` : host}:${port}`.toLowerCase();
}

/** The listener's name in diagnostics: `lane "public"` or `lane "public" (acme_http)`. */
export function describeListener(bound: Pick<Bound, "lane" | "role">): string {
  return `lane "${bound.lane}"${bound.role ? ` (${bound.role})` : ""}`;
}

/**
 * Binds one listener of a lane; the error names the lane, the address and the reason.
 *
 * @param reusePort let other request workers bind the same TCP address (the kernel spreads
 *   connections among them)
 */
export function listen(bound: Bound, reusePort = false): Promise<void> {
  return bindServer(
    bound.server,
    bound.address,
    `Cannot bind ${describeListener(bound)} on ${formatAddress(bound.address)}`,
    reusePort,
  );
}

/**
 * Proves that no other process listens on a listener's TCP address, before this process's request
 * workers bind it with port sharing (see `probeUnshared` in server/bind.ts); the error names the
 * lane and the address: `Cannot bind lane "public" on 127.0.0.1:8080: address already in use by
 * another process`.
 */
export function probeListener(listener: Pick<Bound, "lane" | "role" | "address">): Promise<void> {
  return probeUnshared(
    listener.address,
    `Cannot bind ${describeListener(listener)} on ${formatAddress(listener.address)}`,
  );
}

/** The listening handle under a `node:net` server (Deno's libuv port), when it has one. */
interface ListenHandle {
  listen?: (backlog: number) => number;
}

/**
 * Asks a TCP listener to accept again. Deno 2.9.6's `node:net` stops polling a listener whose
 * `accept` failed (`EMFILE`) and never looks again; calling `listen` on the handle that already
 * listens marks it ready, so pending connections are accepted — the accept queue is kept, not
 * dropped. This reaches into the runtime's handle, so {@link rearm} falls back to binding again.
 *
 * @returns false when the handle offers no such call (another runtime, a Unix socket)
 */
export function nudge(bound: Bound): boolean {
  if (bound.address.kind !== "tcp" || !bound.server.listening) return false;
  const handle = (bound.server as unknown as { _handle?: ListenHandle | null })._handle;
  return typeof handle?.listen === "function" && handle.listen(511) === 0;
}

/**
 * Makes a listener accept again after descriptor exhaustion: a {@link nudge}, or else closing the
 * listening socket (connections already open are not touched) and binding the same address again.
 *
 * @param reusePort as the listener was first bound
 */
export async function rearm(bound: Bound, reusePort: boolean): Promise<void> {
  if (nudge(bound)) return;
  await new Promise<void>((resolve) => {
    if (!bound.server.listening) return resolve();
    // net.Server's own close: only the listening socket (http's would also end idle connections).
    net.Server.prototype.close.call(bound.server, () => resolve());
    // Its callback waits for every connection; the address is free at once.
    resolve();
  });
  await listen(bound, reusePort);
}

/** The address a listener actually bound. */
export function boundAddress(bound: Bound): ListenerAddress {
  const info = bound.server.address();
  if (bound.address.kind === "unix" || info === null || typeof info === "string") {
    return bound.address;
  }
  const { address, port } = info as AddressInfo;
  return { kind: "tcp", hostname: address, port };
}

/** Closes a listener and every connection it has; removes its Unix socket file. */
export function closeListener(bound: Bound): Promise<void> {
  return new Promise((resolve) => {
    const { address } = bound;
    bound.server.close(async () => {
      if (address.kind === "unix") await Deno.remove(address.path).catch(() => {});
      resolve();
    });
    bound.closeAll();
  });
}
