/**
 * The public lane's tenant dataplane, in process over real loopback sockets: respond and redirect
 * actions, request ids, tenant resolution, block responses and file bodies.
 *
 * @module
 */
import assert from "node:assert/strict";
import { exchange, parseResponses, renderRequest, request } from "./fixtures/http_client.ts";
import {
  balancedLedger,
  type EdgeSetup,
  envelope,
  type TestEdge,
  withEdge,
} from "./fixtures/in_process.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const SITE = {
  host: "site.test",
  aliases: ["www.site.test"],
  routes: [
    {
      name: "home",
      match: { path: "/" },
      respond: {
        status: 200,
        headers: { "Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store" },
        body: "hello\n",
      },
    },
    { name: "teapot", match: { path: "/teapot", methods: ["GET"] }, respond: { status: 418 } },
    { name: "user", match: { path: "/users/{id}" }, redirect: { location: "/profiles/{id}" } },
    {
      name: "moved",
      match: { prefix: "/old/" },
      redirect: { status: 308, location: "https://new.test" },
    },
    { name: "file", match: { path: "/file" }, respond: { body_file: "assets/data.txt" } },
  ],
};
const BLOCKED = { host: "blocked.test", enabled: false, block_response: 403, routes: SITE.routes };
const DROPPED = { host: "dropped.test", enabled: false, block_response: "drop" };
const HELD = { host: "held.test", enabled: false, block_response: "timeout" };

/** 1 MiB and a bit of printable, position-dependent text. */
const DATA = Array.from({ length: 1024 * 1024 + 7 }, (_, i) => String.fromCharCode(33 + (i % 90)))
  .join("");

const SETUP: EdgeSetup = {
  tenants: [SITE, BLOCKED, DROPPED, HELD],
  files: { "assets/data.txt": DATA },
};

function site(t: TestEdge, path: string, headers: [string, string][] = [], method = "GET") {
  return request(t.ports.public, { method, path, headers: [["Host", "site.test"], ...headers] });
}

Deno.test("respond route: configured status, body and headers reach the client", async () => {
  await withEdge(SETUP, async (t) => {
    const home = await site(t, "/");
    assert.equal(home.status, 200);
    assert.equal(home.body, "hello\n");
    assert.equal(home.headers["content-type"], "text/plain; charset=utf-8");
    assert.equal(home.headers["cache-control"], "no-store");
    assert.equal(home.headers["content-length"], "6");
    const teapot = await site(t, "/teapot");
    assert.equal(teapot.status, 418);
    assert.equal(teapot.body, "");
    const wrongMethod = await site(t, "/teapot", [], "POST");
    assert.equal(wrongMethod.status, 404);
    assert.equal(envelope(wrongMethod).code, "no_route");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 3);
    assert.equal(ledger.completed, ledger.admitted);
  });
});

Deno.test("request id: a valid inbound X-Request-Id is echoed, in headers and envelopes", async () => {
  await withEdge(SETUP, async (t) => {
    const ok = await site(t, "/", [["X-Request-Id", "trace-abc.123"]]);
    assert.equal(ok.headers["x-request-id"], "trace-abc.123");
    const missing = await site(t, "/missing", [["X-Request-Id", "trace-def"]]);
    assert.equal(missing.headers["x-request-id"], "trace-def");
    assert.equal(envelope(missing).request_id, "trace-def");
  });
});

Deno.test("request id: an invalid or absent inbound id is replaced by a fresh UUID", async () => {
  await withEdge(SETUP, async (t) => {
    const long = "a".repeat(200);
    const tooLong = await site(t, "/", [["X-Request-Id", long]]);
    assert.equal(tooLong.status, 200);
    assert.match(tooLong.headers["x-request-id"], UUID);
    const spaced = await site(t, "/", [["X-Request-Id", "has space"]]);
    assert.equal(spaced.headers["x-request-id"], "has space", "an inner space is still valid");
    const first = await site(t, "/");
    const second = await site(t, "/");
    assert.match(first.headers["x-request-id"], UUID);
    assert.notEqual(first.headers["x-request-id"], second.headers["x-request-id"]);
  });
});

Deno.test("respond route: HEAD gets the headers and content-length without a body", async () => {
  await withEdge(SETUP, async (t) => {
    const raw = await exchange(
      t.ports.public,
      renderRequest({ method: "HEAD", path: "/", headers: [["Host", "site.test"]] }),
    );
    const [head] = parseResponses(raw, ["HEAD"]);
    assert.equal(head.status, 200);
    assert.equal(head.headers["content-length"], "6");
    assert.equal(head.headers["content-type"], "text/plain; charset=utf-8");
    assert.equal(raw.slice(raw.indexOf("\r\n\r\n") + 4), "", "no body bytes after the head");
  });
});

Deno.test("redirect route: a location without a path keeps the request's path and query", async () => {
  await withEdge(SETUP, async (t) => {
    const moved = await site(t, "/old/a/b?x=1&y=two");
    assert.equal(moved.status, 308);
    assert.equal(moved.headers.location, "https://new.test/old/a/b?x=1&y=two");
    assert.equal(moved.body, "");
  });
});

Deno.test("redirect route: template placeholders are filled from the path, re-encoded", async () => {
  await withEdge(SETUP, async (t) => {
    const plain = await site(t, "/users/42");
    assert.equal(plain.status, 302);
    assert.equal(plain.headers.location, "/profiles/42");
    const encoded = await site(t, "/users/a%20b");
    assert.equal(encoded.headers.location, "/profiles/a%20b");
    // An encoded slash is ambiguous (is it a separator?) and refused by default...
    const slash = await site(t, "/users/a%2Fb");
    assert.equal(slash.status, 400);
    assert.equal(envelope(slash).code, "ambiguous_path");
    assert.equal(envelope(await site(t, "/users/")).code, "no_route");
  });
  // ...or kept as data when the operator says so, and re-encoded into the location.
  const keep = {
    ...SETUP,
    edit: (config: Record<string, unknown>) => {
      config.paths = { escaped_slashes: "keep" };
    },
  };
  await withEdge(keep, async (t) => {
    const slash = await site(t, "/users/a%2fb");
    assert.equal(slash.status, 302);
    assert.equal(slash.headers.location, "/profiles/a%2Fb");
  });
});

Deno.test("tenant resolution: an unknown Host is a 421 envelope, never a default tenant", async () => {
  await withEdge(SETUP, async (t) => {
    for (const host of ["nobody.test", "test.invalid", "127.0.0.1"]) {
      const response = await request(t.ports.public, { path: "/", headers: [["Host", host]] });
      assert.equal(response.status, 421, host);
      const error = envelope(response);
      assert.deepEqual(Object.keys(error), ["code", "message", "request_id"]);
      assert.equal(error.code, "misdirected_request");
      assert.equal(error.message, "This gateway does not serve the requested host");
      assert.equal(error.request_id, response.headers["x-request-id"]);
      assert.match(error.request_id, UUID);
    }
  });
});

Deno.test("tenant resolution: case, port, trailing dot and aliases still resolve", async () => {
  await withEdge(SETUP, async (t) => {
    for (const host of ["SITE.TEST:8080", "Site.Test", "site.test.", "www.site.test:443"]) {
      const response = await request(t.ports.public, { path: "/", headers: [["Host", host]] });
      assert.equal(response.status, 200, host);
      assert.equal(response.body, "hello\n", host);
    }
  });
});

Deno.test("tenant routes: a path no route matches is a 404 no_route envelope", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await site(t, "/nothing/here", [["X-Request-Id", "nr-1"]]);
    assert.equal(response.status, 404);
    assert.equal(response.headers["content-type"], "application/json");
    assert.deepEqual(envelope(response), {
      code: "no_route",
      message: "No route matches this request",
      request_id: "nr-1",
    });
  });
});

Deno.test("disabled tenant: block_response 403 answers a 403 tenant_blocked envelope", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await request(t.ports.public, {
      path: "/",
      headers: [["Host", "blocked.test"]],
    });
    assert.equal(response.status, 403);
    assert.equal(envelope(response).code, "tenant_blocked");
    assert.doesNotMatch(response.body, /hello/, "the tenant's routes are not served");
  });
});

Deno.test("disabled tenant: block_response drop closes the connection without a response", async () => {
  await withEdge(SETUP, async (t) => {
    const raw = await exchange(
      t.ports.public,
      renderRequest({ path: "/", headers: [["Host", "dropped.test"]] }),
      3000,
    );
    assert.equal(raw, "");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 1);
    assert.equal(ledger.cancelled, 1);
    const metrics = await request(t.ports.local_health, { path: "/metrics" });
    assert.match(metrics.body, /^portcullis_responses_withheld_total\{lane="public"\} 1$/m);
  });
});

Deno.test("disabled tenant: block_response timeout holds the line until the public deadline", async () => {
  const setup: EdgeSetup = {
    ...SETUP,
    edit: (config) => config.ledger.lanes.public.deadline_ms = 300,
  };
  await withEdge(setup, async (t) => {
    const started = performance.now();
    const raw = await exchange(
      t.ports.public,
      renderRequest({ path: "/", headers: [["Host", "held.test"]] }),
      5000,
    );
    const elapsed = performance.now() - started;
    assert.equal(raw, "", "no response bytes, only a close");
    assert.ok(elapsed >= 250, `held ${elapsed} ms, expected about 300`);
    assert.ok(elapsed < 3000, `held ${elapsed} ms: closed by the deadline, not the client timeout`);
    const ledger = await balancedLedger(t);
    assert.equal(ledger.cancelled, 1);
    assert.equal(ledger.lanes.public.in_use, 0);
  });
});

Deno.test("body_file: the whole file is streamed with its exact content-length", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await site(t, "/file");
    assert.equal(response.status, 200);
    assert.equal(response.headers["content-length"], String(DATA.length));
    assert.equal(response.body.length, DATA.length);
    assert.ok(response.body === DATA, "the body is the file, byte for byte");
    const raw = await exchange(
      t.ports.public,
      renderRequest({ method: "HEAD", path: "/file", headers: [["Host", "site.test"]] }),
    );
    const [head] = parseResponses(raw, ["HEAD"]);
    assert.equal(head.headers["content-length"], String(DATA.length));
    assert.equal(raw.slice(raw.indexOf("\r\n\r\n") + 4), "");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.completed, 2);
    assert.equal(ledger.bytes_in_use, 0);
  });
});
