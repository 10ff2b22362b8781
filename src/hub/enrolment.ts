/**
 * Node certificates from the fleet CA: `POST /v1/nodes/register` turns a one-time node secret (made
 * by `portcullis hub add-node`) and a certificate request into a certificate; `POST
 * /v1/nodes/renew` gives a node holding a valid, unrevoked certificate a new one for a new key.
 *
 * Every refusal of a registration is the same answer (403 `registration_refused`): a wrong, spent
 * or unknown secret, a node type other than the one the secret was made for, and a request the CA
 * will not sign (a CN other than the node id, extra names, a weak key) all read alike, so the
 * answer says nothing about which secrets exist. The hub's log says which it was.
 *
 * A secret is spent by the first registration that presents it rightly, whatever becomes of the
 * request after: a secret copied off the wire or the disk cannot then be tried against several
 * requests, and the operator makes a new one (`add-node`) when an edge sent a bad one.
 *
 * @module
 */
import type { IncomingMessage } from "node:http";
import * as v from "valibot";
import { failureReply } from "../request/errors.ts";
import { jsonReply, type Reply } from "../request/reply.ts";
import { issuedFor, type Issuer, signNodeCsr } from "../trust/ca.ts";
import type { NodeSecrets } from "../trust/node_secrets.ts";
import { NODE_ID } from "./auth.ts";

/** Bodies are a node id, a type, a secret and a PEM request: a few KiB at most. */
const MAX_BODY = 32 * 1024;
/** A longer body is read and dropped up to this size, then the connection is cut. */
const DRAIN_CAP = 1024 * 1024;

/** `POST /v1/nodes/register`'s body; what the strings hold is checked by {@link Enrolment.register}. */
export const RegisterBody = v.object({
  node_id: v.string(),
  node_type: v.string(),
  csr: v.string(),
  secret: v.string(),
});

/** `POST /v1/nodes/renew`'s body. */
export const RenewBody = v.object({ node_id: v.string(), csr: v.string() });

/** What signing needs. */
export interface EnrolmentOptions {
  readonly issuer: Issuer;
  readonly secrets: NodeSecrets;
  readonly lifetimeDays: number;
  readonly log: (line: string) => void;
}

/** The hub's registration and renewal of node certificates. */
export class Enrolment {
  readonly #options: EnrolmentOptions;

  /** @param options the issuer, the node secrets, the certificates' lifetime, the log */
  constructor(options: EnrolmentOptions) {
    this.#options = options;
  }

  /** `POST /v1/nodes/register`: `{node_id, node_type, csr, secret}` → `{certificate, ca}`. */
  async register(body: v.InferOutput<typeof RegisterBody>, requestId: string): Promise<Reply> {
    const nodeId = body.node_id;
    const nodeType = body.node_type;
    const refuse = (why: string) => {
      this.#options.log(`portcullis: hub: registration of node ${quote(nodeId)} refused: ${why}`);
      return failureReply("registration_refused", requestId);
    };
    // The secret first, the same work for any node id (the secrets compare digests).
    const spent = await this.#options.secrets.consume(
      NODE_ID.test(nodeId) ? nodeId : "",
      body.secret,
    );
    if (!spent.ok) return refuse("no unspent secret matches");
    if (nodeType !== spent.nodeType) {
      return refuse(`the secret was made for a ${spent.nodeType}, not a ${quote(nodeType)}`);
    }
    const signed = await this.#sign(nodeId, spent.nodeType, body.csr);
    if (!signed.ok) return refuse(`${signed.reason}: ${signed.detail} (the secret is spent)`);
    this.#options.log(
      `portcullis: hub: registered ${spent.nodeType} ${nodeId} (certificate ${signed.serial}, ` +
        `until ${signed.notAfter.toISOString()})`,
    );
    return this.#answer(signed);
  }

  /**
   * `POST /v1/nodes/renew` from a node already authenticated as `nodeId` by a valid, unrevoked
   * certificate: `{node_id, csr}` → `{certificate, ca}`, for the node type it was registered as.
   */
  async renew(
    body: v.InferOutput<typeof RenewBody>,
    requestId: string,
    nodeId: string,
  ): Promise<Reply> {
    const issued = await issuedFor(this.#options.issuer.files.dir, nodeId).catch(() => []);
    const nodeType = issued.at(-1)?.nodeType;
    if (body.node_id !== nodeId || (nodeType !== "edge" && nodeType !== "door")) {
      this.#options.log(`portcullis: hub: renewal for ${nodeId} refused: not a node the CA issued`);
      return failureReply("renewal_refused", requestId);
    }
    const signed = await this.#sign(nodeId, nodeType, body.csr);
    if (!signed.ok) {
      this.#options.log(
        `portcullis: hub: renewal for ${nodeId} refused: ${signed.reason}: ${signed.detail}`,
      );
      return failureReply("renewal_refused", requestId);
    }
    this.#options.log(
      `portcullis: hub: renewed ${nodeId} (certificate ${signed.serial}, until ` +
        `${signed.notAfter.toISOString()})`,
    );
    return this.#answer(signed);
  }

  #sign(nodeId: string, nodeType: "edge" | "door", csrPem: string) {
    const { issuer, lifetimeDays } = this.#options;
    return signNodeCsr(issuer, { csrPem, nodeId, nodeType, lifetimeDays });
  }

  #answer(signed: { chainPem: string; serial: string; notAfter: Date }): Reply {
    return jsonReply({
      certificate: signed.chainPem,
      ca: this.#options.issuer.rootPem,
      serial: signed.serial,
      not_after: signed.notAfter.toISOString(),
    });
  }
}

/** A node id for the log: quoted, and cut short when it is no node id. */
function quote(value: string): string {
  return JSON.stringify(value.slice(0, 64));
}

/**
 * The request's body as a JSON object: at most {@link MAX_BODY} bytes, or none (too long, not
 * JSON, not an object). Reading stops at the limit.
 */
export async function readJsonBody(
  request: IncomingMessage,
): Promise<Record<string, unknown> | undefined> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Uint8Array).byteLength;
    // Past the limit the rest is read and dropped (so the refusal can be answered), up to a cap
    // beyond which the connection is cut.
    if (size > DRAIN_CAP) {
      request.destroy();
      return undefined;
    }
    if (size <= MAX_BODY) chunks.push(chunk as Uint8Array);
  }
  if (size > MAX_BODY) return undefined;
  try {
    const value = JSON.parse(new TextDecoder().decode(concat(chunks, size)));
    return typeof value === "object" && value !== null && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

function concat(chunks: readonly Uint8Array[], size: number): Uint8Array {
  const all = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    all.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return all;
}
