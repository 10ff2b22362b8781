/**
 * Files only under their roots, secrets at rest (issue 14, item 3), against the real gateway and
 * hub as subprocesses under the flags `main.ts flags` derives. Deno checks `--allow-read` on the
 * path, never on where a symlink leads, so each case plants a link to a "secret" outside the
 * granted folders — a file holding {@link MARKER} — and checks that the file is refused by name
 * and that the marker shows up in no response, no `/v1/config`, no reload answer and no log line:
 *
 * (a) a body file swapped for such a link after load is not served (500 envelope, the refusal
 *     logged), while a link that stays inside the tenants folder keeps working;
 * (b) a tenant file that is such a link is refused on reload, by name;
 * (c) a private key, a certificate and the tenant-label salt that are such links are refused at
 *     boot, by name;
 * (d) a key, a salt or a hub token file that group or others may read is refused, naming the file
 *     and its mode; the same files at 0600 are accepted.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { TestPki, writeCertificate } from "../fixtures/certs.ts";
import * as fixture from "../fixtures/gateway.ts";
import {
  freePorts,
  Gateway,
  grantFlags,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "../fixtures/gateway.ts";
import { HubProcess } from "../fixtures/hub.ts";
import {
  exchange,
  json,
  parseResponses,
  renderRequest,
  request,
  type RequestSpec,
  utf8,
} from "../fixtures/http_client.ts";
import { messages } from "../fixtures/diag_lines.ts";

/** What every outside file holds: it must never leave the gateway. */
const MARKER = "portcullis-outside-secret-3c9d41";
/** A passwd-like text: YAML reads it as one long string, which a rejection used to echo. */
const SECRET_TEXT = `${MARKER}:x:0:0:root:/root:/bin/sh\n`.repeat(8);
/** How long a log line may take to appear. */
const LOG_WAIT_MS = 10_000;

/** The admin credential of the test edges, where the fixtures define one. */
const ADMIN = (fixture as { ADMIN_AUTH?: [string, string] }).ADMIN_AUTH;

/** A folder outside every granted path, holding the secret text. */
async function outsideFolder(): Promise<{ dir: string; secret: string }> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-outside-" });
  const secret = join(dir, "secret.txt");
  await Deno.writeTextFile(secret, SECRET_TEXT, { mode: 0o600 });
  return { dir, secret };
}

function lanePorts(): LanePorts {
  const [publicPort, local, provider] = freePorts(3);
  return { public: publicPort, local_health: local, provider_health: provider };
}

/** Every byte of one exchange on the public lane, as text. */
async function rawPublic(gateway: Gateway, spec: RequestSpec): Promise<string> {
  return utf8(await exchange(gateway.ports.public, renderRequest(spec)));
}

/** Waits until stderr holds a line whose message matches `pattern`; returns that message. */
async function logLine(gateway: Gateway | HubProcess, pattern: RegExp): Promise<string> {
  const until = Date.now() + LOG_WAIT_MS;
  for (;;) {
    const line = messages(gateway.stderr).split("\n").find((l) => pattern.test(l));
    if (line) return line;
    if (Date.now() > until) {
      assert.fail(`no log line matches ${pattern} in ${LOG_WAIT_MS} ms:\n${gateway.stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function assertNoMarker(text: string, where: string): void {
  assert.ok(!text.includes(MARKER), `the outside file's content appears in ${where}:\n${text}`);
}

Deno.test("body_file: swapped for a link out of the tenants folder after load, it is refused; a link inside still serves", async () => {
  const outside = await outsideFolder();
  const ports = lanePorts();
  const tenant = {
    host: "files.test",
    routes: [
      { name: "page", match: { path: "/page" }, respond: { body_file: "assets/page.html" } },
      { name: "alias", match: { path: "/alias" }, respond: { body_file: "alias.html" } },
    ],
  };
  const dir = await writeConfig(proofConfig(ports), [tenant], {
    "assets/page.html": "public page",
    "assets/real.html": "real page",
    "assets/other.html": "other page",
  });
  const tenants = join(dir.dir, "tenants");
  await Deno.symlink(join(tenants, "assets", "real.html"), join(tenants, "alias.html"));
  const gateway = await Gateway.start(dir, ports);
  const get = (path: string, method = "GET") =>
    rawPublic(gateway, { method, path, headers: [["Host", "files.test"]] });
  try {
    assert.match(await get("/page"), /^HTTP\/1\.1 200 [^]*\r\n\r\npublic page$/);
    assert.match(await get("/alias"), /\r\n\r\nreal page$/);

    await Deno.remove(join(tenants, "assets", "page.html"));
    await Deno.symlink(outside.secret, join(tenants, "assets", "page.html"));
    await Deno.remove(join(tenants, "alias.html"));
    await Deno.symlink(join(tenants, "assets", "other.html"), join(tenants, "alias.html"));

    for (const method of ["GET", "HEAD"]) {
      const raw = await get("/page", method);
      assertNoMarker(raw, `the ${method} response`);
      const [response] = parseResponses(raw, [method]);
      assert.equal(response.status, 500, raw);
      if (method === "GET") {
        assert.equal(json<{ error: { code: string } }>(response).error.code, "internal_error");
      }
    }
    assert.match(await get("/alias"), /^HTTP\/1\.1 200 [^]*\r\n\r\nother page$/);
    await logLine(gateway, /File "assets\/page\.html" resolves outside /);
    const config = await request(ports.local_health, { path: "/v1/config" });
    assertNoMarker(config.body, "/v1/config");
    assertNoMarker(gateway.stderr, "stderr");
  } finally {
    await gateway.dispose();
    await Deno.remove(outside.dir, { recursive: true });
  }
});

Deno.test("tenant files: a link out of the tenants folder is refused on reload, by name, and shown nowhere", async () => {
  const outside = await outsideFolder();
  const ports = lanePorts();
  const gateway = await Gateway.start(await writeConfig(proofConfig(ports)), ports);
  try {
    await Deno.symlink(outside.secret, join(gateway.dir.dir, "tenants", "zz.yaml"));
    const reload = await request(ports.local_health, {
      method: "POST",
      path: "/v1/config/reload",
      headers: ADMIN ? [ADMIN] : [],
    });
    assertNoMarker(JSON.stringify(reload), "the reload answer");
    assert.equal(reload.status, 422, reload.body);
    assert.match(reload.body, /zz\.yaml/);
    assert.match(reload.body, /resolves outside/);

    const config = await request(ports.local_health, { path: "/v1/config" });
    assertNoMarker(config.body, "/v1/config");
    const problems = json<{ last_rejected: { problems: { file: string; message: string }[] } }>(
      config,
    ).last_rejected.problems;
    assert.ok(
      problems.some((p) => p.file.endsWith("/zz.yaml") && /resolves outside/.test(p.message)),
      config.body,
    );
    assert.equal((await request(ports.public, { headers: [["Host", "demo.test"]] })).status, 200);
    await logLine(gateway, /zz\.yaml.*resolves outside/);
    assertNoMarker(gateway.stderr, "stderr");
  } finally {
    await gateway.dispose();
    await Deno.remove(outside.dir, { recursive: true });
  }
});

/** `/v1/health`'s TLS section. */
async function tlsHealth(ports: LanePorts): Promise<{ bootstrap: boolean }> {
  const response = await request(ports.local_health, { path: "/v1/health" });
  assert.equal(response.status, 200, response.body);
  return json<{ tls: { bootstrap: boolean } }>(response).tls;
}

/** A config with TLS from `certs/` (one certificate per name) and the salt `metrics-salt`. */
async function tlsSite(ports: LanePorts, names: readonly string[]) {
  const config = proofConfig(ports, { observe: { salt_file: "metrics-salt" } });
  const lanes = config.lanes as Record<string, Record<string, unknown>>;
  lanes.public.tls = {
    name: "edge.test",
    watch: false,
    certificates: names.map((name, i) => ({
      cert_file: `certs/${name}.crt`,
      key_file: `certs/${name}.key`,
      default: i === 0,
    })),
  };
  const dir = await writeConfig(config);
  await Deno.mkdir(join(dir.dir, "certs"));
  return dir;
}

Deno.test("a key, a certificate and the salt linked out of their folders are refused at boot, by name", async () => {
  const outside = await outsideFolder();
  const pki = await TestPki.create();
  const ports = lanePorts();
  const dir = await tlsSite(ports, ["a.test", "b.test"]);
  const certs = join(dir.dir, "certs");
  try {
    const a = await pki.issue("a.test", { unwritten: true });
    await writeCertificate(a, {
      certFile: join(certs, "a.test.crt"),
      keyFile: join(outside.dir, "a.test.key"),
    });
    await Deno.symlink(join(outside.dir, "a.test.key"), join(certs, "a.test.key"));
    const b = await pki.issue("b.test", { unwritten: true });
    await writeCertificate(b, {
      certFile: join(outside.dir, "b.test.crt"),
      keyFile: join(certs, "b.test.key"),
    });
    await Deno.symlink(join(outside.dir, "b.test.crt"), join(certs, "b.test.crt"));
    await Deno.symlink(outside.secret, join(dir.dir, "metrics-salt"));

    // `flags` refuses these files as `check` does; given the grants, the boot refuses each too.
    const gateway = await Gateway.start(dir, ports, await grantFlags(dir.config));
    try {
      const root = `"${certs.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}"`;
      await logLine(
        gateway,
        new RegExp(
          `load certificate .*a\\.test\\.crt: key file .*a\\.test\\.key resolves outside ${root}`,
        ),
      );
      await logLine(
        gateway,
        new RegExp(
          `load certificate .*b\\.test\\.crt: certificate file .*b\\.test\\.crt resolves outside ${root}`,
        ),
      );
      await logLine(gateway, /tenant label salt ".*metrics-salt": resolves outside /);
      assert.equal((await tlsHealth(ports)).bootstrap, true, "no linked certificate is served");
      assertNoMarker(gateway.stderr, "stderr");
      const metrics = await request(ports.local_health, { path: "/metrics" });
      assertNoMarker(metrics.body, "/metrics");
    } finally {
      await gateway.dispose();
    }
  } finally {
    await pki.dispose();
    await Deno.remove(outside.dir, { recursive: true });
  }
});

Deno.test("a key and a salt open to group or others are refused at boot, naming file and mode; 0600 boots", async () => {
  const pki = await TestPki.create();
  const ports = lanePorts();
  const dir = await tlsSite(ports, ["a.test"]);
  const key = join(dir.dir, "certs", "a.test.key");
  const salt = join(dir.dir, "metrics-salt");
  try {
    const a = await pki.issue("a.test", { unwritten: true });
    await writeCertificate(a, { certFile: join(dir.dir, "certs", "a.test.crt"), keyFile: key });
    await Deno.writeTextFile(salt, "0123456789abcdef0123456789abcdef\n");
    await Deno.chmod(key, 0o644);
    await Deno.chmod(salt, 0o644);
    const exposed = await Gateway.start(dir, ports, await grantFlags(dir.config));
    try {
      await logLine(
        exposed,
        /key file .*a\.test\.key is open to group or others \(mode 0644; make it 0600\)/,
      );
      await logLine(
        exposed,
        /salt ".*metrics-salt": is open to group or others \(mode 0644; make it 0600\)/,
      );
      assert.equal((await tlsHealth(ports)).bootstrap, true);
    } finally {
      await exposed.stop();
    }

    await Deno.chmod(key, 0o600);
    await Deno.chmod(salt, 0o600);
    const kept = await Gateway.start(dir, ports);
    try {
      assert.equal((await tlsHealth(ports)).bootstrap, false, kept.stderr);
      assert.doesNotMatch(
        kept.stderr,
        /open to group or others|Cannot load certificate|label salt/,
      );
    } finally {
      await kept.dispose();
    }
  } finally {
    await pki.dispose();
    await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("hub: a token file open to group or others authenticates nobody and is named with its mode", async () => {
  const hub = await HubProcess.start({ nodes: [] });
  try {
    const token = "token-0123456789abcdef";
    await Deno.writeTextFile(join(hub.dir, "tokens", "open-node.token"), `${token}\n`, {
      mode: 0o644,
    });
    await Deno.writeTextFile(join(hub.dir, "tokens", "kept-node.token"), `${token}\n`, {
      mode: 0o600,
    });
    const poll = (node: string) =>
      request(hub.apiPort, {
        path: `/v1/config/stream?node_id=${node}&wait=0`,
        headers: [["Authorization", `Bearer ${token}`]],
      });
    assert.equal((await poll("open-node")).status, 404);
    assert.equal((await poll("kept-node")).status, 200);
    await logLine(hub, /"open-node\.token" is open to group or others \(mode 0644; make it 0600\)/);
  } finally {
    await hub.dispose();
  }
});
