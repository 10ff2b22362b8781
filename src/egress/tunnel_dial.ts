/**
 * The edge's side of the `https_tunnel` transport: one WebSocket per SOCKS connection to the hub's
 * mutual-TLS endpoint. The dial connects in TLS (the node's client certificate, ALPN `http/1.1`),
 * sends the HTTP/1.1 upgrade for `GET /v1/tunnel` (RFC 6455 §4.1), checks the hub's 101 and its
 * `Sec-WebSocket-Accept`, sends the dial op `{"op":"dial","port":N}` as one text message, and
 * only then says `connect`: from there the stream ({@link WebSocketStream}) carries the SOCKS5
 * bytes in binary frames, and the handshake code (`socks5.ts`) runs over it unchanged.
 *
 * Deno's global `WebSocket` cannot present a client certificate, so the client is this one. A hub
 * that answers anything but a valid 101 fails the dial like a refused connection (the SOCKS
 * attempt is then `instance_unreachable`, judged by that pool port's breaker).
 *
 * @module
 */
import { Buffer } from "node:buffer";
import net, { type Socket } from "node:net";
import tls from "node:tls";
import type { Dialled, SocksDial } from "./transport.ts";
import { acceptFor } from "./ws_frame.ts";
import { WebSocketStream } from "./ws_stream.ts";

/** The tunnel's path on the hub. */
export const TUNNEL_PATH = "/v1/tunnel";

/** The most bytes the hub's 101 head may take. */
const MAX_HEAD_BYTES = 16 * 1024;

/** Where and how the tunnel dials. */
export interface TunnelDialOptions {
  readonly hostname: string;
  readonly port: number;
  /** SNI and the name the hub's certificate must carry (none: the address must be in it). */
  readonly servername?: string;
  /** The node's certificate and key and the hub's CA, made once at boot. */
  readonly context: tls.SecureContext;
  /** The pool port the dial op names. */
  readonly poolPort: number;
}

/**
 * The dial for one pool port over the tunnel.
 *
 * @example
 * ```ts ignore
 * import tls from "node:tls";
 * import { tunnelDial } from "./tunnel_dial.ts";
 * const context = tls.createSecureContext({ cert, key, ca });
 * const dial = tunnelDial({ hostname: "10.0.0.1", port: 9451, context, poolPort: 9050 });
 * ```
 */
export function tunnelDial(options: TunnelDialOptions): SocksDial {
  const { hostname, port, servername, context, poolPort } = options;
  const host = `${net.isIPv6(hostname) ? `[${hostname}]` : hostname}:${port}`;
  const dialOp = JSON.stringify({ op: "dial", port: poolPort });
  return function dialHubTunnel(): Dialled {
    const stream = new WebSocketStream({ side: "client" });
    const socket = tls.connect({
      host: hostname,
      port,
      servername,
      secureContext: context,
      ALPNProtocols: ["http/1.1"],
      rejectUnauthorized: true,
    });
    const key = Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("base64");
    const fail = (error: Error) => stream.destroy(error);
    const closedEarly = () => fail(new Error("The hub closed the tunnel during the upgrade"));
    socket.on("error", fail);
    socket.on("close", closedEarly);
    socket.once("secureConnect", function sendUpgrade() {
      socket.write(
        `GET ${TUNNEL_PATH} HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\n` +
          `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
      );
    });
    let head = new Uint8Array(0);
    socket.on("data", function readUpgradeAnswer(chunk: Uint8Array) {
      head = Buffer.concat([head, chunk]);
      const end = Buffer.from(head).indexOf("\r\n\r\n");
      if (end < 0) {
        if (head.length > MAX_HEAD_BYTES) fail(new Error("The hub's upgrade answer is too long"));
        return;
      }
      socket.off("data", readUpgradeAnswer);
      socket.off("error", fail);
      socket.off("close", closedEarly);
      const problem = upgradeProblem(new TextDecoder().decode(head.subarray(0, end)), key);
      if (problem !== undefined) return fail(new Error(`The hub refused the tunnel: ${problem}`));
      stream.attach(socket as Socket, head.subarray(end + 4));
      stream.sendText(dialOp);
      stream.emit("connect");
    });
    return { socket: stream as unknown as Socket, ready: "connect" };
  };
}

/**
 * What is wrong with the hub's answer to the upgrade (RFC 6455 §4.1, the client's checks of the
 * server's handshake), if anything.
 */
export function upgradeProblem(head: string, key: string): string | undefined {
  const [statusLine, ...lines] = head.split("\r\n");
  const status = /^HTTP\/1\.1 (\d{3})/.exec(statusLine)?.[1];
  if (status !== "101") return `status ${status ?? JSON.stringify(statusLine.slice(0, 40))}`;
  const headers = new Map<string, string>();
  for (const line of lines) {
    const colon = line.indexOf(":");
    if (colon > 0) {
      headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
  }
  if (headers.get("upgrade")?.toLowerCase() !== "websocket") return "no Upgrade: websocket";
  const connection = (headers.get("connection") ?? "").toLowerCase().split(/\s*,\s*/);
  if (!connection.includes("upgrade")) return "no Connection: Upgrade";
  if (headers.get("sec-websocket-accept") !== acceptFor(key)) return "wrong Sec-WebSocket-Accept";
  return undefined;
}
