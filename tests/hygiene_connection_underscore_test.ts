/**
 * Rule 3 of issue 33, for header hygiene (src/proxy/hygiene.ts): a field a `Connection` header
 * names is hop-by-hop (RFC 9110 §7.6.1) and never forwarded — also when either side spells it with
 * `_` for `-`. CGI-style upstreams (PHP, many WSGI servers) read `X-Secret` and `x_secret` as one
 * variable, so a client that names `x_secret` in Connection while sending `X-Secret` (or the other
 * way round) must not get either through. Against the real gateway under its derived flags (the
 * adversarial arena), asserting on what the recording upstream received, with a control field that
 * must pass and the same fields passing when no Connection header names them.
 *
 * @module
 */
import assert from "node:assert/strict";
import { type Arena, headerValues, withArena } from "./adversarial/arena.ts";

/** The raw header names the upstream received for the one request it saw, lower-cased as sent. */
function received(arena: Arena): readonly string[] {
  assert.equal(arena.upstream.seen.length, 1, "the upstream received exactly one request");
  const raw = arena.upstream.seen[0].rawHeaders;
  return raw.filter((_, i) => i % 2 === 0);
}

/** Sends `/api/echo` with `headers` and returns what the upstream got for x-secret (any spelling). */
async function secretsThrough(
  arena: Arena,
  headers: [string, string][],
): Promise<{ names: readonly string[]; secret: string[]; control: string[] }> {
  arena.upstream.seen.length = 0;
  const response = await arena.send({ path: "/api/echo", headers });
  assert.equal(response.status, 200, response.body);
  const raw = arena.upstream.seen[0]?.rawHeaders ?? [];
  return {
    names: received(arena),
    // headerValues folds case and reads "_" as "-": every spelling of the field counts.
    secret: headerValues(raw, "x-secret"),
    control: headerValues(raw, "x-control"),
  };
}

Deno.test(
  "rule 3: a Connection header naming a field with _ for - still removes that field (X-Secret and x_secret) before forwarding",
  async () => {
    await withArena({}, async (arena) => {
      const fields: [string, string][] = [
        ["X-Secret", "dash"],
        ["x_secret", "underscore"],
        ["X-Control", "kept"],
      ];
      // The other side first: without a Connection nomination both spellings reach the upstream
      // (the gateway drops underscore twins only of the fields it owns), so the removals below are
      // the nomination's doing.
      const plain = await secretsThrough(arena, fields);
      assert.deepEqual(plain.secret, ["dash", "underscore"], `received ${plain.names}`);
      assert.deepEqual(plain.control, ["kept"]);

      const nominations = [
        "x_secret",
        "X_SECRET",
        "close, x_secret",
        "x-secret",
        "X-Secret",
        " x_secret ,keep-alive",
      ];
      for (const nomination of nominations) {
        // A second Connection field closes the connection after the answer (a list, RFC 9110 §5.3).
        const connection: [string, string][] = [["Connection", nomination], [
          "Connection",
          "close",
        ]];
        const got = await secretsThrough(arena, [...connection, ...fields]);
        assert.deepEqual(
          got.secret,
          [],
          `Connection: ${nomination} left x-secret in ${JSON.stringify(got.names)}`,
        );
        assert.deepEqual(got.control, ["kept"], `Connection: ${nomination} took the control`);
      }
    });
  },
);
