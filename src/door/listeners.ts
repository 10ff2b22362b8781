/**
 * The door's listeners: node:http servers (node:https for a public listener with the door's own
 * certificate) with bounded header size and count and header, request and idle timeouts, as the
 * hub's (`src/hub/listeners.ts`). Bound in order; a failure closes what was bound and refuses the
 * boot. The public ones can be closed alone — a revoked door stops answering the public while its
 * health listener still says why.
 *
 * @module
 */
import http from "node:http";
import https from "node:https";
import type { Server, Socket } from "node:net";
import { BootError } from "../boot/boot_error.ts";
import { formatAddress, type ListenerAddress } from "../config/load.ts";
import { bindServer, boundAddress, closeServerAt } from "../server/bind.ts";
import type { DoorConfig } from "./config.ts";

/** The two kinds of door listener. */
export type DoorRole = "public" | "health";

/** One listener to make. */
export interface DoorListenerSpec {
  readonly role: DoorRole;
  readonly address: ListenerAddress;
  readonly handler: (request: http.IncomingMessage, response: http.ServerResponse) => void;
  /** The door's own certificate and key (PEM), for a TLS public listener. */
  readonly tls?: { readonly cert: string; readonly key: string };
}

interface Bound {
  readonly role: DoorRole;
  readonly address: ListenerAddress;
  readonly server: Server;
  readonly sockets: Set<Socket>;
}

/** The door's listeners, from made to closed. */
export class DoorListeners {
  readonly #servers: Bound[];
  readonly #listening: Bound[] = [];

  /**
   * @param specs the listeners, in the order they bind
   * @param limits the door's timeouts and header limit
   */
  constructor(
    specs: readonly DoorListenerSpec[],
    limits: Pick<DoorConfig, "timeouts" | "limits">,
  ) {
    this.#servers = specs.map((spec) => makeServer(spec, limits));
  }

  /**
   * Binds every listener in order.
   *
   * @returns each listener's role and actual address
   * @throws {BootError} when one cannot bind (every bound one is closed first)
   */
  async bind(): Promise<{ role: DoorRole; address: ListenerAddress }[]> {
    try {
      for (const bound of this.#servers) {
        const what = `Cannot bind the door ${bound.role} listener on ${
          formatAddress(bound.address)
        }`;
        await bindServer(bound.server, bound.address, what);
        this.#listening.push(bound);
      }
    } catch (error) {
      await this.close();
      throw new BootError([(error as Error).message]);
    }
    return this.#listening.map((b) => ({ role: b.role, address: boundAddress(b) }));
  }

  /** Closes the listeners of one role (or all) and destroys their sockets. */
  async close(role?: DoorRole): Promise<void> {
    const closing = this.#listening.filter((b) => role === undefined || b.role === role);
    for (const bound of closing) this.#listening.splice(this.#listening.indexOf(bound), 1);
    await Promise.all(closing.map(closeServerAt));
  }
}

/** The server of one listener, with the door's limits. */
function makeServer(
  spec: DoorListenerSpec,
  limits: Pick<DoorConfig, "timeouts" | "limits">,
): Bound {
  const options: http.ServerOptions = { maxHeaderSize: limits.limits.headerBytes };
  const server = spec.tls
    ? https.createServer({ ...options, cert: spec.tls.cert, key: spec.tls.key }, spec.handler)
    : http.createServer(options, spec.handler);
  server.headersTimeout = limits.timeouts.headerMs;
  server.requestTimeout = limits.timeouts.headerMs;
  server.keepAliveTimeout = limits.timeouts.idleMs;
  server.maxHeadersCount = 100;
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  return { role: spec.role, address: spec.address, server, sockets };
}
