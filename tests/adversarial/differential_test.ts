/**
 * Differential request framing: seeded client byte streams (methods × framings × header spellings
 * × request-looking bodies × pipelining × connection reuse × sizes) go through the real gateway
 * subprocess to two independent HTTP/1.1 implementations — a recorder on h11 and real nginx — and
 * every stream is also parsed by h11 alone (the judge). Whatever reaches an upstream must be
 * exactly what the judge parsed, answered back to the client that sent it; nothing hidden in a
 * body, left behind on a pooled connection, or read past a framing error may ever arrive there.
 * See `tests/fixtures/differential_check.ts` for the invariants and
 * `tests/fixtures/differential_cases.ts` for the generator.
 *
 * A fixed seed runs in `deno task test`. `PORTCULLIS_FUZZ_SECONDS=<n>` keeps drawing rounds with
 * a random seed for about n seconds, `PORTCULLIS_FUZZ_SEED=<s>` fixes the seed and
 * `PORTCULLIS_FUZZ_CASE=<i>[,<j>…]` replays single cases. Without h11 (`python3-h11`) the test is
 * ignored, and without nginx only the h11 upstream runs (with a message) — unless
 * `PORTCULLIS_REQUIRE_PEERS=1`, which makes either a failure naming the package
 * (tests/fixtures/require.ts).
 *
 * @module
 */
import assert from "node:assert/strict";
import { type Case, generateCase, HOSTS, type Recorder } from "../fixtures/differential_cases.ts";
import { type ClientView, drive } from "../fixtures/differential_client.ts";
import { checkCase, checkUnattributed, type Finding } from "../fixtures/differential_check.ts";
import {
  connectionHistory,
  describe,
  type Received,
  receivedFrom,
} from "../fixtures/differential_received.ts";
import { type CaseRecord, formatFindings } from "../fixtures/differential_report.ts";
import {
  freePorts,
  Gateway,
  type LanePorts,
  proofConfig,
  writeConfig,
} from "../fixtures/gateway.ts";
import { type H11Event, H11Upstream, judgeStreams } from "../fixtures/h11.ts";
import { type NginxEntry, NginxUpstream } from "../fixtures/nginx.ts";
import { optionalPeer, peerTest, REQUIRE_PEERS_ENV } from "../fixtures/require.ts";

const FIXED_SEED = 0x5eed;
/**
 * Cases in the fixed-seed run. Measured on a 2-core machine: 15–20 s in all (judging ~1 s,
 * booting ~2 s, driving ~10 s, stopping ~2 s), plus up to 2 × DEADLINE_MS when the ledger leaks.
 */
const FIXED_CASES = 1000;
/** Cases per round of a longer run; each round boots a fresh gateway and fresh upstreams. */
const ROUND_CASES = 300;
/**
 * Client connections in flight at once. Most cases take milliseconds; a few wait for one of the
 * gateway's timeouts (a refused connection it keeps open, an exchange it lets hang), and these
 * waits overlap.
 */
const CONCURRENCY = 12;
/**
 * The public lane's deadline and request timeout: a request a desynchronised upstream never
 * answers is released by it, so the ledger check (which waits twice as long) sees only leaks.
 */
const DEADLINE_MS = 4000;
/**
 * Head and idle timeouts: a gateway that keeps a connection open after refusing a request is
 * waited for this long (the client waits for its close when the judge says it must close).
 */
const IDLE_MS = 3000;
/** The backstop per connection; the client stops on events, not on this. */
const CLIENT_DEADLINE_MS = 3 * DEADLINE_MS;

interface Settings {
  readonly seed: number;
  readonly seconds: number;
  readonly only?: readonly number[];
}

function settings(): Settings {
  const seconds = Number(Deno.env.get("PORTCULLIS_FUZZ_SECONDS") ?? "0");
  const seedText = Deno.env.get("PORTCULLIS_FUZZ_SEED");
  const seed = seedText !== undefined
    ? Number(seedText) >>> 0
    : seconds > 0
    ? crypto.getRandomValues(new Uint32Array(1))[0]
    : FIXED_SEED;
  const only = Deno.env.get("PORTCULLIS_FUZZ_CASE")?.split(",").map(Number);
  return { seed, seconds, only };
}

interface Totals {
  cases: number;
  requests: number;
  forwarded: number;
  refused: number;
  /** Cases whose connection hit the backstop (the gateway neither answered nor closed). */
  deadlines: number[];
}

interface Round {
  readonly records: Map<number, CaseRecord>;
  readonly findings: Finding[];
  readonly before: (r: Received) => readonly Received[];
  readonly stderr: string;
}

async function startGateway(h11Port: number, nginxPort?: number): Promise<Gateway> {
  const [publicPort, localPort, providerPort] = freePorts(3);
  const ports: LanePorts = {
    public: publicPort,
    local_health: localPort,
    provider_health: providerPort,
  };
  const config = proofConfig(ports);
  config.timeouts = { header_ms: IDLE_MS, idle_ms: IDLE_MS, request_ms: DEADLINE_MS };
  const upstreams = nginxPort === undefined ? [h11Port] : [h11Port, nginxPort];
  config.egress = { direct: upstreams.map((p) => `127.0.0.1:${p}`), connect_timeout_ms: 1000 };
  // deno-lint-ignore no-explicit-any
  const ledger = config.ledger as any;
  // Room for every case in flight, even with reservations leaking, so later cases still run.
  ledger.application_slots = 128;
  ledger.lanes.public.deadline_ms = DEADLINE_MS;
  const tenant = (host: string, port: number) => ({
    host,
    routes: [{
      name: "all",
      match: { prefix: "/" },
      proxy: { backends: [{ url: `http://127.0.0.1:${port}` }] },
    }],
  });
  const tenants = [tenant(HOSTS.h11, h11Port)];
  if (nginxPort !== undefined) tenants.push(tenant(HOSTS.nginx, nginxPort));
  const dir = await writeConfig(config, tenants);
  try {
    return await Gateway.start(dir, ports);
  } catch (error) {
    await Deno.remove(dir.dir, { recursive: true }).catch(() => {});
    throw error;
  }
}

/** Runs `work` over `items`, `width` at a time. */
async function pool<T>(items: readonly T[], width: number, work: (item: T) => Promise<void>) {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await work(items[next++]);
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
}

/** Invariant 5: the gateway is still up and every reservation was released. */
async function checkLedger(gateway: Gateway, views: readonly ClientView[]): Promise<Finding[]> {
  const refused = views.filter((v) => v.connectError !== undefined).length;
  const kind = "the gateway stopped accepting connections during the run";
  if (refused > 0) return [{ invariant: 5, kind, detail: `${refused} connection(s) refused` }];
  try {
    const ledger = await gateway.ledgerWhen((r) => r.outstanding === 0, 2 * DEADLINE_MS);
    if (ledger.outstanding === 0 && ledger.double_release === 0) return [];
    return [{
      invariant: 5,
      kind: "the ledger does not balance after the run",
      detail: `outstanding ${ledger.outstanding}, double_release ${ledger.double_release}`,
    }];
  } catch (error) {
    return [{
      invariant: 5,
      kind: "the gateway's ledger could not be read",
      detail: String(error),
    }];
  }
}

/** One round: judge, boot, drive every case, stop everything, then check. */
async function runRound(cases: readonly Case[], nginxBinary: string | undefined): Promise<Round> {
  const verdicts = await judgeStreams(new Map(cases.map((c) => [String(c.index), c.bytes])));
  const views = new Map<number, ClientView>();
  const findings: Finding[] = [];
  const h11 = await H11Upstream.start();
  let nginx: NginxUpstream | undefined;
  let gateway: Gateway | undefined;
  let h11Events: H11Event[] = [];
  let nginxLog: NginxEntry[] = [];
  try {
    if (nginxBinary) nginx = await NginxUpstream.start(nginxBinary);
    const started = await startGateway(h11.port, nginx?.port);
    gateway = started;
    await pool(cases, CONCURRENCY, async (kase) => {
      const verdict = verdicts.get(String(kase.index))!;
      views.set(kase.index, await drive(started.ports.public, kase, verdict, CLIENT_DEADLINE_MS));
    });
    findings.push(...await checkLedger(started, [...views.values()]));
  } finally {
    await gateway?.dispose();
    nginxLog = (await nginx?.stop()) ?? [];
    h11Events = await h11.stop();
  }
  const received = receivedFrom(h11Events, nginxLog);
  const bySeq = new Map<string, Received>(
    received.filter((r) => r.seq !== "").map((r) => [`${r.recorder}:${r.seq}`, r]),
  );
  const records = new Map<number, CaseRecord>();
  for (const kase of cases) {
    const mine = received.filter((r) => r.caseIndex === kase.index);
    const record = {
      kase,
      verdict: verdicts.get(String(kase.index))!,
      view: views.get(kase.index)!,
      received: mine,
    };
    records.set(kase.index, record);
    findings.push(...checkCase(kase, record.verdict, record.view, mine, bySeq));
  }
  findings.push(...checkUnattributed(received, new Set(cases.map((c) => c.index))));
  return { records, findings, before: connectionHistory(received), stderr: gateway?.stderr ?? "" };
}

peerTest(
  "differential: upstreams receive exactly the requests h11 parses from the client's bytes",
  ["python3-h11"],
  differential,
);

/** The test: fixed-seed rounds (or fuzzing for `PORTCULLIS_FUZZ_SECONDS`), findings reported. */
async function differential(): Promise<void> {
  const { seed, seconds, only } = settings();
  const nginxBinary = optionalPeer("nginx");
  if (!nginxBinary) {
    console.log(
      "differential: nginx is not installed; only the h11 upstream runs " +
        `(${REQUIRE_PEERS_ENV}=1 makes this a failure)`,
    );
  }
  const recorders: Recorder[] = nginxBinary ? ["h11", "nginx"] : ["h11"];
  if (seconds > 0) console.log(`differential: seed ${seed} for ~${seconds} s`);
  const totals: Totals = { cases: 0, requests: 0, forwarded: 0, refused: 0, deadlines: [] };
  const until = Date.now() + seconds * 1000;
  let round: Round;
  for (let next = 0;;) {
    const count = seconds > 0 ? ROUND_CASES : FIXED_CASES;
    const indexes = only ?? Array.from({ length: count }, (_, i) => next + i);
    next += indexes.length;
    round = await runRound(indexes.map((i) => generateCase(seed, i, recorders)), nginxBinary);
    for (const [index, record] of round.records) {
      totals.cases++;
      totals.requests += record.kase.requests.length;
      totals.forwarded += record.received.filter((r) => r.kind === "request").length;
      totals.refused += record.view.responses.filter((r) => !r.recorder).length;
      if (record.view.timedOut) totals.deadlines.push(index);
    }
    if (only || round.findings.length > 0 || Date.now() >= until) break;
  }
  console.log(
    `differential: ${totals.cases} cases, ${totals.requests} client requests, ` +
      `${totals.forwarded} forwarded, ${totals.refused} refused, seed ${seed}` +
      (totals.deadlines.length > 0
        ? `; the backstop ended cases ${totals.deadlines.join(", ")}`
        : ""),
  );
  if (round.findings.length > 0) {
    const tail = round.stderr.split("\n").filter((l) => l !== "").slice(-15).join("\n");
    const context = { describe, before: round.before };
    assert.fail(
      `${formatFindings(round.findings, round.records, context)}\n\n` +
        `gateway stderr (last lines):\n${tail}`,
    );
  }
}
