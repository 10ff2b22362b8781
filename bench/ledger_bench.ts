/**
 * Ledger throughput: one admission plus its release, per lane kind, and a snapshot read.
 * Run with `deno task bench`.
 */
import { Ledger } from "../src/ledger/ledger.ts";
import { LedgerMemory } from "../src/ledger/memory.ts";
import { validateProfile } from "../src/ledger/profile.ts";
import { snapshotLedger } from "../src/ledger/snapshot.ts";

function ledger(shared: boolean): Ledger {
  const lane = {
    enabled: true,
    reserve: 0,
    max_connections: 1024,
    footprint_bytes: 65536,
    deadline_ms: 30000,
  };
  const checked = validateProfile({
    application_slots: 256,
    inflight_bytes: 33554432,
    per_connection: 8,
    lanes: {
      public: lane,
      local_health: { ...lane, reserve: 4, footprint_bytes: 16384 },
      provider_health: {
        ...lane,
        reserve: 2,
        footprint_bytes: 1024,
        rate: { per_second: 1e6, burst: 1e6 },
      },
    },
  });
  if (!checked.ok) throw new Error(JSON.stringify(checked.problems));
  // A clock running 1000x fast, so the (real) rate-budget arithmetic never runs dry mid-bench.
  const clock = () => performance.now() * 1000;
  return new Ledger(checked.profile, { memory: LedgerMemory.create(1, shared), clock });
}

const plain = ledger(false);
const shared = ledger(true);
const connection = { active: 0 };

Deno.bench(
  "ledger admit+complete, public (general pool)",
  { group: "admit", baseline: true },
  () => {
    const ticket = plain.admit("public", connection);
    if (!("complete" in ticket)) throw new Error(ticket.overload);
    ticket.complete();
  },
);

Deno.bench("ledger admit+complete, local_health (reserve)", { group: "admit" }, () => {
  const ticket = plain.admit("local_health", connection);
  if (!("complete" in ticket)) throw new Error(ticket.overload);
  ticket.complete();
});

Deno.bench("ledger admit+complete, provider_health (rate budget)", { group: "admit" }, () => {
  const ticket = plain.admit("provider_health", connection);
  if (!("complete" in ticket)) throw new Error(ticket.overload);
  ticket.complete();
});

Deno.bench("ledger admit+complete, public, SharedArrayBuffer", { group: "admit" }, () => {
  const ticket = shared.admit("public", connection);
  if (!("complete" in ticket)) throw new Error(ticket.overload);
  ticket.complete();
});

Deno.bench("ledger snapshot", () => {
  snapshotLedger(plain);
});
