/**
 * The hub's side of fleet trust, made at boot: what is revoked (the CA's CRL, or only removed token
 * files), and — with the fleet CA (`ca`) — registration and renewal signed by its intermediate.
 * The root key is never read: a hub runs with the intermediate only.
 *
 * @module
 */
import { BootError } from "../boot/boot_error.ts";
import { issuedFor, loadIssuer } from "../trust/ca.ts";
import { NodeSecrets } from "../trust/node_secrets.ts";
import type { HubConfig } from "./config.ts";
import { Enrolment } from "./enrolment.ts";
import { Revocations } from "./revocation.ts";

/** What fleet trust hands the rest of the hub. */
export interface FleetTrust {
  readonly revocations: Revocations;
  readonly enrolment?: Enrolment;
  /** The type (`edge`, `door`) the CA last issued the node a certificate as; none without `ca`. */
  readonly nodeTypeOf: (nodeId: string) => Promise<string | undefined>;
}

/**
 * Loads the intermediate and the CRL (with `ca`), and makes the revocations (not yet looking).
 *
 * @throws {BootError} when the CA's files cannot be read or the CRL is not the intermediate's
 */
export async function loadFleetTrust(
  config: HubConfig,
  log: (line: string) => void,
): Promise<FleetTrust> {
  if (!config.ca) {
    return {
      revocations: new Revocations({ reloadMs: config.revocationReloadMs, log }),
      nodeTypeOf: () => Promise.resolve(undefined),
    };
  }
  const { files, lifetimeDays } = config.ca;
  let issuer;
  try {
    issuer = await loadIssuer(files.dir);
  } catch (error) {
    throw new BootError([`Cannot load the fleet CA in ${files.dir}: ${(error as Error).message}`]);
  }
  const revocations = new Revocations({
    crl: { file: files.crl, intermediatePem: issuer.intermediatePem },
    reloadMs: config.revocationReloadMs,
    log,
  });
  await revocations.load();
  const secrets = new NodeSecrets(files.secretsDir);
  return {
    revocations,
    enrolment: new Enrolment({ issuer, secrets, lifetimeDays, log }),
    nodeTypeOf: async (nodeId) =>
      (await issuedFor(files.dir, nodeId).catch(() => [])).at(-1)?.nodeType,
  };
}
