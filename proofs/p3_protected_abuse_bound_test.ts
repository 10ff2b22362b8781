/**
 * Proof 3 — protected-lane abuse bound: a flood on a protected lane gets that lane's own typed
 * overloads — the rate budget admits exactly its burst, the per-connection bound holds exactly
 * `per_connection` requests of one connection, a lane's floor is exactly its reserve and its
 * ceiling exactly reserve plus what it may borrow — and the other protected lane's floor is
 * untouched throughout.
 *
 * Every count is exact, computed from the configured numbers: the rate budget refills once per
 * 100 s, so nothing refills during the proof, and concurrent pressure is made by clients that hold
 * their reservations (see fixtures/holders.ts) rather than by requests hoped to overlap. Evidence
 * from outside (the client's answers) stands beside the ledger's counters.
 */
import assert from "node:assert/strict";
import {
  DEMO_TENANT,
  freePorts,
  Gateway,
  type LanePorts,
  type LedgerReading,
  proofConfig,
  writeConfig,
} from "../tests/fixtures/gateway.ts";
import { exchange, parseResponses, renderRequest, request } from "../tests/fixtures/http_client.ts";
import { envelope } from "../tests/fixtures/in_process.ts";
import { errorCode, explained, pollUntil, tally } from "./fixtures/evidence.ts";
import { type Holder, slowReader, stuckPipeliner } from "./fixtures/holders.ts";

const BURST = 5;
/** One token per 100 s: the bucket cannot refill while the proof runs. */
const TRICKLE = 0.01;

type Ledger = Record<string, unknown> & { lanes: Record<string, Record<string, unknown>> };

function lanePorts(): LanePorts {
  const [publicPort, localPort, providerPort] = freePorts(3);
  return { public: publicPort, local_health: localPort, provider_health: providerPort };
}

function config(ports: LanePorts, change: (ledger: Ledger) => void) {
  const base = proofConfig(ports);
  change(base.ledger as Ledger);
  return base;
}

/** Polls until `ready` holds for a ledger reading (a refused read counts as "not yet"). */
function ledgerUntil(gateway: Gateway, what: string, ready: (r: LedgerReading) => boolean) {
  let last: unknown;
  return pollUntil(what, async () => {
    const response = await request(gateway.ports.local_health, { path: "/v1/ledger" });
    if (response.status !== 200) {
      last = `ledger read refused: ${response.status} ${response.body}`;
      return undefined;
    }
    const reading: LedgerReading = JSON.parse(response.body);
    last = { lanes: reading.lanes, bytes_in_use: reading.bytes_in_use };
    return ready(reading) ? reading : undefined;
  }, { seen: () => last });
}

Deno.test("proof 3: a provider_health flood admits exactly its burst, then only rate_budget", async () => {
  const ports = lanePorts();
  const dir = await writeConfig(config(ports, (ledger) => {
    ledger.lanes.provider_health.rate = { per_second: TRICKLE, burst: BURST };
  }));
  const gateway = await Gateway.start(dir, ports);
  await explained([gateway], async () => {
    const flood = 24;
    const answers = await Promise.all(
      Array.from({ length: flood }, () => request(ports.provider_health, { path: "/healthz" })),
    );
    const limited = answers.filter((r) => errorCode(r) === "rate_budget");
    const passed = answers.filter((r) => errorCode(r) !== "rate_budget");
    // Exactly the burst passed the rate budget: served, or (all at once) refused by the lane's
    // pool after spending its token. The (burst + 1)-th and every later one: rate_budget.
    assert.equal(passed.length, BURST, JSON.stringify(tally(answers)));
    assert.equal(limited.length, flood - BURST);
    for (const response of limited) {
      assert.equal(response.status, 429);
      const retryAfter = Number(response.headers["retry-after"]);
      assert.ok(retryAfter > 1 && retryAfter <= 100, `Retry-After ${retryAfter}: no refill soon`);
    }
    const served = passed.filter((r) => r.status === 200);
    for (const response of served) assert.equal(response.body, "ok\n");
    // Sequentially, after the flood: still refused, the n-th and (n+1)-th denial alike.
    for (let i = 0; i < 2; i++) {
      const again = await request(ports.provider_health, { path: "/healthz" });
      assert.equal(again.status, 429);
      assert.equal(envelope(again).code, "rate_budget");
    }

    // The ledger, beside what the client was told: each kind of answer counted as such.
    const reading = await gateway.ledger();
    const provider = reading.lanes.provider_health;
    const told = (code: string) => passed.filter((r) => errorCode(r) === code).length;
    const pool = ["lane_pool_full", "aggregate_full", "byte_budget"];
    for (const kind of [...pool, "deadline_exceeded"]) {
      assert.equal(
        provider.overload[kind],
        told(kind),
        `${kind}: ${JSON.stringify(tally(answers))}`,
      );
    }
    const refusedAtPool = pool.reduce((sum, kind) => sum + told(kind), 0);
    assert.equal(provider.admitted, BURST - refusedAtPool, "admitted what passed both checks");
    assert.equal(served.length, BURST - refusedAtPool - told("deadline_exceeded"));
    assert.equal(provider.overload.rate_budget, flood - BURST + 2);
    // The other protected lane's floor is untouched: nothing charged, nothing refused.
    const local = reading.lanes.local_health;
    assert.equal(local.reserve_in_use, 0);
    for (const [kind, count] of Object.entries(local.overload)) assert.equal(count, 0, kind);
    assert.equal(reading.lanes.public.admitted, 0, "the flood never reached the public lane");
    assert.equal((await request(ports.local_health, { path: "/healthz" })).status, 200);
  }).finally(() => gateway.dispose());
});

Deno.test("proof 3: a concurrent flood meets each protected bound exactly", async () => {
  const ports = lanePorts();
  // Slots: 16 = local reserve 4 + provider reserve 2 + general pool 10; local_health's ceiling is
  // its reserve plus 4 borrowed. Bytes: the reserves' bytes, eight public footprints, and 1000
  // bytes — less than one local_health footprint — for anyone else borrowing from the pool.
  const perConnection = 2;
  const localFootprint = 16384;
  const publicFootprint = 65536;
  const reserveBytes = 4 * localFootprint + 2 * 1024;
  const publicHeld = 8;
  const dir = await writeConfig(
    config(ports, (ledger) => {
      ledger.per_connection = perConnection;
      ledger.inflight_bytes = reserveBytes + publicHeld * publicFootprint + 1000;
      ledger.lanes.provider_health.rate = { per_second: 100, burst: 100 };
    }),
    [DEMO_TENANT],
    { "assets/big.bin": new Uint8Array(16 * 1024 * 1024) },
  );
  const gateway = await Gateway.start(dir, ports);
  const readers: Holder[] = [];
  const stuck: Holder[] = [];
  const provider = async () => {
    const probes = await Promise.all(
      [0, 1].map(() => request(ports.provider_health, { path: "/healthz" })),
    );
    assert.deepEqual(probes.map((r) => r.status), [200, 200], "provider_health's floor holds");
  };
  /** A local request answered with a refusal, once the last holder has settled. */
  const localRefusal = (what: string) => {
    let last = "";
    return pollUntil(what, async () => {
      const probe = await request(ports.local_health, { path: "/healthz" });
      last = `${probe.status} ${probe.body}`;
      return probe.status === 200 ? undefined : probe;
    }, { seen: () => last });
  };
  await explained([gateway], async () => {
    const reading = await gateway.ledger();
    assert.equal(reading.general_pool, 10);
    assert.equal(reading.lanes.local_health.max_slots, 8);

    // Pipelining within the bound is not abuse: ten requests on one connection are answered in
    // order, the ones beyond per_connection waiting unadmitted rather than refused.
    const burst = Array.from(
      { length: 10 },
      (_, i) => renderRequest({ path: "/healthz", headers: [["X-Request-Id", `p${i}`]] }, i < 9),
    );
    const answers = parseResponses(await exchange(ports.local_health, burst.join("")));
    assert.deepEqual(answers.map((r) => r.status), Array(10).fill(200));
    assert.deepEqual(answers.map((r) => r.headers["x-request-id"]), burst.map((_, i) => `p${i}`));

    // Public takes what the byte budget allows: exactly eight slow readers are admitted.
    readers.push(
      ...await Promise.all(
        Array.from(
          { length: 14 },
          () => slowReader(ports.public, { path: "/asset", headers: [["Host", "demo.test"]] }),
        ),
      ),
    );
    assert.deepEqual(
      readers.map((r) => `${r.status} ${r.code}`.trim()).sort(),
      [...Array(publicHeld).fill("200"), ...Array(14 - publicHeld).fill("503 byte_budget")],
    );

    // A connection that pipelines and never reads: once its answers back up, it holds exactly
    // per_connection reservations — not one more, however many requests it sent.
    stuck.push(await stuckPipeliner(ports.local_health, "/metrics"));
    const one = await ledgerUntil(
      gateway,
      "one stuck connection holds its bound",
      (r) => r.lanes.local_health.in_use >= perConnection,
    );
    assert.equal(one.lanes.local_health.in_use, perConnection, "exactly per_connection held");
    assert.equal(one.lanes.local_health.reserve_in_use, perConnection);
    assert.equal(one.lanes.local_health.overload.per_connection_limit, 0);
    assert.equal(one.lanes.public.in_use, publicHeld);
    assert.equal(one.bytes_in_use, publicHeld * publicFootprint + perConnection * localFootprint);
    assert.ok(one.bytes_in_use <= one.inflight_bytes);
    const later = await gateway.ledger();
    assert.equal(later.lanes.local_health.in_use, perConnection, "and no more later");

    // local_health's floor: a second connection takes the rest of the reserve. Two general slots
    // are free, but not a footprint's worth of bytes: the next local request is refused for
    // bytes — the floor exactly the reserve deep — while provider_health's floor holds.
    stuck.push(await stuckPipeliner(ports.local_health, "/metrics"));
    const refused = await localRefusal("local_health's reserve is exhausted");
    assert.equal(refused.status, 503, refused.body);
    assert.equal(envelope(refused).code, "byte_budget");
    await provider();

    // Public lets go: local_health may borrow up to its ceiling (reserve 4 + 4 borrowed).
    for (const reader of readers) reader.close();
    const borrowing = await ledgerUntil(
      gateway,
      "public released; local borrows",
      (r) => r.lanes.public.in_use === 0,
    );
    assert.equal(borrowing.lanes.local_health.in_use, 2 * perConnection);
    stuck.push(await stuckPipeliner(ports.local_health, "/metrics"));
    const six = await ledgerUntil(
      gateway,
      "three stuck connections",
      (r) => r.lanes.local_health.in_use >= 3 * perConnection,
    );
    assert.equal(six.lanes.local_health.in_use, 3 * perConnection);
    assert.equal(six.lanes.local_health.reserve_in_use, 4);
    assert.equal(six.general_in_use, 3 * perConnection - 4);
    assert.equal(six.bytes_in_use, 3 * perConnection * localFootprint);
    stuck.push(await stuckPipeliner(ports.local_health, "/metrics"));
    const full = await localRefusal("local_health's ceiling is reached");
    assert.equal(full.status, 429, full.body);
    assert.equal(envelope(full).code, "lane_pool_full");
    await provider();

    // Held until the clients go; then every slot comes back exactly once.
    for (const holder of stuck) holder.close();
    const quiet = await gateway.ledgerWhen((r) => r.outstanding === 0, 30_000);
    assert.equal(quiet.outstanding, 0);
    assert.equal(quiet.double_release, 0);
    assert.equal(quiet.release_balanced, true);
    assert.equal(quiet.lanes.public.overload.byte_budget, 14 - publicHeld);
    for (const [kind, count] of Object.entries(quiet.lanes.provider_health.overload)) {
      assert.equal(count, 0, `provider_health ${kind}`);
    }
    assert.ok(quiet.high_water_slots <= quiet.application_slots);
  }).finally(async () => {
    for (const holder of [...readers, ...stuck]) holder.close();
    await gateway.dispose();
  });
});
