/**
 * The hub role: serves one runtime folder to edges as a config stream. The folder is validated the
 * way an edge validates it (every tenant, every policy, host uniqueness, backend URLs) before it
 * becomes a generation; an invalid change is rejected, recorded and shown to every edge, and the
 * last good generation keeps being served.
 *
 * Two kinds of listener, proven distinct after binding and armed only then: `api` (the edges'
 * stream, each node authenticated) and `health` (loopback: status, nodes, reload). Each answers only
 * its own routes.
 *
 * @module
 */
import http from "node:http";
import https from "node:https";
import type { AddressInfo, Server, Socket } from "node:net";
import { overlaps } from "../boot/distinct.ts";
import { type FileSet, hashFileSet, readFileSet, runtimeTextsOf } from "../config/file_set.ts";
import { configStatus, ConfigStore, type OfferOutcome } from "../config/generations.ts";
import { formatAddress, type ListenerAddress } from "../config/load.ts";
import { ConfigError, formatPath } from "../config/problems.ts";
import { inwardProblems } from "../edge/plan.ts";
import type { OwnListener } from "../egress/destinations.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { Tracing } from "../observe/tracing.ts";
import { type FolderRead, readStableFolder, runtimeReloader } from "../config/runtime_watch.ts";
import { describeIoError } from "../config/yaml_file.ts";
import { BootError } from "../edge/edge.ts";
import { bindServer } from "../edge/listeners.ts";
import { buildRegistry } from "../proxy/tenants.ts";
import { certificateAuth, NODE_ID, type NodeAuthenticator, tokenAuth } from "./auth.ts";
import type { HubConfig, HubListenerRole } from "./config.ts";
import { ConfigFeed, sameBytes } from "./feed.ts";

/** What the hub knows about one node that follows it. */
export interface NodeRecord {
  readonly node_id: string;
  /** When its last poll arrived. */
  last_seen: string;
  /** The hash it said it had. */
  have: string;
  /** The generation it was last sent (or told is current). */
  served_generation: number;
  /** A poll of it is held right now. */
  holding: boolean;
  polls: number;
}

/** A running hub. */
export interface Hub {
  readonly store: ConfigStore;
  readonly feed: ConfigFeed;
  readonly listeners: readonly { role: HubListenerRole; address: string }[];
  readonly nodes: ReadonlyMap<string, NodeRecord>;
  /** Reads the folder now. */
  reload(): Promise<OfferOutcome>;
  /** Releases held polls, closes every listener. */
  close(): Promise<void>;
  readonly finished: Promise<void>;
}

/** Refused TLS handshakes are counted always and logged at most this often. */
const TLS_LOG_INTERVAL_MS = 60_000;

interface BoundServer {
  readonly role: HubListenerRole;
  readonly address: ListenerAddress;
  readonly server: Server;
  readonly sockets: Set<Socket>;
}

/**
 * Boots a hub.
 *
 * @throws {ConfigError} when the runtime folder is not a valid generation
 * @throws {BootError} when a credential file cannot be read or a listener cannot bind
 */
export async function startHub(
  config: HubConfig,
  options: { readonly log?: (line: string) => void } = {},
): Promise<Hub> {
  const log = options.log ?? ((line: string) => console.error(line));
  // The hub makes no spans of its own, but Deno's would carry node ids and hashes in URLs.
  const tracing = Tracing.detect("hub");
  if (tracing.refusal) throw new BootError([tracing.refusal]);
  const first = await readStableFolder(config.runtimeDir, readHubFolder, config.debounceMs);
  if (first.problems.length > 0) throw new ConfigError(first.problems);
  const texts = first.texts;
  const built = await buildRegistry(config.runtimeDir, texts);
  if (!built.registry) throw new ConfigError(built.problems);
  // No tenant set the hub serves may aim at the hub itself (edges check their own listeners).
  const own: OwnListener[] = [
    ...config.api.listen.map((address, i) => ({ address, name: `api.listen[${i}]` })),
    ...config.health.map((address, i) => ({ address, name: `health.listen[${i}]` })),
  ].flatMap(({ address, name }) =>
    address.kind === "tcp" ? [{ hostname: address.hostname, port: address.port, name }] : []
  );
  const inward = inwardProblems(built.registry, own);
  if (inward.length > 0) throw new ConfigError(inward);
  const store = new ConfigStore({
    number: 1,
    hash: first.hash,
    loadedAt: Date.now(),
    source: "directory",
    dir: config.runtimeDir,
    registry: built.registry,
    texts,
    files: first.files,
  }, (registry) => inwardProblems(registry, own));
  const feed = new ConfigFeed(store, {
    nodeId: config.nodeId,
    history: config.history,
  });
  const reloader = runtimeReloader(config.runtimeDir, store, {
    watch: config.watch,
    debounceMs: config.debounceMs,
    log,
    read: (dir) => readHubFolder(dir, store.current.files),
  });

  let authenticate: NodeAuthenticator;
  let tlsOptions: https.ServerOptions | undefined;
  try {
    if (config.api.tls) {
      const { certFile, keyFile, clientCaFile } = config.api.tls;
      tlsOptions = {
        cert: await readNamedFile(certFile, "api.tls.cert_file", { maxBytes: 1 << 20 }),
        key: await readNamedFile(keyFile, "api.tls.key_file", { maxBytes: 1 << 20, secret: true }),
        ca: await readNamedFile(clientCaFile, "api.tls.client_ca_file", { maxBytes: 1 << 20 }),
        requestCert: true,
        rejectUnauthorized: true,
        minVersion: "TLSv1.2",
      };
      authenticate = certificateAuth();
    } else {
      authenticate = tokenAuth(config.api.tokensDir!, { log });
    }
  } catch (error) {
    reloader.stop();
    throw new BootError([`Cannot read the hub's TLS files: ${describeIoError(error)}`]);
  }

  const nodes = new Map<string, NodeRecord>();
  let armed = false;
  const stopping = new AbortController();
  const status = () => ({
    node_id: config.nodeId,
    ...configStatus(store, (p) => formatPath(p.path)),
    held_polls: feed.waiting,
    tls_refused: tlsRefused,
    nodes: [...nodes.values()],
  });

  const api = async (request: http.IncomingMessage, response: http.ServerResponse) => {
    const url = new URL(request.url ?? "/", "http://hub");
    if (url.pathname === "/healthz" && isRead(request)) {
      return send(response, 200, { status: "ok" });
    }
    if (url.pathname !== "/v1/config/stream") return refuseRoute(response, "api");
    if (!isRead(request)) return send(response, 405, envelope("method_not_allowed", "Use GET"));
    const nodeId = url.searchParams.get("node_id") ?? "";
    if (!NODE_ID.test(nodeId)) {
      return send(response, 400, envelope("bad_node_id", "node_id must be a node id"));
    }
    const auth = await authenticate(request, nodeId);
    if (!auth.ok) return send(response, auth.status, envelope(auth.code, auth.message));
    if (config.api.nodes && !config.api.nodes.includes(nodeId)) {
      return send(response, 403, envelope("node_not_allowed", "This node may not follow the hub"));
    }
    const have = url.searchParams.get("have") ?? "";
    const hold = url.searchParams.get("wait") === "0" ? 0 : config.holdMs;
    const record = nodes.get(nodeId) ??
      { node_id: nodeId, last_seen: "", have: "", served_generation: 0, holding: false, polls: 0 };
    nodes.set(nodeId, record);
    Object.assign(record, { last_seen: new Date().toISOString(), have, holding: true });
    record.polls++;
    const gone = new AbortController();
    const onClose = () => gone.abort();
    response.once("close", onClose);
    const answer = await feed.answer(have, hold, AbortSignal.any([gone.signal, stopping.signal]));
    response.off("close", onClose);
    record.holding = false;
    record.served_generation = answer.generation;
    if (!gone.signal.aborted) send(response, 200, answer);
  };

  const health = async (request: http.IncomingMessage, response: http.ServerResponse) => {
    const path = new URL(request.url ?? "/", "http://hub").pathname;
    if (path === "/healthz" && isRead(request)) return send(response, 200, { status: "ok" });
    if (path === "/v1/config" && isRead(request)) return send(response, 200, status());
    if (path === "/v1/nodes" && isRead(request)) {
      return send(response, 200, { nodes: [...nodes.values()] });
    }
    if (path === "/v1/config/reload" && request.method === "POST") {
      const outcome = await reloader.reload();
      return send(response, outcome.outcome === "rejected" ? 422 : 200, {
        outcome: outcome.outcome,
        ...status(),
      });
    }
    return refuseRoute(response, "health");
  };

  const servers: BoundServer[] = [
    ...config.api.listen.map((address) => makeServer("api", address, api, config, tlsOptions)),
    ...config.health.map((address) => makeServer("health", address, health, config)),
  ];
  let tlsRefused = 0;
  let tlsLoggedAt = -Infinity;
  for (const bound of servers) {
    bound.server.on("tlsClientError", (error: Error, socket: Socket) => {
      tlsRefused++;
      if (Date.now() - tlsLoggedAt < TLS_LOG_INTERVAL_MS) return;
      tlsLoggedAt = Date.now();
      log(
        `portcullis: hub api: TLS handshake from ${socket.remoteAddress} refused: ` +
          `${error.message} (${tlsRefused} since start; logged at most once a minute)`,
      );
    });
    bound.server.on("connection", (socket: Socket) => {
      if (!armed) return socket.destroy();
      bound.sockets.add(socket);
      socket.once("close", () => bound.sockets.delete(socket));
    });
  }
  const listening: BoundServer[] = [];
  const closeAll = () => Promise.all(listening.map(closeServer));
  try {
    for (const bound of servers) {
      const what = `Cannot bind the hub ${bound.role} listener on ${formatAddress(bound.address)}`;
      await bindServer(bound.server, bound.address, what);
      listening.push(bound);
    }
  } catch (error) {
    await closeAll();
    reloader.stop();
    throw new BootError([(error as Error).message]);
  }
  const actual = listening.map((bound) => ({ role: bound.role, address: actualAddress(bound) }));
  const clash = actual.flatMap((a, i) =>
    actual.slice(i + 1).filter((b) => overlaps(a.address, b.address)).map((b) =>
      `The ${a.role} listener ${formatAddress(a.address)} overlaps the ${b.role} listener ` +
      formatAddress(b.address)
    )
  );
  if (clash.length > 0) {
    await closeAll();
    reloader.stop();
    throw new BootError(clash);
  }
  armed = true;
  for (const { role, address } of actual) {
    const tls = role === "api" && tlsOptions ? " (mutual TLS)" : role === "api" ? " (tokens)" : "";
    log(`portcullis: hub ${role} listening on ${formatAddress(address)}${tls}`);
  }

  let resolveFinished!: () => void;
  const finished = new Promise<void>((resolve) => resolveFinished = resolve);
  let closing: Promise<void> | undefined;
  return {
    store,
    feed,
    nodes,
    listeners: actual.map(({ role, address }) => ({ role, address: formatAddress(address) })),
    reload: () => reloader.reload(),
    close() {
      closing ??= (async () => {
        reloader.stop();
        stopping.abort();
        feed.close();
        await closeAll();
        resolveFinished();
      })();
      return closing;
    },
    finished,
  };
}

/** Reads the runtime folder whole, sharing the live set's buffers for unchanged files. */
async function readHubFolder(dir: string, live?: FileSet): Promise<FolderRead> {
  const read = await readFileSet(dir);
  const files = shareUnchanged(read.files, live);
  return {
    texts: runtimeTextsOf(files),
    hash: await hashFileSet(files),
    problems: read.problems,
    files,
  };
}

/**
 * Reuses the live set's buffer for every file whose bytes did not change, so the generations kept
 * for deltas cost the changed files, not a full copy of the folder each.
 */
function shareUnchanged(files: Map<string, Uint8Array>, live: FileSet | undefined): FileSet {
  if (!live) return files;
  for (const [name, data] of files) {
    const before = live.get(name);
    if (before && sameBytes(before, data)) files.set(name, before);
  }
  return files;
}

function makeServer(
  role: HubListenerRole,
  address: ListenerAddress,
  handler: (request: http.IncomingMessage, response: http.ServerResponse) => Promise<void>,
  config: HubConfig,
  tls?: https.ServerOptions,
): BoundServer {
  const onRequest = (request: http.IncomingMessage, response: http.ServerResponse) => {
    handler(request, response).catch((error) => {
      if (!response.headersSent) {
        send(response, 500, envelope("internal", "The hub could not answer"));
      } else response.destroy();
      console.error(`portcullis: hub ${role} request failed: ${error}`);
    });
  };
  const server = tls ? https.createServer(tls, onRequest) : http.createServer(onRequest);
  server.headersTimeout = config.timeouts.headerMs;
  server.requestTimeout = config.timeouts.headerMs;
  server.keepAliveTimeout = config.timeouts.idleMs;
  server.maxHeadersCount = 100;
  return { role, address, server, sockets: new Set() };
}

function actualAddress(bound: BoundServer): ListenerAddress {
  const info = bound.server.address();
  if (bound.address.kind === "unix" || info === null || typeof info === "string") {
    return bound.address;
  }
  return { kind: "tcp", hostname: (info as AddressInfo).address, port: (info as AddressInfo).port };
}

function closeServer(bound: BoundServer): Promise<void> {
  return new Promise((resolve) => {
    bound.server.close(async () => {
      if (bound.address.kind === "unix") await Deno.remove(bound.address.path).catch(() => {});
      resolve();
    });
    for (const socket of bound.sockets) socket.destroy();
  });
}

function isRead(request: http.IncomingMessage): boolean {
  return request.method === "GET" || request.method === "HEAD";
}

function envelope(code: string, message: string): { error: { code: string; message: string } } {
  return { error: { code, message } };
}

function refuseRoute(response: http.ServerResponse, role: HubListenerRole): void {
  send(
    response,
    404,
    envelope("route_not_allowed", `This route is not served on the hub's ${role} listener`),
  );
}

function send(response: http.ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  response.writeHead(status, {
    "content-type": "application/json",
    "content-length": String(new TextEncoder().encode(body).byteLength),
    "cache-control": "no-store",
  });
  response.end(body);
}
