/**
 * Remote mode: an edge reads its hub's view of the SOCKS pool (`GET /v1/pool`, authenticated like
 * the config stream, on the same hub address) every probe interval and hands it to its egress, so
 * a pool port the hub's Tor pool does not list as live has its breaker opened before any request
 * finds it dead (pool_view.ts). A hub that cannot be asked changes nothing.
 *
 * @module
 */
import type { HubClientConfig } from "../config/runtime_source.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { type LivePort, parseView } from "../egress/pool_view.ts";
import { hubHttpClient } from "./hub_answer.ts";

/** Asks the hub for its pool's live ports; undefined when the hub cannot be asked. */
export async function askHubPool(
  hub: HubClientConfig,
  nodeId: string,
  client: Deno.HttpClient | undefined,
  timeoutMs: number,
): Promise<LivePort[] | undefined> {
  try {
    const url = new URL("/v1/pool", hub.url);
    url.searchParams.set("node_id", nodeId);
    const headers: Record<string, string> = { accept: "application/json" };
    if (hub.tokenFile) {
      const token = await readNamedFile(hub.tokenFile, "hub.token_file", { secret: true });
      headers.authorization = `Bearer ${token.trim()}`;
    }
    const response = await fetch(url, { headers, client, signal: AbortSignal.timeout(timeoutMs) });
    const text = await response.text();
    return response.status === 200 ? parseView(text) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Reads the hub's pool view every `intervalMs` and hands each to `apply`.
 *
 * @returns stops the reading
 */
export function followHubPool(
  hub: HubClientConfig,
  nodeId: string,
  intervalMs: number,
  apply: (live: readonly LivePort[]) => void,
): () => void {
  let stopped = false;
  let client: Promise<Deno.HttpClient | undefined> | undefined;
  const poll = async () => {
    client ??= hub.tls ? hubHttpClient(hub.tls).catch(() => undefined) : Promise.resolve(undefined);
    const view = await askHubPool(
      hub,
      nodeId,
      await client,
      Math.max(100, Math.min(intervalMs, 5000)),
    );
    if (!stopped && view !== undefined) apply(view);
  };
  const timer = setInterval(poll, intervalMs);
  Deno.unrefTimer(timer as unknown as number);
  poll();
  return () => {
    stopped = true;
    clearInterval(timer);
    client?.then((c) => c?.close());
  };
}
