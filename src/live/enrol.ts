/**
 * A node's certificate from the hub's fleet CA: registered once with a one-time secret, renewed
 * before it expires, both over the hub's api listener.
 *
 * Registration runs at boot while `cert_file` does not exist and `register.secret_file` does: the
 * node makes a fresh ECDSA key and a request naming only its node id, presents the secret, and
 * writes the key, then the certificate chain it gets back, each atomically with mode 0600, and
 * only then removes the secret (spent on the hub either way). A refusal is one answer whatever the
 * cause; the hub's log says which.
 *
 * Renewal runs on a timer while the node serves: when the certificate has fewer than
 * `renew_before_days` left, a new key and request go to `POST /v1/nodes/renew`, authenticated by
 * the certificate still valid; the new pair is written beside the old one (`<file>.new`) and
 * renamed over it, key then certificate, so the old pair stays whole until both new files are on
 * disk.
 *
 * @module
 */
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import type { HubClientConfig } from "../config/runtime_source.ts";
import { readNamedFile } from "../config/rooted_read.ts";
import { certificateNotAfter } from "../trust/ca.ts";
import { makeNodeKeyAndCsr } from "../trust/csr.ts";
import { readNodeSecretFile } from "../trust/node_secrets.ts";
import { readAnswerError } from "./hub_answer.ts";

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
 * Registers the node when it has no certificate yet and a secret to register with.
 *
 * @returns "present" when `cert_file` exists, "registered" when it was just made, "none" when
 *   there is neither a certificate nor a secret (the credential check reports that)
 * @throws Error naming the file or the hub's answer when registration fails
 */
export async function ensureNodeCertificate(
  options: EnrolOptions,
): Promise<"present" | "registered" | "none"> {
  const { nodeId, nodeType, hub, log } = options;
  if (await exists(hub.certFile)) return "present";
  if (!hub.secretFile || !await exists(hub.secretFile)) return "none";
  const secret = await readNodeSecretFile(hub.secretFile);
  if (secret.nodeId !== nodeId) {
    throw new Error(
      `The registration secret ${hub.secretFile} was made for node "${secret.nodeId}", not ` +
        `"${nodeId}"`,
    );
  }
  const { keyPem, csrPem } = await makeNodeKeyAndCsr(nodeId);
  const body = { node_id: nodeId, node_type: nodeType, csr: csrPem, secret: secret.secret };
  const answer = await postToHub(hub, "/v1/nodes/register", body);
  const chain = checkedChain(answer, nodeId, "registration");
  await replacePair(hub, keyPem, chain);
  await Deno.remove(hub.secretFile).catch(() => {});
  log(
    `portcullis: registered with the hub as ${nodeType} ${nodeId}: certificate ${hub.certFile} ` +
      `until ${certificateNotAfter(chain).toISOString()}; the secret is spent and removed`,
  );
  return "registered";
}

/**
 * Renews the certificate when fewer than `renewBeforeDays` remain.
 *
 * @param now the time to judge the certificate by (tests pass one)
 * @returns true when a new certificate was written
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
  await replacePair(tls, keyPem, chain);
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
    const check = () => void this.check().then((done) => done && renewed());
    check();
    this.#timer = setInterval(check, this.#checkMs) as unknown as number;
  }

  /** Stops the timer. */
  stop(): void {
    clearInterval(this.#timer);
  }

  /** Renews if due; true when a new certificate was written. */
  async check(): Promise<boolean> {
    try {
      const renewed = await renewIfDue(this.#options);
      if (renewed) this.#last = { at: new Date().toISOString(), outcome: "renewed" };
      return renewed;
    } catch (error) {
      const outcome = `failed: ${(error as Error).message}`;
      if (outcome !== this.#last?.outcome) {
        this.#options.log(
          `portcullis: certificate renewal ${outcome} (the current one serves meanwhile)`,
        );
      }
      this.#last = { at: new Date().toISOString(), outcome };
      return false;
    }
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
    if (response.status !== 200) throw readAnswerError(response.status, text);
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

/**
 * Writes a new key and certificate beside the files they replace (`<file>.new`, mode 0600, made
 * afresh), then renames them into place, key then certificate: the names are fixed so the edge's
 * write grants can name them exactly (src/boot/flags.ts), and the old pair stays whole until both
 * new files are on disk.
 */
async function replacePair(
  files: { readonly keyFile: string; readonly certFile: string },
  keyPem: string,
  chainPem: string,
): Promise<void> {
  for (const [file, text] of [[files.keyFile, keyPem], [files.certFile, chainPem]]) {
    await Deno.remove(`${file}.new`).catch(() => {});
    await Deno.writeTextFile(`${file}.new`, text, { mode: 0o600, createNew: true });
  }
  await Deno.rename(`${files.keyFile}.new`, files.keyFile);
  await Deno.rename(`${files.certFile}.new`, files.certFile);
}

async function exists(path: string): Promise<boolean> {
  return await Deno.lstat(path).then(() => true, () => false);
}
