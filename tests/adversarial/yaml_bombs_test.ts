/**
 * Hostile YAML against every place a tenant file is parsed, as an operator meets it: `check` and
 * `serve` on the real CLI, a local edge's `POST /v1/config/reload` (real gateway, derived flags)
 * and a hub's (real hub subprocess). Issue 14: an alias bomb made `check` and boot die with an
 * uncaught `ReferenceError`, a live reload answer 502 `unreachable` with no rejection recorded, and
 * the hub's reload answer 500.
 *
 * Every document of {@link hostileDocuments} must give a located diagnostic (file, line, column)
 * starting `portcullis:` on the CLI, a 422 with the problem recorded in `/v1/config` on a reload,
 * no stack trace anywhere, and the previous generation serving on.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  ADMIN_AUTH,
  checkConfig,
  derivedFlags,
  freePorts,
  Gateway,
  proofConfig,
  READ_ONLY,
  runCli,
  writeConfig,
} from "../fixtures/gateway.ts";
import { getFrom, HubProcess, tenantText } from "../fixtures/hub.ts";
import { json, request } from "../fixtures/http_client.ts";
import { mulberry32 } from "../fixtures/random.ts";
import { messages } from "../fixtures/diag_lines.ts";

/** One hostile document: its name, its bytes, and what its diagnostic must say. */
interface Hostile {
  readonly name: string;
  readonly bytes: Uint8Array;
  readonly says: RegExp;
}

const encode = (text: string) => new TextEncoder().encode(text);

/** Billion laughs: `levels` anchors, each a list of `width` aliases of the one before. */
function aliasBomb(levels: number, width: number, anchor = "l"): string {
  let text = `host: bomb.test\n${anchor}0: &${anchor}0 ["lol"]\n`;
  for (let i = 1; i <= levels; i++) {
    const aliases = Array(width).fill(`*${anchor}${i - 1}`).join(", ");
    text += `${anchor}${i}: &${anchor}${i} [${aliases}]\n`;
  }
  return `${text}routes: []\n`;
}

/**
 * The hostile documents: alias bombs (fixed, with merge keys, and three drawn from `seed`), aliases
 * out of order or inside their own anchor, nesting 100,000 deep in flow, in compact block and by
 * indentation, characters YAML does not allow (NUL, C1, a BOM inside, bytes that are not UTF-8),
 * a duplicate key, two documents, a list as a key, and a number too large for any field.
 */
export function hostileDocuments(seed = 14): Hostile[] {
  const BOMB = /Invalid YAML: aliases stand for more than 50 nodes/;
  const DEEP = /Invalid YAML: nested more than 64 levels deep/;
  const random = mulberry32(seed);
  const draw = (low: number, high: number) => low + Math.floor(random() * (high - low + 1));
  const text: [string, string, RegExp][] = [
    ["bomb", aliasBomb(9, 9), BOMB],
    ["merge-bomb", `${aliasBomb(5, 9)}<<: [*l5, *l5]\n`, BOMB],
    ...[1, 2, 3].map((i): [string, string, RegExp] => {
      const [levels, width] = [draw(4, 9), draw(4, 9)];
      return [`bomb-${seed}-${i}-${levels}x${width}`, aliasBomb(levels, width, `a${i}_`), BOMB];
    }),
    ["alias-first", "host: a.test\nroutes: *later\nx: &later []\n", /alias \*later comes before/],
    ["alias-cycle", "host: a.test\nroutes: &r [*r]\n", /alias \*r is inside its own anchor/],
    ["deep-flow", `host: a.test\nroutes: ${"[".repeat(100_000)}${"]".repeat(100_000)}\n`, DEEP],
    ["deep-map", `host: a.test\nx: ${"{a: ".repeat(50_000)}1${"}".repeat(50_000)}\n`, DEEP],
    ["deep-dash", `host: a.test\nroutes:\n${"- ".repeat(100_000)}x\n`, DEEP],
    ["deep-indent", Array.from({ length: 200 }, (_, i) => `${" ".repeat(i)}- `).join("\n"), DEEP],
    ["nul", "host: a.test\nroutes: []\nnote: a\u0000b\n", /character U\+0000/],
    ["c1-control", "host: a.test\nroutes: []\nnote: a\u0090b\n", /character U\+0090/],
    ["bom-inside", "host: a.test\n\uFEFFroutes: []\n", /byte order mark/],
    ["duplicate-key", "host: a.test\nroutes: []\nroutes: []\n", /Map keys must be unique/],
    ["two-documents", "host: a.test\n---\nhost: b.test\n", /holds one document/],
    ["list-key", "host: a.test\n? [routes]\n: []\n", /a key must be text/],
    [
      "huge-number",
      `host: a.test\nroutes:\n  - { name: a, match: { path: / }, respond: { status: 1e400 } }\n`,
      /status/,
    ],
  ];
  const notUtf8 = Uint8Array.from([...encode("host: a.test\nroutes: []\nnote: "), 0xc3, 0x28, 10]);
  return [
    ...text.map(([name, body, says]) => ({ name, bytes: encode(body), says })),
    { name: "not-utf8", bytes: notUtf8, says: /not UTF-8/ },
  ];
}

const STACK_TRACE = /^\s+at |Uncaught|ReferenceError|RangeError: Maximum/m;

/** Writes a file the way the README asks writers to: a hidden temporary, renamed into place. */
async function place(dir: string, name: string, bytes: Uint8Array): Promise<void> {
  await Deno.writeFile(`${dir}/.${name}.tmp`, bytes);
  await Deno.rename(`${dir}/.${name}.tmp`, `${dir}/${name}`);
}

/** Asserts that the CLI output locates every hostile document, and shows no stack trace. */
function assertLocated(stderr: string, dir: string, documents: readonly Hostile[]): void {
  assert.doesNotMatch(messages(stderr), STACK_TRACE, stderr.slice(0, 2000));
  // check writes "portcullis: " text lines; a booting server JSON lines (the message read here).
  const lines = messages(stderr).split("\n").map((line) => line.replace(/^portcullis: /, ""));
  for (const { name, says } of documents) {
    const file = `${dir}/${name}.test.yaml`;
    const located = lines.filter((line) => line.startsWith(`${file}:`));
    assert.ok(
      located.some((line) => /^\S+:\d+:\d+: /.test(line) && says.test(line)),
      `${name}: no located diagnostic matching ${says} in:\n${located.join("\n") || stderr}`,
    );
  }
}

Deno.test("check and boot: every hostile document gives a located portcullis: diagnostic, no stack trace", async () => {
  const documents = hostileDocuments();
  const ports = { public: freePorts(1)[0], local_health: 0, provider_health: 0 };
  const configDir = await writeConfig(proofConfig(ports), []);
  const tenants = `${configDir.dir}/tenants`;
  try {
    // The flags of the config while its folder is valid (`flags` refuses what `check` refuses).
    const flags = await derivedFlags(configDir.config);
    for (const { name, bytes } of documents) await place(tenants, `${name}.test.yaml`, bytes);
    // `check` on the folder (as a hub reads it) and on the edge config, and `serve` under its
    // derived flags (refused at boot), side by side.
    const [folder, check, serve] = await Promise.all([
      runCli(READ_ONLY, ["check", tenants]),
      checkConfig(configDir.config),
      runCli(flags, ["serve", configDir.config]),
    ]);
    for (const run of [folder, check, serve]) {
      assert.equal(run.code, 1, run.stderr.slice(0, 2000));
      assertLocated(run.stderr, tenants, documents);
    }
    assert.match(check.stderr, /problem\(s\); nothing was started/);
  } finally {
    await Deno.remove(configDir.dir, { recursive: true });
  }
});

/** What a reload answered: status, outcome, and the problem naming `hostile.test.yaml`. */
interface ReloadView {
  readonly outcome: string;
  readonly generation: number;
  readonly last_rejected: {
    readonly problems: readonly { file: string; message: string; at?: string }[];
  } | null;
}

function assertRejected(status: number, body: ReloadView, hostile: Hostile, live: number): void {
  const what = `${hostile.name}: ${JSON.stringify(body).slice(0, 600)}`;
  assert.equal(status, 422, what);
  assert.equal(body.outcome, "rejected", what);
  assert.equal(body.generation, live, `${what}: the live generation stays`);
  const problems = body.last_rejected?.problems ?? [];
  assert.ok(
    problems.some((p) =>
      p.file.endsWith("/hostile.test.yaml") && /^\d+:\d+$/.test(p.at ?? "") &&
      hostile.says.test(p.message)
    ),
    what,
  );
}

Deno.test("edge reload: every hostile document is a recorded 422 rejection; the last generation serves on", async () => {
  const [publicPort, localPort] = freePorts(2);
  const ports = { public: publicPort, local_health: localPort, provider_health: 0 };
  const config = proofConfig(ports, { runtime: { watch: false, debounce_ms: 20 } });
  const gateway = await Gateway.start(await writeConfig(config), ports);
  const tenants = `${gateway.dir.dir}/tenants`;
  try {
    const reload = async () => {
      const response = await request(ports.local_health, {
        method: "POST",
        path: "/v1/config/reload",
        headers: [ADMIN_AUTH],
        body: "",
      });
      return { status: response.status, body: json<ReloadView>(response) };
    };
    const live = (await reload()).body.generation;
    for (const hostile of hostileDocuments()) {
      await place(tenants, "hostile.test.yaml", hostile.bytes);
      const { status, body } = await reload();
      assertRejected(status, body, hostile, live);
      const shown = json<ReloadView>(await request(ports.local_health, { path: "/v1/config" }));
      assert.deepEqual(shown.last_rejected, body.last_rejected, "/v1/config shows the rejection");
      const served = await getFrom(gateway, "demo.test");
      assert.equal(served.status, 200);
      assert.equal(served.body, "tenant-home");
    }
    await Deno.remove(`${tenants}/hostile.test.yaml`);
    const after = await reload();
    assert.equal(after.status, 200, JSON.stringify(after.body));
    assert.equal(after.body.generation, live);
    assert.doesNotMatch(messages(gateway.stderr), STACK_TRACE, gateway.stderr.slice(0, 2000));
  } finally {
    await gateway.stop();
    await Deno.remove(gateway.dir.dir, { recursive: true });
  }
});

Deno.test("hub reload: every hostile document is a 422 rejection shown on /v1/config; the set stays", async () => {
  const hub = await HubProcess.start({
    runtime: { "demo.test.yaml": tenantText("demo.test", "demo v1") },
    nodes: [],
  });
  try {
    const live = (await hub.status()).generation;
    for (const hostile of hostileDocuments()) {
      await place(hub.runtimeDir, "hostile.test.yaml", hostile.bytes);
      const response = await hub.reload();
      assertRejected(response.status, json<ReloadView>(response), hostile, live);
      const status = await hub.status();
      assert.equal(status.generation, live);
      assert.ok(status.last_rejected?.problems.some((p) => p.file.endsWith("/hostile.test.yaml")));
    }
    assert.doesNotMatch(messages(hub.stderr), STACK_TRACE, hub.stderr.slice(0, 2000));
  } finally {
    await hub.dispose();
  }
});
