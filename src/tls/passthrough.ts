/**
 * L4 SNI passthrough: for tenants that terminate TLS themselves, the gateway reads the ClientHello
 * on a dedicated listener, routes on its SNI name without decrypting anything, and splices the raw
 * bytes — the ClientHello it already read first — to the tenant's TLS backend.
 *
 * One connection runs these phases in order, each a named function; any of the first four may
 * close the connection, and the admission is released exactly once:
 *
 * 1. {@link awaitClientHello} — buffer bytes until {@link readClientHello} says hello or invalid,
 *    within `helloTimeoutMs` of accept (the only deadline: an established pipe has no timeout).
 * 2. route — `lookup(serverName)`; no SNI or an unknown one closes.
 * 3. admit — `admit()`; a refusal closes.
 * 4. {@link connectFirst} — the route's backends in order until one connects; none closes.
 * 5. {@link splice} — write the buffered bytes, then `pipe` both ways (backpressure respected)
 *    until either side ends; the other is then ended after its pending writes, or destroyed at
 *    once on an error.
 *
 * Logs never name the SNI or the client address: both can be secret.
 *
 * Neither socket is ever without an `error` listener: the client's is attached in the tick it is
 * accepted, the backend stream's in the tick its connect settles (a SOCKS connect hands its socket
 * over with none), so a reset on either side ends this connection alone, never the isolate.
 *
 * @module
 */
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { DEFAULT_MAX_HELLO_BYTES, readClientHello } from "./client_hello.ts";

/** Where a passthrough tenant's TLS server listens. */
export interface PassthroughBackend {
  readonly host: string;
  readonly port: number;
}

/** What a passthrough SNI name routes to. */
export interface PassthroughRoute {
  /** Tried in order until one connects. */
  readonly backends: readonly PassthroughBackend[];
}

/** What {@link servePassthrough} needs from the rest of the gateway. */
export interface PassthroughOptions {
  /** Deadline for a complete ClientHello, from accept. */
  readonly helloTimeoutMs: number;
  /** Cap on the ClientHello's wire size and so on the bytes buffered; 32 KiB by default. */
  readonly maxHelloBytes?: number;
  /** The route for an SNI name (lower case), or undefined (→ close). */
  lookup(serverName: string): PassthroughRoute | undefined;
  /**
   * Admission at ClientHello time; returns a release function (true = the pipe ended normally)
   * or undefined when refused (→ close).
   */
  admit(): ((ok: boolean) => void) | undefined;
  /** Opens a raw byte stream to a backend (through the SOCKS pool or directly); rejects on failure. */
  connect(target: PassthroughBackend): Promise<Duplex>;
  /**
   * Diagnostics (never the SNI name or client address at info level: they can be secret; say
   * "unknown SNI" without the name).
   */
  readonly log: (line: string) => void;
}

/** How reading the ClientHello ended. */
type HelloOutcome =
  | { readonly kind: "hello"; readonly serverName?: string; readonly buffered: Uint8Array }
  | { readonly kind: "closed"; readonly reason: string };

/**
 * Serves one accepted connection: reads the ClientHello, routes on its SNI, admits, connects to a
 * backend and splices the two sockets until either side ends, then releases the admission
 * (`true` once a pipe was established and ended, `false` when it never was or a side failed).
 * Never throws; every failure closes the client socket and is logged.
 *
 * @param socket a freshly accepted client connection, not yet read from
 * @param options routing, admission, backend connection and logging
 *
 * @example
 * ```ts
 * import { connect, createServer } from "node:net";
 * import { servePassthrough } from "./passthrough.ts";
 *
 * const routes = new Map([["shop.example", { backends: [{ host: "10.0.0.7", port: 443 }] }]]);
 * const listener = createServer((socket) =>
 *   servePassthrough(socket, {
 *     helloTimeoutMs: 5_000,
 *     lookup: (serverName) => routes.get(serverName),
 *     admit: () => (_ok) => {},
 *     connect: ({ host, port }) =>
 *       new Promise((resolve, reject) => {
 *         const stream = connect(port, host, () => resolve(stream)).once("error", reject);
 *       }),
 *     log: console.log,
 *   })
 * );
 * listener.close(); // a real gateway would `listen` on its passthrough address
 * ```
 */
export function servePassthrough(socket: Socket, options: PassthroughOptions): void {
  runPassthrough(socket, options).catch((error: unknown) => {
    socket.destroy();
    options.log(`passthrough: internal error: ${errorName(error)}`);
  });
}

/** The phases of {@link servePassthrough}, in order. */
async function runPassthrough(socket: Socket, options: PassthroughOptions): Promise<void> {
  const hello = await awaitClientHello(
    socket,
    options.helloTimeoutMs,
    options.maxHelloBytes ?? DEFAULT_MAX_HELLO_BYTES,
  );
  if (hello.kind === "closed") return refuse(socket, options, hello.reason);
  if (hello.serverName === undefined) return refuse(socket, options, "no SNI");
  const route = options.lookup(hello.serverName);
  if (route === undefined) return refuse(socket, options, "unknown SNI");
  const admitted = options.admit();
  if (admitted === undefined) return refuse(socket, options, "admission refused");
  const release = once(admitted);
  let backend: Duplex | undefined;
  try {
    backend = await connectFirst(socket, route.backends, options);
    if (backend === undefined) {
      release(false);
      const reason = socket.destroyed
        ? "client left during backend connect"
        : "no backend reachable";
      return refuse(socket, options, reason);
    }
    splice(socket, backend, hello.buffered, release);
  } catch (error) {
    backend?.destroy();
    release(false);
    throw error;
  }
}

/** Closes the client connection for `reason` (which never names the SNI). */
function refuse(socket: Socket, options: PassthroughOptions, reason: string): void {
  socket.destroy();
  options.log(`passthrough: closed: ${reason}`);
}

/**
 * Reads from `socket` until the bytes so far form a complete ClientHello or cannot become one,
 * the peer closes, or `timeoutMs` passes. Leaves the socket paused with an error listener that
 * outlives this phase, so bytes that arrive later wait for the pipe.
 */
function awaitClientHello(
  socket: Socket,
  timeoutMs: number,
  maxHelloBytes: number,
): Promise<HelloOutcome> {
  return new Promise((resolve) => {
    const buffer = { storage: new Uint8Array(2048), length: 0 };
    const finish = (outcome: HelloOutcome) => {
      clearTimeout(timer);
      socket.off("data", onData);
      socket.off("end", onEnd);
      socket.off("close", onEnd);
      socket.pause();
      resolve(outcome);
    };
    const onData = (chunk: Uint8Array) => {
      const buffered = append(buffer, chunk);
      const result = readClientHello(buffered, maxHelloBytes);
      if (result.kind === "invalid") {
        finish({ kind: "closed", reason: `invalid ClientHello (${result.reason})` });
      } else if (result.kind === "hello") {
        finish({ kind: "hello", serverName: result.serverName, buffered });
      }
    };
    const onEnd = () => finish({ kind: "closed", reason: "client left before its ClientHello" });
    const timer = setTimeout(
      () => finish({ kind: "closed", reason: `no ClientHello within ${timeoutMs} ms` }),
      timeoutMs,
    );
    socket.on("error", ignoreError);
    socket.on("data", onData);
    socket.on("end", onEnd);
    socket.on("close", onEnd);
  });
}

/**
 * Connects to the backends in order and returns the first stream that opens, or undefined when
 * all fail or the client leaves meanwhile (a stream that opens too late is destroyed).
 */
async function connectFirst(
  client: Socket,
  backends: readonly PassthroughBackend[],
  options: PassthroughOptions,
): Promise<Duplex | undefined> {
  for (const [index, backend] of backends.entries()) {
    if (client.destroyed) return undefined;
    try {
      const stream = await options.connect(backend);
      // Owned until the splice listens: an error meanwhile only closes it.
      stream.on("error", ignoreError);
      if (!client.destroyed && !stream.destroyed) return stream;
      stream.destroy();
      return undefined;
    } catch (error) {
      options.log(
        `passthrough: backend ${index + 1} of ${backends.length} failed: ${errorName(error)}`,
      );
    }
  }
  return undefined;
}

/**
 * Writes the buffered ClientHello to `backend`, then pipes both ways until both streams have
 * closed, and releases: `true` unless either side errored. A side that ends makes the pipe end
 * the other (after its pending writes); a side that closes has the other closed too.
 */
function splice(
  client: Socket,
  backend: Duplex,
  buffered: Uint8Array,
  release: (ok: boolean) => void,
): void {
  let failed = false;
  let open = 2;
  const onError = () => {
    failed = true;
    client.destroy();
    backend.destroy();
  };
  const closed = (other: Duplex) => () => {
    if (failed) other.destroy();
    else endThenDestroy(other);
    open -= 1;
    if (open === 0) release(!failed);
  };
  client.off("error", ignoreError);
  backend.off("error", ignoreError);
  client.on("error", onError);
  backend.on("error", onError);
  client.once("close", closed(backend));
  backend.once("close", closed(client));
  backend.write(buffered);
  client.pipe(backend);
  backend.pipe(client);
}

/** Ends `stream` and destroys it once its pending writes are flushed. */
function endThenDestroy(stream: Duplex): void {
  if (stream.destroyed) return;
  stream.end();
  if (stream.writableLength === 0) stream.destroy();
  else stream.once("finish", () => stream.destroy());
}

/** Appends `chunk` to `buffer`, doubling its storage when full: a trickle costs linear copying. */
function append(buffer: { storage: Uint8Array; length: number }, chunk: Uint8Array): Uint8Array {
  const needed = buffer.length + chunk.length;
  if (needed > buffer.storage.length) {
    const grown = new Uint8Array(Math.max(needed, buffer.storage.length * 2));
    grown.set(buffer.storage.subarray(0, buffer.length));
    buffer.storage = grown;
  }
  buffer.storage.set(chunk, buffer.length);
  buffer.length = needed;
  return buffer.storage.subarray(0, needed);
}

/** Wraps a release function so that only its first call counts. */
function once(release: (ok: boolean) => void): (ok: boolean) => void {
  let done = false;
  return function releaseOnce(ok: boolean) {
    if (done) return;
    done = true;
    release(ok);
  };
}

/**
 * An error's code (`ECONNREFUSED`), kind (a SocksError's `timeout`) or name for the log — never
 * its message, which may carry an address.
 */
function errorName(error: unknown): string {
  if (!(error instanceof Error)) return "non-error value";
  const { code, kind } = error as { code?: unknown; kind?: unknown };
  if (typeof code === "string") return code;
  return typeof kind === "string" ? `${error.name} ${kind}` : error.name;
}

/** Swallows client errors while no phase listens; the `close` that follows does the work. */
function ignoreError(): void {}
