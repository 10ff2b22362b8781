/**
 * Mutual TLS on the hub: a certificate the client CA signed is a node only when its subject names
 * exactly one CN and that CN is, character for character, the node id asked for. Issue 14 found a
 * certificate made with `openssl req -subj "/CN=edge-1/CN=edge-2"` accepted as `edge-1`.
 *
 * @module
 */
import assert from "node:assert/strict";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { type IssuedCertificate, TestPki } from "./fixtures/certs.ts";
import { startTestHub } from "./fixtures/hub_in_process.ts";

/** What the hub answered one certificate asking as `node`: status and error code. */
async function ask(
  url: string,
  ca: string,
  leaf: IssuedCertificate,
  node: string,
): Promise<string> {
  const client = Deno.createHttpClient({ caCerts: [ca], cert: leaf.certPem, key: leaf.keyPem });
  try {
    const query = `node_id=${encodeURIComponent(node)}&wait=0`;
    const response = await fetch(`${url}/v1/config/stream?${query}`, { client });
    const body = await response.json();
    return `${response.status} ${body.error?.code ?? body.type}`;
  } finally {
    client.close();
  }
}

Deno.test("hub mutual TLS: a certificate with two CNs is refused for either, one exact CN is a node", async () => {
  const { pki, t } = await mutualTlsHub(["edge-1", "edge-2"]);
  try {
    const exact = await pki.issueWithOpenssl("exact", "/CN=edge-1");
    const two = await pki.issueWithOpenssl("two", "/CN=edge-1/CN=edge-2");
    const multi = await pki.issueWithOpenssl("multi", "/CN=edge-1+CN=edge-2", ["-multivalue-rdn"]);
    const twice = await pki.issueSubject("twice", [{ CN: ["edge-1"] }, { CN: ["edge-1"] }]);
    const organised = await pki.issueSubject("organised", [{ O: ["Ops"] }, { CN: ["edge-1"] }]);
    const none = await pki.issueSubject("none", [{ O: ["edge-1"] }]);
    assert.deepEqual(cnsOf(two), ["edge-1", "edge-2"]);

    const answers = {
      exact: await ask(t.url, pki.ca.certPem, exact, "edge-1"),
      exactAsOther: await ask(t.url, pki.ca.certPem, exact, "edge-2"),
      organised: await ask(t.url, pki.ca.certPem, organised, "edge-1"),
      twoAsFirst: await ask(t.url, pki.ca.certPem, two, "edge-1"),
      twoAsSecond: await ask(t.url, pki.ca.certPem, two, "edge-2"),
      multiAsFirst: await ask(t.url, pki.ca.certPem, multi, "edge-1"),
      multiAsSecond: await ask(t.url, pki.ca.certPem, multi, "edge-2"),
      twice: await ask(t.url, pki.ca.certPem, twice, "edge-1"),
      none: await ask(t.url, pki.ca.certPem, none, "edge-1"),
    };
    assert.deepEqual(answers, {
      exact: "200 snapshot",
      exactAsOther: "403 wrong_node",
      organised: "200 snapshot",
      twoAsFirst: "403 ambiguous_certificate",
      twoAsSecond: "403 ambiguous_certificate",
      multiAsFirst: "403 ambiguous_certificate",
      multiAsSecond: "403 ambiguous_certificate",
      twice: "403 ambiguous_certificate",
      none: "403 ambiguous_certificate",
    });
  } finally {
    await t.dispose();
    await pki.dispose();
  }
});

Deno.test("hub mutual TLS: a CN that is nearly a node id (case, space, dot, NUL, look-alike) is no node", async () => {
  const { pki, t } = await mutualTlsHub(["edge-1"]);
  const nearMisses = [
    "EDGE-1",
    "Edge-1",
    "edge-1 ",
    " edge-1",
    "edge-1\t",
    "edge-1.",
    "edge-1\u0000",
    "edge-1\u0000x",
    "edge-1\n",
    "edge-1\u200b",
    "\u0435dge-1", // Cyrillic е
    "edge-1/CN=edge-1",
    "edge-1,CN=edge-1",
  ];
  try {
    const answers: Record<string, string[]> = {};
    for (const [i, cn] of nearMisses.entries()) {
      const leaf = await pki.issueSubject(`near-${i}`, [{ CN: [cn] }] as x509.JsonName);
      assert.deepEqual(cnsOf(leaf), [cn], "the CN is encoded as given");
      // As the node it nearly is, and as the node it names (when that is a node id at all).
      answers[JSON.stringify(cn)] = [
        await ask(t.url, pki.ca.certPem, leaf, "edge-1"),
        await ask(t.url, pki.ca.certPem, leaf, cn),
      ];
    }
    for (const [cn, [asNode, asItself]] of Object.entries(answers)) {
      assert.equal(asNode, "403 wrong_node", `CN ${cn} asking as edge-1`);
      assert.match(asItself, /^(400 bad_node_id|403 node_not_allowed)$/, `CN ${cn} as itself`);
    }
    const exact = await pki.issueSubject("exact", [{ CN: ["edge-1"] }]);
    assert.equal(await ask(t.url, pki.ca.certPem, exact, "edge-1"), "200 snapshot");
  } finally {
    await t.dispose();
    await pki.dispose();
  }
});

/** A hub whose api listener takes client certificates from a fresh test CA, for `nodes` only. */
async function mutualTlsHub(nodes: string[]) {
  const pki = await TestPki.create();
  const caFile = `${pki.dir}/client-ca.crt`;
  await Deno.writeTextFile(caFile, pki.ca.certPem);
  const server = await pki.issue("hub.test", { altNames: ["127.0.0.1"] });
  const t = await startTestHub({
    edit: (c) => {
      delete c.api.tokens_dir;
      c.api.tls = { cert_file: server.certFile, key_file: server.keyFile, client_ca_file: caFile };
      c.api.nodes = nodes;
    },
  });
  return { pki, t };
}

/** Every CN of a leaf's subject, as encoded (the fixture made what the test meant). */
function cnsOf(leaf: IssuedCertificate): string[] {
  return new x509.X509Certificate(leaf.certPem).subjectName.getField("CN");
}
