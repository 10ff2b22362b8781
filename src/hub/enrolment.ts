/**
 * Node certificates from the fleet CA: `POST /v1/nodes/register` turns a one-time node secret (made
 * by `portcullis hub add-node`) and a certificate request into a certificate; `POST
 * /v1/nodes/renew` gives a node holding a valid certificate of its current incarnation a new one
 * for a new key, within limits.
 *
 * Every refusal of a registration is the same answer (403 `registration_refused`): a wrong, spent
 * or unknown secret, a node type other than the one the secret was made for, a node registered
 * already or revoked, and a request the CA will not sign (a CN other than the node id, extra
 * names, a weak key) all read alike, so the answer says nothing about which secrets exist. The
 * hub's log says which it was.
 *
 * A secret is spent by the first registration that presents it rightly, whatever becomes of the
 * request after: a secret copied off the wire or the disk cannot then be tried against several
 * requests. The registration it bought can be asked again, with the same secret and the same key,
 * for `ca.registration_retry_seconds`, and gets the same certificate (trust/spent_secrets.ts says
 * why this and not a secret spent at first use); another key, a revoked node, or a later ask is
 * refused.
 *
 * The node's type and incarnation come from the secret and are written to `nodes/<node_id>.json`
 * at registration; a renewal reads them from there, never from a certificate's record. Renewal is
 * refused to a revoked node (`node_revoked`), and answered only while the certificate presented has
 * at most `ca.renew_before_days` left and the node was issued none in the last
 * `ca.renew_interval_seconds` (429 `renewal_too_early`, Retry-After).
 *
 * Each registration and renewal runs one at a time per node and reads the node's standing from
 * disk twice: before signing, and after the serial is recorded — a revocation written between the
 * two withholds the certificate. node_standing.ts proves why no certificate then escapes the
 * revocation. A registration is serialized from before its secret is consumed: one asked again
 * while the first is still being issued (twelve at once with one key refused seven, found in an
 * attack on issue 31) waits for it and then gets the same certificate from the retry record the
 * first wrote; with another key it is refused, so one secret still buys one certificate.
 *
 * @module
 */
import * as v from "valibot";
import { failureReply } from "../request/errors.ts";
import { jsonReply, type Reply } from "../request/reply.ts";
import { certificateNotAfter, type Issuer, signNodeCsr } from "../trust/ca.ts";
import { csrKeySha256 } from "../trust/csr.ts";
import {
  isRevokedBy,
  type NodeEntry,
  readRevokedMarker,
  writeNodeEntry,
} from "../trust/node_registry.ts";
import type { NodeSecrets } from "../trust/node_secrets.ts";
import { sha256Hex, type SpentSecret, writeSpent } from "../trust/spent_secrets.ts";
import { NODE_ID } from "./auth.ts";
import type { CaSettings } from "./config.ts";
import type { NodeStanding } from "./node_standing.ts";

export { readJsonBody } from "./json_body.ts";

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
  readonly standing: NodeStanding;
  /** The CA's settings: lifetime, renewal window and interval, retry window. */
  readonly limits: CaSettings;
  readonly log: (line: string) => void;
}

/** A certificate signed for an answer. */
interface Signed {
  readonly chainPem: string;
  readonly serial: string;
  readonly notAfter: Date;
}

const DAY_MS = 86_400_000;

/** The hub's registration and renewal of node certificates. */
export class Enrolment {
  readonly #options: EnrolmentOptions;

  /** @param options the issuer, the node secrets, the standing, the CA's limits, the log */
  constructor(options: EnrolmentOptions) {
    this.#options = options;
  }

  /** `POST /v1/nodes/register`: `{node_id, node_type, csr, secret}` → `{certificate, ca}`. */
  async register(body: v.InferOutput<typeof RegisterBody>, requestId: string): Promise<Reply> {
    const nodeId = body.node_id;
    const refuse = (why: string) => {
      this.#options.log(`portcullis: hub: registration of node ${quote(nodeId)} refused: ${why}`);
      return failureReply("registration_refused", requestId);
    };
    // One registration of a node at a time, from before its secret is consumed: one asked again
    // while the first is still being issued waits for it, and then finds its retry record.
    if (!NODE_ID.test(nodeId)) return await this.#consumeAndRegister("", body, refuse);
    return await this.#options.standing.serialized(
      nodeId,
      () => this.#consumeAndRegister(nodeId, body, refuse),
    );
  }

  /** Consumes the secret, then registers the node, or answers a retry, or refuses (serialized). */
  async #consumeAndRegister(
    nodeId: string,
    body: v.InferOutput<typeof RegisterBody>,
    refuse: (why: string) => Reply,
  ): Promise<Reply> {
    // The secret first, the same work for any node id (the secrets compare digests).
    const spent = await this.#options.secrets.consume(nodeId, body.secret);
    if (!spent.ok) {
      if (spent.spent) return await this.#again(spent.spent, body, refuse);
      return refuse("no unspent secret matches");
    }
    const nodeType = body.node_type;
    if (nodeType !== spent.nodeType) {
      return refuse(`the secret was made for a ${spent.nodeType}, not a ${quote(nodeType)}`);
    }
    const entry: NodeEntry = {
      nodeId,
      nodeType: spent.nodeType,
      incarnation: spent.incarnation,
      registeredAt: new Date().toISOString(),
    };
    return await this.#registerNode(entry, body, refuse);
  }

  /** Registers a node whose secret was just spent: checks, signs, records, checks again. */
  async #registerNode(
    entry: NodeEntry,
    body: v.InferOutput<typeof RegisterBody>,
    refuse: (why: string) => Reply,
  ): Promise<Reply> {
    const { standing, limits } = this.#options;
    const nodeId = entry.nodeId;
    const before = await standing.readOnDisk(nodeId);
    if (before.marker && before.marker.incarnation >= entry.incarnation) {
      return refuse("the node is revoked; re-provision it (hub add-node --reprovision)");
    }
    if (before.entry && before.entry.incarnation >= entry.incarnation) {
      return refuse(
        `the node is registered already (incarnation ${before.entry.incarnation}); revoke it, ` +
          "then re-provision it",
      );
    }
    const signed = await this.#sign(entry, body.csr);
    if (!signed.ok) return refuse(`${signed.reason}: ${signed.detail} (the secret is spent)`);
    await writeNodeEntry(limits.files.nodesDir, entry);
    await standing.noteIssue(entry, { ...signed, issuedAt: new Date() });
    // Kept before the answer: a retry finds it even if this hub stops before answering.
    await this.#remember(entry, body, signed);
    const after = await readRevokedMarker(limits.files.revokedDir, nodeId);
    if (after && after.incarnation >= entry.incarnation) {
      return refuse(`revoked while it registered; certificate ${signed.serial} withheld`);
    }
    this.#options.log(
      `portcullis: hub: registered ${entry.nodeType} ${nodeId} (certificate ${signed.serial}, ` +
        `incarnation ${entry.incarnation}, until ${signed.notAfter.toISOString()})`,
    );
    return this.#answer(signed);
  }

  /** Keeps what a retry of this registration may get again, while its window lasts. */
  async #remember(
    entry: NodeEntry,
    body: v.InferOutput<typeof RegisterBody>,
    signed: Signed,
  ): Promise<void> {
    const { limits, log } = this.#options;
    const keySha256 = await csrKeySha256(body.csr);
    if (limits.retryWindowMs <= 0 || !keySha256) return;
    await writeSpent(limits.files.secretsDir, {
      nodeId: entry.nodeId,
      nodeType: entry.nodeType,
      incarnation: entry.incarnation,
      secretSha256: await sha256Hex(body.secret),
      keySha256,
      serial: signed.serial,
      certificate: signed.chainPem,
      until: new Date(Date.now() + limits.retryWindowMs).toISOString(),
    }).catch((error) =>
      log(`portcullis: hub: cannot keep ${entry.nodeId}'s registration for a retry: ${error}`)
    );
  }

  /**
   * A registration asked again with a secret already spent: the same certificate for the same
   * key, while the node is neither revoked nor provisioned again since. Runs inside the node's
   * serialized registration ({@link register}).
   */
  async #again(
    record: SpentSecret,
    body: v.InferOutput<typeof RegisterBody>,
    refuse: (why: string) => Reply,
  ): Promise<Reply> {
    const nodeId = record.nodeId;
    const key = await csrKeySha256(body.csr);
    if (body.node_type !== record.nodeType || key !== record.keySha256) {
      return refuse("the secret was spent by a registration with another key (or type)");
    }
    const now = await this.#options.standing.readOnDisk(nodeId);
    const judged = this.#options.standing.listed(record.serial)
      ? "revoked"
      : await this.#options.standing.judge(nodeId, record.serial);
    if (now.revoked || now.entry?.incarnation !== record.incarnation || judged !== "ok") {
      return refuse("the secret was spent, and the node was revoked or provisioned again since");
    }
    this.#options.log(
      `portcullis: hub: registration of ${nodeId} asked again with the same key: certificate ` +
        `${record.serial} answered again`,
    );
    const notAfter = certificateNotAfter(record.certificate);
    return this.#answer({ chainPem: record.certificate, serial: record.serial, notAfter });
  }

  /**
   * `POST /v1/nodes/renew` from a node authenticated as `nodeId` by `presented`, a certificate of
   * its current incarnation: `{node_id, csr}` → `{certificate, ca}`, for the type it registered as.
   */
  async renew(
    body: v.InferOutput<typeof RenewBody>,
    requestId: string,
    nodeId: string,
    presented: { readonly serial: string; readonly notAfter: Date } | undefined,
  ): Promise<Reply> {
    const refuse = (kind: "renewal_refused" | "node_revoked", why: string) => {
      this.#options.log(`portcullis: hub: renewal for ${nodeId} refused: ${why}`);
      return failureReply(kind, requestId);
    };
    if (body.node_id !== nodeId || !presented) {
      return refuse("renewal_refused", "the body names another node, or no certificate");
    }
    return await this.#options.standing.serialized(nodeId, async () => {
      const { standing, limits } = this.#options;
      const disk = await standing.readOnDisk(nodeId);
      if (!disk.entry) return refuse("renewal_refused", "not a node the CA registered");
      if (disk.revoked) return refuse("node_revoked", "the node is revoked");
      if ((await standing.judge(nodeId, presented.serial)) !== "ok") {
        return refuse("node_revoked", `certificate ${presented.serial} is not of its incarnation`);
      }
      const wait = this.#wait(nodeId, presented.notAfter);
      if (wait) {
        this.#options.log(`portcullis: hub: renewal for ${nodeId} too early: ${wait.why}`);
        const retry = String(Math.max(1, Math.ceil(wait.ms / 1000)));
        return failureReply("renewal_too_early", requestId, { headers: { "retry-after": retry } });
      }
      const signed = await this.#sign(disk.entry, body.csr);
      if (!signed.ok) return refuse("renewal_refused", `${signed.reason}: ${signed.detail}`);
      await standing.noteIssue(disk.entry, { ...signed, issuedAt: new Date() });
      const after = await readRevokedMarker(limits.files.revokedDir, nodeId);
      if (isRevokedBy(disk.entry, after)) {
        return refuse("node_revoked", `revoked meanwhile; certificate ${signed.serial} withheld`);
      }
      this.#options.log(
        `portcullis: hub: renewed ${nodeId} (certificate ${signed.serial}, until ` +
          `${signed.notAfter.toISOString()})`,
      );
      return this.#answer(signed);
    });
  }

  /** How long a renewal must wait, and why; undefined when it may go ahead now. */
  #wait(nodeId: string, notAfter: Date): { ms: number; why: string } | undefined {
    const { limits, standing } = this.#options;
    const now = Date.now();
    const early = notAfter.getTime() - limits.renewBeforeDays * DAY_MS - now;
    if (early > 0) {
      const left = Math.floor((notAfter.getTime() - now) / DAY_MS);
      return { ms: early, why: `${left} days left, more than ca.renew_before_days` };
    }
    const since = now - standing.lastIssuedAt(nodeId);
    if (since < limits.renewIntervalMs) {
      return {
        ms: limits.renewIntervalMs - since,
        why: `issued one ${Math.floor(since / 1000)} s ago (ca.renew_interval_seconds)`,
      };
    }
    return undefined;
  }

  #sign(entry: NodeEntry, csrPem: string) {
    const { issuer, limits } = this.#options;
    return signNodeCsr(issuer, {
      csrPem,
      nodeId: entry.nodeId,
      nodeType: entry.nodeType,
      incarnation: entry.incarnation,
      lifetimeDays: limits.lifetimeDays,
    });
  }

  #answer(signed: Signed): Reply {
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
