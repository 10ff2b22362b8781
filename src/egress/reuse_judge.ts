/**
 * A pooled upstream connection is judged again before every reuse, for `node:http`'s pool: the
 * destination check that every new connection passes (reach_verdicts.ts says why a kept-
 * alive connection must pass it again) runs before node may hand a request one of its free
 * sockets. Refused, every free socket to that destination is destroyed, and node dials — which the
 * same check refuses, with its sentence and its failure kind.
 *
 * The connections the gateway reads itself (owned_conns.ts) are judged in `WayAgent.takeOwned`
 * (agents.ts); both pools are swept by {@link dropFreeSockets} and `OwnedConns.closeIdle` when a
 * machine reading changes.
 *
 * @module
 */

/** A destination as the agents dial it (agents.ts `Target`). */
interface Destination {
  readonly host: string;
  readonly port: number;
}

/** Why `host:port` may not be used again: at once, or once the machine was read again. */
export type ReuseCheck = (
  host: string,
  port: number,
) => string | undefined | Promise<string | undefined>;

/** The free sockets of a `node:http` agent, by pool name. */
type FreeLists = Record<string, object[] | undefined>;

/** The parts of node's agent this wraps (`addRequest` is not in node's types). */
interface NodeAgent {
  readonly freeSockets: FreeLists;
  addRequest(request: object, options: Record<PropertyKey, unknown>): void;
}

/**
 * Judges the destination of each request a `node:http` agent places before it may take a free
 * socket (wrapping the agent's `addRequest`, once, at construction).
 *
 * @param agent the agent
 * @param check the reuse check (egress.ts: `DestinationVerdicts.refuseReuse`)
 * @param destinationOf the destination a socket was made for (undefined: not the agent's own)
 */
export function judgeFreeSockets(
  agent: object,
  check: ReuseCheck,
  destinationOf: (socket: object) => Destination | undefined,
): void {
  const node = agent as NodeAgent;
  const add = node.addRequest.bind(node);
  node.addRequest = function addJudged(request, options): void {
    const host = String(options.host ?? "");
    const port = Number(options.port ?? 80);
    const verdict = check(host, port);
    if (!(verdict instanceof Promise)) return placed(verdict);
    verdict.then(placed, () => placed(undefined));

    function placed(refusal: string | undefined): void {
      if (refusal !== undefined) {
        dropFreeSockets(node.freeSockets, (socket) => {
          const made = destinationOf(socket);
          return made !== undefined && made.host === host && made.port === port;
        });
      }
      // Given up while the machine was read: node never saw it.
      if ((request as { destroyed?: boolean }).destroyed) return;
      add(request, options);
    }
  };
}

/**
 * Destroys every free socket `drop` picks and takes it out of its list.
 *
 * @returns how many were destroyed
 */
export function dropFreeSockets(free: FreeLists, drop: (socket: object) => boolean): number {
  let dropped = 0;
  for (const [name, list] of Object.entries(free)) {
    if (!list || !list.some(drop)) continue;
    const kept = list.filter((socket) => !drop(socket));
    for (const socket of list) {
      if (kept.includes(socket)) continue;
      (socket as { destroy(): void }).destroy();
      dropped++;
    }
    if (kept.length > 0) free[name] = kept;
    else delete free[name];
  }
  return dropped;
}
