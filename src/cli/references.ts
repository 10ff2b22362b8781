/**
 * What `check` (and `flags`, which refuses what `check` refuses) verifies beyond the schemas: the
 * files and folders a config names, opened the way the running program will open them — rooted in
 * their folder, a secret refused when group or others may read it — and parsed where they have a
 * format (a certificate, a private key that matches it, a salt long enough).
 *
 * A finding is a problem (the program would refuse or could not work: a certificate that is not a
 * certificate, the hub's token folder that is not there, an edge's missing `hub.token_file`, with
 * which it would start with no tenants and retry for ever) or a warning (it would run, but not as
 * written: a salt that cannot be read leaves every tenant unlabelled; a certificate an ACME client
 * has yet to write leaves the bootstrap certificate in service). Both name file, field and value,
 * as every config problem does.
 *
 * The schemas have already checked the shapes; this module reads the document as written (so it
 * can name the field) and resolves each path against the config file's folder, as the loaders do.
 *
 * @module
 */
import type { YamlFile } from "../config/yaml_file.ts";
import { SOCKS5_TLS_WARNING } from "../egress/transport.ts";
import { type Findings, type Path, Referee } from "./file_checks.ts";

export type { Findings };

/**
 * The files an edge config names: public TLS pairs, the admin gate, the ACME challenge folder, the
 * hub client's files, the admin token, the tenant-label salt and the egress transport's files.
 *
 * @param source the edge config as parsed (already valid against its schema)
 */
export async function edgeReferences(source: YamlFile): Promise<Findings> {
  const check = new Referee(source);
  const publicLane = ["lanes", "public"];
  const acme = check.has([...publicLane, "acme_http"]);
  const certificates = check.list([...publicLane, "tls", "certificates"]);
  for (let index = 0; index < certificates; index++) {
    await check.pair([...publicLane, "tls", "certificates", index], {
      missing: acme
        ? { warn: "the bootstrap certificate is served until the ACME client writes it" }
        : "problem",
    });
  }
  await check.secret([...publicLane, "admin_gate", "file"]);
  await check.folder([...publicLane, "acme_http", "challenge_dir"], {
    warn: "the ACME client must create it before a challenge can be answered",
  });
  await hubClient(check, ["hub"]);
  await check.secret(["admin", "token_file"]);
  await check.salt(["observe", "salt_file"]);
  const transport = ["egress", "transport"];
  if (check.text([...transport, "kind"]) === "socks5_tls") {
    check.warn([...transport, "kind"], SOCKS5_TLS_WARNING);
  }
  if (check.has([...transport, "cert_file"])) {
    await check.pair(transport, { missing: "problem" });
    await check.caFile([...transport, "ca_file"]);
  }
  return check.findings;
}

/**
 * The files a door config names: each listener's TLS pair and the hub client's files (the cover
 * file and the cache are the door's own `check`).
 *
 * @param source the door config as parsed (already valid against its schema)
 */
export async function doorReferences(source: YamlFile): Promise<Findings> {
  const check = new Referee(source);
  const listeners = check.list(["listen"]);
  for (let index = 0; index < listeners; index++) {
    if (check.has(["listen", index, "tls"])) {
      await check.pair(["listen", index, "tls"], { missing: "problem" });
    }
  }
  await hubClient(check, ["hub"]);
  return check.findings;
}

/**
 * The files a hub config names: the API's and the transports' TLS pairs and client CAs, and the
 * token folder with a readable token per node. A hub whose token folder is missing refuses to
 * start, so `check` refuses it too.
 *
 * @param source the hub config as parsed (already valid against its schema)
 */
export async function hubReferences(source: YamlFile): Promise<Findings> {
  const check = new Referee(source);
  if (check.has(["transport", "socks5_tls"])) {
    check.warn(["transport", "socks5_tls"], SOCKS5_TLS_WARNING);
  }
  for (
    const block of [["api", "tls"], ["transport", "socks5_tls"], ["transport", "https_tunnel"]]
  ) {
    if (!check.has(block)) continue;
    await check.pair(block, { missing: "problem" });
    await check.caFile([...block, "client_ca_file"]);
  }
  await check.tokensFolder(["api", "tokens_dir"], ["api", "nodes"]);
  return check.findings;
}

/** A hub client block (an edge's or a door's `hub`): CA, client pair or registration, token. */
async function hubClient(check: Referee, block: Path): Promise<void> {
  if (!check.has(block)) return;
  await check.caFile([...block, "ca_file"]);
  const registers = check.has([...block, "register"]);
  if (check.has([...block, "cert_file"])) {
    // A renewal a crash left half written is completed at boot (live/node_pair.ts): not refused.
    const pair = await check.pair(block, {
      missing: registers ? "fine" : "problem",
      pending: true,
    });
    // Registration needs its one-time secret only while there is no certificate yet.
    if (registers && pair === "missing") await check.secret([...block, "register", "secret_file"]);
  }
  await check.secret([...block, "token_file"]);
}
