/**
 * The streams a transport (the `socks5_tls` relay, the `https_tunnel` endpoint) carries, each
 * remembered with the node and the certificate serial it was admitted with, so that a stream ends
 * with its node. Issue 31 found a relay stream and a tunnel stream opened before `hub revoke`
 * still carrying new requests to backends after the api answered that node `node_revoked`: the
 * certificate was checked once, at the handshake, and an edge's pooled SOCKS connections live as
 * long as it keeps using them.
 *
 * - Admission asks one function, `admits(node, serial)` (an active, unrevoked node that is no
 *   door, its certificate current): the hub's fleet trust answers it. An answer that comes after a
 *   revocation look started is asked again, so no stream slips in between a look and its checks.
 * - Each revocation look ({@link NodeStreams.recheck}, told by `revocation.ts` after every look:
 *   on a CRL or node change, and every `revocation.reload_ms` at worst) asks again for every open
 *   stream, once per node and serial, and ends those no longer admitted (`revoked`). An answer that
 *   fails (the trust cannot read its files) is a refusal: a stream is closed rather than carried
 *   on a check that did not happen.
 * - A stream also ends when it has been open `transport.max_stream_seconds` (`lifetime`), so
 *   nothing a check missed outlives that bound; the edge dials a fresh stream for its next
 *   request.
 *
 * How a stream ends is its carrier's: the relay destroys both sockets, the tunnel sends a close
 * frame (1008 revoked, 1001 lifetime) and ends.
 *
 * @module
 */

/** The admission check: true for an active, unrevoked node that is no door, its certificate current. */
export type Admits = (nodeId: string, serial: string) => Promise<boolean>;

/** Why the hub ended a stream. */
export type StreamEnd = "revoked" | "lifetime";

/** What the streams are judged by. */
export interface NodeStreamsOptions {
  /** The admission check (none: every node the CA signed and the node list allows). */
  readonly admits?: Admits;
  /** The longest a stream stays open, in ms (none: no bound). */
  readonly maxLifetimeMs?: number;
}

/** One open stream. */
interface Tracked {
  readonly node: string;
  readonly serial: string;
  readonly end: (why: StreamEnd) => void;
  timer?: ReturnType<typeof setTimeout>;
}

/** The open streams of one carrier, by node and serial. */
export class NodeStreams {
  readonly #options: NodeStreamsOptions;
  readonly #open = new Set<Tracked>();
  readonly #ended: Record<StreamEnd, number> = { revoked: 0, lifetime: 0 };
  /** Rechecks started: an admission that straddles one is asked again. */
  #looks = 0;

  /** @param options the admission check and the stream lifetime */
  constructor(options: NodeStreamsOptions) {
    this.#options = options;
  }

  /**
   * Admits a stream of `node` with certificate `serial` and tracks it until released.
   *
   * @param end how the carrier ends this stream when the hub ends it
   * @returns the release to call once the stream has closed, or none when the node is not admitted
   */
  async open(
    who: { readonly node: string; readonly serial: string },
    end: (why: StreamEnd) => void,
  ): Promise<(() => void) | undefined> {
    for (;;) {
      const looks = this.#looks;
      if (!(await this.#admits(who.node, who.serial))) return undefined;
      if (looks === this.#looks) break;
    }
    const stream: Tracked = { node: who.node, serial: who.serial, end };
    this.#open.add(stream);
    const lifetime = this.#options.maxLifetimeMs;
    if (lifetime !== undefined) {
      stream.timer = setTimeout(() => this.#end(stream, "lifetime"), lifetime);
    }
    return () => this.#release(stream);
  }

  /**
   * Asks again for every open stream (once per node and serial) and ends those whose node is no
   * longer admitted.
   *
   * @returns how many streams it ended
   */
  async recheck(): Promise<number> {
    this.#looks++;
    const asked = new Map<string, Promise<boolean>>();
    const ask = (stream: Tracked) => {
      const key = `${stream.node}\u0000${stream.serial}`;
      let answer = asked.get(key);
      if (!answer) asked.set(key, answer = this.#admits(stream.node, stream.serial));
      return answer;
    };
    const verdicts = await Promise.all(
      [...this.#open].map(async (stream) => ({ stream, admitted: await ask(stream) })),
    );
    let ended = 0;
    for (const { stream, admitted } of verdicts) {
      if (!admitted && this.#end(stream, "revoked")) ended++;
    }
    return ended;
  }

  /** Streams open now, and streams the hub ended since start, by why. */
  counts(): { open: number; ended: Record<StreamEnd, number> } {
    return { open: this.#open.size, ended: { ...this.#ended } };
  }

  /** The admission check; a failure to answer is a refusal. */
  #admits(node: string, serial: string): Promise<boolean> {
    const admits = this.#options.admits;
    if (!admits) return Promise.resolve(true);
    return admits(node, serial).then((admitted) => admitted === true, () => false);
  }

  /** Ends a stream the hub no longer carries; false when it had already gone. */
  #end(stream: Tracked, why: StreamEnd): boolean {
    if (!this.#open.has(stream)) return false;
    this.#release(stream);
    this.#ended[why]++;
    stream.end(why);
    return true;
  }

  #release(stream: Tracked): void {
    clearTimeout(stream.timer);
    this.#open.delete(stream);
  }
}
