/**
 * The benign half of the WAF corpus: real-looking requests that `inspect()` must pass with every
 * detection on and the usual headers listed. The attack half is in waf_attacks_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import { inspect, type WafOptions } from "../src/policy/waf.ts";

const ALL: WafOptions = {
  sqli: true,
  xss: true,
  traversal: true,
  headers: ["user-agent", "referer", "cookie"],
};

/** A request from "path?query" and lower-case headers. */
function request(target: string, headers: Readonly<Record<string, string>> = {}) {
  const cut = target.indexOf("?");
  return {
    path: cut === -1 ? target : target.slice(0, cut),
    query: cut === -1 ? "" : target.slice(cut),
    header: (name: string) => headers[name],
  };
}

/** Each case that produced a finding, with the finding, so a failure lists them all. */
function flagged(cases: readonly string[], headers?: Record<string, string>): string[] {
  return cases.flatMap((target) => {
    const finding = inspect(request(target, headers), ALL);
    return finding
      ? [`${target} -> ${finding.detection} (${finding.rule} in ${finding.location})`]
      : [];
  });
}

const PATHS = [
  "/",
  "/api/v1/users/42",
  "/v1.2/file.tar.gz",
  "/a..b",
  "/docs/...",
  "/releases/v2..v3/notes",
  "/static/js/script.js",
  "/static/js/scripts.min.js.map",
  "/assets/app.3f2a9c.css",
  "/blog/2024/05/why-1=1-is-true",
  "/forum/math/x%2By%3D1%20implies%201%3D1",
  "/forum/math/proof-that-1=1-and-2=2",
  "/files/Annual%20Report%202024%20(final).pdf",
  "/wiki/C%2B%2B",
  "/wiki/Rock_%27n%27_Roll",
  "/users/o'neil/profile",
  "/api/items;jsessionid=ABC123",
  "/.well-known/acme-challenge/xY_9-z",
  "/caf%C3%A9/men%C3%BC",
  "/%E6%97%A5%E6%9C%AC%E8%AA%9E/%E3%83%9A%E3%83%BC%E3%82%B8",
  "/docs/etc/passwd-format",
  "/products/union-station-tickets",
  "/select/a-plan",
  "/events/onload-conference-2025",
  "/download/report.final.v2.pdf",
  "/search/100%25-cotton",
];

const QUERIES = [
  "/search?q=select+a+plan",
  "/search?q=O%27Reilly",
  "/search?q=O'Reilly+Media",
  "/search?q=Conan+O%27Brien+and+Andy+Richter",
  "/search?q=drop+us+a+line",
  "/search?q=union+station",
  "/search?q=order+by+date",
  "/search?q=sort&order=desc&by=date",
  "/signup?onboarding=true&step=2",
  "/search?q=a+%3C+b",
  "/search?q=x%3Ey",
  "/search?q=I+%3C3+you",
  "/search?q=5+%3E+3+and+2+%3C+4",
  "/search?q=2%2B2%3D4",
  "/search?q=x%5E2+%2B+y%5E2+%3D+z%5E2",
  "/search?q=x%3D1+or+y%3D2",
  "/search?q=true+or+false",
  "/search?q=1%3D1",
  "/search?q=rock+%27n%27+roll",
  "/search?q=don%27t+stop+me+now",
  "/search?q=it%27s+5+o%27clock",
  "/search?q=%22cats%22+or+%22dogs%22",
  "/search?q=%22quoted+phrase%22+and+more",
  "/search?q=she+said+%22hello%22+--+and+left",
  "/search?q=5%27+10%22+tall",
  "/search?q=O%27Reilly+%23books",
  "/search?q=javascript%3A+the+good+parts",
  "/search?q=regular+expression+(regex)",
  "/search?q=how+much+sleep+(8+hours)",
  "/search?q=Thread.sleep(1000)+java",
  "/search?q=select+*+from+memes",
  "/search?q=drop+table+tennis",
  "/search?q=delete+from+cart",
  "/search?q=1%3B+drop+in+anytime",
  "/search?q=information+schema+design",
  "/search?q=100%25+cotton&size=M",
  "/search?q=100%&bad=%zz&end=%",
  "/search?q=C%2B%2B+vs+C%23",
  "/search?q=%40user+%23hashtag",
  "/search?q=--verbose+flag",
  "/search?q=the+data%3A+text+analysis",
  "/search?q=on+load+balancing",
  "/search?q=%3Cb%3Ebold%3C%2Fb%3E+text",
  "/search?q=%E2%80%9Csmart+quotes%E2%80%9D+%F0%9F%98%80",
  "/search?q=caf%C3%A9+cr%C3%A8me+br%C3%BBl%C3%A9e",
  "/search?q=C%3A+drive+full",
  "/search?q=1..10&range=..5",
  "/search?q=wait...+what",
  "/items?filter=%7B%22status%22%3A%22active%22%2C%22tags%22%3A%5B%22a%22%2C%22b%22%5D%7D",
  "/items?filter=%7B%22price%22%3A%7B%22%24lt%22%3A100%7D%2C%22or%22%3A1%7D",
  '/items?where={"and":["x","y"]}&fields=id,name',
  "/login?redirect=https%3A%2F%2Fexample.com%2Fcallback%3Fa%3D1%26b%3D2",
  "/oauth?redirect_uri=https%3A%2F%2Fapp.example.com%2Fauth%2Fcallback&state=a%2Bb%3D",
  "/contact?email=john.o%27brien%40example.com&name=John+O%27Brien",
  "/recipes?q=1%2F2+cup+sugar&unit=cup",
  "/files?path=/a/b/c&file=report.final.v2.pdf",
  "/api?callback=jQuery1124_1700000000&_=1700000000",
  "/shop?title=Ocean%27s+Eleven+%26+Twelve",
  "/search?q=color%3A+%23ff0000&hex=0xffffff00",
  "/api/glob?pattern=src%2F**%2F*.ts",
  "/search?q=%27%23%27",
  "/mail?to=%22John+Doe%22+%3Cjohn%40example.com%3E",
  "/odata/Products?$filter=Name+eq+%27Milk%27+and+Price+lt+2.55&$top=10",
  "/snippets?code=const+f+%3D+(x)+%3D%3E+x+*+2%3B",
  "/api/users?sort=-created_at&fields=id,name,email&page[size]=25",
  "/auth?token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl&next=%2Fdashboard%3Ftab%3Dbilling",
  "/search?q=sql+injection+union+select+example",
  "/search?q=what+does+%27or%27+mean",
];

const HEADERS: readonly Record<string, string>[] = [
  {
    "user-agent":
      "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    referer: "https://www.google.com/search?q=portcullis+gateway&hl=en",
    cookie: "_ga=GA1.2.1234567890.1700000000; theme=dark; cart=%7B%22items%22%3A%5B1%2C2%5D%7D",
  },
  {
    "user-agent": "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    referer: "https://example.com/blog/2024/o'reilly-interview?utm_source=news&utm_medium=email",
    cookie: 'prefs={"lang":"en","or":1}; session="abc.def.ghi"',
  },
  {
    "user-agent": "curl/8.9.1",
    referer: "https://shop.example/search?q=drop+us+a+line&sort=order+by+price",
    cookie: "consent=yes; last_search=select%20a%20plan",
  },
  {
    "user-agent":
      "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
    referer: "https://example.org/a..b/v1.2/file.tar.gz",
    cookie: "name=Ren%C3%A9e; note=a%20%3C%20b",
  },
  {
    "user-agent": "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    referer: "https://forum.example/t/why-does-1=1/99?page=2#post-3",
    cookie: "sid=s%3A8f3e2d1c.AbCdEf%2BgHiJ; flags=onboarding=true",
  },
];

Deno.test("inspect() passes benign paths with dots, Unicode, apostrophes and math", () => {
  assert.deepEqual(flagged(PATHS), []);
});

Deno.test("inspect() passes benign queries: search terms, punctuation, JSON-ish values", () => {
  assert.deepEqual(flagged(QUERIES), []);
});

Deno.test("inspect() passes benign user agents, referers and cookies", () => {
  const wrong = HEADERS.flatMap((headers) =>
    flagged(["/"], headers).map((w) => `${w} ${JSON.stringify(headers)}`)
  );
  assert.deepEqual(wrong, []);
});

Deno.test("the benign corpus holds at least 60 requests", () => {
  assert.ok(PATHS.length + QUERIES.length + HEADERS.length * 3 >= 60);
});
