/**
 * Who may have a pooled upstream connection right after its exchange: the client connection that
 * just used it, at once; any other client only once it has settled ({@link SETTLE_MS}).
 *
 * An upstream that sends surplus bytes a few milliseconds after a complete response (a second,
 * unsolicited response; a body longer than it said) desynchronises a keep-alive connection: the
 * next request written on it reads those bytes as its own answer, and on the owned reads every
 * later answer on the connection came one behind — another client's answer, so one user could be
 * handed another's page. nginx does the same; HAProxy's `http-reuse safe` keeps a client session's
 * first request off shared connections. Bytes that arrive while a connection sits idle drop it
 * (owned_conns.ts) or are discarded by node's client; the settle time closes the window between
 * handing a connection over and its surplus arriving, for every client but the one whose own
 * exchange the surplus followed.
 *
 * Measured (docs/decisions.md): a settle time for every client made a closed-loop load through one
 * backend dial hundreds of connections a second — settling connections leave the pool short — and
 * cost node's client path about a quarter of its throughput; letting a client take back its own
 * connection at once keeps a keep-alive client on one upstream connection, as before.
 *
 * What it does not close: surplus later than {@link SETTLE_MS} onto a connection taken by then, and
 * surplus reaching the next request of the same client connection (the blast radius is the client
 * whose exchange it followed) — both indistinguishable from the answer to the request just written.
 *
 * @module
 */

/**
 * How long a connection back from an exchange stays out of other clients' reach by default (ms;
 * `egress.reuse_settle_ms`).
 */
export const SETTLE_MS = 10;

/**
 * Request options of node's client: the client connection an upstream request serves (set by the
 * attempt, read by the agent).
 */
export const CLIENT_CONNECTION: unique symbol = Symbol("portcullis.clientConnection");

/** A pooled connection as the rule sees it. */
export interface Settling {
  /** When its last exchange released it (ms, monotonic). */
  readonly releasedAt: number;
  /** The client connection its last exchange served. */
  readonly owner?: object;
}

/**
 * True when `conn` may carry a request of client connection `owner` at `now`, connections settling
 * for `settleMs`.
 */
export function mayTake(
  conn: Settling,
  owner: object | undefined,
  now: number,
  settleMs: number = SETTLE_MS,
): boolean {
  return now - conn.releasedAt >= settleMs || (owner !== undefined && conn.owner === owner);
}

/** The free sockets of a `node:http` agent, by pool name. */
type FreeLists = Record<string, object[] | undefined>;

/** The parts of node's agent this wraps (`addRequest` is not in node's types). */
interface NodeAgent {
  readonly freeSockets: FreeLists;
  keepSocketAlive(socket: object): boolean;
  addRequest(request: object, options: Record<PropertyKey, unknown>): void;
}

/**
 * Gives a `node:http` agent the rule: each socket it keeps alive is timed and remembers the client
 * connection it served; each request it places sees only the free sockets it may take.
 *
 * @param agent the agent (its own methods are wrapped, once, at construction)
 * @param settleMs how long a socket back from an exchange settles
 * @param clock milliseconds, monotonic
 */
export function settleFreeSockets(
  agent: object,
  settleMs: number = SETTLE_MS,
  clock: () => number = () => performance.now(),
): void {
  const node = agent as NodeAgent;
  const owners = new WeakMap<object, object>();
  const freed = new WeakMap<object, Settling>();
  let lastFreed = Number.NEGATIVE_INFINITY;
  const keep = node.keepSocketAlive.bind(node);
  const add = node.addRequest.bind(node);
  node.keepSocketAlive = function keepSettling(socket: object): boolean {
    const kept = keep(socket);
    if (!kept) return kept;
    const request = (socket as { _httpMessage?: object })._httpMessage;
    lastFreed = clock();
    freed.set(socket, { releasedAt: lastFreed, owner: request && owners.get(request) });
    return kept;
  };
  node.addRequest = function addSettled(request, options): void {
    const owner = options[CLIENT_CONNECTION] as object | undefined;
    if (owner) owners.set(request, owner);
    const now = clock();
    if (now - lastFreed >= settleMs) return add(request, options);
    const may = (socket: object) => mayTake(freed.get(socket) ?? SETTLED, owner, now, settleMs);
    hidden(node.freeSockets, may, () => add(request, options));
  };
}

/** A socket the rule never saw go free (kept before it was wrapped). */
const SETTLED: Settling = { releasedAt: Number.NEGATIVE_INFINITY };

/**
 * Runs `pick` (the agent's `addRequest`) with every free socket `may` refuses out of `free`, then
 * puts those back at the newest end of their lists.
 */
function hidden(free: FreeLists, may: (socket: object) => boolean, pick: () => void): void {
  const held: [string, object[]][] = [];
  for (const [name, list] of Object.entries(free)) {
    if (!list || list.every(may)) continue;
    held.push([name, list.filter((socket) => !may(socket))]);
    const rest = list.filter(may);
    if (rest.length > 0) free[name] = rest;
    else delete free[name];
  }
  try {
    pick();
  } finally {
    for (const [name, settling] of held) free[name] = [...(free[name] ?? []), ...settling];
  }
}
