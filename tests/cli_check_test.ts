/**
 * `check` verifies every file a config names (src/cli/references.ts), and `flags` refuses what
 * `check` refuses: certificate and key files, the admin token, the tenant-label salt, a remote
 * edge's token, a hub's token folder (the hub then does not start either), and route methods with
 * a did-you-mean. Run in this process ({@link runMain}) except where the process itself matters.
 *
 * @module
 */
import assert from "node:assert/strict";
import { TestPki } from "./fixtures/certs.ts";
import {
  freePorts,
  proofConfig,
  READ_ONLY,
  runCli,
  runMain,
  writeConfig,
} from "./fixtures/gateway.ts";
import { diagLines } from "./fixtures/diag_lines.ts";
import type { ConfigObject } from "./fixtures/in_process.ts";

function config(): ConfigObject {
  const [p, l, h] = freePorts(3);
  return proofConfig({ public: p, local_health: l, provider_health: h });
}

/** The stderr lines of a run, without the trailing empty one. */
function lines(text: string): string[] {
  return text.split("\n").filter((line) => line !== "");
}

/** Runs `check` and `flags` on `file`; both refuse with the same problems, flags printing nothing. */
async function refusedByBoth(file: string): Promise<string[]> {
  const check = await runMain(["check", file]);
  assert.equal(check.code, 1, check.stdout);
  assert.equal(check.stdout, "");
  const flags = await runMain(["flags", file]);
  assert.equal(flags.code, 1);
  assert.equal(flags.stdout, "", "flags prints no flags for a config check refuses");
  assert.equal(flags.stderr, check.stderr);
  return lines(check.stderr);
}

Deno.test("cli check: missing certificate files fail check and flags, naming field and value", async () => {
  const edge = config();
  edge.lanes.public.tls = {
    certificates: [{ cert_file: "pki/site.crt", key_file: "pki/site.key" }],
  };
  const dir = await writeConfig(edge);
  try {
    const said = await refusedByBoth(dir.config);
    assert.match(
      said[0],
      /^portcullis: \S+config\.yaml:\d+:\d+: lanes\.public\.tls\.certificates\[0\]\.cert_file: The file does not exist \(got "pki\/site\.crt"\)$/,
    );
    assert.match(
      said[1],
      /certificates\[0\]\.key_file: The file does not exist \(got "pki\/site\.key"\)$/,
    );
    assert.equal(said.at(-1), "portcullis: 2 problem(s); nothing was started");
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli check: a key that does not match, a file that is not PEM, an open key", async () => {
  const pki = await TestPki.create();
  const site = await pki.issue("site.test");
  const other = await pki.issue("other.test");
  await Deno.writeTextFile(`${pki.dir}/junk.crt`, "not a certificate\n");
  await Deno.writeTextFile(`${pki.dir}/open.key`, site.keyPem, { mode: 0o644 });
  await Deno.chmod(`${pki.dir}/open.key`, 0o644);
  const edge = config();
  edge.lanes.public.tls = {
    certificates: [
      { cert_file: site.certFile, key_file: other.keyFile },
      { cert_file: `${pki.dir}/junk.crt`, key_file: site.keyFile },
      { cert_file: site.certFile, key_file: `${pki.dir}/open.key` },
      { cert_file: site.certFile, key_file: site.keyFile },
    ],
  };
  const dir = await writeConfig(edge);
  try {
    const said = await refusedByBoth(dir.config);
    assert.equal(said.length, 4, said.join("\n"));
    assert.match(
      said[0],
      /certificates\[0\]\.key_file: The key does not belong to the certificate in /,
    );
    assert.match(said[1], /certificates\[1\]\.cert_file: Not a PEM certificate/);
    assert.match(said[2], /certificates\[2\]\.key_file: .*open to group or others \(mode 0644/);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
    await Deno.remove(pki.dir, { recursive: true });
  }
});

Deno.test("cli check: with acme_http a certificate not yet written is a warning, exit 0", async () => {
  const edge = config();
  const [acmePort] = freePorts(1);
  edge.lanes.public.tls = { certificates: [{ cert_file: "live.crt", key_file: "live.key" }] };
  edge.lanes.public.acme_http = { hostname: "127.0.0.1", port: acmePort, challenge_dir: "acme" };
  const dir = await writeConfig(edge);
  await Deno.mkdir(`${dir.dir}/acme`);
  try {
    const check = await runMain(["check", dir.config]);
    assert.equal(check.code, 0, check.stderr);
    assert.match(check.stdout, /is valid/);
    const warned = lines(check.stderr);
    assert.equal(warned.length, 2, check.stderr);
    assert.match(
      warned[0],
      /^portcullis: warning: .*cert_file: The file does not exist; the bootstrap certificate is served until the ACME client writes it/,
    );
    const flags = await runMain(["flags", dir.config]);
    assert.equal(flags.code, 0);
    assert.match(flags.stdout, /^--allow-net=/);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli check: the admin token, the salt and a remote edge's token file", async () => {
  const edge = config();
  edge.admin = { token_file: "admin.token" };
  edge.observe = { salt_file: "salt" };
  const dir = await writeConfig(edge);
  try {
    // A missing salt is a warning (the edge runs, unlabelled); a missing admin token a problem.
    const said = await refusedByBoth(dir.config);
    assert.match(
      said[0],
      /^portcullis: warning: .*observe\.salt_file: .*does not exist; no metric or log line would carry a tenant/,
    );
    assert.match(said[1], /admin\.token_file: The file does not exist \(got "admin\.token"\)$/);
    assert.equal(said.at(-1), "portcullis: 1 problem(s); nothing was started");
    await Deno.writeTextFile(`${dir.dir}/admin.token`, "", { mode: 0o600 });
    await Deno.writeTextFile(`${dir.dir}/salt`, "0123456789abcdef-salt\n", { mode: 0o600 });
    assert.match(
      lines((await runMain(["check", dir.config])).stderr)[0],
      /admin\.token_file: The file is empty/,
    );
    await Deno.writeTextFile(`${dir.dir}/admin.token`, "secret-token\n");
    const good = await runMain(["check", dir.config]);
    assert.equal(good.code, 0, good.stderr);
    assert.equal(good.stderr, "", "no warning once the salt is readable");
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli check: a remote edge whose hub.token_file is missing is refused", async () => {
  const edge = config();
  delete edge.tenants_dir;
  Object.assign(edge, {
    mode: "remote",
    cache_dir: "cache",
    hub: { url: "http://127.0.0.1:9443", token_file: "tokens/edge.token" },
  });
  const dir = await writeConfig(edge);
  try {
    const said = await refusedByBoth(dir.config);
    assert.match(
      said[0],
      /hub\.token_file: The file does not exist \(got "tokens\/edge\.token"\)$/,
    );
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli check: a misspelt route method is refused with the method it looks like", async () => {
  const tenant = {
    host: "shop.test",
    routes: [{ match: { path: "/", methods: ["GET", "HEDA", "post", "FROB"] }, respond: {} }],
  };
  const dir = await writeConfig(config(), [tenant]);
  try {
    const said = await refusedByBoth(dir.config);
    const file = `${dir.dir}/tenants/shop.test.yaml`;
    assert.match(
      said[0],
      new RegExp(
        `^portcullis: ${file}:\\d+:\\d+: routes\\[0\\]\\.match\\.methods\\[1\\]: HEDA is not a method; did you mean HEAD\\? \\(got "HEDA"\\)$`,
      ),
    );
    assert.match(said[1], /methods\[2\]: post is not a method; did you mean POST\?/);
    assert.match(said[2], /methods\[3\]: FROB is not a method \(expected an upper-case method/);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli check: a value outside a fixed list suggests the listed value it looks like", async () => {
  const dir = await writeConfig(
    "node_id: e1\nmode: remtoe\nlanes:\n  public: { listen: [{ hostname: 127.0.0.1, port: 1 }] }\n" +
      "ledger: { application_slots: 4, inflight_bytes: 4096, per_connection: 1 }\n",
  );
  try {
    const said = await refusedByBoth(dir.config);
    assert.match(
      said[0],
      /mode: Expected "local" or "remote"; did you mean "remote"\? \(got "remtoe"\)$/,
    );
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

/** A hub config with a token folder (`tokens`), written beside an empty runtime folder. */
async function hubDir(): Promise<{ dir: string; config: string }> {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-hub-check-" });
  await Deno.mkdir(`${dir}/runtime`);
  await Deno.writeTextFile(`${dir}/runtime/globals.yaml`, "policies: {}\n");
  const [api] = freePorts(1);
  const config = `${dir}/hub.yaml`;
  await Deno.writeTextFile(
    config,
    `role: hub\nnode_id: hub-1\nruntime_dir: runtime\n` +
      `api: { listen: [{ hostname: 127.0.0.1, port: ${api} }], tokens_dir: tokens, ` +
      `nodes: [edge-a, edge-b] }\n`,
  );
  return { dir, config };
}

Deno.test("cli check: a hub without its token folder fails check and flags, and does not start", async () => {
  const hub = await hubDir();
  try {
    const said = await refusedByBoth(hub.config);
    assert.match(said[0], /api\.tokens_dir: The token folder does not exist .* \(got "tokens"\)$/);
    const started = await runCli([...READ_ONLY, "--allow-net=127.0.0.1"], ["hub", hub.config]);
    assert.equal(started.code, 1);
    const logged = diagLines(started.stderr);
    assert.match(logged[0].msg, /api\.tokens_dir: The token folder does not exist/);
    assert.equal(logged.at(-1)?.msg, "1 problem(s); nothing was started");
  } finally {
    await Deno.remove(hub.dir, { recursive: true });
  }
});

Deno.test("cli check: a hub's token files are secrets; a listed node without one is a warning", async () => {
  const hub = await hubDir();
  await Deno.mkdir(`${hub.dir}/tokens`);
  try {
    const empty = await runMain(["check", hub.config]);
    assert.equal(empty.code, 0, empty.stderr);
    assert.match(
      empty.stderr,
      /^portcullis: warning: .*api\.tokens_dir: No token file for edge-a, edge-b \(listed in api\.nodes\)/,
    );
    await Deno.writeTextFile(`${hub.dir}/tokens/edge-a.token`, "t-a\n", { mode: 0o600 });
    await Deno.writeTextFile(`${hub.dir}/tokens/edge-b.token`, "t-b\n", { mode: 0o644 });
    await Deno.chmod(`${hub.dir}/tokens/edge-b.token`, 0o644);
    const open = await refusedByBoth(hub.config);
    assert.match(
      open[0],
      /api\.tokens_dir: Token file .*edge-b\.token is open to group or others \(mode 0644/,
    );
    await Deno.chmod(`${hub.dir}/tokens/edge-b.token`, 0o600);
    const good = await runMain(["check", hub.config]);
    assert.equal(good.code, 0, good.stderr);
    assert.equal(good.stderr, "");
  } finally {
    await Deno.remove(hub.dir, { recursive: true });
  }
});
