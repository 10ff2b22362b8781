/**
 * What routing the operator APIs through Hono costs. Prints figures; `deno task bench:admin-hono`.
 *
 * 1. Routing alone, in process: the hub health listener's hand-written `if (path === …)` chain as
 *    it was before Hono (copied below as the baseline) against the Hono app the hub now runs, per
 *    request from a parsed request to the Reply, no sockets (µs per request, median of rounds).
 * 2. On the wire, same process and hub: wrk against a `node:http` server running the baseline and
 *    against the hub's own health listener, GET `/v1/nodes`, runs interleaved.
 * 3. The listeners as they are in this checkout — the api's `/v1/config/stream?wait=0` behind a
 *    bearer token and an edge's `local_health` `/healthz`. Run on a checkout from before the Hono
 *    change and on one after to compare (parts 1 and 2 need the Hono modules and are skipped there).
 *
 * `BENCH_SECONDS` (default 5) per wrk run, `BENCH_RUNS` (default 3) runs, median kept.
 *
 * @module
 */
import http, { type IncomingMessage } from "node:http";
import type { Hono } from "hono";
import { failureReply } from "../src/request/errors.ts";
import { jsonReply, type Reply } from "../src/request/reply.ts";
import { requestIdFor } from "../src/request/request_id.ts";
import { writeReply } from "../src/request/write_reply.ts";
import type { Hub } from "../src/hub/hub.ts";
import { startTestHub } from "../tests/fixtures/hub_in_process.ts";
import { bootEdge } from "../tests/fixtures/in_process.ts";
import { haveTools, median, wrk, type WrkResult } from "./lib.ts";

const SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? 5);
const RUNS = Number(Deno.env.get("BENCH_RUNS") ?? 3);
// local_health admits 4 at once (its reserve): more connections would measure its overload answer.
const CONNECTIONS = 4;

/** The health listener's routing before Hono (src/hub/routes.ts `health()`), the baseline. */
function handWritten(hub: Hub, request: IncomingMessage, requestId: string): Reply {
  const path = new URL(request.url ?? "/", "http://hub").pathname;
  const isRead = request.method === "GET" || request.method === "HEAD";
  if (path === "/healthz" && isRead) return jsonReply({ status: "ok" });
  if (path === "/v1/nodes" && isRead) return jsonReply({ nodes: [...hub.nodes.values()] });
  return failureReply("route_not_allowed", requestId);
}

/** What the Hono side needs from this checkout's modules; none before the change. */
interface HonoSide {
  readonly app: Hono<never>;
  readonly route: (
    incoming: IncomingMessage,
    outgoing: http.ServerResponse,
    requestId: string,
  ) => Promise<Reply | undefined>;
}

async function honoSide(): Promise<HonoSide | undefined> {
  const where = "../src/hub/hub_app.ts";
  try {
    const { hubHealthApp, hubRoute } = await import(where);
    const { HubRoutes } = await import("../src/hub/routes.ts");
    // Only the node list is read on the routes measured: the rest of the options stay unset.
    // deno-lint-ignore no-explicit-any
    const routes = new HubRoutes({ revocations: { onLook() {} } } as any);
    const app = hubHealthApp(routes);
    return { app, route: hubRoute(app) };
  } catch {
    return undefined;
  }
}

/** µs per request from parsed request to Reply, for `count` requests of each kind. */
async function routingAlone(hub: Hub, hono: HonoSide): Promise<string[]> {
  const ask = (method: string, url: string) =>
    ({ method, url, rawHeaders: ["Host", "hub"], headers: { host: "hub" } }) as IncomingMessage;
  const kinds = [
    ["GET /v1/nodes (200)", ask("GET", "/v1/nodes")],
    ["GET /nope (404)", ask("GET", "/nope")],
  ] as const;
  const count = 20_000;
  const out: string[] = [];
  for (const [name, request] of kinds) {
    const before: number[] = [];
    const after: number[] = [];
    for (let round = 0; round < 5; round++) {
      let started = performance.now();
      for (let i = 0; i < count; i++) handWritten(hub, request, "r");
      before.push((performance.now() - started) * 1000 / count);
      started = performance.now();
      for (let i = 0; i < count; i++) await hono.route(request, {} as http.ServerResponse, "r");
      after.push((performance.now() - started) * 1000 / count);
    }
    out.push(
      `| ${name.padEnd(24)} | ${median(before).toFixed(2).padStart(11)} | ${
        median(after).toFixed(2).padStart(8)
      } |`,
    );
  }
  return out;
}

/** A node:http server answering with the baseline routing, as the hub's listener wraps a route. */
async function baselineServer(hub: Hub): Promise<{ port: number; close: () => Promise<void> }> {
  const server = http.createServer((request, response) => {
    const requestId = requestIdFor(request.headers["x-request-id"]);
    writeReply(response, handWritten(hub, request, requestId), requestId);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** The median-rate run of `RUNS` wrk runs of each URL, the URLs' runs interleaved. */
async function interleaved(urls: readonly string[], headers: string[] = []): Promise<WrkResult[]> {
  const runs: WrkResult[][] = urls.map(() => []);
  for (let i = 0; i < RUNS; i++) {
    for (const [index, url] of urls.entries()) {
      runs[index].push(await wrk(url, { seconds: SECONDS, connections: CONNECTIONS, headers }));
    }
  }
  return runs.map((list) => list.sort((a, b) => a.rps - b.rps)[Math.floor(list.length / 2)]);
}

function row(name: string, result: WrkResult): string {
  const rate = Math.round(result.rps).toString().padStart(7);
  const p50 = result.p50.toFixed(3).padStart(6);
  const p99 = result.p99.toFixed(3).padStart(7);
  return `| ${name.padEnd(44)} | ${rate} | ${p50} | ${p99} | ${result.non2xx} |`;
}

if (await haveTools("bench:admin-hono", { wrk: ["--version"] })) {
  const wire: string[] = [];
  const hub = await startTestHub();
  try {
    const hono = await honoSide();
    if (hono) {
      console.log("Routing alone, in process (µs per request, median of 5 rounds of 20,000)");
      console.log("| request                  | hand-written | Hono     |");
      console.log("|--------------------------|--------------|----------|");
      for (const line of await routingAlone(hub.hub, hono)) console.log(line);
      const baseline = await baselineServer(hub.hub);
      try {
        const [before, after] = await interleaved([
          `http://127.0.0.1:${baseline.port}/v1/nodes`,
          `http://127.0.0.1:${hub.healthPort}/v1/nodes`,
        ]);
        wire.push(row("hub health GET /v1/nodes, hand-written", before));
        wire.push(row("hub health GET /v1/nodes, Hono", after));
      } finally {
        await baseline.close();
      }
    } else {
      const [nodes] = await interleaved([`http://127.0.0.1:${hub.healthPort}/v1/nodes`]);
      wire.push(row("hub health GET /v1/nodes (this checkout)", nodes));
    }
    const token = await hub.token("bench-edge");
    const have = hub.hub.store.current.hash;
    const stream = `${hub.url}/v1/config/stream?node_id=bench-edge&have=${have}&wait=0`;
    const [polled] = await interleaved([stream], [`Authorization: Bearer ${token}`]);
    wire.push(row("hub api GET /v1/config/stream, token", polled));
  } finally {
    await hub.dispose();
  }
  const edge = await bootEdge({ lanes: ["public", "local_health"] });
  try {
    const [healthz] = await interleaved([`http://127.0.0.1:${edge.ports.local_health}/healthz`]);
    wire.push(row("edge local_health GET /healthz", healthz));
  } finally {
    await edge.dispose();
  }
  console.log(
    `\nOn the wire: wrk, ${CONNECTIONS} connections, ${SECONDS} s a run, median of ${RUNS}`,
  );
  console.log(
    "| route                                        |   req/s | p50 ms | p99 ms  | non-2xx |",
  );
  console.log(
    "|----------------------------------------------|---------|--------|---------|---------|",
  );
  for (const line of wire) console.log(line);
}
