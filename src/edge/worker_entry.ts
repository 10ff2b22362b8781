/**
 * A request worker (1 … N) of a multi-worker edge: reads the owner's config text, plans with the
 * owner's live generation (the first one at boot, the one live then for a replacement), waits for
 * the owner's word to bind, binds every public TCP listener with `reusePort`, reports them and
 * waits to be armed, then serves. It mirrors the owner's generations and rejection record, and asks
 * the owner for a reload, the hub's status or a drain.
 *
 * An error nothing caught ends this worker, never the process: it tells the owner why and closes
 * itself (the owner reclaims what it held and starts a replacement, workers.ts), rather than leave
 * Deno to print free text on stderr.
 *
 * @module
 */
import { flushStandardOutlets } from "../observe/log_outlet.ts";
import { LANES } from "../../lanes/mod.ts";
import type { OfferOutcome, Rejection } from "../live/generations.ts";
import { resolveConfig } from "../config/load.ts";
import { parseYaml } from "../config/yaml_file.ts";
import { ConfigError, formatProblem } from "../config/problems.ts";
import { BootError } from "../boot/boot_error.ts";
import { type Edge, startEdge } from "./edge.ts";
import { type EdgePlan, planEdge } from "./plan.ts";
import type { EdgeServices } from "../pipeline/services.ts";
import type { WorkerRole } from "./worker_role.ts";
import type { ToOwner, ToWorker } from "./worker_messages.ts";
import { diagnostics, diagnosticSink } from "../observe/diag.ts";
import { describeError } from "../request/errors.ts";

const scope = self as unknown as {
  postMessage(message: ToOwner): void;
  onmessage: ((event: MessageEvent<ToWorker>) => void) | null;
  close(): void;
};
let edge: Edge | undefined;
let chain: Promise<unknown> = Promise.resolve();
let arm: { resolve: () => void; reject: (error: BootError) => void } | undefined;
/** Settles this worker's wait for the owner's word to bind (`mayBind`). */
let bindWord: ((reasons?: readonly string[]) => void) | undefined;
const calls = new Map<number, { resolve: (value: unknown) => void; reject: (e: Error) => void }>();
let nextCall = 0;
/** This worker's index, once the owner has said it (for the lines it writes). */
let workerIndex: number | undefined;

function call(method: "reload" | "hubStatus"): Promise<unknown> {
  const id = nextCall++;
  scope.postMessage({ type: "call", id, method });
  return new Promise((resolve, reject) => calls.set(id, { resolve, reject }));
}

scope.onmessage = (event) => {
  const message = event.data;
  if (message.type === "arm") return arm?.resolve();
  if (message.type === "refuse") return arm?.reject(new BootError(message.reasons));
  if (message.type === "bind") return bindWord?.(message.reasons);
  if (message.type === "result") {
    const pending = calls.get(message.id);
    calls.delete(message.id);
    // Settle after the generation messages that came before the answer have been applied.
    chain = chain.then(() => {
      if (message.error !== undefined) pending?.reject(new Error(message.error));
      else pending?.resolve(message.value);
    });
    return;
  }
  chain = chain.then(() => handle(message)).catch((error) =>
    diagnostics().error(`worker failed: ${error}`, { worker: workerIndex })
  );
};

async function handle(message: ToWorker): Promise<void> {
  if (message.type === "start") return await start(message);
  if (!edge) return;
  const store = edge.services.config;
  if (message.type === "prepare") {
    if (message.tables) store.current.registry.environment.tables.adopt(message.tables);
    const problems = await store.prepare({
      dir: message.dir,
      texts: new Map(message.texts),
      source: message.source,
      hash: message.hash,
      number: message.number,
    });
    scope.postMessage({ type: "prepared", number: message.number, problems });
  } else if (message.type === "status") {
    store.mirrorRejection(message.rejected, message.superseded);
  } else if (message.type === "drain") {
    await edge.drain();
  } else if (message.type === "close") {
    await edge.close();
  }
}

/**
 * Boots this worker's edge from the owner's config and first generation, then reports it armed;
 * a failure is reported to the owner with its reasons.
 */
async function start(message: StartMessage): Promise<void> {
  workerIndex = message.index;
  try {
    const plan = await planAsOwner(message);
    const log = diagnosticSink({
      level: plan.config.observe.logLevel,
      fields: { worker: message.index },
    });
    edge = await startEdge(plan, { version: message.version, log, worker: mirrorRole(message) });
    scope.postMessage({ type: "armed" });
    sendCounts(edge);
  } catch (error) {
    const reasons = error instanceof ConfigError
      ? error.problems.map(formatProblem)
      : error instanceof BootError
      ? [...error.reasons]
      : [String(error)];
    scope.postMessage({ type: "boot-failed", reasons });
  }
}

/**
 * Ends this worker on an error nothing caught: the owner is told why (it reclaims what the worker
 * held and starts a replacement), then the worker closes itself, so no further code of it runs.
 */
function dieOnUncaught(error: unknown): void {
  scope.postMessage({ type: "died", reason: describeError(error) });
  scope.close();
}

self.addEventListener("error", function uncaughtError(event: ErrorEvent) {
  event.preventDefault();
  dieOnUncaught(event.error ?? event.message);
});
self.addEventListener("unhandledrejection", function unhandledRejection(event) {
  event.preventDefault();
  dieOnUncaught(event.reason);
});

/** The "start" message: everything a worker is told before it boots. */
type StartMessage = Extract<ToWorker, { type: "start" }>;

/**
 * Reads the owner's config text (never the file again: a replacement started after an operator's
 * edit runs what the owner runs) and plans it with the owner's generation and open-file limit.
 */
async function planAsOwner(message: StartMessage): Promise<EdgePlan<EdgeServices>> {
  const source = parseYaml(message.file, message.configText);
  if (Array.isArray(source)) throw new ConfigError(source);
  const config = resolveConfig(source);
  const first = message.first;
  return await planEdge(config, LANES, {
    first: {
      dir: first.dir,
      texts: new Map(first.texts),
      hash: first.hash,
      source: first.source,
    },
    fileLimit: message.fileLimit,
    tables: first.tables,
  });
}

/**
 * This worker's part: its stripe of the shared memory, an arm gate that waits for the owner's
 * word, and the owner's calls for what only the owner can do (reload, hub status, drain).
 */
function mirrorRole(message: StartMessage): WorkerRole {
  return {
    index: message.index,
    count: message.count,
    ledger: message.ledger,
    stats: message.stats,
    egressChannel: message.egressChannel,
    generation: message.generation,
    first: { number: message.first.number, loadedAt: message.first.loadedAt },
    armGate(listeners) {
      scope.postMessage({ type: "listeners", listeners });
      return new Promise((resolve, reject) => arm = { resolve, reject });
    },
    mayBind() {
      scope.postMessage({ type: "may-bind" });
      return new Promise((resolve, reject) => {
        bindWord = (reasons) => reasons ? reject(new BootError(reasons)) : resolve();
      });
    },
    owner: {
      async reloadConfig(): Promise<OfferOutcome> {
        const value = await call("reload") as { outcome: string; rejection?: Rejection };
        const live = edge!.services.config.current;
        if (value.outcome === "rejected") {
          return { outcome: "rejected", rejection: value.rejection! };
        }
        return { outcome: value.outcome as "loaded" | "unchanged" | "pending", generation: live };
      },
      hubStatus: () => call("hubStatus") as Promise<Record<string, unknown>>,
      drain: () => scope.postMessage({ type: "drain" }),
    },
  };
}

/**
 * Sends policy and request counters to worker 0 (which serves /metrics) twice a second while they
 * change, and tells it when this edge has finished.
 */
function sendCounts(running: Edge): void {
  let sent = "";
  const timer = setInterval(() => {
    const policy = running.services.policyStats.counts();
    const requests = running.services.observer.metrics.counts();
    const stores = running.services.storeCounters?.counts();
    const text = JSON.stringify([policy, requests, stores]);
    if (text !== sent) scope.postMessage({ type: "counts", policy, requests, stores });
    sent = text;
  }, 500);
  Deno.unrefTimer(timer);
  running.finished.then(async () => {
    clearInterval(timer);
    // The last access-log lines of a drain leave before the isolate does (bounded: a stalled
    // stdout costs them, not the stop).
    await flushStandardOutlets();
    scope.postMessage({ type: "finished" });
    scope.close();
  });
}
