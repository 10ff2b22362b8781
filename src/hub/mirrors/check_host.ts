/**
 * The check-host.net client (https://check-host.net/about/api): `GET /check-http?host=…&node=…`
 * starts a check and answers a `request_id`; `GET /check-result/<id>` answers, per node, `null`
 * while the node is still checking and `[[1, seconds, message, status]]` (1: reached) or
 * `[[0, …]]` (not reached) once it has. The client asks for the result every few seconds until
 * every node answered or the prober's signal ends the check, and hands back what came.
 *
 * Small on purpose: no retries (the next round is the retry), no parallel checks, and only the
 * fields it needs read from each answer. It is the hub's one call to a third party, made only with
 * `prober.enabled` (and granted `check-host.net:443` only then); tests never use it.
 *
 * @module
 */
import type { RegionAnswer } from "./verdict.ts";
import type { MirrorCheckClient } from "./prober.ts";
import { sleep } from "../../live/backoff.ts";

const BASE = "https://check-host.net";

/** A node name as configured (`de1`), or in full (`de1.node.check-host.net`). */
export function checkHostNode(region: string): string {
  return region.includes(".") ? region : `${region}.node.check-host.net`;
}

/** Checks a mirror over HTTPS from check-host.net's nodes. */
export class CheckHostClient implements MirrorCheckClient {
  readonly #pollMs: number;
  readonly #fetch: typeof fetch;

  /** @param options how often to ask for results (default 3 s), and the fetch to use */
  constructor(options: { readonly pollMs?: number; readonly fetch?: typeof fetch } = {}) {
    this.#pollMs = options.pollMs ?? 3000;
    this.#fetch = options.fetch ?? fetch;
  }

  /** Starts a check of `https://<host>/` from `regions` and collects the answers. */
  async check(
    host: string,
    regions: readonly string[],
    signal: AbortSignal,
  ): Promise<Map<string, RegionAnswer>> {
    const start = new URL(`${BASE}/check-http`);
    start.searchParams.set("host", `https://${host}/`);
    for (const region of regions) start.searchParams.append("node", checkHostNode(region));
    const started = await this.#get(start, signal) as { ok?: number; request_id?: unknown };
    const id = started.request_id;
    if (started.ok !== 1 || typeof id !== "string" || !/^[A-Za-z0-9]{1,64}$/.test(id)) {
      throw new Error("check-host.net did not start the check");
    }
    const answers = new Map<string, RegionAnswer>();
    while (answers.size < regions.length) {
      await sleep(this.#pollMs, signal);
      if (signal.aborted) break;
      let results: Record<string, unknown>;
      try {
        results = await this.#get(new URL(`${BASE}/check-result/${id}`), signal) as typeof results;
      } catch (error) {
        if (signal.aborted) break;
        throw error;
      }
      for (const region of regions) {
        const answer = answerOf(results?.[checkHostNode(region)]);
        if (answer) answers.set(region, answer);
      }
    }
    return answers;
  }

  async #get(url: URL, signal: AbortSignal): Promise<unknown> {
    const response = await this.#fetch(url, { headers: { accept: "application/json" }, signal });
    if (!response.ok) {
      await response.body?.cancel();
      throw new Error(`check-host.net answered ${response.status}`);
    }
    return await response.json();
  }
}

/** One node's HTTP result: null while it checks, `[[1, …]]` reached, `[[0, …]]` not. */
function answerOf(result: unknown): RegionAnswer | undefined {
  if (!Array.isArray(result) || !Array.isArray(result[0])) return undefined;
  const code = result[0][0];
  if (code === 1) return "ok";
  return code === 0 || code === null ? "failed" : undefined;
}
