/**
 * The caps policy refuses a declared body over `max_body_bytes` from the head alone, before any
 * of the body is read or anything reaches the upstream. `policy_test.ts` sends the whole oversized
 * body, which the streaming limit also cuts off, so it cannot tell the two apart; here the client
 * declares a large body and sends only a few bytes of it. Killed mutation:
 * `policy.declared-body-cap-skipped`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { readResponse } from "./fixtures/in_process.ts";
import { failure, rawConnection, SHOP, withProxyEdge } from "./fixtures/proxy_edge.ts";

Deno.test("caps: a declared body over the limit is a 413 before any of it is read", async () => {
  await withProxyEdge({ policies: { caps: { max_body_bytes: 16 } } }, async (p) => {
    const { conn, close } = await rawConnection(p, 3000);
    try {
      const head = `POST /api/echo HTTP/1.1\r\nHost: ${SHOP}\r\nContent-Length: 100000\r\n\r\n`;
      await conn.write(new TextEncoder().encode(`${head}0123456789`));
      failure(await readResponse(conn), 413, "payload_too_large");
    } finally {
      close();
    }
    assert.equal(p.upstream.heads.length, 0, "the upstream never saw the request");
  });
});
