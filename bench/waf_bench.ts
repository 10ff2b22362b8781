/**
 * WAF cost per request: `inspect()` with every detection on, over a typical benign request (path,
 * three query parameters, two headers), an encoded attack found in the last query parameter, and
 * a worst case (8 KiB of quote-and-space in path, query and a header, all inspected in full).
 * Run with `deno bench --no-prompt bench/waf_bench.ts`.
 */
import { inspect, WAF_INSPECT_LIMIT, type WafOptions } from "../src/policy/waf.ts";

const OPTIONS: WafOptions = {
  sqli: true,
  xss: true,
  traversal: true,
  headers: ["user-agent", "referer"],
};

const HEADERS: Readonly<Record<string, string>> = {
  "user-agent":
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
  referer: "https://shop.example/catalog?category=shoes&sort=price_asc",
};

/** A request with the usual two headers. */
function request(path: string, query: string, headers = HEADERS) {
  return { path, query, header: (name: string) => headers[name] };
}

const benign = request(
  "/api/v1/products/42/reviews",
  "?q=O%27Reilly+%22blue+shoes%22&page=2&sort=date",
);
const attack = request(
  "/api/v1/products",
  "?page=2&sort=date&q=1%27%20UNION%2F**%2FSELECT%20pw,2--",
);
const hostile = "' ".repeat(WAF_INSPECT_LIMIT / 2);
const worst = request(`/${hostile}`, `?q=${hostile}`, { "user-agent": hostile, referer: hostile });

/** Fails the bench when a fixture does not get the verdict it is there to measure. */
function expectVerdict(label: string, subject: ReturnType<typeof request>, caught: boolean): void {
  if ((inspect(subject, OPTIONS) !== undefined) !== caught) {
    throw new Error(`Bench fixture "${label}" got the wrong verdict`);
  }
}
expectVerdict("benign", benign, false);
expectVerdict("attack", attack, true);
expectVerdict("worst", worst, false);

Deno.bench(
  "waf inspect, benign (path + 3 params + 2 headers)",
  { group: "waf", baseline: true },
  () => {
    inspect(benign, OPTIONS);
  },
);

Deno.bench("waf inspect, attack (SQLi in the 3rd param)", { group: "waf" }, () => {
  inspect(attack, OPTIONS);
});

Deno.bench("waf inspect, worst case (4 x 8 KiB of quote-space)", { group: "waf" }, () => {
  inspect(worst, OPTIONS);
});
