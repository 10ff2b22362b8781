/**
 * Verdicts on destinations against the machine as it is now: the one place the egress asks
 * whether `host:port` may be reached — before a new connection is made, and before a pooled one is
 * used again.
 *
 * Why before reuse too: the own-listener lock (own_listener.ts) and the internal-address rule
 * (destinations.ts) used to judge each new connection only. Found in an attack on issue 31: a
 * backend named by a host name nothing resolved, microsocks as the way out, and `127.0.0.1 <name>`
 * appended to `/etc/hosts` while a client polled every 30 ms — within the machine view's staleness
 * one connection went through microsocks to local_health and was kept alive, and 41 of 50 polls
 * read local_health's JSON, on and on, also after the line was removed. A verdict holds for the
 * machine it was made against; a pooled connection carries no proof that the machine still says
 * the same. So:
 *
 * - {@link DestinationVerdicts.refuse} judges a new connection, with the machine read again when
 *   the last reading is older than the view's age limit (one second);
 * - {@link DestinationVerdicts.refuseReuse} judges a pooled connection before each reuse: at once
 *   while the reading is fresh, else after the reading is renewed — the same staleness bound as a
 *   new connection, never an older one;
 * - {@link DestinationVerdicts.refuseNow} is the verdict against the latest reading, for closing
 *   every pooled connection a changed reading refuses (egress.ts, on `MachineView.onChange`).
 *
 * Verdicts are cached per reading (the view keeps one object while the machine says the same), so
 * the check before a reuse costs a map lookup; the cache holds at most {@link MAX_VERDICTS}
 * destinations and starts again beyond that.
 *
 * @module
 */
import type { LocalMachine, MachineView } from "./local_machine.ts";

/** Destinations whose verdict is kept per reading. */
export const MAX_VERDICTS = 4096;

/** Why `host:port` may not be reached on `machine`, or undefined. */
export type DestinationJudge = (
  host: string,
  port: number,
  machine: LocalMachine,
) => string | undefined;

/** Verdicts of one egress, over its machine view. */
export class DestinationVerdicts {
  readonly #view: MachineView;
  readonly #judge: DestinationJudge;
  #reading?: LocalMachine;
  readonly #cache = new Map<string, string | undefined>();

  /**
   * @param view the machine as the egress reads it
   * @param judge the rules (own listeners, internal addresses) for one reading
   */
  constructor(view: MachineView, judge: DestinationJudge) {
    this.#view = view;
    this.#judge = judge;
  }

  /** Why a new connection to `host:port` may not be made (the machine read again when stale). */
  async refuse(host: string, port: number): Promise<string | undefined> {
    return this.#verdict(host, port, await this.#view.current());
  }

  /**
   * Why a pooled connection to `host:port` may not be used again: at once while the machine's
   * reading is fresh, else once it was read again.
   */
  refuseReuse(host: string, port: number): string | undefined | Promise<string | undefined> {
    if (this.#view.fresh()) return this.#verdict(host, port, this.#view.latest());
    return this.refuse(host, port);
  }

  /** The verdict against the latest reading, as it stands (no read). */
  refuseNow(host: string, port: number): string | undefined {
    return this.#verdict(host, port, this.#view.latest());
  }

  #verdict(host: string, port: number, machine: LocalMachine): string | undefined {
    if (machine !== this.#reading || this.#cache.size >= MAX_VERDICTS) {
      this.#cache.clear();
      this.#reading = machine;
    }
    const key = `${port} ${host}`;
    if (this.#cache.has(key)) return this.#cache.get(key);
    const verdict = this.#judge(host, port, machine);
    this.#cache.set(key, verdict);
    return verdict;
  }
}
