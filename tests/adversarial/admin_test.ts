/**
 * Acting on the gateway needs authority, not just a connection: against the real gateway (derived
 * flags), `POST /v1/drain`, `/v1/config/reload` and `/v1/tls/reload` on `local_health` answer 401
 * without the admin token (absent, wrong, another scheme, a prefix of it) and act with it; over a
 * Unix socket listener (file mode 0600: only the gateway's user connects) they act without one. A
 * token file others can read refuses the boot. Reading endpoints stay open.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  ADMIN_AUTH,
  ADMIN_TOKEN,
  freePorts,
  Gateway,
  grantFlags,
  proofConfig,
  writeConfig,
} from "../fixtures/gateway.ts";
import { json, request } from "../fixtures/http_client.ts";
import { unixRequest } from "../fixtures/unix_request.ts";

const ACTING = ["/v1/drain", "/v1/config/reload", "/v1/tls/reload"];

function lanePorts() {
  const [publicPort, localPort, providerPort] = freePorts(3);
  return { public: publicPort, local_health: localPort, provider_health: providerPort };
}

Deno.test("admin: acting endpoints refuse every request without the exact token", async () => {
  const ports = lanePorts();
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  try {
    const wrong: [string, string][][] = [
      [],
      [["Authorization", "Bearer wrong-token-0123456789abcdef"]],
      [["Authorization", `Basic ${btoa(`admin:${ADMIN_TOKEN}`)}`]],
      [["Authorization", `Bearer ${ADMIN_TOKEN.slice(0, -1)}`]],
      [["Authorization", `Bearer ${ADMIN_TOKEN}x`]],
      [["Authorization", `Bearer`]],
      [["X-Admin-Token", ADMIN_TOKEN]],
    ];
    for (const path of ACTING) {
      for (const headers of wrong) {
        const response = await request(ports.local_health, { method: "POST", path, headers });
        assert.equal(response.status, 401, `${path} ${JSON.stringify(headers)}`);
        assert.equal(
          json<{ error: { code: string } }>(response).error.code,
          "admin_credential_required",
        );
        assert.equal(response.headers["www-authenticate"], "Bearer"); // no realm by default
      }
    }
    const health = await request(ports.local_health, { path: "/v1/health" });
    assert.equal(json(health).status, "ok", "nothing drained");
    assert.equal((await request(ports.local_health, { path: "/v1/ledger" })).status, 200);
    // The scheme is case-insensitive (RFC 9110 §11.1); the token is not.
    const reload = await request(ports.local_health, {
      method: "POST",
      path: "/v1/config/reload",
      headers: [["Authorization", `bearer ${ADMIN_TOKEN}`]],
    });
    assert.equal(reload.status, 200, reload.body);
    const drain = await request(ports.local_health, {
      method: "POST",
      path: "/v1/drain",
      headers: [ADMIN_AUTH],
    });
    assert.equal(drain.status, 202);
    const status = await gateway.exited();
    assert.equal(status.code, 0, "drained and exited");
  } finally {
    await gateway.dispose();
  }
});

Deno.test("admin: over a Unix socket listener (mode 0600) acting needs no token", async () => {
  const ports = lanePorts();
  const dir = await Deno.makeTempDir({ prefix: "portcullis-admin-" });
  const socket = `${dir}/local.sock`;
  const config = proofConfig(ports);
  // deno-lint-ignore no-explicit-any
  (config.lanes as any).local_health.listen.push({ path: socket });
  config.admin = {};
  const gateway = await Gateway.start(await writeConfig(config), ports);
  try {
    const mode = (await Deno.stat(socket)).mode! & 0o777;
    assert.equal(mode, 0o600, `socket mode 0${mode.toString(8)}`);
    const tcp = await request(ports.local_health, { method: "POST", path: "/v1/config/reload" });
    assert.equal(tcp.status, 401, "no token configured: TCP clients cannot act");
    const unix = await unixRequest(socket, "/v1/config/reload", "POST");
    assert.match(unix, /^HTTP\/1\.1 200 /, unix);
    assert.match(unix, /"outcome":"unchanged"/);
  } finally {
    await gateway.dispose();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("admin: a token file others can read refuses the boot, naming file and mode", async () => {
  const ports = lanePorts();
  const dir = await Deno.makeTempDir({ prefix: "portcullis-admin-" });
  const token = `${dir}/admin.token`;
  await Deno.writeTextFile(token, `${ADMIN_TOKEN}\n`);
  await Deno.chmod(token, 0o644);
  const config = proofConfig(ports);
  config.admin = { token_file: token };
  const written = await writeConfig(config);
  try {
    await assert.rejects(
      // `flags` refuses it as `check` does; the boot, given the grants, refuses it too.
      async () => Gateway.start(written, ports, await grantFlags(written.config)),
      /admin\.token_file \S*admin\.token is open to group or others \(mode 0644; make it 0600\)/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
    await Deno.remove(written.dir, { recursive: true });
  }
});
