/**
 * The control-protocol client: reply parsing (mid, data and end lines; failures), and a probe
 * against a scripted control port — the cookie sent as hex, the bootstrap phase read, a failure
 * reply and a silent port each ending the probe with a {@link ControlError} in bounded time.
 *
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { ControlError, getinfoValues, keywordArgs, ReplyParser } from "../src/torpool/control.ts";
import { probeTor } from "../src/torpool/probe.ts";
import { boundedTest } from "./fixtures/bounded_test.ts";

Deno.test("ReplyParser splits replies at their end line, across chunks, with data blocks", () => {
  const parser = new ReplyParser();
  assert.deepEqual(parser.push("250-PROTOCOLINFO 1\r\n250-AUTH METHODS=COOKIE"), []);
  const [info] = parser.push(' COOKIEFILE="/x/c"\r\n250 OK\r\n');
  assert.equal(info.status, 250);
  assert.deepEqual(info.lines.map((l) => [l.kind, l.text]), [
    ["-", "PROTOCOLINFO 1"],
    ["-", 'AUTH METHODS=COOKIE COOKIEFILE="/x/c"'],
    [" ", "OK"],
  ]);
  const replies = parser.push(
    "250+config-text=\r\nSocksPort 9050\r\n..dot\r\n.\r\n250 OK\r\n515 Authentication failed\r\n",
  );
  assert.equal(replies.length, 2);
  assert.equal(getinfoValues(replies[0]).get("config-text"), "SocksPort 9050\n.dot");
  assert.equal(replies[1].status, 515);
  assert.throws(() => new ReplyParser().push("hello\r\n"), ControlError);
});

Deno.test("keywordArgs() reads Tor's bootstrap phase, quoted values unescaped", () => {
  const args = keywordArgs(
    'WARN BOOTSTRAP PROGRESS=14 TAG=handshake SUMMARY="Handshaking with a \\"relay\\"" COUNT=2',
  );
  assert.equal(args.get("PROGRESS"), "14");
  assert.equal(args.get("TAG"), "handshake");
  assert.equal(args.get("SUMMARY"), 'Handshaking with a "relay"');
});

/** A control port that answers each command line with `answer(line)` (undefined: say nothing). */
async function scripted(answer: (line: string) => string | undefined) {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-control-" });
  const cookieFile = join(dir, "control_auth_cookie");
  const cookie = crypto.getRandomValues(new Uint8Array(32));
  await Deno.writeFile(cookieFile, cookie);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const heard: string[] = [];
  const conns: Deno.Conn[] = [];
  const served = (async () => {
    for await (const conn of listener) {
      conns.push(conn);
      (async () => {
        const buffer = new Uint8Array(4096);
        let partial = "";
        for (;;) {
          const n = await conn.read(buffer).catch(() => null);
          if (n === null) break;
          partial += new TextDecoder().decode(buffer.subarray(0, n));
          let end: number;
          while ((end = partial.indexOf("\r\n")) >= 0) {
            const line = partial.slice(0, end);
            partial = partial.slice(end + 2);
            heard.push(line);
            const reply = answer(line);
            if (reply !== undefined) await conn.write(new TextEncoder().encode(reply));
          }
        }
        try {
          conn.close();
        } catch { /* closed */ }
      })();
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    cookieFile,
    hex: [...cookie].map((b) => b.toString(16).padStart(2, "0")).join(""),
    heard,
    async close() {
      listener.close();
      await served;
      for (const conn of conns) {
        try {
          conn.close();
        } catch { /* closed */ }
      }
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function tor(line: string): string | undefined {
  if (line.startsWith("PROTOCOLINFO")) {
    return '250-PROTOCOLINFO 1\r\n250-AUTH METHODS=COOKIE,SAFECOOKIE COOKIEFILE="/c"\r\n' +
      '250-VERSION Tor="0.4.9.11"\r\n250 OK\r\n';
  }
  if (line.startsWith("AUTHENTICATE")) return "250 OK\r\n";
  if (line.startsWith("GETINFO")) {
    return '250-status/bootstrap-phase=NOTICE BOOTSTRAP PROGRESS=14 TAG=handshake SUMMARY="Handshaking with a relay"\r\n' +
      "250-status/circuit-established=0\r\n250 OK\r\n";
  }
  return "510 Unrecognized command\r\n";
}

boundedTest(
  "probeTor() authenticates with the hex cookie and reads bootstrap and circuit",
  async () => {
    const port = await scripted(tor);
    try {
      const status = await probeTor({
        host: "127.0.0.1",
        port: port.port,
        cookieFile: port.cookieFile,
        timeoutMs: 2000,
      });
      assert.equal(status.progress, 14);
      assert.equal(status.tag, "handshake");
      assert.equal(status.summary, "Handshaking with a relay");
      assert.equal(status.circuitEstablished, false);
      assert.ok(status.latencyMs >= 0);
      assert.deepEqual(port.heard, [
        "PROTOCOLINFO 1",
        `AUTHENTICATE ${port.hex}`,
        "GETINFO status/bootstrap-phase status/circuit-established",
      ]);
    } finally {
      await port.close();
    }
  },
  10_000,
);

boundedTest("probeTor() fails with the reply's status when authentication is refused", async () => {
  const port = await scripted((line) =>
    line.startsWith("AUTHENTICATE") ? "515 Authentication failed: Wrong length\r\n" : tor(line)
  );
  try {
    const error = await probeTor({
      host: "127.0.0.1",
      port: port.port,
      cookieFile: port.cookieFile,
      timeoutMs: 2000,
    }).catch((e) => e);
    assert.ok(error instanceof ControlError);
    assert.equal(error.status, 515);
    assert.equal(error.message, "AUTHENTICATE failed: 515 Authentication failed: Wrong length");
    assert.ok(!error.message.includes(port.hex), "the cookie is not in the message");
  } finally {
    await port.close();
  }
}, 10_000);

boundedTest("probeTor() gives up on a silent control port within its timeout", async () => {
  const port = await scripted(() => undefined);
  try {
    const started = Date.now();
    await assert.rejects(
      probeTor({ host: "127.0.0.1", port: port.port, cookieFile: port.cookieFile, timeoutMs: 200 }),
      { name: "ControlError", message: "No reply to PROTOCOLINFO within 200 ms" },
    );
    assert.ok(Date.now() - started < 1500);
  } finally {
    await port.close();
  }
}, 10_000);

boundedTest("probeTor() fails at once on a closed port", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  await assert.rejects(
    probeTor({ host: "127.0.0.1", port, cookieFile: "/nonexistent", timeoutMs: 2000 }),
    (error: Error) => error instanceof ControlError && /ECONNREFUSED/.test(error.message),
  );
}, 10_000);
