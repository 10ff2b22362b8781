/**
 * The operator's choices for failure replies (`errors`) are honoured: a template per status or per
 * class, read from a file relative to the config file or written inline; the request id sent only
 * when asked for; the envelope by choice; and every mistake refused naming file, field and value.
 * The end-to-end case runs `main.ts serve` under the flags `main.ts flags` derives (which must
 * grant the template file).
 *
 * @module
 */
import assert from "node:assert/strict";
import { ErrorPages } from "../src/request/error_pages.ts";
import { failureReply } from "../src/request/errors.ts";
import { errorsOf, ErrorsSchema, loadErrorPages } from "../src/config/errors_schema.ts";
import { ConfigError, formatProblem } from "../src/config/problems.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import * as v from "valibot";
import { checkConfig, freePorts, Gateway, proofConfig, writeConfig } from "./fixtures/gateway.ts";
import { request } from "./fixtures/http_client.ts";

Deno.test("error pages: the default answers the reason phrase as text, with no request id", () => {
  const { reply, extra } = ErrorPages.minimal().finish(
    failureReply("misdirected_request", "id-1", { headers: { "retry-after": "5" } }),
    "id-1",
  );
  assert.equal(reply.status, 421);
  assert.equal(reply.body, "Misdirected Request\n");
  assert.deepEqual(reply.headers, {
    "retry-after": "5",
    "content-type": "text/plain; charset=utf-8",
  });
  assert.deepEqual(extra, {});
  assert.equal(reply.failure, "misdirected_request", "still counted and logged by its kind");
});

Deno.test("error pages: json keeps the envelope, with the request id only when asked for", () => {
  const withId = new ErrorPages({ format: "json", requestId: true }).finish(
    failureReply("no_route", "id-2"),
    "id-2",
  );
  assert.deepEqual(JSON.parse(withId.reply.body as string).error, {
    code: "no_route",
    message: "No route matches this request",
    request_id: "id-2",
  });
  assert.deepEqual(withId.extra, { "x-request-id": "id-2" });
  const withoutId = new ErrorPages({ format: "json", requestId: false }).finish(
    failureReply("no_route", "id-3"),
    "id-3",
  );
  assert.equal(JSON.parse(withoutId.reply.body as string).error.request_id, undefined);
  assert.doesNotMatch(withoutId.reply.body as string, /id-3/);
  assert.deepEqual(withoutId.extra, {});
});

Deno.test("error pages: an exact status template wins over its class; other statuses fall back", () => {
  const pages = new ErrorPages({
    format: "minimal",
    requestId: true,
    templates: new Map([
      ["404", { body: "<p>{status} {reason} {request_id}</p>", contentType: "text/html" }],
      ["4xx", { body: "client {status}", contentType: "text/plain" }],
    ]),
  });
  const exact = pages.finish(failureReply("no_route", "r"), "r");
  assert.equal(exact.reply.body, "<p>404 Not Found r</p>");
  assert.equal(exact.reply.headers?.["content-type"], "text/html");
  assert.equal(
    pages.finish(failureReply("misdirected_request", "r"), "r").reply.body,
    "client 421",
  );
  assert.equal(pages.finish(failureReply("upstream_failed", "r"), "r").reply.body, "Bad Gateway\n");
  // A tenant's block status is the status a template is chosen by.
  const blocked = pages.finish(failureReply("tenant_blocked", "r", { status: 451 }), "r");
  assert.equal(blocked.reply.body, "client 451");
});

Deno.test("error pages: replies the gateway did not build as failures pass untouched", () => {
  const pages = ErrorPages.minimal();
  const ok = { status: 200, body: "fine" };
  assert.equal(pages.finish(ok, "r").reply, ok);
  assert.deepEqual(pages.finish(ok, "r").extra, { "x-request-id": "r" });
  const upstream = { status: 502, rawHeaders: ["a", "b"], body: "theirs" };
  assert.equal(pages.finish(upstream, "r").reply, upstream);
  const kept = pages.keeping(["node_revoked"]).finish(failureReply("node_revoked", "r"), "r");
  assert.equal(JSON.parse(kept.reply.body as string).error.code, "node_revoked");
  assert.deepEqual(kept.extra, { "x-request-id": "r" });
});

/** Loads an `errors` section written in `dir/config.yaml`. */
async function load(dir: string, section: Record<string, unknown>): Promise<ErrorPages> {
  const file = `${dir}/config.yaml`;
  const source = parseYaml(file, JSON.stringify({ errors: section }));
  if (Array.isArray(source)) throw new Error("unparsable");
  const raw = v.parse(ErrorsSchema, (source.value as { errors: unknown }).errors);
  return await loadErrorPages(errorsOf(raw, (path) => `${dir}/${path}`), source);
}

Deno.test("errors config: a template file is read relative to the config; mistakes name file, field and value", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.mkdir(`${dir}/errors`);
    await Deno.writeTextFile(`${dir}/errors/404.html`, "<h1>gone</h1>");
    const pages = await load(dir, { templates: { "404": { file: "errors/404.html" } } });
    const { reply } = pages.finish(failureReply("no_route", "r"), "r");
    assert.equal(reply.body, "<h1>gone</h1>");
    assert.equal(reply.headers?.["content-type"], "text/html; charset=utf-8");

    const missing = await load(dir, { templates: { "503": { file: "errors/503.html" } } })
      .then(() => undefined, (error) => error);
    assert.ok(missing instanceof ConfigError);
    const line = formatProblem(missing.problems[0]);
    assert.match(line, /config\.yaml/);
    assert.match(line, /errors\.templates\.503\.file/);
    assert.match(line, /errors\/503\.html/);

    const withheld = await load(dir, { templates: { "5xx": { body: "id {request_id}" } } })
      .then(() => undefined, (error) => error);
    assert.ok(withheld instanceof ConfigError);
    assert.match(formatProblem(withheld.problems[0]), /errors\.templates\.5xx\.body.*request_id/s);
    await load(dir, { request_id: true, templates: { "5xx": { body: "id {request_id}" } } });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("errors config: a status outside 400-599 and a template with both file and body are refused by check", async () => {
  const dir = await writeConfig(
    proofConfig({ public: freePorts(1)[0], local_health: 0, provider_health: 0 }, {
      errors: { templates: { "302": { body: "x" }, "404": { body: "x", file: "x.html" } } },
    }),
  );
  try {
    const result = await checkConfig(dir.config);
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /errors\.templates\.302/);
    assert.match(result.stderr, /Expected a status from "400" to "599"/);
    assert.match(result.stderr, /errors\.templates\.404.*exactly one of file or body/);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("errors config: an edge under its derived flags answers with the operator's templates and request id", async () => {
  const [deadPort, publicPort] = freePorts(2);
  const ports = { public: publicPort, local_health: 0, provider_health: 0 };
  const config = proofConfig(ports, {
    egress: { direct: [`127.0.0.1:${deadPort}`] },
    errors: {
      request_id: true,
      templates: {
        "421": { file: "pages/421.html" },
        "5xx": { body: "Down {status} {request_id}", content_type: "text/plain" },
      },
    },
  });
  const tenant = {
    host: "shop.test",
    routes: [{
      match: { prefix: "/dead/" },
      proxy: { backends: [{ url: `http://127.0.0.1:${deadPort}` }], attempts: 1 },
    }],
  };
  const dir = await writeConfig(config, [tenant]);
  await Deno.mkdir(`${dir.dir}/pages`);
  await Deno.writeTextFile(`${dir.dir}/pages/421.html`, "<p>Wrong door</p>\n");
  const gateway = await Gateway.start(dir, ports);
  try {
    assert.ok(gateway.flags.some((flag) => flag.includes(`${dir.dir}/pages/421.html`)));
    const id = ["X-Request-Id", "trace-me-1"] as [string, string];
    const misdirected = await request(publicPort, { headers: [["Host", "x.test"], id] });
    assert.equal(misdirected.status, 421);
    assert.equal(misdirected.body, "<p>Wrong door</p>\n");
    assert.equal(misdirected.headers["content-type"], "text/html; charset=utf-8");
    assert.equal(misdirected.headers["x-request-id"], "trace-me-1");
    const dead = await request(publicPort, {
      path: "/dead/",
      headers: [["Host", "shop.test"], id],
    });
    assert.equal(dead.status, 502);
    assert.equal(dead.body, "Down 502 trace-me-1");
    const missing = await request(publicPort, { path: "/none", headers: [["Host", "shop.test"]] });
    assert.equal(missing.status, 404);
    assert.equal(missing.body, "Not Found\n");
    assert.match(missing.headers["x-request-id"], /^[0-9a-f-]{36}$/);
  } finally {
    await gateway.dispose();
  }
});
