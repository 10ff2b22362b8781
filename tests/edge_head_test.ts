/**
 * Request-head checks on the public lane, over raw bytes (so duplicate and conflicting headers
 * reach the gateway exactly as written): Host rules, framing, header count and size, target length
 * and absolute-form targets.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  exchange,
  parseResponses,
  type RawResponse,
  renderRequest,
} from "./fixtures/http_client.ts";
import { balancedLedger, type EdgeSetup, envelope, withEdge } from "./fixtures/in_process.ts";

/** Small limits so each cap is reached with a few bytes. */
const SETUP: EdgeSetup = {
  edit: (config) => config.limits = { headers: 10, header_bytes: 1024, target_bytes: 256 },
};

async function raw(port: number, bytes: string): Promise<RawResponse> {
  const text = await exchange(port, bytes, 5000);
  const responses = parseResponses(text);
  assert.equal(responses.length, 1, `one response, got ${JSON.stringify(text)}`);
  return responses[0];
}

/** Asserts a gateway-generated failure: status, envelope code, and a closed connection. */
function assertRefused(response: RawResponse, status: number, code: string): void {
  assert.equal(response.status, status);
  assert.equal(response.headers["content-type"], "application/json");
  assert.equal(envelope(response).code, code);
  assert.equal(response.headers.connection, "close");
}

Deno.test("request head: two Host headers are a 400 bad_request", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await raw(
      t.ports.public,
      "GET / HTTP/1.1\r\nHost: demo.test\r\nHost: demo.test\r\nConnection: close\r\n\r\n",
    );
    assertRefused(response, 400, "bad_request");
    assert.equal(envelope(response).request_id, response.headers["x-request-id"]);
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 1);
  });
});

Deno.test("request head: HTTP/1.1 without Host is a 400 bad_request envelope", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await raw(t.ports.public, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    assertRefused(response, 400, "bad_request");
    assert.equal(envelope(response).request_id, response.headers["x-request-id"]);
  });
});

Deno.test("request head: HTTP/1.0 without Host is allowed but names no tenant (421)", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await raw(t.ports.public, "GET / HTTP/1.0\r\n\r\n");
    assert.equal(response.status, 421);
    assert.equal(envelope(response).code, "misdirected_request");
  });
});

Deno.test("request head: an invalid Host value is a 400 bad_request", async () => {
  await withEdge(SETUP, async (t) => {
    for (const host of ["demo.test/evil", "demo.test:80:80", "a b"]) {
      const response = await raw(
        t.ports.public,
        renderRequest({ path: "/", headers: [["Host", host]] }),
      );
      assertRefused(response, 400, "bad_request");
    }
  });
});

Deno.test("request head: Transfer-Encoding beside Content-Length is a 400", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await raw(
      t.ports.public,
      "POST / HTTP/1.1\r\nHost: demo.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n" +
        "Connection: close\r\n\r\n0\r\n\r\n",
    );
    assertRefused(response, 400, "bad_request");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 0, "refused before the request was admitted");
  });
});

Deno.test("request head: Transfer-Encoding on HTTP/1.0 is a 400", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await raw(
      t.ports.public,
      "POST / HTTP/1.0\r\nHost: demo.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    assertRefused(response, 400, "bad_request");
    assert.doesNotMatch(response.body, /tenant-home/);
  });
});

Deno.test("request head: two differing Content-Length headers are a 400", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await raw(
      t.ports.public,
      "POST / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n" +
        "Connection: close\r\n\r\nab",
    );
    assertRefused(response, 400, "bad_request");
  });
});

Deno.test("request head: more header fields than limits.headers is a 431", async () => {
  await withEdge(SETUP, async (t) => {
    // renderRequest adds Connection, so Host + n extra + Connection = n + 2 fields.
    const fields = (n: number) =>
      renderRequest({
        path: "/",
        headers: [
          ["Host", "demo.test"],
          ...Array.from({ length: n }, (_, i): [string, string] => [`X-Field-${i}`, "v"]),
        ],
      });
    const atLimit = await raw(t.ports.public, fields(8));
    assert.equal(atLimit.status, 200, "exactly 10 fields are fine");
    assert.equal(atLimit.body, "tenant-home");
    const over = await raw(t.ports.public, fields(9));
    assertRefused(over, 431, "header_fields_too_large");
    assert.equal(envelope(over).request_id, over.headers["x-request-id"]);
  });
});

Deno.test("request head: header bytes over limits.header_bytes is a 431", async () => {
  await withEdge(SETUP, async (t) => {
    const response = await raw(
      t.ports.public,
      renderRequest({ path: "/", headers: [["Host", "demo.test"], ["X-Big", "b".repeat(2000)]] }),
    );
    assertRefused(response, 431, "header_fields_too_large");
    const metrics = await exchange(
      t.ports.local_health,
      renderRequest({ path: "/metrics" }),
    );
    assert.match(metrics, /^portcullis_protocol_errors_total\{lane="public"\} 1$/m);
  });
});

Deno.test("request head: a target longer than limits.target_bytes is a 414", async () => {
  await withEdge(SETUP, async (t) => {
    const target = (length: number) => "/" + "t".repeat(length - 1);
    const atLimit = await raw(
      t.ports.public,
      renderRequest({ path: target(256), headers: [["Host", "demo.test"]] }),
    );
    assert.equal(atLimit.status, 404, "a 256-byte target is read (and matches no route)");
    assert.equal(envelope(atLimit).code, "no_route");
    const over = await raw(
      t.ports.public,
      renderRequest({ path: target(257), headers: [["Host", "demo.test"]] }),
    );
    assertRefused(over, 414, "uri_too_long");
  });
});

Deno.test("request head: an absolute-form target must name the Host's authority", async () => {
  await withEdge(SETUP, async (t) => {
    const other = await raw(
      t.ports.public,
      renderRequest({ path: "http://other.test/", headers: [["Host", "demo.test"]] }),
    );
    assertRefused(other, 400, "bad_request");
    const same = await raw(
      t.ports.public,
      renderRequest({ path: "http://DEMO.test:80/?q=1", headers: [["Host", "demo.test"]] }),
    );
    assert.equal(same.status, 200);
    assert.equal(same.body, "tenant-home");
    const ledger = await balancedLedger(t);
    assert.equal(ledger.lanes.public.admitted, 2);
  });
});
