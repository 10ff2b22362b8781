/**
 * What `socks5_tls` shows to whoever is not the hub, and what its port preamble admits (issue 34):
 * - on the path (a TCP tap between edge and relay records every byte both ways): the ClientHello
 *   offers `http/1.1` (or no ALPN), and no byte names the product or a pool port, while the
 *   request still reaches the upstream through the pool;
 * - to a prober without a certificate: a handshake like any HTTPS server's, no application byte,
 *   and an offer of the old `portcullis-socks/<port>` protocol refused, never selected;
 * - at the relay, from an admitted node: a preamble naming a port not in the pool, one that is
 *   wrong at any byte, short (the stream ends), slow (the deadline), or none (a SOCKS greeting
 *   first, as an edge built before the preamble sends) is refused, nothing reaching the pool;
 * - `check` and the hub's boot say, in one line, that `socks5_tls` is fingerprintable.
 *
 * @module
 */
import assert from "node:assert/strict";
import net from "node:net";
import tls from "node:tls";
import { stringify } from "yaml";
import { loadConfig } from "../src/config/load.ts";
import { ConfigError, formatPath } from "../src/config/problems.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { decodePreamble, encodePreamble } from "../src/egress/relay_preamble.ts";
import { resolveHubConfig } from "../src/hub/config.ts";
import { SOCKS5_TLS_WARNING } from "../src/egress/transport.ts";
import { freePorts, proofConfig, runMain, writeConfig } from "./fixtures/gateway.ts";
import { MINIMAL, writeConfigText } from "./fixtures/config_files.ts";
import { json } from "./fixtures/http_client.ts";
import { type Echo, withProxyEdge } from "./fixtures/proxy_edge.ts";
import { relayClient, type SocksHub, startSocksHub } from "./fixtures/socks_hub.ts";
import { startTestHub } from "./fixtures/hub_in_process.ts";
import { waitFor } from "./fixtures/in_process.ts";

/** Runs `body` with a hub (relay + pool of doubles) and always disposes of it. */
async function withSocksHub(
  setup: Parameters<typeof startSocksHub>[0],
  body: (hub: SocksHub) => Promise<void>,
): Promise<void> {
  const hub = await startSocksHub(setup);
  try {
    await body(hub);
  } finally {
    await hub.dispose();
  }
}

/** A TCP relay in front of `target` that records every byte each way. */
interface Tap {
  readonly port: number;
  /** Each connection's bytes, edge to hub and hub to edge. */
  readonly flows: { up: number[]; down: number[] }[];
  close(): Promise<void>;
}

async function startTap(target: number): Promise<Tap> {
  const flows: { up: number[]; down: number[] }[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer(function tapConnection(edge) {
    const flow = { up: [] as number[], down: [] as number[] };
    flows.push(flow);
    const hub = net.connect({ host: "127.0.0.1", port: target });
    for (const socket of [edge, hub]) {
      sockets.add(socket);
      socket.on("error", () => {}).on("close", () => sockets.delete(socket));
    }
    edge.on("data", (chunk: Uint8Array) => flow.up.push(...chunk));
    hub.on("data", (chunk: Uint8Array) => flow.down.push(...chunk));
    edge.pipe(hub).on("close", () => edge.destroy());
    hub.pipe(edge).on("close", () => hub.destroy());
  });
  const [port] = freePorts(1);
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  return {
    port,
    flows,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The ALPN protocol ids a ClientHello offers (RFC 8446 §4.1.2, RFC 7301 §3.1), from the first TLS
 * record of a connection; undefined when it has no ALPN extension.
 */
function offeredAlpn(bytes: readonly number[]): string[] | undefined {
  const u16 = (at: number) => (bytes[at] << 8) | bytes[at + 1];
  assert.equal(bytes[0], 22, "the first record is a handshake record");
  assert.equal(bytes[5], 1, "its first message is a ClientHello");
  let at = 9 + 2 + 32; // record head, message head, version, random
  at += 1 + bytes[at]; // session id
  at += 2 + u16(at); // cipher suites
  at += 1 + bytes[at]; // compression methods
  const end = at + 2 + u16(at);
  for (at += 2; at < end; at += 4 + u16(at + 2)) {
    if (u16(at) !== 16) continue;
    const ids: string[] = [];
    for (let id = at + 6; id < at + 4 + u16(at + 2); id += 1 + bytes[id]) {
      ids.push(String.fromCharCode(...bytes.slice(id + 1, id + 1 + bytes[id])));
    }
    return ids;
  }
  return undefined;
}

/** The product's name or a pool port, wherever it occurs in `bytes` as text. */
function telltales(bytes: readonly number[], ports: readonly number[]): string[] {
  const text = String.fromCharCode(...bytes);
  const found = /portcullis|socks/i.exec(text)?.[0];
  return [...found ? [found] : [], ...ports.map(String).filter((port) => text.includes(port))];
}

for (const alpn of [undefined, [] as string[]]) {
  const which = alpn === undefined ? "the default ALPN (http/1.1)" : "no ALPN (alpn: [])";
  Deno.test(`socks5_tls on the wire with ${which}: the ClientHello and every byte name neither the product nor a port`, async () => {
    await withSocksHub({}, async (hub) => {
      const tap = await startTap(hub.relayPort);
      try {
        const transport = {
          ...hub.transport(),
          hub: `127.0.0.1:${tap.port}`,
          ...(alpn ? { alpn } : {}),
        };
        await withProxyEdge({ socks: [], egress: () => ({ transport }) }, async (p) => {
          const response = await p.send({ path: "/api/echo?via=tap" });
          assert.equal(response.status, 200);
          assert.equal(json<Echo>(response).url, "/echo?via=tap");
        });
        assert.equal(
          hub.socks.flatMap((s) => s.connects).length,
          1,
          "one CONNECT reached the pool",
        );
        assert.ok(tap.flows.length >= 1);
        const ports = hub.socks.map((s) => s.port);
        for (const flow of tap.flows) {
          assert.deepEqual(offeredAlpn(flow.up), alpn?.length === 0 ? undefined : ["http/1.1"]);
          assert.deepEqual(telltales(flow.up, ports), [], "edge to hub");
          assert.deepEqual(telltales(flow.down, ports), [], "hub to edge");
        }
      } finally {
        await tap.close();
      }
    });
  });
}

/** What a client without a certificate sees of the relay. */
function probe(port: number, alpn: readonly string[]): Promise<{
  handshake: boolean;
  alpn?: string | false;
  bytes: number;
  error?: string;
}> {
  return new Promise((resolve) => {
    const seen: { handshake: boolean; alpn?: string | false; bytes: number; error?: string } = {
      handshake: false,
      bytes: 0,
    };
    const socket = tls.connect({
      host: "127.0.0.1",
      port,
      rejectUnauthorized: false,
      ALPNProtocols: [...alpn],
    });
    const timer = setTimeout(() => socket.destroy(), 3000);
    socket.once("secureConnect", () => {
      seen.handshake = true;
      seen.alpn = socket.alpnProtocol ?? false;
      socket.write("GET / HTTP/1.1\r\nHost: hub\r\n\r\n");
    });
    socket.on("data", (chunk: Uint8Array) => seen.bytes += chunk.length);
    socket.on("error", (error) => seen.error ??= error.message);
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(seen);
    });
  });
}

Deno.test("socks5_tls: a prober without a certificate gets an ordinary handshake, no byte, and never the old ALPN", async () => {
  await withSocksHub({}, async (hub) => {
    const port = hub.socks[0].port;
    const browser = await probe(hub.relayPort, ["h2", "http/1.1"]);
    assert.equal(browser.bytes, 0, "no application byte to a client without a certificate");
    if (browser.handshake) assert.equal(browser.alpn, "http/1.1");
    const legacy = await probe(hub.relayPort, [`portcullis-socks/${port}`]);
    assert.equal(legacy.handshake, false, "the old protocol is not selected, so not confirmed");
    assert.match(legacy.error ?? "", /no.?application.?protocol/i);
    assert.equal(legacy.bytes, 0);
    assert.equal(hub.socks[0].accepted, 0, "nothing reached the pool");
    assert.equal(hub.t.hub.relay!.snapshot().refused.preamble, 0);
  });
});

/** Opens an admitted connection, writes `bytes`, then ends it; resolves when the relay closes. */
function shortPreamble(hub: SocksHub, bytes: Uint8Array): Promise<number[]> {
  return new Promise((resolve) => {
    const reply: number[] = [];
    const socket = tls.connect({
      host: "127.0.0.1",
      port: hub.relayPort,
      ca: hub.pki.ca.certPem,
      cert: hub.edge.certPem,
      key: hub.edge.keyPem,
    });
    socket.once("secureConnect", () => socket.end(bytes));
    socket.on("data", (chunk: Uint8Array) => reply.push(...chunk));
    socket.on("error", () => {});
    socket.once("close", () => resolve(reply));
  });
}

Deno.test("socks5_tls: the relay refuses a port not in the pool, a wrong byte, a short, slow or missing preamble", async () => {
  await withSocksHub({ headerMs: 400 }, async (hub) => {
    const ca = hub.pki.ca.certPem;
    const port = hub.socks[0].port;
    const edge = { ca, cert: hub.edge.certPem, key: hub.edge.keyPem };
    const good = encodePreamble(port);
    const refused = () => hub.t.hub.relay!.snapshot().refused.preamble;
    const cases: [string, Promise<{ reply: number[] }> | (() => Promise<{ reply: number[] }>)][] = [
      [
        "port not in the pool",
        () => relayClient(hub.relayPort, { ...edge, preamble: encodePreamble(1) }),
      ],
      [
        "port 0",
        () => relayClient(hub.relayPort, { ...edge, preamble: Uint8Array.of(0, 1, 0, 0) }),
      ],
      [
        "version 2",
        () =>
          relayClient(hub.relayPort, { ...edge, preamble: Uint8Array.of(0, 2, good[2], good[3]) }),
      ],
      [
        "first byte",
        () =>
          relayClient(hub.relayPort, { ...edge, preamble: Uint8Array.of(1, 1, good[2], good[3]) }),
      ],
      [
        "garbage",
        () =>
          relayClient(hub.relayPort, { ...edge, preamble: Uint8Array.of(0xde, 0xad, 0xbe, 0xef) }),
      ],
      ["no preamble (a SOCKS greeting first)", () => relayClient(hub.relayPort, edge)],
      [
        "slow (one byte every 300 ms)",
        () => relayClient(hub.relayPort, { ...edge, preamble: good, gapMs: 300 }, 4000),
      ],
      [
        "short (3 bytes, then the end)",
        async () => ({ reply: await shortPreamble(hub, good.subarray(0, 3)) }),
      ],
    ];
    for (const [index, [name, run]] of cases.entries()) {
      const answer = await (typeof run === "function" ? run() : run);
      assert.deepEqual(answer.reply, [], `${name}: no SOCKS reply`);
      await waitFor(refused, (count) => count === index + 1, 3000);
    }
    assert.equal(hub.socks[0].accepted + hub.socks[1].accepted, 0, "nothing reached the pool");

    // The same preamble whole, or a byte at a time within the deadline, is relayed.
    const whole = await relayClient(hub.relayPort, { ...edge, preamble: good });
    assert.deepEqual(whole.reply, [5, 0]);
    assert.equal(whole.alpn, false, "a client offering no ALPN is served too");
    const split = await relayClient(hub.relayPort, {
      ...edge,
      preamble: good,
      gapMs: 20,
      alpn: ["http/1.1"],
    });
    assert.deepEqual(split.reply, [5, 0]);
    assert.equal(split.alpn, "http/1.1");
    assert.equal(hub.socks[0].accepted, 2);
    assert.equal(refused(), cases.length);
  });
});

Deno.test("socks5_tls mixed versions: an edge that names the port by ALPN is refused by a hub that reads a preamble", async () => {
  await withSocksHub({}, async (hub) => {
    const port = hub.socks[0].port;
    const old = { ca: hub.pki.ca.certPem, cert: hub.edge.certPem, key: hub.edge.keyPem };
    const answer = await relayClient(hub.relayPort, { ...old, alpn: [`portcullis-socks/${port}`] });
    assert.deepEqual(answer, { handshake: false, reply: [], alpn: undefined });
    assert.equal(hub.socks[0].accepted, 0);
  });
  // With alpn: [] the hub selects nothing: the old edge completes the handshake, sends its
  // greeting first, and is refused at the greeting's first byte.
  await withSocksHub({ alpn: [] }, async (hub) => {
    const port = hub.socks[0].port;
    const old = { ca: hub.pki.ca.certPem, cert: hub.edge.certPem, key: hub.edge.keyPem };
    const answer = await relayClient(hub.relayPort, { ...old, alpn: [`portcullis-socks/${port}`] });
    assert.equal(answer.alpn, false, "the hub selected nothing");
    assert.deepEqual(answer.reply, []);
    await waitFor(() => hub.t.hub.relay!.snapshot().refused.preamble, (n) => n === 1, 3000);
    assert.equal(hub.socks[0].accepted, 0);
  });
});

Deno.test("socks5_tls: check on the edge and on the hub, and the hub's boot, warn in one line", async () => {
  await withSocksHub({}, async (hub) => {
    const warning = hub.t.lines.filter((line) => line.includes(SOCKS5_TLS_WARNING));
    assert.equal(warning.length, 1, hub.t.lines.join("\n"));
    assert.match(
      warning[0],
      /^portcullis: warning: \S+hub\.yaml: transport\.socks5_tls: socks5_tls is/,
    );

    const [p, l, h] = freePorts(3);
    const edge = proofConfig({ public: p, local_health: l, provider_health: h });
    const dir = await writeConfig({ ...edge, egress: { transport: hub.transport() } });
    try {
      const check = await runMain(["check", dir.config]);
      assert.equal(check.code, 0, check.stderr);
      const said = check.stderr.split("\n").filter((line) => line.includes(SOCKS5_TLS_WARNING));
      assert.equal(said.length, 1, check.stderr);
      assert.match(
        said[0],
        /^portcullis: warning: \S+config\.yaml:\d+:\d+: egress\.transport\.kind: socks5_tls is the fingerprintable transport: .* prefer wireguard, else https_tunnel .* \(got "socks5_tls"\)$/,
      );
      const tunnel = await writeConfig({
        ...edge,
        egress: { transport: hub.transport(undefined, "https_tunnel") },
      });
      try {
        const quiet = await runMain(["check", tunnel.config]);
        assert.equal(quiet.code, 0, quiet.stderr);
        assert.ok(!quiet.stderr.includes("fingerprintable"), quiet.stderr);
      } finally {
        await Deno.remove(tunnel.dir, { recursive: true });
      }
      const hubCheck = await runMain(["check", `${hub.t.dir}/hub.yaml`]);
      assert.equal(hubCheck.code, 0, hubCheck.stderr);
      assert.match(
        hubCheck.stderr,
        /^portcullis: warning: \S+hub\.yaml:\d+:\d+: transport\.socks5_tls: socks5_tls is the fingerprintable transport: /m,
      );
    } finally {
      await Deno.remove(dir.dir, { recursive: true });
    }
  });
  const plain = await startTestHub();
  try {
    assert.ok(
      !plain.lines.some((line) => line.includes("fingerprintable")),
      "no relay, no warning",
    );
  } finally {
    await plain.dispose();
  }
});

Deno.test("socks5_tls alpn config: ids are checked where written, on the edge and on the hub", async () => {
  const edgeWith = async (alpn: unknown) => {
    const transport = {
      kind: "socks5_tls",
      hub: "10.0.0.2:9450",
      ports: [9050],
      cert_file: "e.crt",
      key_file: "e.key",
      ca_file: "ca.crt",
      alpn,
    };
    const file = await writeConfigText(
      `${MINIMAL}egress:\n  transport: ${JSON.stringify(transport)}\n`,
    );
    return await loadConfig(file).then(
      (config) => config.egress.transport,
      (error: ConfigError) => error.problems.map((p) => `${formatPath(p.path)}: ${p.message}`),
    );
  };
  const accepted = await edgeWith(["h2", "http/1.1"]);
  assert.ok(!Array.isArray(accepted) && accepted?.kind === "socks5_tls");
  assert.deepEqual(accepted.alpn, ["h2", "http/1.1"]);
  const none = await edgeWith([]);
  assert.ok(!Array.isArray(none) && none?.kind === "socks5_tls" && none.alpn.length === 0);
  for (
    const [alpn, problem] of [
      [
        ["http 1.1"],
        "egress.transport.alpn[0]: Expected 1-255 printable characters without spaces",
      ],
      [[""], "egress.transport.alpn[0]: Expected 1-255 printable characters without spaces"],
      [
        ["x".repeat(256)],
        "egress.transport.alpn[0]: Expected 1-255 printable characters without spaces",
      ],
      [["h2", "h2"], "egress.transport.alpn: Each ALPN protocol id may appear once"],
      [
        Array.from({ length: 9 }, (_, i) => `p${i}`),
        "egress.transport.alpn: Expected at most 8 ALPN protocol ids",
      ],
      ["http/1.1", "egress.transport.alpn: Expected a list of ALPN protocol ids, e.g. [http/1.1]"],
    ] as const
  ) {
    assert.deepEqual(await edgeWith(alpn), [problem], JSON.stringify(alpn));
  }
  const longest = await edgeWith(["x".repeat(255)]);
  assert.ok(!Array.isArray(longest) && longest?.kind === "socks5_tls", "255 characters is allowed");

  const hubWith = (alpn: unknown) => {
    const config = {
      role: "hub",
      node_id: "hub-1",
      runtime_dir: "runtime",
      api: { listen: [{ hostname: "127.0.0.1", port: 9443 }], tokens_dir: "tokens" },
      transport: {
        socks5_tls: {
          listen: { hostname: "127.0.0.1", port: 9450 },
          cert_file: "hub.crt",
          key_file: "hub.key",
          client_ca_file: "ca.crt",
          ...(alpn === undefined ? {} : { alpn }),
        },
      },
      pool: { socks: [{ hostname: "127.0.0.1", port: 9050 }] },
    };
    const parsed = parseYaml("/etc/portcullis/hub.yaml", stringify(config));
    if (Array.isArray(parsed)) throw new Error("unparsable");
    try {
      return resolveHubConfig(parsed).socks5Tls?.alpn;
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      return error.problems.map((p) => `${formatPath(p.path)}: ${p.message}`);
    }
  };
  assert.deepEqual(hubWith(undefined), ["http/1.1"], "the hub's default is the edges' default");
  assert.deepEqual(hubWith([]), []);
  assert.deepEqual(hubWith(["a b"]), [
    "transport.socks5_tls.alpn[0]: Expected 1-255 printable characters without spaces",
  ]);
});

Deno.test("relay preamble: 0x00 0x01 and a port 1-65535; anything else is garbage at its first wrong byte", () => {
  assert.deepEqual([...encodePreamble(9050)], [0, 1, 0x23, 0x5a]);
  assert.deepEqual(decodePreamble(Uint8Array.of(0, 1, 0x23, 0x5a, 5, 1, 0)), {
    kind: "port",
    port: 9050,
  });
  assert.deepEqual(decodePreamble(Uint8Array.of(0, 1, 0xff, 0xff)), { kind: "port", port: 65535 });
  assert.deepEqual(decodePreamble(Uint8Array.of(0, 1, 0, 1)), { kind: "port", port: 1 });
  assert.deepEqual(decodePreamble(Uint8Array.of(0, 1, 0, 0)), { kind: "garbage" });
  for (const partial of [[], [0], [0, 1], [0, 1, 0x23]]) {
    assert.deepEqual(decodePreamble(Uint8Array.from(partial)), { kind: "partial" });
  }
  for (const wrong of [[5], [0, 2], [1, 1, 0, 80], [0x16, 3, 1]]) {
    assert.deepEqual(decodePreamble(Uint8Array.from(wrong)), { kind: "garbage" }, String(wrong));
  }
  for (const port of [0, 65536, 1.5, -1]) assert.throws(() => encodePreamble(port), RangeError);
});
