/**
 * Active health checks of proxy backends: a backend whose tenant file gives it `health` is probed
 * with a GET of its path every interval, and after `failures` failed probes in a row it is made
 * cold in the negative cache, so the weighted choice passes it over while another backend is left
 * — before any client request has to fail on it. Each failed probe after that renews the cold
 * period; the first passing probe ends it.
 *
 * Why probes go through the egress: a backend is only healthy if the gateway can reach it the way
 * requests do — the same agent (SOCKS instance or direct), the same TLS settings, the same Host.
 * A probe that the way out itself failed (a SOCKS instance fault, a destination the egress
 * refuses) says nothing about the backend and changes nothing. Probes carry no tenant, so with
 * isolation they use the shared SOCKS credentials. Instance breakers do not learn from probes:
 * the egress's own SOCKS probes decide those.
 *
 * One {@link HealthChecks} runs per edge, in the isolate that owns the runtime source; its
 * verdicts reach the request workers as shared backend outcomes (`Egress.backendChecked`). Checks
 * are keyed by backend and settings, so a backend several routes or tenants name is probed once;
 * a new generation keeps the checks (timers, failure runs) it did not change. Probes of one check
 * never overlap: the next starts an interval after the last started, or when it ends if later.
 *
 * What a probe says about the gateway: `GET <path>`, `Host` and nothing else by default — no
 * `User-Agent` (as HAProxy's checks send none), so the backend reads no product name in it. An
 * operator who wants the backend's logs to tell probes from clients names one
 * (`forwarding.health_user_agent`).
 *
 * @module
 */
import http from "node:http";
import { CONNECT_MS, EgressRefusal, HANDSHAKE_SIGNAL } from "./agents.ts";
import type { Backend, BackendHealth } from "./destinations.ts";
import type { Egress } from "./egress.ts";
import { SocksError } from "./socks5.ts";
import { UPSTREAM_TLS } from "./upstream_tls.ts";

/** What one probe found: `inconclusive` when the way out failed, not the backend. */
export interface ProbeResult {
  readonly verdict: "pass" | "fail" | "inconclusive";
  /** For the log: the status, or what went wrong. */
  readonly detail: string;
}

/** Runs one probe of `backend` (its `health` is set); `signal` aborts it when checks stop. */
export type HealthProbe = (backend: Backend, signal: AbortSignal) => Promise<ProbeResult>;

/** One-shot timers (tests inject manual ones). */
export interface HealthTimers {
  set(run: () => void, ms: number): number;
  clear(id: number): void;
}

/** What {@link HealthChecks} is given. */
export interface HealthChecksOptions {
  /** Where verdicts go (`backendChecked`) and, by default, what probes go through. */
  readonly egress: Pick<Egress, "backendChecked" | "way" | "finish">;
  /** Monotonic milliseconds. */
  readonly clock: () => number;
  /** One line per state change of a check. */
  readonly log: (line: string) => void;
  /** Default: a GET through the egress ({@link probeBackend}). */
  readonly probe?: HealthProbe;
  /** The default probe's User-Agent (`forwarding.health_user_agent`); absent: none sent. */
  readonly userAgent?: string;
  /** Default: unref'd `setTimeout`. */
  readonly timers?: HealthTimers;
}

interface Check {
  readonly id: string;
  /** The newest generation's backend with this key and settings. */
  backend: Backend;
  readonly health: BackendHealth;
  failing: boolean;
  /** Failed probes in a row. */
  run: number;
  timer?: number;
  probing?: AbortController;
}

/**
 * The active health checks of one edge.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { HealthChecks } from "./health_checks.ts";
 * const checks = new HealthChecks({
 *   egress: { backendChecked() {}, way: () => undefined, finish() {} },
 *   clock: () => 0,
 *   log: () => {},
 *   timers: { set: () => 0, clear() {} },
 * });
 * const health = { path: "/up", intervalMs: 500, timeoutMs: 100, expectStatus: [200], failures: 2 };
 * const a = { key: "http://a.test", hostname: "a.test", port: 80, authority: "a.test" };
 * const backend = { ...a, target: "a.test:80", weight: 1, health };
 * checks.update([backend, { ...backend, weight: 3 }]); // two routes, one check
 * assert.equal(checks.size, 1);
 * checks.stop();
 * assert.equal(checks.size, 0);
 * ```
 */
export class HealthChecks {
  readonly #options: HealthChecksOptions;
  readonly #probe: HealthProbe;
  readonly #timers: HealthTimers;
  readonly #checks = new Map<string, Check>();
  #stopped = false;

  constructor(options: HealthChecksOptions) {
    this.#options = options;
    const egress = options.egress;
    const userAgent = options.userAgent;
    this.#probe = options.probe ??
      ((backend, signal) => probeBackend(egress, backend, signal, userAgent));
    this.#timers = options.timers ?? UNREF_TIMERS;
  }

  /** How many checks are scheduled (one per backend key and settings). */
  get size(): number {
    return this.#checks.size;
  }

  /**
   * Schedules the checks of a generation's backends: new ones are probed at once, unchanged ones
   * keep their schedule and state, and those no backend asks for any more stop. A new check of a
   * backend whose ended check was failing starts failing, so its first pass warms the backend.
   */
  update(backends: Iterable<Backend>): void {
    if (this.#stopped) return;
    const wanted = new Map<string, Backend>();
    for (const backend of backends) {
      if (backend.health === undefined) continue;
      const id = checkId(backend, backend.health);
      if (!wanted.has(id)) wanted.set(id, backend);
    }
    const failed = new Map<string, number>();
    for (const [id, check] of this.#checks) {
      if (wanted.has(id)) continue;
      if (check.failing) failed.set(check.backend.key, check.run);
      this.#end(check);
    }
    for (const [id, backend] of wanted) {
      const check = this.#checks.get(id);
      if (check) {
        check.backend = backend;
        continue;
      }
      const run = failed.get(backend.key);
      const health = backend.health!;
      const added: Check = { id, backend, health, failing: run !== undefined, run: run ?? 0 };
      this.#checks.set(id, added);
      this.#arm(added, 0);
    }
  }

  /** Stops every check: no timer is left and probes in flight are aborted (idempotent). */
  stop(): void {
    this.#stopped = true;
    for (const check of this.#checks.values()) this.#end(check);
  }

  #end(check: Check): void {
    this.#checks.delete(check.id);
    if (check.timer !== undefined) this.#timers.clear(check.timer);
    check.timer = undefined;
    check.probing?.abort();
  }

  #arm(check: Check, ms: number): void {
    check.timer = this.#timers.set(() => {
      check.timer = undefined;
      void this.#run(check);
    }, ms);
  }

  async #run(check: Check): Promise<void> {
    const started = this.#options.clock();
    const probing = new AbortController();
    check.probing = probing;
    const result = await this.#probe(check.backend, probing.signal).catch((error: unknown) => ({
      verdict: "fail" as const,
      detail: error instanceof Error ? error.message : String(error),
    }));
    check.probing = undefined;
    if (this.#checks.get(check.id) !== check) return; // stopped, or no generation wants it now
    this.#record(check, result);
    const next = started + check.health.intervalMs - this.#options.clock();
    this.#arm(check, Math.max(0, next));
  }

  /** Moves the check's state; a failing check reports every failed probe, a recovery once. */
  #record(check: Check, result: ProbeResult): void {
    const { egress, log } = this.#options;
    if (result.verdict === "inconclusive") return;
    const what = `egress: health check of backend ${check.backend.key} (GET ${check.health.path})`;
    if (result.verdict === "pass") {
      if (check.failing) {
        check.failing = false;
        egress.backendChecked(check.backend, true);
        log(
          `portcullis: ${what} failing -> healthy: ${result.detail} after ${check.run} failed probes`,
        );
      }
      check.run = 0;
      return;
    }
    check.run++;
    if (!check.failing && check.run >= check.health.failures) {
      check.failing = true;
      log(
        `portcullis: warning: ${what} healthy -> failing: ${check.run} failed probes in a row, ` +
          `last: ${result.detail}; passed over while another backend is left`,
      );
    }
    if (check.failing) egress.backendChecked(check.backend, false);
  }
}

/** A check's identity: the backend and every setting of its check. */
function checkId(backend: Backend, health: BackendHealth): string {
  const { path, intervalMs, timeoutMs, expectStatus, failures } = health;
  return JSON.stringify([backend.key, path, intervalMs, timeoutMs, expectStatus, failures]);
}

const UNREF_TIMERS: HealthTimers = {
  set(run, ms) {
    // Deno's timers are numbers (node's types say Timeout); unref: they must not keep a process up.
    const id = setTimeout(run, ms) as unknown as number;
    Deno.unrefTimer(id);
    return id;
  },
  clear: (id) => clearTimeout(id),
};

/**
 * Probes `backend` once: `GET <health.path>` with `Host: <authority>` (and `User-Agent` when
 * one is given), through the egress's way out for it, the whole exchange (connection, TLS
 * handshake, head and body) bounded by `health.timeoutMs`.
 *
 * @param userAgent the probe's User-Agent; absent: none
 * @returns pass when the status is expected; fail on another status, a timeout or a backend
 *   fault; inconclusive when there was no way out or the way out failed
 */
export function probeBackend(
  egress: Pick<Egress, "way" | "finish">,
  backend: Backend,
  signal: AbortSignal,
  userAgent?: string,
): Promise<ProbeResult> {
  const health = backend.health!;
  const chosen = egress.way(backend);
  if (!chosen) return Promise.resolve({ verdict: "inconclusive", detail: "no way out" });
  const way = chosen;
  return new Promise((resolve) => {
    const handshake = new AbortController();
    const request = http.request({
      host: backend.hostname,
      port: backend.port,
      method: "GET",
      path: health.path,
      headers: userAgent === undefined
        ? { host: backend.authority }
        : { host: backend.authority, "user-agent": userAgent },
      agent: way.agent,
      setHost: false,
      [HANDSHAKE_SIGNAL]: handshake.signal,
      [UPSTREAM_TLS]: backend.tls,
      [CONNECT_MS]: health.timeoutMs,
    } as http.RequestOptions);
    // As in upstream.ts: node's client would re-send on its own, also after a timeout destroyed it.
    (request as unknown as { _retrying: boolean })._retrying = true;
    let answer: ProbeResult | undefined;
    let settled = false;
    const timer = setTimeout(() => {
      finish(answer ?? { verdict: "fail", detail: `no answer within ${health.timeoutMs} ms` });
    }, health.timeoutMs);
    Deno.unrefTimer(timer);
    const stopped = () => finish({ verdict: "inconclusive", detail: "checks stopped" });
    signal.addEventListener("abort", stopped, { once: true });
    if (signal.aborted) stopped();

    /** Settles once; a connection whose answer did not end whole is not kept. */
    function finish(result: ProbeResult, whole = false): void {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener("abort", stopped);
      if (!whole) {
        handshake.abort();
        request.destroy();
      }
      egress.finish(way, backend, { instanceOk: undefined });
      resolve(result);
    }

    request.once("response", (response) => {
      const status = response.statusCode ?? 0;
      const expected = health.expectStatus.includes(status);
      const detail = expected ? `status ${status}` : `status ${status} (expected ` +
        `${health.expectStatus.join(" or ")})`;
      const found: ProbeResult = { verdict: expected ? "pass" : "fail", detail };
      answer = found;
      response.once("end", () => finish(found, true));
      response.once("close", () => finish(found));
      response.resume(); // the body is read and dropped, so the connection can serve again
    });
    request.once("error", (error) => finish(answer ?? failureOf(error)));
    request.end();
  });
}

/** A probe's error: the backend's fault, unless the way out failed or refused the destination. */
function failureOf(error: Error): ProbeResult {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (e instanceof EgressRefusal) return { verdict: "inconclusive", detail: e.message };
    if (e instanceof SocksError) {
      const verdict = e.blame === "destination" ? "fail" : "inconclusive";
      return { verdict, detail: e.message };
    }
  }
  return { verdict: "fail", detail: error.message };
}
