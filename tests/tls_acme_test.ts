/**
 * The ACME http-01 companion listener of the public lane: a challenge file is served as written,
 * anything else is a 404 or a redirect to https (per `otherwise`), no token ever reads outside the
 * challenge folder, every request is charged to the public lane, and an ACME listener that
 * overlaps another listener refuses the boot.
 *
 * @module
 */
import assert from "node:assert/strict";
import { site, withTlsEdge } from "./fixtures/tls_edge.ts";
import { ConfigError } from "../src/config/problems.ts";
import { tlsTest } from "./fixtures/certs.ts";
import { freePorts } from "./fixtures/gateway.ts";
import { exchange, parseResponses, request } from "./fixtures/http_client.ts";
import {
  balancedLedger,
  bootEdge,
  type ConfigObject,
  envelope,
  type TestEdge,
} from "./fixtures/in_process.ts";

const TOKEN = "Xk3_q-9ZpLr2";
const KEY_AUTHORIZATION = `${TOKEN}.thumbprint-of-the-account-key`;
const SECRET = "secret outside the challenge folder";
const CHALLENGE = "/.well-known/acme-challenge/";

/**
 * An edge with TLS on the public lane and the ACME companion on its own port; the challenge
 * folder is `<config dir>/acme`, with a secret file beside it and another in a subfolder.
 */
async function withAcme(
  otherwise: "404" | "redirect",
  body: (t: TestEdge, acmePort: number) => Promise<void>,
): Promise<void> {
  const [acmePort] = freePorts(1);
  await withTlsEdge({
    names: ["a.test"],
    edit(config) {
      config.lanes.public.acme_http = {
        hostname: "127.0.0.1",
        port: acmePort,
        challenge_dir: "acme",
        otherwise,
      };
    },
  }, async (t) => {
    await Deno.mkdir(`${t.dir.dir}/acme/sub`, { recursive: true });
    await Deno.writeTextFile(`${t.dir.dir}/acme/${TOKEN}`, KEY_AUTHORIZATION);
    await Deno.writeTextFile(`${t.dir.dir}/acme/sub/${TOKEN}`, SECRET);
    await Deno.writeTextFile(`${t.dir.dir}/secret.txt`, SECRET);
    await body(t, acmePort);
  });
}

tlsTest(
  "acme: a challenge file is served as written, over plain HTTP, for GET and HEAD",
  async () => {
    await withAcme("404", async (t, port) => {
      const response = await request(port, {
        path: `${CHALLENGE}${TOKEN}`,
        headers: [["Host", "a.test"]],
      });
      assert.equal(response.status, 200);
      assert.equal(response.body, KEY_AUTHORIZATION);
      const head = parseResponses(
        await exchange(
          port,
          `HEAD ${CHALLENGE}${TOKEN} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n`,
        ),
        ["HEAD"],
      )[0];
      assert.equal(head.status, 200);
      const ledger = await balancedLedger(t);
      assert.equal(ledger.lanes.public.admitted, 2, "charged to the public lane");
      assert.equal(ledger.lanes.public.connections_accepted, 2);
    });
  },
);

tlsTest(
  "acme: otherwise 404 answers an unknown token and every other request with a 404",
  async () => {
    await withAcme("404", async (t, port) => {
      const paths = [`${CHALLENGE}unknown-token`, "/", "/healthz", `${CHALLENGE}`];
      for (const path of paths) {
        const response = await request(port, { path, headers: [["Host", "a.test"]] });
        assert.equal(response.status, 404, path);
        assert.equal(envelope(response).code, "route_not_allowed", path);
        assert.doesNotMatch(response.body, /tenant a\.test/);
      }
      const post = await request(port, {
        method: "POST",
        path: `${CHALLENGE}${TOKEN}`,
        headers: [["Host", "a.test"]],
        body: "",
      });
      assert.equal(post.status, 404, "only GET and HEAD read challenges");
      const ledger = await balancedLedger(t);
      assert.equal(ledger.lanes.public.admitted, paths.length + 1);
      assert.equal(ledger.lanes.public.denied_route, paths.length + 1);
    });
  },
);

tlsTest(
  "acme: otherwise redirect sends everything but a challenge to https://<host><path>",
  async () => {
    await withAcme("redirect", async (t, port) => {
      const page = await request(port, {
        path: "/shop/cart?item=7",
        headers: [["Host", "A.test:80"]],
      });
      assert.equal(page.status, 301);
      assert.equal(page.headers.location, "https://a.test/shop/cart?item=7");
      const unknown = await request(port, {
        path: `${CHALLENGE}nope`,
        headers: [["Host", "a.test"]],
      });
      assert.equal(unknown.status, 301);
      assert.equal(unknown.headers.location, `https://a.test${CHALLENGE}nope`);
      const challenge = await request(port, {
        path: `${CHALLENGE}${TOKEN}`,
        headers: [["Host", "a.test"]],
      });
      assert.equal(challenge.status, 200, "a challenge is still answered, not redirected");
      assert.equal(challenge.body, KEY_AUTHORIZATION);
      const ledger = await balancedLedger(t);
      assert.equal(ledger.lanes.public.admitted, 3);
    });
  },
);

tlsTest(
  "acme: a token with '..', '/' or encoded separators never reads outside the folder",
  async () => {
    for (const otherwise of ["404", "redirect"] as const) {
      await withAcme(otherwise, async (_t, port) => {
        const targets = [
          `${CHALLENGE}../secret.txt`,
          `${CHALLENGE}..%2Fsecret.txt`,
          `${CHALLENGE}%2e%2e%2fsecret.txt`,
          `${CHALLENGE}..`,
          `${CHALLENGE}sub/${TOKEN}`,
          `${CHALLENGE}sub%2F${TOKEN}`,
          `${CHALLENGE}%2Fetc%2Fpasswd`,
          `${CHALLENGE}.`,
          `http://a.test${CHALLENGE}../secret.txt`,
        ];
        for (const target of targets) {
          const text = await exchange(
            port,
            `GET ${target} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n`,
          );
          assert.ok(!text.includes(SECRET), `${otherwise} ${target} leaked: ${text}`);
          const [response] = parseResponses(text);
          assert.ok([301, 400, 404].includes(response.status), `${target}: ${response.status}`);
        }
      });
    }
  },
);

/** Boots with `edit` applied and returns the ConfigError it must be refused with. */
async function refusedBoot(edit: (config: ConfigObject, port: number) => void) {
  const [acmePort] = freePorts(1);
  const error = await bootEdge({
    lanes: ["public", "local_health"],
    tenants: [site("a.test")],
    edit: (config) => edit(config, acmePort),
  }).then(async (t) => {
    await t.dispose();
    return assert.fail("the boot was not refused");
  }, (error: unknown) => error);
  assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${error}`);
  return error.problems.map((p) => p.message);
}

tlsTest(
  "acme: an ACME listener on another lane's address refuses the boot, naming it",
  async () => {
    const onHealth = await refusedBoot((config) => {
      const health = config.lanes.local_health.listen[0];
      config.lanes.public.acme_http = { ...health, challenge_dir: "acme" };
    });
    assert.equal(onHealth.length, 1);
    assert.match(onHealth[0], /^Cannot bind lane "public" \(acme_http\): address 127\.0\.0\.1:\d+/);
    assert.match(onHealth[0], /overlaps lane "local_health"/);

    const wildcard = await refusedBoot((config) => {
      const port = config.lanes.public.listen[0].port;
      config.lanes.public.acme_http = { hostname: "0.0.0.0", port, challenge_dir: "acme" };
    });
    assert.ok(wildcard.some((m) => m.includes('lane "public" (acme_http)')), wildcard.join("\n"));
  },
);
