/**
 * The policy phase's cost per request, every policy on, over a typical admitted request: what
 * `checkPolicies()` and `decorate()` add to one proxied exchange. Run with
 * `deno bench --no-prompt bench/policy_bench.ts`.
 */
import { compilePolicies, NO_POLICIES } from "../src/policy/policies.ts";
import { checkPolicies, decorate, type PolicyTrail } from "../src/policy/checks.ts";
import { PolicyStats } from "../src/policy/policy_stats.ts";
import { AddressSet } from "../src/request/cidr.ts";
import type { RequestContext } from "../src/request/context.ts";
import type { Reply } from "../src/request/reply.ts";

const RAW = [
  "Host",
  "bench.test",
  "User-Agent",
  "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120 Safari/537",
  "Accept",
  "text/html,application/xhtml+xml",
  "Accept-Language",
  "en-GB,en;q=0.9",
  "Cookie",
  "session=abc123; theme=dark",
];
const HEADERS: Record<string, string> = {};
for (let i = 0; i < RAW.length; i += 2) HEADERS[RAW[i].toLowerCase()] = RAW[i + 1];

const context = {
  requestId: "bench",
  peer: "203.0.113.7",
  head: {
    method: "GET",
    path: "/api/v1/products/42",
    query: "?page=2&sort=date",
    host: "bench.test",
  },
  headers: HEADERS,
  request: { rawHeaders: RAW },
} as unknown as RequestContext;

const every = compilePolicies({
  rate_limit: {
    mode: "on",
    per_second: 1e6,
    burst: 1e6,
    max_clients: 100_000,
    block_after: 0,
    headers: false,
  },
  caps: {
    mode: "on",
    max_headers: 100,
    max_header_bytes: 16384,
    max_url_bytes: 8192,
    max_body_bytes: 1 << 20,
  },
  waf: { mode: "on", sqli: true, xss: true, traversal: true, headers: ["user-agent", "referer"] },
  blocklist: {
    mode: "on",
    rules: [
      { name: "admin", path: "^/(admin|wp-admin)", action: "404" },
      { name: "scanner", header: { name: "user-agent", pattern: "sqlmap|nikto" }, action: "drop" },
    ],
    block_after: 10,
    window_ms: 60_000,
  },
  ttl_block: { mode: "on", ttl_ms: 600_000, action: "429", max_entries: 100_000 },
  security_headers: {
    mode: "on",
    hsts: "max-age=31536000",
    content_type_options: true,
    frame_options: "DENY",
    referrer_policy: "no-referrer",
    add: {},
    remove: [],
  },
}, {});

const services = {
  clock: () => performance.now(),
  trusted: AddressSet.of([]),
  log: () => {},
  policyStats: new PolicyStats(),
};

const upstreamReply: Reply = {
  status: 200,
  rawHeaders: ["Content-Type", "text/plain", "Content-Length", "64", "X-Request-Id", "bench"],
};

Deno.bench("policy phase, every policy on (check + decorate)", { group: "policy" }, () => {
  const trail: PolicyTrail = { headers: [] };
  trail.headers.push(...every.securityHeaders!.add);
  const denied = checkPolicies(context, every, "api", services, trail);
  if (denied) throw new Error("a benign request was refused");
  decorate(upstreamReply, trail, every.strip);
});

Deno.bench("policy phase, every policy off", { group: "policy", baseline: true }, () => {
  if (NO_POLICIES.any) throw new Error("unreachable");
});
