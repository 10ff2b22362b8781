/**
 * Unit tests for the tenant registry's respond rules and file handling: body files stay inside the
 * tenants folder, routes never set framing headers, editor leftovers are skipped, and the forms of
 * `block_response`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { blockReply } from "../src/pipeline/tenant_phases.ts";
import { loadTenants } from "../src/proxy/tenants.ts";
import type { RequestContext } from "../src/request/context.ts";
import { configErrorOf, tenantsDir } from "./fixtures/config_files.ts";

/** Loads the folder and returns the problems it must be refused with. */
async function problemsOf(dir: string) {
  const error = await configErrorOf(loadTenants(dir), "loadTenants() accepted a bad tenant set");
  return error.problems.map((p) => [p.path.join("."), p.value, p.message]);
}

/** A tenant `a.example` whose one route `/` responds with `respond` (a YAML flow mapping). */
function respondWith(respond: string): string {
  return `host: a.example\nroutes:\n  - name: r\n    match: { path: / }\n    respond: ${respond}\n`;
}

/** The compiled action of route `/` of `a.example`. */
async function actionOf(dir: string) {
  const registry = await loadTenants(dir);
  return registry.get("a.example")?.routes.match("GET", "/", "a.example")?.route.action;
}

Deno.test("loadTenants() resolves a body_file inside the tenants folder", async () => {
  const dir = await tenantsDir({
    "a.example.yaml": respondWith("{ body_file: pages/home.html }"),
    "pages/home.html": "<h1>home</h1>",
  });
  assert.deepEqual(await actionOf(dir), {
    kind: "respond",
    status: 200,
    headers: {},
    body: "",
    file: join(dir, "pages", "home.html"),
    root: dir, // every request that serves the file reads it rooted here
  });
});

Deno.test("loadTenants() accepts an absolute body_file that lies inside the folder", async () => {
  const dir = await tenantsDir({ "page.html": "x" });
  await Deno.writeTextFile(
    join(dir, "a.example.yaml"),
    respondWith(`{ body_file: "${join(dir, "page.html")}" }`),
  );
  const action = await actionOf(dir);
  assert.equal(action?.kind === "respond" ? action.file : undefined, join(dir, "page.html"));
});

Deno.test("loadTenants() accepts a body_file whose name starts with two dots", async () => {
  const dir = await tenantsDir({
    "a.example.yaml": respondWith("{ body_file: ..notes.html }"),
    "..notes.html": "notes",
  });
  const action = await actionOf(dir);
  assert.equal(action?.kind === "respond" ? action.file : undefined, join(dir, "..notes.html"));
});

Deno.test("loadTenants() refuses a body_file outside the tenants folder", async () => {
  const outside = await Deno.makeTempFile({ prefix: "portcullis_secret_" });
  const dir = await tenantsDir({
    "a.example.yaml": "host: a.example\nroutes:\n" +
      "  - { match: { path: /a }, respond: { body_file: ../../etc/passwd } }\n" +
      "  - { match: { path: /b }, respond: { body_file: pages/../../x.html } }\n" +
      `  - { match: { path: /c }, respond: { body_file: "${outside}" } }\n`,
  });
  const message = "A body file must be inside the tenants folder";
  assert.deepEqual(await problemsOf(dir), [
    ["routes.0.respond.body_file", "../../etc/passwd", message],
    ["routes.1.respond.body_file", "pages/../../x.html", message],
    ["routes.2.respond.body_file", outside, message],
  ]);
});

Deno.test("loadTenants() refuses a body_file that is a symlink leading outside the folder", async () => {
  const outside = await Deno.makeTempFile({ prefix: "portcullis_secret_" });
  const dir = await tenantsDir({
    "a.example.yaml": respondWith("{ body_file: link.html }"),
    "inside.html": "fine",
  });
  await Deno.symlink(outside, join(dir, "link.html"));
  assert.deepEqual(await problemsOf(dir), [[
    "routes.0.respond.body_file",
    "link.html",
    "A body file must be inside the tenants folder (it links outside)",
  ]]);
  await Deno.remove(join(dir, "link.html"));
  await Deno.symlink(join(dir, "inside.html"), join(dir, "link.html"));
  await loadTenants(dir); // a link that stays inside is accepted
});

Deno.test("loadTenants() refuses a body_file that is missing or not a file", async () => {
  const dir = await tenantsDir({
    "a.example.yaml": "host: a.example\nroutes:\n" +
      "  - { match: { path: /a }, respond: { body_file: absent.html } }\n" +
      "  - { match: { path: /b }, respond: { body_file: pages } }\n" +
      "  - { match: { path: /c }, respond: { body: x, body_file: pages/p.html } }\n",
    "pages/p.html": "p",
  });
  assert.deepEqual(await problemsOf(dir), [
    ["routes.0.respond.body_file", "absent.html", "Cannot read the body file"],
    ["routes.1.respond.body_file", "pages", "Not a regular file"],
    ["routes.2.respond", undefined, "Give body or body_file, not both"],
  ]);
});

Deno.test("loadTenants() refuses respond headers that set framing or the request id", async () => {
  const owned = [
    "Content-Length",
    "connection",
    "Transfer-Encoding",
    "X-Request-Id",
    "keep-alive",
    "TE",
    "Trailer",
    "Upgrade",
    "Proxy-Connection",
  ];
  const headers = owned.map((name) => `${name}: "1"`).join(", ");
  const dir = await tenantsDir({ "a.example.yaml": respondWith(`{ headers: { ${headers} } }`) });
  const message = "The gateway owns this header (framing, connection or request id)";
  assert.deepEqual(
    await problemsOf(dir),
    owned.map((name) => [`routes.0.respond.headers.${name}`, name, message]),
  );
});

Deno.test("loadTenants() keeps other respond headers, lower-cased", async () => {
  const dir = await tenantsDir({
    "a.example.yaml": respondWith(
      '{ status: 203, headers: { Content-Type: text/plain, X-Frame-Options: DENY }, body: "hi" }',
    ),
  });
  assert.deepEqual(await actionOf(dir), {
    kind: "respond",
    status: 203,
    headers: { "content-type": "text/plain", "x-frame-options": "DENY" },
    body: "hi",
    file: undefined,
  });
});

Deno.test("loadTenants() refuses a header value holding a control character", async () => {
  const dir = await tenantsDir({
    "a.example.yaml": respondWith('{ headers: { x-note: "a\\r\\nSet-Cookie: x=1" } }'),
  });
  assert.deepEqual(await problemsOf(dir), [[
    "routes.0.respond.headers.x-note",
    "a\r\nSet-Cookie: x=1",
    "A header value cannot hold control characters",
  ]]);
});

Deno.test("loadTenants() skips hidden files, editor leftovers and other extensions", async () => {
  const garbage = "host: [unclosed\n";
  const dir = await tenantsDir({
    "a.example.yaml": "host: a.example\n",
    ".b.example.yaml": garbage,
    ".a.example.yaml.swp": garbage,
    "a.example.yaml~": garbage,
    "a.example.yaml.tmp": garbage,
    "a.example.yaml.swp": garbage,
    "README.md": garbage,
    "pages/c.example.yaml": garbage,
  });
  await Deno.mkdir(join(dir, "d.example.yaml"));
  const registry = await loadTenants(dir);
  assert.deepEqual(registry.tenants.map((t) => t.host), ["a.example"]);
});

Deno.test("loadTenants() reads tenant files in name order", async () => {
  const dir = await tenantsDir({
    "c.example.yaml": "host: c.example\n",
    "a.example.yaml": "host: a.example\n",
    "b.example.yaml": "host: b.example\n",
  });
  const registry = await loadTenants(dir);
  assert.deepEqual(registry.tenants.map((t) => t.host), ["a.example", "b.example", "c.example"]);
});

const CONTEXT = { requestId: "req-1" } as RequestContext;

Deno.test("blockReply() answers a disabled tenant with its configured status", async () => {
  const dir = await tenantsDir({
    "a.example.yaml": "host: a.example\nenabled: false\nblock_response: 451\n",
  });
  const tenant = (await loadTenants(dir)).get("a.example")!;
  assert.deepEqual([tenant.enabled, tenant.block], [false, 451]);
  const reply = blockReply(tenant, CONTEXT);
  assert.equal(reply.status, 451);
  assert.equal(reply.failure, "tenant_blocked");
  assert.deepEqual(JSON.parse(reply.body as string), {
    error: { code: "tenant_blocked", message: "This site is not available", request_id: "req-1" },
  });
});

Deno.test('blockReply() drops or holds the connection for "drop" and "timeout"', async () => {
  const dir = await tenantsDir({
    "a.example.yaml": "host: a.example\nenabled: false\nblock_response: drop\n",
    "b.example.yaml": "host: b.example\nenabled: false\nblock_response: timeout\n",
  });
  const registry = await loadTenants(dir);
  assert.deepEqual(blockReply(registry.get("a.example")!, CONTEXT), {
    status: 0,
    withhold: "drop",
    failure: "tenant_blocked",
  });
  assert.deepEqual(blockReply(registry.get("b.example")!, CONTEXT), {
    status: 0,
    withhold: "hold",
    failure: "tenant_blocked",
  });
});

Deno.test("loadTenants() refuses a block_response outside 400-599, drop and timeout", async () => {
  const dir = await tenantsDir({
    "a.example.yaml": "host: a.example\nblock_response: 200\n",
    "b.example.yaml": "host: b.example\nblock_response: later\n",
  });
  assert.deepEqual(await problemsOf(dir), [
    ["block_response", 200, "Expected a status from 400 to 599"],
    ["block_response", "later", 'Expected a status from 400 to 599, "drop" or "timeout"'],
  ]);
});
