/**
 * The attack half of the WAF corpus: requests `inspect()` must catch, grouped by the detection
 * each must report, plain and encoded (percent, double percent, `+`, mixed case, HTML entities,
 * SQL comments, overlong UTF-8). The benign half is in waf_corpus_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import { inspect, type WafDetection, type WafOptions } from "../src/policy/waf.ts";

const ALL: WafOptions = {
  sqli: true,
  xss: true,
  traversal: true,
  headers: ["user-agent", "referer", "cookie"],
};

/** One attack: "path?query", or that plus lower-case headers. */
type Attack = string | readonly [string, Readonly<Record<string, string>>];

/** A request from an attack case. */
function request(attack: Attack) {
  const [target, headers] = typeof attack === "string" ? [attack, {}] : attack;
  const cut = target.indexOf("?");
  return {
    path: cut === -1 ? target : target.slice(0, cut),
    query: cut === -1 ? "" : target.slice(cut),
    header: (name: string) => (headers as Record<string, string>)[name],
  };
}

/** Each case not reported as `expected`, with what it got instead. */
function missed(cases: readonly Attack[], expected: WafDetection): string[] {
  return cases.flatMap((attack) => {
    const finding = inspect(request(attack), ALL);
    return finding?.detection === expected ? [] : [`${JSON.stringify(attack)} -> ${finding?.rule}`];
  });
}

const TRAVERSAL: readonly Attack[] = [
  "/static/../../etc/passwd",
  "/static/..%2f..%2fetc%2fpasswd",
  "/static/%2e%2e%2f%2e%2e%2fapp.env",
  "/static/%2E%2E/%2E%2E/app.env",
  "/static/%252e%252e%252fsecret",
  "/static/..;/admin",
  "/static/%c0%ae%c0%ae/%c0%ae%c0%ae/x",
  "/..%c0%af..%c0%afetc/passwd",
  "/static/%u002e%u002e/%u002e%u002e/web.config",
  "/static/..\\..\\windows\\win.ini",
  "/static/..%5c..%5cboot.ini",
  "/cgi-bin/.%2e/.%2e/bin/sh",
  "/download/file.txt%00.jpg",
  "/%2e%2e/%2e%2e/proc/self/environ",
  "/etc/passwd",
  "/static//etc/shadow",
  "/view?file=../../../../etc/passwd",
  "/view?file=%2fetc%2fpasswd",
  "/view?file=/etc/shadow",
  "/view?img=file:///etc/passwd",
  "/view?path=C:%5CWindows%5Csystem32%5Cdrivers%5Cetc%5Chosts",
  "/view?page=....//....//etc/passwd",
  "/view?f=%252e%252e%252f%252e%252e%252fetc",
  "/view?f=..%255c..%255cweb.config",
  "/view?template=config.php%2500",
  ["/", { cookie: "lang=../../../../etc/passwd%00" }],
];

const SQLI: readonly Attack[] = [
  "/item?id=1%27+or+%271%27%3D%271",
  "/item?id=1'+OR+'1'='1",
  "/login?user=admin%27--",
  "/login?user=admin%27+%23",
  "/login?user=admin%27)--+-",
  "/login?user=admin%27/*",
  "/search?q=%22+OR+1%3D1+--",
  "/item?id=1+or+1%3D1%23",
  "/item?id=1%20AND%202%3D2",
  "/item?id=1)+or+(1%3D1",
  "/login?name=%27%20OR%20%27%27%3D%27",
  "/item?id=1%27+and+%27a%27%3D%27a",
  "/item?id=1%27+OR+TRUE--",
  "/item?id=1+UNION+SELECT+username,password+FROM+users",
  "/item?id=-1%20UNION%20ALL%20SELECT%20NULL,NULL,NULL--",
  "/item?id=1%27%20UnIoN%20sElEcT%201,2,3--+",
  "/item?id=1+UN/**/ION+SEL/**/ECT+1,2",
  "/item?id=1/*!50000UNION*//*!50000SELECT*/1,2",
  "/item?id=-1+UNION+SELECT+0x61646d696e,0x70617373",
  "/item?id=1+union+select+table_name+from+information_schema.tables",
  "/item?id=1;DROP+TABLE+users",
  "/item?id=1%27%3B+delete+from+accounts--",
  "/item?id=1%27%3Bupdate+users+set+role%3D%27admin",
  "/item?id=1%27+AND+SLEEP(5)--",
  "/item?id=1+AND+(SELECT+*+FROM+(SELECT(SLEEP(5)))a)",
  "/item?id=1+AND+BENCHMARK(5000000,MD5(1))",
  "/item?id=1%27%7C%7Cpg_sleep(10)--",
  "/item?id=1%27%3BWAITFOR+DELAY+%270%3A0%3A5%27--",
  "/item?id=1;waitfor+delay+%270:0:5%27",
  "/run?cmd=1%27%3B+EXEC+xp_cmdshell(%27dir%27)--",
  "/item?id=1%27+AND+extractvalue(1,concat(0x7e,version()))--",
  "/item?id=1+and+ascii(char(0x41))",
  "/item?id=1%27+order+by+5--+",
  "/search?q=%27+%7C%7C+(select+password+from+users)+--",
  "/item?id=1%2527%2520or%2520%25271%2527%253D%25271",
  "/item?id=1%27%09or%09%271%27%3D%271",
  "/item?id=1%27/**/OR/**/1=1--",
  "/search?q=%26%2339%3B+or+%26%2339%3B1%26%2339%3B%3D%26%2339%3B1",
  "/products/1%27%20or%20%271%27=%271",
  "/products/1;drop%20table%20items",
  ["/", { "user-agent": "Mozilla/5.0' or '1'='1" }],
  ["/", { cookie: "session=abc'+or+1=1--" }],
];

const XSS: readonly Attack[] = [
  "/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
  "/search?q=%3CScRiPt%3Ealert(1)%3C/sCrIpT%3E",
  "/search?q=%253Cscript%253Ealert(1)",
  "/search?q=%26lt%3Bscript%26gt%3Balert(1)",
  "/search?q=%26%2360%3Bscript%26%2362%3B",
  "/search?q=%26%23x3C%3Bscript%26%23x3e%3B",
  "/search?q=%26%230000060script%26%2362",
  "/search?q=%3Cimg+src%3Dx+onerror%3Dalert(1)%3E",
  "/search?q=%3Cimg%2Fsrc%2Fonerror%3Dalert(1)%3E",
  "/search?q=%3Csvg%2Fonload%3Dalert(1)%3E",
  "/search?q=%3Csvg+onload%3Dalert(1)%3E",
  "/search?q=%3Cbody+onload%3Dalert(1)%3E",
  "/search?q=%3Cdetails+open+ontoggle%3Dalert(1)%3E",
  "/search?q=%3Cinput+autofocus+onfocus%3Dalert(1)%3E",
  "/search?q=%3Ciframe+src%3D%22https%3A%2F%2Fevil.example%22%3E",
  "/search?q=%3Cx+srcdoc%3D%22%26lt%3Bb%26gt%3B%22%3E",
  "/search?q=%3Cobject+data%3D%22evil.swf%22%3E",
  "/search?q=%3Cmeta+http-equiv%3D%22refresh%22+content%3D%220%22%3E",
  "/search?q=%3Cbutton+formaction%3D%22x%22%3E",
  "/go?url=javascript%3Aalert(document.cookie)",
  "/go?url=JaVaScRiPt%3Aalert(1)",
  "/go?url=java%09script%3Aalert(1)",
  "/go?url=javascript%3A+alert(1)",
  "/go?url=javascript%26%2358%3Bvoid(0)",
  "/go?url=data%3Atext%2Fhtml%3Bbase64%2CPHNjcmlwdD4%3D",
  "/search?q=%22%3E%3Cscript%3Ealert(1)%3C%2Fscript%3E",
  "/search?q=%22+onmouseover%3D%22alert(1)",
  "/search?q=x%22+autofocus+onfocus%3Dalert(1)+x%3D%22",
  "/search?q=x%27onclick%3Dalert(1)",
  "/page?style=width%3Aexpression(alert(1))",
  "/search?q=%3Ca+href%3D%22javascript%3Avoid(0)%22%3Eclick%3C%2Fa%3E",
  "/search/%3Cscript%3Ealert(1)%3C%2Fscript%3E",
  "/search?name=%3CSCRIPT+SRC%3D%2F%2Fevil.example%2Fx.js%3E%3C%2FSCRIPT%3E",
  ["/", { referer: "https://x.example/?q=<script>alert(1)</script>" }],
  ["/", { "user-agent": "<img src=x onerror=alert(1)>" }],
];

Deno.test("inspect() reports path traversal: dot segments, encodings, NUL, system files", () => {
  assert.deepEqual(missed(TRAVERSAL, "path_traversal"), []);
});

Deno.test("inspect() reports SQL injection: tautologies, unions, stacked, time-based, comments", () => {
  assert.deepEqual(missed(SQLI, "sql_injection"), []);
});

Deno.test("inspect() reports XSS: tags, handlers, script and data URIs, entities", () => {
  assert.deepEqual(missed(XSS, "xss"), []);
});

Deno.test("inspect() names the rule and the location it matched", () => {
  const at = (attack: Attack) => inspect(request(attack), ALL);
  assert.deepEqual(at("/a?id=1+UN/**/ION+SELECT+1"), {
    detection: "sql_injection",
    location: "query",
    rule: "sqli.union_select",
  });
  assert.deepEqual(at("/a/%252e%252e%252f"), {
    detection: "path_traversal",
    location: "path",
    rule: "traversal.dot_segment",
  });
  assert.deepEqual(at(["/", { referer: "https://x/?q=<svg onload=alert(1)>" }]), {
    detection: "xss",
    location: "header:referer",
    rule: "xss.event_handler",
  });
});

Deno.test("inspect() accepts known false positives: SQL-shaped math and query languages", () => {
  const rule = (attack: Attack) => inspect(request(attack), ALL)?.rule;
  assert.equal(rule("/forum/math/x%2By%3D1%20and%201%3D1"), "sqli.tautology_bare");
  assert.equal(rule("/jira?jql=project+%3D+%22ABC%22+AND+status+%3D+%22Open%22"), "sqli.tautology");
  assert.equal(rule("/search?q=what+is+%2Fetc%2Fpasswd"), "traversal.sensitive_file");
});

Deno.test("the attack corpus holds at least 60 requests", () => {
  assert.ok(TRAVERSAL.length + SQLI.length + XSS.length >= 60);
});
