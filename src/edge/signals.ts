/**
 * What a running edge does on a signal: SIGTERM and SIGINT drain it (the lame-duck window first,
 * see lifecycle.ts), SIGHUP reloads its runtime set (the tenants folder, or a fresh poll of the
 * hub) and its certificates — what `POST /v1/config/reload` and `POST /v1/tls/reload` do, for a
 * supervisor that can only send signals (`systemctl reload`).
 *
 * @module
 */
import type { Edge } from "./edge.ts";

/** Stops following signals. */
export type StopSignals = () => void;

/**
 * Drains `edge` on SIGTERM and SIGINT and reloads it on SIGHUP until stopped.
 *
 * @param edge the running edge (worker 0's handle: a drain spans every worker)
 * @param log where the reload's outcome goes
 * @returns a function that removes the listeners
 */
export function followSignals(edge: Edge, log: (line: string) => void): StopSignals {
  const drain = () => void edge.drain();
  const reload = () => void reloadOnSignal(edge, log);
  Deno.addSignalListener("SIGTERM", drain);
  Deno.addSignalListener("SIGINT", drain);
  Deno.addSignalListener("SIGHUP", reload);
  return function stopSignals() {
    Deno.removeSignalListener("SIGTERM", drain);
    Deno.removeSignalListener("SIGINT", drain);
    Deno.removeSignalListener("SIGHUP", reload);
  };
}

/**
 * SIGHUP: reloads the runtime set and the certificates. A new or rejected generation is logged by
 * the reload itself; a set that did not change is said here, so every SIGHUP leaves a line.
 */
export async function reloadOnSignal(edge: Edge, log: (line: string) => void): Promise<void> {
  const { reloadConfig, tls, state } = edge.services;
  if (state.draining) return;
  log("portcullis: SIGHUP: reloading the runtime set");
  if (reloadConfig) {
    try {
      const outcome = await reloadConfig();
      if (outcome.outcome === "unchanged") {
        log(`portcullis: config unchanged; generation ${outcome.generation.number} stays live`);
      }
    } catch (error) {
      log(`portcullis: config reload failed: ${error}`);
    }
  }
  if (tls) {
    const problems = await tls.reload().catch((error) => [String(error)]);
    for (const problem of problems) log(`portcullis: tls: reload: ${problem}`);
  }
}
