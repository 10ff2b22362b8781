/**
 * The state an edge changes as it boots, serves and stops — armed, ready/draining, the bound
 * listeners, how to stop the watchers — and the three ways it ends: abandoned (a boot that will
 * not complete), drained, or closed. Every boot step is handed the one {@link Lifecycle} and
 * records in it what it started, so whichever way the edge ends stops exactly that.
 *
 * Drain reports the edge not ready at once (`/readyz` 503, `/v1/health` `ready: false`, the
 * provider probe `draining`) while the public lane goes on admitting for `drain.lame_duck_ms`, so a
 * load balancer polling readiness moves traffic away before connections are refused; then public
 * admission stops, the drain waits until no public request is in flight (or the cap), and every
 * listener closes.
 *
 * @module
 */
import { Ledger } from "../ledger/ledger.ts";
import { LedgerMemory } from "../ledger/memory.ts";
import { Egress } from "../egress/egress.ts";
import { followHubPool } from "../live/hub_pool.ts";
import { egressSettings } from "../egress/settings.ts";
import { ownListeners } from "./plan.ts";
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
  readonly state: EdgeState = { ready: false, draining: false, admissionStopped: false };
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
  /** Aborted by {@link close}: a drain in progress stops waiting. */
  readonly #cut = new AbortController();

  constructor(boot: BootContext) {
    const { plan, worker, clock, options } = boot;
    this.#boot = boot;
    const memory = worker && LedgerMemory.attach(worker.ledger, worker.index);
    this.ledger = new Ledger(plan.profile, { clock, memory });
    const settings = {
      ...egressSettings(plan.config.egress),
      ownListeners: ownListeners(plan.config),
    };
    this.egress = new Egress(settings, clock, {
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
    // A drain asked for during boot wins: never ready while draining.
    this.state.ready = !this.state.draining;
  }

  /**
   * Drains (idempotent): not ready at once; the public lane admits through the lame-duck window,
   * then stops admitting; public work is waited out (to the cap); then everything shuts down.
   */
  drain(): Promise<void> {
    if (this.#stopping) return this.#stopping;
    const { log, plan } = this.#boot;
    this.state.draining = true;
    this.state.ready = false;
    const { lameDuckMs, drainMs } = plan.config;
    if (lameDuckMs > 0) {
      log(`portcullis: draining: not ready; public admission stops in ${lameDuckMs} ms`);
    } else {
      this.#stopAdmission();
    }
    this.#stopping = (async () => {
      if (lameDuckMs > 0) {
        await this.#pause(lameDuckMs);
        this.#stopAdmission();
      }
      const until = Date.now() + drainMs;
      const inFlight = () => this.ledger.inUse("public");
      while (inFlight() > 0 && Date.now() < until && !this.#cut.signal.aborted) {
        await this.#pause(25);
      }
      const left = inFlight();
      log(`portcullis: drained${left > 0 ? ` with ${left} public requests cut at the cap` : ""}`);
      // The drain request's own answer (and any health probe's) is delivered before the close.
      const protectedUntil = Date.now() + 2000;
      const answering = () =>
        this.ledger.inUse("local_health") + this.ledger.inUse("provider_health");
      while (answering() > 0 && Date.now() < protectedUntil && !this.#cut.signal.aborted) {
        await this.#pause(10);
      }
      await this.#shutdown();
    })();
    return this.#stopping;
  }

  /** Public admission stops: the public listeners close and their idle connections go. */
  #stopAdmission(): void {
    this.state.admissionStopped = true;
    this.#boot.log("portcullis: draining: public admission stopped");
    for (const grant of this.listening.filter((grant) => grant.lane === "public")) {
      grant.stopAccepting();
      grant.closeIdle();
    }
  }

  /** Waits `ms`, or less when {@link close} cuts the drain short. */
  #pause(ms: number): Promise<void> {
    const signal = this.#cut.signal;
    if (ms <= 0 || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done);
    });
  }

  /**
   * Closes every listener and connection now, without waiting for work (idempotent); during a
   * drain it cuts the drain's waits short.
   */
  close(): Promise<void> {
    this.#cut.abort();
    if (!this.#stopping) {
      this.state.draining = true;
      this.state.ready = false;
      this.state.admissionStopped = true;
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
