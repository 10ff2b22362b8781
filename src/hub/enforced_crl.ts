/**
 * The CRL the hub enforces, and the copy that lets a hub restarted on a damaged `crl.pem` keep its
 * fleet (issue 32: a hub restarted on a half-written CRL refused to boot, leaving every node
 * without registration, renewal and config).
 *
 * Each time `crl.pem` reads and verifies (signed by the intermediate, trust/crl.ts) its text is
 * kept as the CA's `hub-state/crl.last-good.pem`, written whole, when it differs from the copy.
 * At boot a `crl.pem` that cannot be used — missing, cut short, not PEM, signed by another key —
 * is replaced by that copy, verified on the same terms: the hub serves, says so in an error line,
 * in `/v1/config` (`revocation.crl_state`) and in `/metrics` (`portcullis_hub_crl_*`), and keeps
 * looking; the first good read of `crl.pem` ends it. Without a copy that verifies, boot is
 * refused as before: a hub that never read a good list has none it may enforce.
 *
 * Why serving with the copy rather than refusing the api: a verified copy is as trustworthy as the
 * list it copies, and refusing the api would leave every node without its hub exactly as a refused
 * boot does. What serving with it misses is only what the damaged write added: `hub revoke`
 * writes the node's marker before the CRL (trust/crl.ts `revokeNode`), and the hub refuses a
 * node by its marker whatever the CRL says (node_standing.ts), so a node revoked by that write is
 * still refused. Serials listed without a marker (`writeCrl` alone) wait for a readable list.
 *
 * Later in a run a CRL that cannot be read keeps the list already held, as before.
 *
 * @module
 */
import { describeIoError } from "../config/yaml_file.ts";
import { counter, type Family, gauge, only } from "../observe/exposition.ts";
import { keepLastGoodCrl, readRevoked, type RevokedList } from "../trust/crl.ts";

/** Where the CRL is, the certificate that must have signed it, and where its copy is kept. */
export interface CrlSource {
  readonly file: string;
  readonly intermediatePem: string;
  /** The hub's last good copy (none: no copy is kept or served). */
  readonly lastGoodFile?: string;
}

/** Where the enforced list came from: `crl.pem`, or the last good copy (boot on a damaged CRL). */
export type CrlOrigin = "crl" | "last_good_copy";

/** The list the hub enforces: read from `crl.pem` at each look, or its last good copy at boot. */
export class EnforcedCrl {
  readonly #source: CrlSource;
  readonly #log: (line: string) => void;
  #list: RevokedList | undefined;
  #origin: CrlOrigin = "crl";
  /** Why the last read of `crl.pem` failed (none: it read and verified). */
  #damaged: { reason: string; since: string } | undefined;
  /** The text the copy holds, as far as this hub knows. */
  #copied: string | undefined;
  #copyError: string | undefined;
  #readFailures = 0;
  #copyFailures = 0;

  constructor(source: CrlSource, log: (line: string) => void) {
    this.#source = source;
    this.#log = log;
  }

  /** The serials of the list enforced (pem.ts spelling); empty before {@link load}. */
  get serials(): ReadonlySet<string> {
    return this.#list?.serials ?? new Set();
  }

  /**
   * Reads `crl.pem` for the first time, or — when it cannot be used — the last good copy, saying so
   * in an error line.
   *
   * @throws {Error} naming both failures when neither verifies
   */
  async load(): Promise<void> {
    const { file, lastGoodFile, intermediatePem } = this.#source;
    this.#copied = lastGoodFile ? await Deno.readTextFile(lastGoodFile).catch(() => "") : "";
    const damage = await this.read().then(() => undefined, (error: unknown) => error);
    if (damage === undefined) return await this.keep();
    const reason = describeIoError(damage);
    if (!lastGoodFile) throw new Error(reason);
    let copy: RevokedList;
    try {
      copy = await readRevoked(lastGoodFile, intermediatePem);
    } catch (error) {
      throw new Error(`${reason}; and no last good copy to serve with: ${describeIoError(error)}`);
    }
    this.#list = copy;
    this.#origin = "last_good_copy";
    this.#log(
      `portcullis: error: hub: the fleet CA's CRL ${file} cannot be used (${reason}); serving ` +
        `with its last good copy ${lastGoodFile} (this update ${copy.thisUpdate.toISOString()}, ` +
        `${copy.serials.size} revoked certificates) until it reads again — repair it: ` +
        "`portcullis hub revoke` rebuilds it from the copy, or restore it from a backup",
    );
  }

  /**
   * Reads `crl.pem` again; on success it is the list enforced (then {@link keep} makes it the
   * copy), on failure the list held stays.
   *
   * @throws {Error} when `crl.pem` cannot be read or verified
   */
  async read(): Promise<void> {
    const { file, intermediatePem } = this.#source;
    let list: RevokedList;
    try {
      list = await readRevoked(file, intermediatePem);
    } catch (error) {
      this.#readFailures++;
      this.#damaged ??= { reason: describeIoError(error), since: new Date().toISOString() };
      this.#damaged.reason = describeIoError(error);
      throw error;
    }
    if (this.#origin === "last_good_copy") {
      this.#log(
        `portcullis: hub: the fleet CA's CRL ${file} reads again; the copy is no longer served`,
      );
    }
    this.#list = list;
    this.#origin = "crl";
    this.#damaged = undefined;
  }

  /**
   * Makes the list read from `crl.pem` the last good copy, when the copy does not hold it already;
   * a failure is logged once and counted, not thrown. Called after the list is enforced, so a
   * revocation never waits for the copy's write.
   */
  async keep(): Promise<void> {
    const copy = this.#source.lastGoodFile;
    const text = this.#origin === "crl" ? this.#list?.text : undefined;
    if (!copy || text === undefined || text === this.#copied) return;
    try {
      await keepLastGoodCrl(copy, text);
      this.#copied = text;
      this.#copyError = undefined;
    } catch (error) {
      this.#copyFailures++;
      const message = `Cannot keep the last good CRL in ${copy}: ${describeIoError(error)}`;
      if (message !== this.#copyError) this.#log(`portcullis: warning: hub: ${message}`);
      this.#copyError = message;
    }
  }

  /** What `/v1/config` says of the list (beside the revocation fields). */
  status(): Record<string, unknown> {
    return {
      origin: this.#origin,
      this_update: this.#list?.thisUpdate.toISOString() ?? null,
      damaged: this.#damaged ?? null,
      last_good_copy: this.#source.lastGoodFile ?? null,
      copy_error: this.#copyError ?? null,
    };
  }

  /** The list's families for the hub's `/metrics`. */
  families(): Family[] {
    const thisUpdate = this.#list ? this.#list.thisUpdate.getTime() / 1000 : 0;
    return [
      gauge(
        "hub_crl_readable",
        "1 when the last look read crl.pem and its signature verified, else 0.",
        only(this.#damaged ? 0 : 1),
      ),
      gauge(
        "hub_crl_from_last_good_copy",
        "1 when the list enforced is the last good copy (the hub booted on a damaged crl.pem).",
        only(this.#origin === "last_good_copy" ? 1 : 0),
      ),
      gauge(
        "hub_crl_revoked_certificates",
        "Certificate serials the enforced list revokes.",
        only(this.serials.size),
      ),
      gauge(
        "hub_crl_this_update_timestamp_seconds",
        "thisUpdate of the enforced list, in seconds since the epoch.",
        only(thisUpdate),
      ),
      counter(
        "hub_crl_read_failures_total",
        "Looks at crl.pem that could not read or verify it.",
        only(this.#readFailures),
      ),
      counter(
        "hub_crl_copy_write_failures_total",
        "Failed writes of the last good copy.",
        only(this.#copyFailures),
      ),
    ];
  }
}
