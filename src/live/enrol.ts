/**
 * A node's certificate from the hub's fleet CA: registered once with a one-time secret, renewed
 * before it expires, both over the hub's api listener.
 *
 * Registration runs at boot while `cert_file` does not exist and `register.secret_file` does: the
 * node makes a fresh ECDSA key and writes it to `<key_file>.new` (mode 0600) *before* it presents
 * the secret with a request naming only its node id, then writes the certificate chain it gets
 * back to `<cert_file>.new` and renames both into place, key then certificate, and only then
 * removes the secret. Before any of it, every boot completes a pair a crash left half written and
 * removes a secret the certificate in place was issued for (node_pair.ts: every crash point of a
 * registration or a renewal leaves a node that starts). The secret is spent on the hub at the
 * first right answer; because the key is already on disk, a registration whose answer was lost (a
 * timeout, a crash, a file it could not write) asks again with the same key and secret and gets
 * the same certificate while the hub's `ca.registration_retry_seconds` last (hub/enrolment.ts).
 * A key that cannot be written fails before the secret is spent (issue 31: a door's flags lacked
 * `<key>.new`, and its first attempt spent the secret). A refusal (403) is one answer whatever the cause — the hub's log says which
 * — and drops the waiting key, so the next secret registers a fresh one.
 *
 * Renewal runs on a timer while the node serves: when the certificate has fewer than
 * `renew_before_days` left, a new key and request go to `POST /v1/nodes/renew`, authenticated by
 * the certificate still valid; the new pair is written beside the old one (`<file>.new`, synced)
 * and renamed over it, key then certificate, so the old pair stays whole until both new files are
 * on disk, and a crash between the renames is completed at the next boot (node_pair.ts). A hub
 * that says `renewal_too_early` (429, its `ca.renew_before_days` or `ca.renew_interval_seconds`)
 * is believed: the node keeps its certificate and asks again after the Retry-After it gave, not
 * before.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import type { HubClientConfig } from "../config/runtime_source.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { certificateNotAfter } from "../trust/ca.ts";
import { csrForKey, makeNodeKeyAndCsr } from "../trust/csr.ts";
import { readNodeSecretFile } from "../trust/node_secrets.ts";
import { HubRefusal, readAnswerError } from "./hub_answer.ts";
import { dropSpentSecret, settlePair, writeNewFile, writePair } from "./node_pair.ts";

const PEM = { maxBytes: 1 << 20 } as const;

/** Who registers, and with which hub. */
export interface EnrolOptions {
  readonly nodeId: string;
  readonly nodeType: "edge" | "door";
  readonly hub: {
    readonly url: string;
    readonly caFile: string;
    readonly certFile: string;
    readonly keyFile: string;
    readonly secretFile?: string;
  };
  readonly log: (line: string) => void;
}

/**
 * Completes a pair a crash left half written, then registers the node when it has no certificate
 * yet and a secret to register with.
 *
 * @returns "present" when `cert_file` exists, "registered" when it was just made, "none" when
 *   there is neither a certificate nor a secret (the credential check reports that)
 * @throws Error naming the file or the hub's answer when registration fails
 */
export async function ensureNodeCertificate(
  options: EnrolOptions,
): Promise<"present" | "registered" | "none"> {
  const { nodeId, nodeType, hub, log } = options;
  await settlePair({ nodeId, files: hub, log });
  if (await exists(hub.certFile)) {
    await dropSpentSecret({ nodeId, files: hub, log });
    return "present";
  }
  if (!hub.secretFile || !await exists(hub.secretFile)) return "none";
  const secret = await readNodeSecretFile(hub.secretFile);
  if (secret.nodeId !== nodeId) {
    throw new Error(
      `The registration secret ${hub.secretFile} was made for node "${secret.nodeId}", not ` +
        `"${nodeId}"`,
    );
  }
  const { keyPem, csrPem } = await waitingKey(hub.keyFile, nodeId);
  const body = { node_id: nodeId, node_type: nodeType, csr: csrPem, secret: secret.secret };
  let answer: Record<string, unknown>;
  try {
    answer = await postToHub(hub, "/v1/nodes/register", body);
  } catch (error) {
    // Refused for good: the next secret registers a fresh key. Anything else: ask again with it.
    if (error instanceof HubRefusal && error.status === 403) {
      await Deno.remove(`${hub.keyFile}.new`).catch(() => {});
    }
    throw error;
  }
  const chain = checkedChain(answer, nodeId, "registration");
  await writePair(hub, keyPem, chain);
  await Deno.remove(hub.secretFile).catch(() => {});
  log(
    `portcullis: registered with the hub as ${nodeType} ${nodeId}: certificate ${hub.certFile} ` +
      `until ${certificateNotAfter(chain).toISOString()}; the secret is spent and removed`,
  );
  return "registered";
}

/**
 * The key a registration asks with: the one an earlier attempt left in `<keyFile>.new` (its answer
 * was lost), else a fresh one written there first — a key that cannot be written fails here,
 * before the secret is presented.
 */
async function waitingKey(
  keyFile: string,
  nodeId: string,
): Promise<{ keyPem: string; csrPem: string }> {
  const waiting = `${keyFile}.new`;
  const kept = await Deno.readTextFile(waiting).catch(() => undefined);
  if (kept !== undefined) {
    try {
      return { keyPem: kept, csrPem: await csrForKey(nodeId, kept) };
    } catch { /* not a key of ours: made afresh below */ }
  }
  const made = await makeNodeKeyAndCsr(nodeId);
  await writeNewFile(waiting, made.keyPem);
  return made;
}

/** The hub said a renewal is too early: ask again after `retryAfterMs`, not before. */
export class RenewalDeferred extends Error {
  /** How long the hub said to wait. */
  readonly retryAfterMs: number;

  /** @param retryAfterMs the hub's Retry-After, in ms */
  constructor(retryAfterMs: number) {
    super(`the hub says renewal is too early; asking again in ${Math.ceil(retryAfterMs / 1000)} s`);
    this.name = "RenewalDeferred";
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * Renews the certificate when fewer than `renewBeforeDays` remain.
 *
 * @param now the time to judge the certificate by (tests pass one)
 * @returns true when a new certificate was written
 * @throws {RenewalDeferred} when the hub says it is too early (with how long to wait)
 * @throws Error with the hub's answer when the renewal was refused or failed
 */
export async function renewIfDue(
  options: { nodeId: string; hub: RenewingHub; log: (line: string) => void; now?: Date },
): Promise<boolean> {
  const { nodeId, hub, log } = options;
  const tls = hub.tls;
  if (!tls) return false;
  const current = await readNamedFile(tls.certFile, "hub.cert_file", PEM);
  const notAfter = certificateNotAfter(current);
  const left = notAfter.getTime() - (options.now ?? new Date()).getTime();
  if (left > hub.renewBeforeDays * 86_400_000) return false;
  const { keyPem, csrPem } = await makeNodeKeyAndCsr(nodeId);
  const client = Deno.createHttpClient({
    caCerts: [await readNamedFile(tls.caFile, "hub.ca_file", PEM)],
    cert: current,
    key: await readNamedFile(tls.keyFile, "hub.key_file", { ...PEM, secret: true }),
  });
  let answer: Record<string, unknown>;
  try {
    const path = `/v1/nodes/renew?node_id=${encodeURIComponent(nodeId)}`;
    answer = await postToHub(hub, path, { node_id: nodeId, csr: csrPem }, client);
  } finally {
    client.close();
  }
  const chain = checkedChain(answer, nodeId, "renewal");
  await writePair(tls, keyPem, chain);
  log(
    `portcullis: certificate renewed (it had ${Math.max(0, Math.floor(left / 86_400_000))} days ` +
      `left): ${tls.certFile} until ${certificateNotAfter(chain).toISOString()}`,
  );
  return true;
}

/** What renewal needs of a node's hub settings (an edge's or a door's). */
export type RenewingHub = Pick<HubClientConfig, "url" | "tls" | "renewBeforeDays">;

/** A certificate is looked at for renewal this often by default (and at start). */
const RENEW_CHECK_MS = 3_600_000;

/**
 * The renewal checks of a running node: at start, then every `checkMs`. A failed renewal is
 * logged (once per distinct failure) and tried again at the next check; the current certificate
 * serves meanwhile.
 */
export class CertificateRenewal {
  readonly #options: { nodeId: string; hub: RenewingHub; log: (line: string) => void };
  readonly #checkMs: number;
  #timer: number | undefined;
  #retry: number | undefined;
  /** No renewal is asked before this (epoch ms): what the hub's last Retry-After said. */
  #notBefore = 0;
  #renewed: () => void = () => {};
  #last: { at: string; outcome: string } | undefined;

  /** @param options the node, its hub, the log, and how often to look (default hourly) */
  constructor(
    options: {
      nodeId: string;
      hub: RenewingHub;
      log: (line: string) => void;
      checkMs?: number;
    },
  ) {
    this.#options = options;
    this.#checkMs = options.checkMs ?? RENEW_CHECK_MS;
  }

  /** Looks now and on the timer; `renewed` runs after each new certificate is on disk. */
  start(renewed: () => void): void {
    this.#renewed = renewed;
    const check = () => void this.check().then((done) => done && renewed());
    check();
    this.#timer = setInterval(check, this.#checkMs) as unknown as number;
  }

  /** Stops the timers. */
  stop(): void {
    clearInterval(this.#timer);
    clearTimeout(this.#retry);
    this.#retry = undefined;
  }

  /**
   * Renews if due; true when a new certificate was written. Nothing is asked before the time a
   * `renewal_too_early` answer named; a check then is scheduled when it comes before the next one.
   */
  async check(): Promise<boolean> {
    if (Date.now() < this.#notBefore) return false;
    try {
      const renewed = await renewIfDue(this.#options);
      if (renewed) this.#last = { at: new Date().toISOString(), outcome: "renewed" };
      return renewed;
    } catch (error) {
      const deferred = error instanceof RenewalDeferred;
      if (deferred) this.#defer(error.retryAfterMs);
      const outcome = `${deferred ? "deferred" : "failed"}: ${(error as Error).message}`;
      if (outcome !== this.#last?.outcome) {
        this.#options.log(
          `portcullis: certificate renewal ${outcome} (the current one serves meanwhile)`,
        );
      }
      this.#last = { at: new Date().toISOString(), outcome };
      return false;
    }
  }

  /** Waits `ms` before the next ask, checking again then if that is before the next timer. */
  #defer(ms: number): void {
    this.#notBefore = Date.now() + ms;
    clearTimeout(this.#retry);
    if (this.#timer === undefined || ms >= this.#checkMs) return;
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      void this.check().then((done) => done && this.#renewed());
    }, ms) as unknown as number;
  }

  /** The last renewal's time and outcome, for `/v1/config`. */
  status(): Record<string, unknown> | null {
    return this.#last ?? null;
  }
}

/** Posts JSON to the hub and reads the JSON object it answers with 200. */
async function postToHub(
  hub: { readonly url: string; readonly caFile?: string },
  path: string,
  body: unknown,
  client?: Deno.HttpClient,
): Promise<Record<string, unknown>> {
  const own = client ? undefined : Deno.createHttpClient({
    caCerts: [await readNamedFile(hub.caFile!, "hub.ca_file", PEM)],
  });
  try {
    const response = await fetch(new URL(path, hub.url), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      client: client ?? own,
      signal: AbortSignal.timeout(30_000),
    });
    const text = await response.text();
    const refusal = response.status === 200 ? undefined : readAnswerError(response.status, text);
    if (refusal?.code === "renewal_too_early") {
      const seconds = Number(response.headers.get("retry-after"));
      throw new RenewalDeferred(Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 60_000);
    }
    if (refusal) throw refusal;
    return JSON.parse(text);
  } finally {
    own?.close();
  }
}

/**
 * The chain in a hub's answer, checked: PEM certificates whose first names exactly this node (a
 * hub that answers with someone else's certificate is not trusted with this node's key).
 */
function checkedChain(answer: Record<string, unknown>, nodeId: string, what: string): string {
  const chain = typeof answer.certificate === "string" ? answer.certificate : "";
  let names: string[] = [];
  try {
    const leaf = new x509.X509Certificate(chain.slice(0, chain.indexOf("-----END") + 30));
    names = leaf.subjectName.toJSON().flatMap((rdn) => rdn.CN ?? []);
  } catch { /* names stays empty */ }
  if (names.length !== 1 || names[0] !== nodeId) {
    throw new Error(`The hub's ${what} answer does not hold a certificate for node "${nodeId}"`);
  }
  return chain;
}

async function exists(path: string): Promise<boolean> {
  return await Deno.lstat(path).then(() => true, () => false);
}
