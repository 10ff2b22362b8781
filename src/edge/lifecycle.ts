/**
 * The state an edge changes as it boots, serves and stops — armed, ready/draining, the bound
 * listeners, how to stop the watchers — and the three ways it ends: abandoned (a boot that will
 * not complete), drained, or closed. Every boot step is handed the one {@link Lifecycle} and
 * records in it what it started, so whichever way the edge ends stops exactly that.
 *
 * Drain stops public admission, waits until no public request is in flight (or the cap), then
 * closes every listener.
 *
 * @module
 */
import { Ledger } from "../ledger/ledger.ts";
import { LedgerMemory } from "../ledger/memory.ts";
import { Egress } from "../egress/egress.ts";
import { followHubPool } from "../live/hub_pool.ts";
import { egressSettings } from "../egress/settings.ts";
import type { StopWatching } from "../tls/watch.ts";
import type { DescriptorWatch } from "../server/descriptors.ts";
import type { EdgeState } from "../pipeline/services.ts";
import { type Bound, closeListener } from "./listeners.ts";
import type { BootContext } from "./boot_context.ts";

/**
 * An edge's changing state and its endings. The ledger and the egress live here because drain
 * waits on the one and shutdown closes the other.
 */
export class Lifecycle {
  readonly ledger: Ledger;
  readonly egress: Egress;
  /** Shared with every handler as `services.state`. */
  readonly state: EdgeState = { ready: false, draining: false };
  /** False until every check has passed; until then a connection is closed unread. */
  armed = false;
  /** The listeners bound so far, in bind order. */
  readonly listening: Bound[] = [];
  /** Stops the runtime source, the egress sharing and the access-log batching. */
  stopRuntime: () => void = () => {};
  /** Stops the certificate watch. */
  stopWatching: StopWatching = () => {};
  /** Set once armed. */
  descriptors?: DescriptorWatch;
  /** Resolves when the edge has stopped, by drain or close. */
  readonly finished: Promise<void>;
  readonly #boot: BootContext;
  #resolveFinished!: () => void;
  #stopping?: Promise<void>;

  constructor(boot: BootContext) {
    const { plan, worker, clock, options } = boot;
    this.#boot = boot;
    const memory = worker && LedgerMemory.attach(worker.ledger, worker.index);
    this.ledger = new Ledger(plan.profile, { clock, memory });
    this.egress = new Egress(egressSettings(plan.config.egress), clock, {
      random: options.random,
      log: boot.log,
    });
    // Only an isolate that carries public traffic reads the pool's view: worker 0 of a multi-worker
    // edge serves the protected lanes and sends no request upstream, so one poller fewer (its
    // breakers still learn from the workers' outcome batches and close by their own probes).
    if (!worker || worker.index > 0) {
      const { runtime, egress, nodeId } = plan.config;
      if (egress.torpool) this.egress.view.followLocal(egress.torpool.api_socket, boot.log);
      if (runtime.kind === "remote" && egress.transport) {
        const hub = runtime.hub;
        this.egress.view.follow((interval, apply) => followHubPool(hub, nodeId, interval, apply));
      }
    }
    this.finished = new Promise<void>((resolve) => this.#resolveFinished = resolve);
  }

  /**
   * Undoes a boot that will not complete: listeners, certificate watch, runtime source, and the
   * egress (its idle sweep runs from construction).
   */
  async abandon(): Promise<void> {
    await Promise.all(this.listening.map((grant) => closeListener(grant)));
    this.stopWatching();
    this.stopRuntime();
    this.egress.close();
  }

  /** Lets connections reach the handlers and reports the edge ready. */
  arm(): void {
    this.armed = true;
    this.state.ready = true;
  }

  /** Stops public admission, waits out public work (to the cap), then shuts down (idempotent). */
  drain(): Promise<void> {
    if (this.#stopping) return this.#stopping;
    const { log, plan } = this.#boot;
    this.state.draining = true;
    log("portcullis: draining: public admission stopped");
    const publicServers = this.listening.filter((grant) => grant.lane === "public");
    for (const grant of publicServers) {
      grant.stopAccepting();
      grant.closeIdle();
    }
    this.#stopping = (async () => {
      const until = Date.now() + plan.config.drainMs;
      const inFlight = () => this.ledger.inUse("public");
      while (inFlight() > 0 && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      const left = inFlight();
      log(`portcullis: drained${left > 0 ? ` with ${left} public requests cut at the cap` : ""}`);
      // The drain request's own answer (and any health probe's) is delivered before the close.
      const protectedUntil = Date.now() + 2000;
      const answering = () =>
        this.ledger.inUse("local_health") + this.ledger.inUse("provider_health");
      while (answering() > 0 && Date.now() < protectedUntil) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      await this.#shutdown();
    })();
    return this.#stopping;
  }

  /** Closes every listener and connection now, without waiting for work (idempotent). */
  close(): Promise<void> {
    if (!this.#stopping) {
      this.state.draining = true;
      this.#stopping = this.#shutdown();
    }
    return this.#stopping;
  }

  /** Stops every watcher, closes every listener and the egress, then resolves `finished`. */
  async #shutdown(): Promise<void> {
    this.state.ready = false;
    this.descriptors?.stop();
    this.stopWatching();
    this.stopRuntime();
    await Promise.all(this.listening.map((grant) => closeListener(grant)));
    this.egress.close();
    this.#resolveFinished();
  }
}
