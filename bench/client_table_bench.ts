/**
 * The cost of one rate-limit decision in the shared client table against the per-isolate
 * `MapRateLimiter`, over 1,000 and 100,000 distinct clients (the table at twice as many
 * entries, so neither side evicts), and of hashing one salted client address into a key. Run with
 * `deno bench --no-prompt bench/client_table_bench.ts`.
 */
import { ClientTable, keyOf } from "../src/policy/client_table.ts";
import { MapRateLimiter } from "../tests/fixtures/gcra_model.ts";

const PER_SECOND = 10, BURST = 20;
const RATE = { intervalMs: 1000 / PER_SECOND, toleranceMs: (1000 / PER_SECOND) * BURST };

for (const clients of [1_000, 100_000]) {
  const texts = Array.from(
    { length: clients },
    (_, n) => `tenant-salt|10.${n >> 16}.${(n >> 8) & 255}.${n & 255}`,
  );
  const keys = texts.map(keyOf);
  const group = `take() over ${clients.toLocaleString("en")} clients`;
  const limiter = new MapRateLimiter({
    perSecond: PER_SECOND,
    burst: BURST,
    maxClients: clients,
  });
  const table = new ClientTable(ClientTable.allocate(clients * 2));
  let a = 0, b = 0, c = 0;
  Deno.bench({ name: "MapRateLimiter.take(text)", group, baseline: true }, () => {
    limiter.take(texts[a % clients], a++ / clients);
  });
  Deno.bench({ name: "ClientTable.take(key)", group }, () => {
    table.take(keys[b % clients], b++ / clients, RATE);
  });
  Deno.bench({ name: "ClientTable.take(keyOf(text))", group }, () => {
    table.take(keyOf(texts[c % clients]), c++ / clients, RATE);
  });
}

const sink = new BigInt64Array(1); // a stored result cannot be optimized away
Deno.bench('keyOf("tenant-salt|203.0.113.7")', () => {
  sink[0] = keyOf("tenant-salt|203.0.113.7");
});
