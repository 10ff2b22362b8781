/**
 * Adversarial: an upstream's Content-Length as the client receives it (issue 31, finding 10:
 * `Content-Length: 1, 1` and two equal fields were forwarded as received). RFC 9110 §8.6 lets a
 * recipient take a list of identical values as one value, and then a proxy must forward one; values
 * that differ are an unrecoverable framing error (RFC 9112 §6.3).
 *
 * Each response shape is judged by h11 (tests/fixtures/h1_response_oracle.py) and sent through the
 * real gateway twice: a GET, which the gateway reads itself (owned reads: src/egress/h1_response.ts),
 * and a POST with a body, which goes through node's client. Where h11 refuses the head, both
 * answer 502. Where h11 takes it, the client gets exactly one Content-Length field whose value is
 * h11's length in plain decimal (no leading zeros), and h11's body — except that node's client
 * (llhttp) refuses every list and every repeated field, a 502: stricter than h11, listed below.
 *
 * @module
 */
import assert from "node:assert/strict";
import { freePorts } from "../fixtures/gateway.ts";
import { PYTHON } from "../fixtures/h11.ts";
import { peerTest } from "../fixtures/require.ts";
import { type Arena, SHOP, withArena } from "./arena.ts";

/** Response shapes by name: the upstream's Content-Length field lines and its body. */
const SHAPES: Record<string, { readonly fields: readonly string[]; readonly body: string }> = {
  "one value": { fields: ["Content-Length: 1"], body: "x" },
  "a list of one value twice": { fields: ["Content-Length: 1, 1"], body: "x" },
  "a list with odd spacing": { fields: ["Content-Length:  1 ,\t1 "], body: "x" },
  "two equal fields": { fields: ["Content-Length: 1", "content-length: 1"], body: "x" },
  "leading zeros": { fields: ["Content-Length: 001"], body: "x" },
  "leading zeros twice": { fields: ["Content-Length: 01", "Content-Length: 01"], body: "x" },
  "zero as a list": { fields: ["Content-Length: 00, 00"], body: "" },
  "a list that differs": { fields: ["Content-Length: 1, 2"], body: "xy" },
  "fields that differ": { fields: ["Content-Length: 1", "Content-Length: 2"], body: "xy" },
  "01 beside 1": { fields: ["Content-Length: 01", "Content-Length: 1"], body: "x" },
  "an empty member": { fields: ["Content-Length: 1,,1"], body: "x" },
  "a sign": { fields: ["Content-Length: +1"], body: "x" },
};

/** Shapes h11 takes that node's client refuses (llhttp: no lists, no repeated field). */
const NODE_REFUSES = new Set([
  "a list of one value twice",
  "a list with odd spacing",
  "two equal fields",
  "leading zeros twice",
  "zero as a list",
]);

function responseBytes(name: string): string {
  const { fields, body } = SHAPES[name];
  return `HTTP/1.1 200 OK\r\n${fields.map((f) => `${f}\r\n`).join("")}` +
    `Connection: close\r\n\r\n${body}`;
}

/** h11's reading of each shape: its length (as h11 keeps it) and body, or its refusal. */
async function h11Verdicts(): Promise<Map<string, { length?: string; body?: string }>> {
  const names = Object.keys(SHAPES);
  const input = names.map((name) => ({ bytes: btoa(responseBytes(name)), method: "GET" }));
  const child = new Deno.Command(PYTHON, {
    args: [new URL("../fixtures/h1_response_oracle.py", import.meta.url).pathname],
    stdin: "piped",
    stdout: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify(input)));
  await writer.close();
  const out = JSON.parse(new TextDecoder().decode((await child.output()).stdout)) as {
    ok: boolean;
    responses: { headers: [string, string][]; body: string }[];
  }[];
  return new Map(names.map((name, i) => {
    const { ok, responses } = out[i];
    if (!ok || responses.length !== 1) return [name, {}];
    const length = responses[0].headers.find(([n]) => n.toLowerCase() === "content-length")?.[1];
    return [name, { length, body: atob(responses[0].body) }];
  }));
}

/** An upstream over raw TCP answering `/len/<shape>` with that shape, then closing. */
function lengthUpstream() {
  const [port] = freePorts(1);
  const listener = Deno.listen({ hostname: "127.0.0.1", port });
  const serving = (async () => {
    for await (const conn of listener) answer(conn).catch(() => {}).finally(() => conn.close());
  })();
  return {
    port,
    async stop() {
      listener.close();
      await serving.catch(() => {});
    },
  };
}

/** Reads one request (head and Content-Length body) and writes the shape its path names. */
async function answer(conn: Deno.Conn): Promise<void> {
  let text = "";
  const buffer = new Uint8Array(4096);
  for (;;) {
    const end = text.indexOf("\r\n\r\n");
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(text)?.[1] ?? 0);
    if (end !== -1 && text.length >= end + 4 + length) break;
    const n = await conn.read(buffer);
    if (n === null) return;
    text += new TextDecoder().decode(buffer.subarray(0, n));
  }
  const path = decodeURIComponent(text.split(" ")[1].replace(/^\/len\//, ""));
  await conn.write(new TextEncoder().encode(responseBytes(path)));
}

/** What the client got: status, every Content-Length field value, Transfer-Encoding, body. */
async function through(arena: Arena, name: string, method: "GET" | "POST") {
  const body = method === "POST" ? "p" : "";
  const sent = `${method} /len/${encodeURIComponent(name)} HTTP/1.1\r\nHost: ${SHOP}\r\n` +
    `Connection: close\r\n${method === "POST" ? "Content-Length: 1\r\n" : ""}\r\n${body}`;
  const raw = await arena.raw(sent, 8000);
  const end = raw.indexOf("\r\n\r\n");
  const lines = raw.slice(0, end).split("\r\n");
  const fields = lines.slice(1).map((line) => line.split(/:\s*/, 2) as [string, string]);
  return {
    status: Number(lines[0].split(" ")[1]),
    lengths: fields.filter(([n]) => n.toLowerCase() === "content-length").map(([, v]) => v),
    chunked: fields.some(([n]) => n.toLowerCase() === "transfer-encoding"),
    body: raw.slice(end + 4),
  };
}

peerTest(
  "adversarial: a response's Content-Length reaches the client as one decimal value, or as a 502 where h11 refuses it",
  ["python3-h11"],
  async () => {
    const verdicts = await h11Verdicts();
    // The oracle agrees with the shapes' names: the last five are refused.
    assert.deepEqual([...verdicts].filter(([, v]) => v.length === undefined).map(([n]) => n), [
      "a list that differs",
      "fields that differ",
      "01 beside 1",
      "an empty member",
      "a sign",
    ]);
    const upstream = lengthUpstream();
    const failures: string[] = [];
    try {
      await withArena({
        routes: () => [{
          name: "len",
          match: { prefix: "/len/" },
          proxy: { backends: [{ url: `http://127.0.0.1:${upstream.port}` }], attempts: 1 },
        }],
        edit(config) {
          (config.egress as { direct: string[] }).direct.push(`127.0.0.1:${upstream.port}`);
        },
      }, async (arena) => {
        for (const [name, h11] of verdicts) {
          for (const method of ["GET", "POST"] as const) {
            const got = await through(arena, name, method);
            const refused = h11.length === undefined ||
              (method === "POST" && NODE_REFUSES.has(name));
            const want = refused
              ? { status: 502, lengths: got.lengths, chunked: got.chunked, body: got.body }
              : {
                status: 200,
                lengths: [String(Number(h11.length))],
                chunked: false,
                body: h11.body,
              };
            try {
              assert.deepEqual(got, want);
            } catch {
              failures.push(`${name} (${method}): got ${JSON.stringify(got)}`);
            }
          }
        }
      });
    } finally {
      await upstream.stop();
    }
    assert.deepEqual(failures, []);
  },
);
