/**
 * The hub's side of fleet trust, made at boot: what is revoked (the CA's CRL and the nodes'
 * standing — node_standing.ts —, or only removed token files), and — with the fleet CA (`ca`) —
 * registration and renewal signed by its intermediate. The root key is never read: a hub runs with
 * the intermediate only.
 *
 * A CA whose `issued/` still holds records in the flat layout of before issue 31 refuses the boot
 * and names `portcullis hub migrate-ca`: the hub never guesses a node's type or incarnation from
 * its certificates' records (trust/migrate_issued.ts says what the migration can tell).
 *
 * @module
 */
import { BootError } from "../boot/boot_error.ts";
import { loadIssuer } from "../trust/ca.ts";
import { flatRecords } from "../trust/issued_index.ts";
import { NodeSecrets } from "../trust/node_secrets.ts";
import type { HubConfig } from "./config.ts";
import { Enrolment } from "./enrolment.ts";
import { NodeStanding } from "./node_standing.ts";
import { Revocations } from "./revocation.ts";

/** What fleet trust hands the rest of the hub. */
export interface FleetTrust {
  readonly revocations: Revocations;
  /** Each node's registered type, incarnation and revocation, as held between looks. */
  readonly standing: NodeStanding;
  readonly enrolment?: Enrolment;
  /** The type (`edge`, `door`) the CA registered the node as; none without `ca`. */
  readonly nodeTypeOf: (nodeId: string) => Promise<string | undefined>;
  /**
   * The relay's and the tunnel's check: an active, unrevoked node that is no door, whose
   * certificate serial belongs to its current incarnation and is not in the CRL.
   */
  readonly admitsTransport: (nodeId: string, serial: string) => Promise<boolean>;
}

/**
 * Loads the intermediate, the CRL (or, when it is damaged, the hub's last good copy of it:
 * enforced_crl.ts) and the nodes' standing (with `ca`), and makes the revocations (not yet
 * looking).
 *
 * @throws {BootError} when the CA's files cannot be read, neither the CRL nor its last good copy
 *   is the intermediate's, or the CA still has the flat issued layout
 */
export async function loadFleetTrust(
  config: HubConfig,
  log: (line: string) => void,
): Promise<FleetTrust> {
  const doorList = config.doors?.nodes;
  const reloadMs = config.revocationReloadMs;
  if (!config.ca) {
    const standing = new NodeStanding({ doorList, crl: { isRevoked: () => false }, log });
    return trustOf(new Revocations({ standing, reloadMs, log }), standing);
  }
  const { files } = config.ca;
  let issuer;
  try {
    issuer = await loadIssuer(files.dir);
  } catch (error) {
    throw new BootError([`Cannot load the fleet CA in ${files.dir}: ${(error as Error).message}`]);
  }
  await refuseFlatLayout(config);
  const crl = {
    file: files.crl,
    intermediatePem: issuer.intermediatePem,
    lastGoodFile: files.lastGoodCrl,
  };
  const serials = { isRevoked: (serial: string): boolean => revocations.isRevoked(serial) };
  const standing: NodeStanding = new NodeStanding({ files, doorList, crl: serials, log });
  const revocations: Revocations = new Revocations({ crl, standing, reloadMs, log });
  await revocations.load();
  const secrets = new NodeSecrets(files.secretsDir, { log });
  const enrolment = new Enrolment({ issuer, secrets, standing, limits: config.ca, log });
  return { ...trustOf(revocations, standing), enrolment };
}

function trustOf(revocations: Revocations, standing: NodeStanding): FleetTrust {
  return {
    revocations,
    standing,
    nodeTypeOf: (nodeId) => Promise.resolve(standing.nodeTypeOf(nodeId)),
    admitsTransport: (nodeId, serial) => standing.admitsTransport(nodeId, serial),
  };
}

/** Refuses a CA that keeps issued records in the flat layout, naming the command that moves them. */
async function refuseFlatLayout(config: HubConfig): Promise<void> {
  const issuedDir = config.ca!.files.issuedDir;
  let flat: string[];
  try {
    flat = await flatRecords(issuedDir);
  } catch (error) {
    throw new BootError([(error as Error).message]);
  }
  if (flat.length === 0) return;
  throw new BootError([
    `The fleet CA keeps ${flat.length} issued record(s) in the old flat layout ` +
    `("${issuedDir}/${flat[0]}"); run "portcullis hub migrate-ca ${config.file}" once, then ` +
    "start the hub",
  ]);
}
