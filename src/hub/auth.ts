/**
 * How a node proves who it is to the hub: a client certificate chained to the hub's client CA whose
 * only CN is exactly the node id (mutual TLS; the TLS layer has already refused any other chain),
 * or — where the hub has no TLS — a bearer token equal to the contents of
 * `<tokens_dir>/<node_id>.token`. An unknown node and a wrong token get the same answer, after the
 * same work.
 *
 * Why tokens are not read per request: reading `<node_id>.token` when a request asks for it makes
 * the answer's time say whether the file exists. Measured on two busy cores (issue 14, 1,000
 * interleaved pairs a round): an unknown node answered 10–30 µs slower than a known node with a
 * wrong token (the NotFound error costs more than the read), every round — enough to enumerate node
 * ids. So the folder is read whole into a {@link TokenBook} of HMAC digests, and a request does the
 * same thing whatever node it names: one `stat` of the folder, one HMAC of the token it presented,
 * one constant-time comparison of two 32-byte digests — the node's, or a dummy's made at start for
 * nodes that have none. `tests/hub_auth_timing_test.ts` holds the two kinds of answer to a
 * signed-rank test.
 *
 * Why the certificate's subject is read from its DER: a subject may carry several CNs (`/CN=edge-1
 * /CN=edge-2`), and taking the first let such a certificate act as `edge-1`. A certificate must
 * name exactly one CN, and it must equal the node id character for character (no trimming, no case
 * folding: `EDGE-1`, `edge-1.`, `edge-1 ` and `edge-1\0` are other names).
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { TLSSocket } from "node:tls";
import { readRootedText, RootedReadError } from "../config/rooted_read.ts";
import { describeIoError } from "../config/yaml_file.ts";
import type { FailureKind } from "../request/errors.ts";
import { peerSerial } from "./revocation.ts";

/** The outcome of authenticating one request: accepted, or the failure to answer with. */
export type AuthResult =
  | {
    readonly ok: true;
    /** Whether the credential this request presented has been revoked since (held polls ask). */
    readonly revoked?: () => Promise<boolean>;
    /** The client certificate it presented (mutual TLS): renewal judges its serial and end. */
    readonly certificate?: { readonly serial: string; readonly notAfter: Date };
  }
  | { readonly ok: false; readonly kind: AuthFailure };

/** How the hub refuses a node; status and message are in the failure table (request/errors.ts). */
export type AuthFailure = Extract<
  FailureKind,
  "unauthenticated" | "wrong_node" | "ambiguous_certificate" | "node_revoked"
>;

/** Authenticates a request that says it comes from `nodeId`. */
export type NodeAuthenticator = (request: IncomingMessage, nodeId: string) => Promise<AuthResult>;

/** A node id as a file name may carry it (the schema's rule for `node_id`). */
export const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** A refusal, as {@link AuthResult} spells one. */
type Refusal = Extract<AuthResult, { ok: false }>;

const REFUSED: Refusal = { ok: false, kind: "unauthenticated" };
const WRONG_NODE: Refusal = { ok: false, kind: "wrong_node" };
const AMBIGUOUS: Refusal = { ok: false, kind: "ambiguous_certificate" };
const REVOKED: Refusal = { ok: false, kind: "node_revoked" };

/** What a certificate check consults: the fleet CA's revocations (none: nothing is revoked). */
export interface RevocationCheck {
  isRevoked(serial: string): boolean;
  /**
   * The node's standing, then the serial (hub/node_standing.ts): registered, not revoked, the
   * serial its current incarnation's. Absent: the CRL alone decides.
   */
  judge?(nodeId: string, serial: string): Promise<"ok" | "revoked" | "unknown">;
  /**
   * For the relay and the tunnel: an active, unrevoked node that is no door, its certificate of
   * its current incarnation and not in the CRL (hub/node_standing.ts).
   */
  admitsTransport?(nodeId: string, serial: string): Promise<boolean>;
}

/**
 * Mutual TLS: the peer certificate's one CN must be the node id, exactly, and its serial must not
 * be revoked; with the fleet CA the node's standing is asked first (a revoked node, or a
 * certificate of an earlier incarnation, is `node_revoked`; a serial the CA never issued the node
 * is `unauthenticated`). A revoked certificate still proves who holds it, so its holder is told
 * `node_revoked` (and nobody else can get that answer).
 */
export function certificateAuth(revocations?: RevocationCheck): NodeAuthenticator {
  return function authenticateCertificate(request, nodeId) {
    const node = certificateNode(request.socket as TLSSocket, revocations);
    if (!node.ok) return Promise.resolve(node);
    if (node.node !== nodeId) return Promise.resolve(WRONG_NODE);
    return standingOf(node, revocations);
  };
}

/** An authenticated certificate's node judged by its standing, and how to judge it again. */
async function standingOf(
  node: { readonly node: string; readonly serial: string; readonly notAfter: Date },
  revocations: RevocationCheck | undefined,
): Promise<AuthResult> {
  const judge = () => revocations?.judge?.(node.node, node.serial) ?? Promise.resolve("ok");
  const verdict = await judge();
  if (verdict === "revoked") return REVOKED;
  if (verdict === "unknown") return REFUSED;
  const revoked = async () =>
    (revocations?.isRevoked(node.serial) ?? false) || (await judge()) !== "ok";
  return { ok: true, revoked, certificate: { serial: node.serial, notAfter: node.notAfter } };
}

/**
 * The node a mutual-TLS connection is from: the one CN of a certificate the client CA signed, as
 * {@link certificateAuth} reads it. For connections that name no node of their own (the SOCKS
 * relay): the certificate says who it is, and the caller applies `api.nodes`.
 *
 * @param socket a TLS socket whose handshake has finished
 * @returns the node id, or why there is none (no chain to the CA; not exactly one CN)
 */
export function certificateNode(
  socket: TLSSocket,
  revocations?: RevocationCheck,
):
  | { readonly ok: true; readonly node: string; readonly serial: string; readonly notAfter: Date }
  | Refusal {
  if (!socket.authorized) return REFUSED;
  const raw = socket.getPeerCertificate()?.raw;
  const names = commonNamesOf(raw);
  if (names.length !== 1) return AMBIGUOUS;
  const serial = peerSerial(raw);
  if (revocations?.isRevoked(serial)) return REVOKED;
  return { ok: true, node: names[0], serial, notAfter: notAfterOf(raw) };
}

/** When a certificate given as DER expires (the epoch when it does not parse). */
function notAfterOf(der: Uint8Array | undefined): Date {
  try {
    return new x509.X509Certificate(Uint8Array.from(der!)).notAfter;
  } catch {
    return new Date(0);
  }
}

/**
 * Every CN of a certificate's subject, in order, as encoded: several RDNs or a multi-valued RDN
 * give several; a value of a type that is not a string comes back as `#` and its hex (never a
 * node id).
 *
 * @param der the certificate, DER encoded
 * @returns the CNs; none when `der` is absent or does not parse
 */
export function commonNamesOf(der: Uint8Array | undefined): string[] {
  if (!der || der.byteLength === 0) return [];
  try {
    const subject = new x509.X509Certificate(Uint8Array.from(der)).subjectName.toJSON();
    return subject.flatMap((rdn) => rdn.CN ?? []);
  } catch {
    return [];
  }
}

/** A token authenticator: the whole check from a request, and the check of a token already taken. */
export interface TokenAuthenticator extends NodeAuthenticator {
  /**
   * Whether `token` is `nodeId`'s (what the api's `bearerAuth` asks once it has taken the token
   * from the header): the same work for any node id, known or not.
   */
  readonly verify: (nodeId: string, token: string) => Promise<AuthResult>;
}

/** A token as RFC 6750 §2.1 spells one (`b64token`), as `Authorization: Bearer` may carry it. */
export const BEARER_TOKEN = /^[A-Za-z0-9._~+/-]+=*$/;

/** Tokens longer than this authenticate nobody (the hub's own are 64 characters). */
const MAX_TOKEN = 1024;

/**
 * Token files: `Authorization: Bearer <token>` must equal `<dir>/<node_id>.token` (trimmed). Each
 * file is read rooted in `dir` as a secret (config/rooted_read.ts): one that links out of the
 * folder, that group or others may read (mode other than 0600/0400), or whose token is no RFC 6750
 * bearer token authenticates nobody (logged once). Files are read into a {@link TokenBook}, never
 * on behalf of one request.
 *
 * @param dir the tokens folder
 * @param options where refused token files are logged
 */
export function tokenAuth(
  dir: string,
  options: { readonly log?: (line: string) => void } = {},
): TokenAuthenticator {
  const book = new TokenBook(dir, options.log ?? (() => {}));
  const verify = async function verifyToken(nodeId: string, token: string): Promise<AuthResult> {
    const entry = await book.lookup(nodeId);
    const presented = book.digest(token);
    const same = timingSafeEqual(presented, entry.digest);
    // Always a second comparison, against the node's last removed token or the dummy's.
    const retired = timingSafeEqual(presented, entry.retired);
    if (token.length > MAX_TOKEN) return REFUSED;
    if (same && entry.known) {
      const revoked = async () => {
        const now = await book.lookup(nodeId);
        return now.wasKnown && timingSafeEqual(now.retired, presented);
      };
      return { ok: true, revoked };
    }
    return retired && entry.wasKnown ? REVOKED : REFUSED;
  };
  const authenticateToken = async (request: IncomingMessage, nodeId: string) => {
    const header = request.headers.authorization ?? "";
    const match = /^Bearer (\S+)$/.exec(header);
    const token = match && BEARER_TOKEN.test(match[1]) ? match[1] : undefined;
    const result = await verify(nodeId, token ?? "");
    return token === undefined ? REFUSED : result;
  };
  return Object.assign(authenticateToken, { verify });
}

/** Reads one node's token file: rooted in the folder, a secret, at most 4 KiB, trimmed. */
async function readTokenFile(dir: string, nodeId: string): Promise<string> {
  return (await readRootedText(dir, `${nodeId}.token`, { maxBytes: 4096, secret: true })).trim();
}

/** A folder read that is re-read at least this often, so a token rewritten in place is seen. */
const REREAD_MS = 1000;

/**
 * A folder changed this recently may change again within the same mtime tick (file times come from
 * a coarse clock): a read made so soon after is not trusted, and the next request reads again.
 */
const RACY_MS = 100;

/**
 * The tokens folder, held as HMAC-SHA-256 digests under a key made at start (the tokens themselves
 * are not kept). A lookup stats the folder and reads it again only when its mtime changed (a token
 * file added, removed or renamed into place), when the last read was too close to a change to
 * trust, or after {@link REREAD_MS}: what triggers a read is the folder, never the node a request
 * names. Concurrent lookups that see the same folder share one read.
 */
class TokenBook {
  readonly #dir: string;
  readonly #log: (line: string) => void;
  readonly #key = crypto.getRandomValues(new Uint8Array(32));
  /** What a node without a token is compared against: the digest of a random token. */
  readonly #dummy: Uint8Array;
  #digests = new Map<string, Uint8Array>();
  /**
   * Each node's token removed (or replaced) since start, and those `hub revoke` moved to
   * `<tokens_dir>/revoked/` (read once, at the first read, so a restarted hub remembers them):
   * presenting one is `node_revoked`, an answer only a holder of the token can get. A token file
   * deleted by hand is remembered only until the hub restarts.
   */
  readonly #retired = new Map<string, Uint8Array>();
  #read?: { readonly mtime: number; readonly at: number; readonly seq: number };
  #pending?: { readonly mtime: number; readonly done: Promise<void> };
  #started = 0;
  /** What the last read refused, so each refusal is logged once while it lasts. */
  #refusals = new Set<string>();

  /**
   * @param dir the tokens folder
   * @param log where refused token files are reported (each once while it lasts)
   */
  constructor(dir: string, log: (line: string) => void) {
    this.#dir = dir;
    this.#log = log;
    const random = crypto.getRandomValues(new Uint8Array(32));
    this.#dummy = this.digest(Array.from(random, (b) => b.toString(16).padStart(2, "0")).join(""));
  }

  /** The keyed digest of a secret (32 bytes), the same work for any secret of a given length. */
  digest(secret: string): Uint8Array {
    return new Uint8Array(createHmac("sha256", this.#key).update(secret).digest());
  }

  /**
   * The node's digest, or the dummy's (`known: false`), and its last removed token's digest, or
   * the dummy's (`wasKnown: false`) — after the same work either way.
   */
  async lookup(
    nodeId: string,
  ): Promise<{ digest: Uint8Array; known: boolean; retired: Uint8Array; wasKnown: boolean }> {
    await this.#refresh();
    const digest = this.#digests.get(nodeId);
    const retired = this.#retired.get(nodeId);
    return {
      digest: digest ?? this.#dummy,
      known: digest !== undefined,
      retired: retired ?? this.#dummy,
      wasKnown: retired !== undefined,
    };
  }

  async #refresh(): Promise<void> {
    const mtime = await Deno.stat(this.#dir).then((info) => info.mtime?.getTime() ?? 0, () => -1);
    const read = this.#read;
    const now = Date.now();
    if (read && read.mtime === mtime && now - read.at < REREAD_MS && read.at - mtime > RACY_MS) {
      return;
    }
    if (this.#pending?.mtime !== mtime) {
      const pending = { mtime, done: this.#readFolder(mtime) };
      this.#pending = pending;
      pending.done.then(() => {
        if (this.#pending === pending) this.#pending = undefined;
      });
    }
    await this.#pending!.done;
  }

  /** Reads every `<node_id>.token`; never throws (an unreadable folder holds no tokens). */
  async #readFolder(mtime: number): Promise<void> {
    const seq = ++this.#started;
    const at = Date.now();
    const digests = new Map<string, Uint8Array>();
    const refusals: string[] = [];
    try {
      for await (const entry of Deno.readDir(this.#dir)) {
        const nodeId = entry.name.endsWith(".token") ? entry.name.slice(0, -".token".length) : "";
        if (!NODE_ID.test(nodeId)) continue;
        try {
          const token = await readTokenFile(this.#dir, nodeId);
          if (token.length > 0 && !BEARER_TOKEN.test(token)) {
            refusals.push(
              `${nodeId}.token holds characters a bearer token cannot carry (RFC 6750: ` +
                `A-Z a-z 0-9 . _ ~ + / - then = padding); node "${nodeId}" cannot authenticate`,
            );
          } else if (token.length > 0) digests.set(nodeId, this.digest(token));
        } catch (error) {
          // Removed since the listing: the folder's mtime changed, so the next request reads again.
          if (error instanceof RootedReadError && error.reason === "missing") continue;
          refusals.push(`${(error as Error).message}; node "${nodeId}" cannot authenticate`);
        }
      }
    } catch (error) {
      refusals.push(`Cannot read the tokens folder: ${describeIoError(error)}; no node can`);
    }
    if (this.#read && this.#read.seq > seq) return; // a later read finished first
    if (!this.#read) await this.#readRevoked(refusals);
    for (const [nodeId, before] of this.#digests) {
      const now = digests.get(nodeId);
      if (!now || !timingSafeEqual(now, before)) this.#retired.set(nodeId, before);
    }
    this.#digests = digests;
    this.#read = { mtime, at, seq };
    for (const refusal of refusals) {
      if (!this.#refusals.has(refusal)) {
        this.#log(`portcullis: hub tokens in ${this.#dir}: ${refusal}`);
      }
    }
    this.#refusals = new Set(refusals);
  }

  /** Reads `revoked/<node_id>.token` (what `hub revoke` moved there) into the retired digests. */
  async #readRevoked(refusals: string[]): Promise<void> {
    const folder = `${this.#dir}/${REVOKED_FOLDER}`;
    try {
      for await (const entry of Deno.readDir(folder)) {
        const nodeId = entry.name.endsWith(".token") ? entry.name.slice(0, -".token".length) : "";
        if (!NODE_ID.test(nodeId) || this.#retired.has(nodeId)) continue;
        try {
          this.#retired.set(nodeId, this.digest(await readTokenFile(folder, nodeId)));
        } catch (error) {
          refusals.push(`${(error as Error).message}; a revoked token of "${nodeId}" is unread`);
        }
      }
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) {
        refusals.push(`Cannot read ${folder}: ${describeIoError(error)}`);
      }
    }
  }
}

/** Where `hub revoke` keeps the tokens it revoked, inside the tokens folder. */
export const REVOKED_FOLDER = "revoked";
