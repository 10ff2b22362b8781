/**
 * The `forwarding` section's marks (src/config/forwarding_schema.ts, src/proxy/forwarding.ts) and
 * how hygiene writes them (src/proxy/hygiene.ts): the defaults mark nothing; `via` keeps its old
 * meaning (a pseudonym both ways, `false` none) and takes one per direction; the backend header
 * names are the operator's, refused where they would clash (named twice, a name the gateway
 * writes for another reason, a client-address claim) with file, field and value; a named header
 * is the gateway's both ways. The end-to-end view is adversarial/blind_marks_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import { loadConfig } from "../src/config/load.ts";
import { AddressSet } from "../src/request/cidr.ts";
import { forwardingOf } from "../src/proxy/forwarding.ts";
import { downstreamHeaders, type ForwardContext, upstreamHeaders } from "../src/proxy/hygiene.ts";
import { configErrorOf, MINIMAL, writeConfigText } from "./fixtures/config_files.ts";

/** The config's `forwarding` as resolved, from the YAML of the section's body. */
async function forwardingFrom(section: string) {
  return (await loadConfig(await writeConfigText(`${MINIMAL}forwarding: ${section}\n`))).forwarding;
}

/** The problems (path, value, message) of a config with this `forwarding` and `admin`. */
async function problems(section: string, admin = "{}") {
  const file = await writeConfigText(`${MINIMAL}forwarding: ${section}\nadmin: ${admin}\n`);
  const error = await configErrorOf(loadConfig(file), "loadConfig() accepted a bad config");
  for (const problem of error.problems) assert.equal(problem.file, file);
  return error.problems.map((p) => [p.path.join("."), p.value, p.message]);
}

Deno.test("loadConfig() keeps forwarding.via's meaning and takes one pseudonym per direction", async () => {
  const cases: [string, { backends?: string; clients?: string }][] = [
    ["{}", { backends: undefined, clients: undefined }],
    ["{ via: edge-7 }", { backends: "edge-7", clients: "edge-7" }],
    ["{ via: false }", { backends: undefined, clients: undefined }],
    ["{ via: { backends: relay-3 } }", { backends: "relay-3", clients: undefined }],
    ["{ via: { clients: front-2 } }", { backends: undefined, clients: "front-2" }],
    ["{ via: { backends: r, clients: c } }", { backends: "r", clients: "c" }],
    ["{ via: { backends: false, clients: c } }", { backends: undefined, clients: "c" }],
  ];
  for (const [section, via] of cases) {
    assert.deepEqual((await forwardingFrom(section)).via, via, section);
  }
});

Deno.test("loadConfig() reads backend_headers and health_user_agent as written, none by default", async () => {
  const named = await forwardingFrom(
    "{ backend_headers: { tenant: X-Tenant, request_id: X-Portcullis-Request-Id }, " +
      'health_user_agent: "probe/1 (ops)" }',
  );
  assert.deepEqual(named.backendHeaders, {
    tenant: "X-Tenant",
    route: undefined,
    requestId: "X-Portcullis-Request-Id",
  });
  assert.equal(named.healthUserAgent, "probe/1 (ops)");
  const none = await forwardingFrom("{ health_user_agent: false }");
  assert.equal(none.healthUserAgent, undefined);
});

Deno.test("loadConfig() refuses backend header names the gateway writes, twice named, or client-address claims", async () => {
  assert.deepEqual(
    await problems(
      "{ backend_headers: { tenant: Via, route: X_Forwarded_Host, request_id: Host } }",
    ),
    [
      ["forwarding.backend_headers.tenant", "Via"],
      ["forwarding.backend_headers.route", "X_Forwarded_Host"],
      ["forwarding.backend_headers.request_id", "Host"],
    ].map((
      [path, value],
    ) => [path, value, "The gateway writes or removes this header itself; name another"]),
  );
  assert.deepEqual(
    await problems(
      "{ backend_headers: { tenant: X-Tenant, route: x_tenant, request_id: True-Client-IP } }",
    ),
    [
      [
        "forwarding.backend_headers.route",
        "x_tenant",
        "Names the same header as backend_headers.tenant",
      ],
      [
        "forwarding.backend_headers.request_id",
        "True-Client-IP",
        "Is also listed in client_ip_headers",
      ],
    ],
  );
  const listed = await problems(
    "{ client_ip_headers: [X-Edge-Client], backend_headers: { tenant: x_edge_client } }",
  );
  assert.deepEqual(listed, [[
    "forwarding.backend_headers.tenant",
    "x_edge_client",
    "Is also listed in client_ip_headers",
  ]]);
});

Deno.test("loadConfig() refuses a Via object with a bad pseudonym, a User-Agent with a control character, a realm with a quote", async () => {
  const found = await problems(
    '{ via: { backends: "relay 3", sideways: x }, health_user_agent: "probe\\r\\nX-Evil: 1" }',
    '{ realm: "ops\\"x" }',
  );
  assert.deepEqual(found.map(([path]) => path).sort(), [
    "admin.realm",
    "forwarding.health_user_agent",
    "forwarding.via",
  ]);
});

/** A request context as the proxy phase builds it from `marks`. */
function context(marks: ReturnType<typeof forwardingOf>): ForwardContext {
  return {
    peer: "203.0.113.7",
    trusted: AddressSet.of([]),
    proto: "https",
    host: "demo.example",
    requestId: "req-1",
    tenant: "demo.example",
    route: "api",
    authority: "10.0.0.5:8080",
    upgrade: false,
    via: marks.via.backends,
    backendHeaders: marks.backendHeaders,
    owned: marks.owned,
    clientIpHeaders: marks.clientIpHeaders,
  };
}

const FORGED = [
  "X-Portcullis-Tenant",
  "evil",
  "X-Tenant",
  "evil",
  "x_tenant",
  "evil",
  "X-TENANT",
  "evil",
  "X-Route",
  "evil",
  "Accept",
  "*/*",
];

Deno.test("upstreamHeaders() writes no backend header and no Via by default, and still drops X-Portcullis-*", () => {
  const marks = forwardingOf({ via: {}, backendHeaders: {}, clientIpHeaders: [] });
  assert.deepEqual(upstreamHeaders(FORGED, context(marks)), [
    "Host",
    "10.0.0.5:8080",
    "X-Tenant",
    "evil",
    "x_tenant",
    "evil",
    "X-TENANT",
    "evil",
    "X-Route",
    "evil",
    "Accept",
    "*/*",
    "X-Forwarded-For",
    "203.0.113.7",
    "X-Real-IP",
    "203.0.113.7",
    "X-Forwarded-Proto",
    "https",
    "X-Forwarded-Host",
    "demo.example",
    "X-Request-Id",
    "req-1",
  ]);
});

Deno.test("upstreamHeaders() writes the named headers once, with the gateway's values, after its Via", () => {
  const marks = forwardingOf({
    via: { backends: "relay-3", clients: "front-2" },
    backendHeaders: { tenant: "X-Tenant", route: "X-Route" },
    clientIpHeaders: [],
  });
  const out = upstreamHeaders(FORGED, context(marks));
  assert.deepEqual(out.slice(0, 10), [
    "Host",
    "10.0.0.5:8080",
    "Accept",
    "*/*",
    "Via",
    "1.1 relay-3",
    "X-Tenant",
    "demo.example",
    "X-Route",
    "api",
  ]);
  assert.equal(out.filter((v) => /evil/.test(v)).length, 0);
});

Deno.test("downstreamHeaders() drops an upstream's copy of a named header and writes the clients' Via", () => {
  const marks = forwardingOf({
    via: { backends: "relay-3", clients: "front-2" },
    backendHeaders: { requestId: "X-Trace-Id" },
    clientIpHeaders: [],
  });
  const raw = ["X_Trace_Id", "upstream", "X-Portcullis-Tenant", "upstream", "Via", "1.1 cache"];
  assert.deepEqual(
    downstreamHeaders(raw, "req-1", { via: marks.via.clients, owned: marks.owned }),
    ["Via", "1.1 cache, 1.1 front-2", "X-Request-Id", "req-1"],
  );
  assert.deepEqual(downstreamHeaders(["X-Trace-Id", "kept"], "req-1"), [
    "X-Trace-Id",
    "kept",
    "X-Request-Id",
    "req-1",
  ]);
});
