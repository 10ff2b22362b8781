/**
 * The adversarial suite's arena: the real gateway as a subprocess (started with the flags
 * `main.ts flags` derives, as an operator runs it), a recording upstream, a rogue upstream that
 * misbehaves on purpose, and a port nothing listens on. Cases talk to the public lane over raw
 * loopback sockets, so they can send bytes no well-behaved client would, and assert both what the
 * client got and what each upstream saw.
 *
 * Tenant `shop.test` routes `/api/…` to the recording upstream (prefix stripped), `/rogue/…` to the
 * rogue one and `/refused/…` to the dead port.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "../fixtures/gateway.ts";
import {
  exchange,
  parseResponses,
  type RawResponse,
  renderRequest,
  request,
  type RequestSpec,
} from "../fixtures/http_client.ts";
import { UpstreamFixture } from "../fixtures/upstream.ts";

/** The tenant every case addresses. */
export const SHOP = "shop.test";

/** Timeouts small enough for slow-client cases to finish quickly. */
export const HEADER_MS = 1000;
export const REQUEST_MS = 2500;
/** The public lane's deadline: a hung upstream is answered after this long. */
export const PUBLIC_DEADLINE_MS = 3000;

/** The arena's upstream ports, for routes a case file writes itself. */
export interface ArenaPorts {
  /** The recording upstream. */
  readonly upstream: number;
  /** The rogue upstream. */
  readonly rogue: number;
  /** A port nothing listens on. */
  readonly dead: number;
}

/** How a case file wants its gateway. */
export interface ArenaOptions {
  /** `shop.test`'s policies. */
  readonly policies?: Record<string, unknown>;
  /** `shop.test`'s routes, instead of the arena's `/api/`, `/rogue/` and `/refused/`. */
  readonly routes?: (ports: ArenaPorts) => Record<string, unknown>[];
  /** Further edits of the bootstrap config (after the arena's own). */
  readonly edit?: (config: Record<string, unknown>) => void;
}

/** A running arena. */
export interface Arena {
  readonly gateway: Gateway;
  readonly ports: LanePorts;
  /** Records every request it receives; answers as {@link UpstreamFixture} documents. */
  readonly upstream: UpstreamFixture;
  /** Answers wrongly on purpose; see {@link RogueUpstream}. */
  readonly rogue: RogueUpstream;
  /** Sends raw bytes to the public lane and returns everything read until the gateway closed. */
  raw(bytes: string | Uint8Array, timeoutMs?: number): Promise<string>;
  /** Sends one request (Host `shop.test` unless given, `Connection: close`) and parses the reply. */
  send(spec: RequestSpec): Promise<RawResponse>;
  /** The first response in raw bytes sent to the public lane, or undefined when none came. */
  first(bytes: string, method?: string): Promise<RawResponse | undefined>;
}

/**
 * Registers one test that boots an arena and runs each case as a step against it. The recorders
 * are cleared before every case; after the last one the ledger must balance (every reservation
 * released, whatever the cases did).
 *
 * @param name the test's name
 * @param options policies and config edits
 * @param cases the cases, by name
 */
export function arenaTest(
  name: string,
  options: ArenaOptions,
  cases: Record<string, (arena: Arena) => Promise<void>>,
): void {
  Deno.test(name, (t) =>
    withArena(options, async (arena) => {
      for (const [caseName, run] of Object.entries(cases)) {
        arena.upstream.seen.length = 0;
        arena.upstream.heads.length = 0;
        arena.rogue.heads.length = 0;
        const passed = await t.step(caseName, () => run(arena));
        if (!passed) break;
      }
    }));
}

/**
 * Boots an arena, runs `body` against it, checks that the ledger balances afterwards, and stops
 * everything it started.
 */
export async function withArena(
  options: ArenaOptions,
  body: (arena: Arena) => Promise<void>,
): Promise<void> {
  const arena = await startArena(options);
  try {
    await body(arena);
    const ledger = await arena.gateway.ledgerWhen((r) => r.outstanding === 0);
    assert.equal(ledger.outstanding, 0, "every reservation was released");
    assert.equal(ledger.lanes.public.in_use, 0);
    assert.equal(ledger.double_release, 0);
  } finally {
    await arena.gateway.dispose();
    await arena.upstream.stop();
    await arena.rogue.stop();
  }
}

async function startArena(options: ArenaOptions): Promise<ArenaHandle> {
  const upstream = await UpstreamFixture.start();
  const rogue = RogueUpstream.start();
  const [publicPort, localPort, providerPort, deadPort] = freePorts(4);
  const ports: LanePorts = {
    public: publicPort,
    local_health: localPort,
    provider_health: providerPort,
  };
  const config = proofConfig(ports);
  config.timeouts = { header_ms: HEADER_MS, idle_ms: 5000, request_ms: REQUEST_MS };
  config.egress = {
    direct: [upstream, rogue].map((u) => `127.0.0.1:${u.port}`).concat(`127.0.0.1:${deadPort}`),
    connect_timeout_ms: 1000,
  };
  // deno-lint-ignore no-explicit-any
  const ledger = config.ledger as any;
  ledger.lanes.public.deadline_ms = PUBLIC_DEADLINE_MS;
  options.edit?.(config);
  const backend = (port: number, prefix: string) => ({
    backends: [{ url: `http://127.0.0.1:${port}` }],
    rewrite: { strip_prefix: prefix },
  });
  const tenant: Record<string, unknown> = {
    host: SHOP,
    routes: options.routes?.({ upstream: upstream.port, rogue: rogue.port, dead: deadPort }) ?? [
      { name: "api", match: { prefix: "/api/" }, proxy: backend(upstream.port, "/api") },
      { name: "rogue", match: { prefix: "/rogue/" }, proxy: backend(rogue.port, "/rogue") },
      { name: "refused", match: { prefix: "/refused/" }, proxy: backend(deadPort, "/refused") },
    ],
  };
  if (options.policies) tenant.policies = options.policies;
  const dir = await writeConfig(config, [tenant]);
  let gateway: Gateway;
  try {
    gateway = await Gateway.start(dir, ports);
  } catch (error) {
    await upstream.stop();
    await rogue.stop();
    throw error;
  }
  return {
    gateway,
    ports,
    upstream,
    rogue,
    raw: (bytes, timeoutMs = 5000) => exchange(ports.public, bytes, timeoutMs),
    async send(spec) {
      const headers = [...(spec.headers ?? [])];
      if (!spec.noHost && !headers.some(([n]) => n.toLowerCase() === "host")) {
        headers.unshift(["Host", SHOP]);
      }
      const text = await exchange(ports.public, renderRequest({ ...spec, headers }), 8000);
      const [response] = parseResponses(text, [spec.method ?? "GET"]);
      if (!response) throw new Error(`no response to ${spec.method ?? "GET"} ${spec.path}`);
      return response;
    },
    async first(bytes, method = "GET") {
      const text = await exchange(ports.public, bytes, 5000);
      return text === "" ? undefined : parseResponses(text, [method])[0];
    },
  };
}

type ArenaHandle = Arena;

/**
 * An upstream that misbehaves by path, over raw TCP (each connection serves one request):
 *
 * - `/reset`: promises 100,000 bytes, sends 1,000, then closes;
 * - `/hang`: reads the request and never answers;
 * - `/clte`: answers with both `Content-Length` and `Transfer-Encoding: chunked`;
 * - `/badchunk`: a chunked body whose chunk size is not hexadecimal;
 * - `/twolengths`: two different `Content-Length` fields;
 * - anything else: 200 `rogue`.
 */
export class RogueUpstream {
  /** Request lines received, in order. */
  readonly heads: string[] = [];
  readonly port: number;
  readonly #listener: Deno.Listener;
  readonly #conns = new Set<Deno.Conn>();
  readonly #accepting: Promise<void>;

  private constructor() {
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.port = (this.#listener.addr as Deno.NetAddr).port;
    this.#accepting = this.#accept();
  }

  /** Starts listening on a free loopback port. */
  static start(): RogueUpstream {
    return new RogueUpstream();
  }

  async #accept(): Promise<void> {
    for (;;) {
      let conn: Deno.Conn;
      try {
        conn = await this.#listener.accept();
      } catch {
        return;
      }
      this.#conns.add(conn);
      this.#serve(conn).catch(() => {}).finally(() => {
        this.#conns.delete(conn);
        try {
          conn.close();
        } catch { /* closed */ }
      });
    }
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    const buffer = new Uint8Array(16384);
    let head = "";
    while (!head.includes("\r\n\r\n")) {
      const n = await conn.read(buffer);
      if (n === null) return;
      head += new TextDecoder().decode(buffer.subarray(0, n));
    }
    const line = head.slice(0, head.indexOf("\r\n"));
    this.heads.push(line);
    const path = line.split(" ")[1] ?? "/";
    const write = (text: string) => writeText(conn, text);
    if (path === "/hang") {
      // Never answer; the connection is closed by the gateway or by stop().
      while (await conn.read(buffer) !== null) { /* discard */ }
      return;
    }
    if (path === "/reset") {
      await write("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + "r".repeat(1000));
      await new Promise((resolve) => setTimeout(resolve, 50));
      return;
    }
    if (path === "/clte") {
      await write(
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" +
          "5\r\nhello\r\n0\r\n\r\n",
      );
      return;
    }
    if (path === "/badchunk") {
      await write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n");
      return;
    }
    if (path === "/twolengths") {
      await write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello..");
      return;
    }
    await write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nrogue");
  }

  /** Closes the listener and every connection. */
  async stop(): Promise<void> {
    this.#listener.close();
    for (const conn of this.#conns) {
      try {
        conn.close();
      } catch { /* closed */ }
    }
    await this.#accepting;
  }
}

async function writeText(conn: Deno.Conn, text: string): Promise<void> {
  const bytes = new TextEncoder().encode(text);
  let offset = 0;
  while (offset < bytes.byteLength) offset += await conn.write(bytes.subarray(offset));
}

/** Every value of header `name` (any case, `-` and `_` alike) in a raw header list. */
export function headerValues(raw: readonly string[], name: string): string[] {
  const wanted = fold(name);
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (fold(raw[i]) === wanted) out.push(raw[i + 1]);
  return out;
}

function fold(name: string): string {
  return name.toLowerCase().replaceAll("_", "-");
}

/** Reads `/healthz` on a lane; the status, or 0 when the connection failed. */
export async function healthOf(port: number): Promise<number> {
  try {
    return (await request(port, { path: "/healthz" })).status;
  } catch {
    return 0;
  }
}

/** Waits `ms` milliseconds. */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
