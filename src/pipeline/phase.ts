/**
 * A phase: one step of the request path with one job. It answers the request now (a reply) or lets
 * it go on (undefined), synchronously or not. The runner (runner.ts) runs a lane's phases top to
 * bottom and owns everything around them — the deadline, the spans, the access-log record and the
 * response phase — so a phase holds only its own logic. (Pingora's ordered proxy hooks and Hono's
 * `compose` are the models: a list of named steps, one short loop over it.)
 *
 * @module
 */
import type { Reply } from "../request/reply.ts";
import type { Exchange } from "./exchange.ts";

/** What a phase decides: a reply answers now; undefined goes on to the next phase. */
export type PhaseOutcome = Reply | undefined;

/**
 * One named step of a lane's pipeline.
 *
 * @internal
 */
export interface Phase<S> {
  /** The phase's name, as docs/architecture.md lists it. */
  readonly name: string;
  /** The span the runner opens around the phase, when it is traced on its own. */
  readonly span?: string;
  /** False when the phase has nothing to do for this request: the runner skips it (no span). */
  applies?(exchange: Exchange): boolean;
  /** Runs the phase for one request. */
  run(exchange: Exchange, services: S): PhaseOutcome | Promise<PhaseOutcome>;
}
