/**
 * The JSON schemas in `schema/` (for editors): they are up to date with the valibot schemas, accept
 * the example files, and agree with valibot on the mistakes a person makes in a config.
 *
 * @module
 */
import assert from "node:assert/strict";
import { Ajv, type ValidateFunction } from "ajv";
import * as v from "valibot";
import { parse } from "yaml";
import { renderSchemas } from "../scripts/schema.ts";
import { BootstrapSchema } from "../src/config/bootstrap.ts";
import { GlobalsSchema } from "../src/config/policy_schema.ts";
import { TenantSchema } from "../src/config/tenant_schema.ts";
import { HubConfigSchema } from "../src/hub/schema.ts";
import { MINIMAL } from "./fixtures/config_files.ts";

const ROOT = new URL("../", import.meta.url);
const EXAMPLE = new URL("deploy/example/", ROOT);

/** The committed schema `name`, compiled. */
async function validatorOf(name: string): Promise<ValidateFunction> {
  const text = await Deno.readTextFile(new URL(`schema/${name}`, ROOT));
  return new Ajv({ allErrors: true, strict: true, strictRequired: false }).compile(
    JSON.parse(text),
  );
}

/** The JSON schema's errors for `value`, one `path: message` line each; empty when it passes. */
function errorsOf(validate: ValidateFunction, value: unknown): string[] {
  if (validate(value)) return [];
  return (validate.errors ?? []).map((e) =>
    `${e.instancePath || "/"}: ${e.message} ${JSON.stringify(e.params)}`
  );
}

/** Asserts that the JSON schema and the valibot schema both accept, or both refuse, `value`. */
function assertAgree(validate: ValidateFunction, schema: v.GenericSchema, value: unknown) {
  const json = errorsOf(validate, value);
  const valibot = v.safeParse(schema, value).success;
  assert.equal(json.length === 0, valibot, `JSON schema: ${json.join("; ") || "ok"}`);
}

const config = parse(MINIMAL);

Deno.test("schema/*.json are what `deno task schema` writes from the valibot schemas", async () => {
  for (const [name, text] of renderSchemas()) {
    const committed = await Deno.readTextFile(new URL(`schema/${name}`, ROOT)).catch(() => "");
    assert.ok(committed === text, `schema/${name} is stale: run \`deno task schema\``);
  }
});

Deno.test("the example edge, remote edge and hub configs match their schemas", async () => {
  for (
    const [file, schema] of [
      ["config.yaml", "config.schema.json"],
      ["remote-edge.yaml", "config.schema.json"],
      ["hub.yaml", "hub.schema.json"],
    ]
  ) {
    const validate = await validatorOf(schema);
    const example = parse(await Deno.readTextFile(new URL(file, EXAMPLE)));
    assert.deepEqual(errorsOf(validate, example), [], file);
  }
});

Deno.test("tenant and globals schemas accept every file in deploy/example/tenants", async () => {
  const tenant = await validatorOf("tenant.schema.json");
  const globals = await validatorOf("globals.schema.json");
  const dir = new URL("tenants/", EXAMPLE);
  const names = [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => n.endsWith(".yaml"));
  assert.ok(names.includes("globals.yaml") && names.length >= 2, `Files: ${names.join(", ")}`);
  for (const name of names) {
    const document = parse(await Deno.readTextFile(new URL(name, dir)));
    const validate = name === "globals.yaml" ? globals : tenant;
    assert.deepEqual(errorsOf(validate, document), [], name);
  }
});

Deno.test("config.schema.json refuses a misspelt key, naming it", async () => {
  const validate = await validatorOf("config.schema.json");
  const { node_id, ...rest } = config;
  const errors = errorsOf(validate, { ...rest, node_idd: node_id });
  assert.ok(errors.some((e) => e.includes('"additionalProperty":"node_idd"')), errors.join("\n"));
  assert.ok(errors.some((e) => e.includes('"missingProperty":"node_id"')), errors.join("\n"));
});

Deno.test("config.schema.json agrees with BootstrapSchema on listeners, enums and ranges", async () => {
  const validate = await validatorOf("config.schema.json");
  const withListen = (listen: unknown) => ({ ...config, lanes: { public: { listen } } });
  const samples: [unknown, boolean][] = [
    [config, true],
    [withListen([{ path: "run/public.sock" }]), true],
    [withListen([{ hostname: "127.0.0.1", port: 8080 }, { path: "run/b.sock" }]), true],
    [withListen([{ hostname: "127.0.0.1" }]), false],
    [withListen([{ hostname: "127.0.0.1", port: 8080, path: "run/a.sock" }]), false],
    [withListen([{ path: "run/a,b.sock" }]), false],
    [withListen([]), false],
    [withListen([{ hostname: "127.0.0.1", port: 70000 }]), false],
    [{ ...config, mode: "hybrid" }, false],
    [{ ...config, node_id: "-edge" }, false],
    [{ ...config, role: "hub" }, false],
    [{ ...config, timeouts: { header_ms: 10.5 } }, false],
    [{ ...config, lanes: { public: { listen: [], tls: { min_version: "TLSv1.1" } } } }, false],
  ];
  for (const [sample, valid] of samples) {
    assert.equal(errorsOf(validate, sample).length === 0, valid, JSON.stringify(sample));
    assertAgree(validate, BootstrapSchema, sample);
  }
});

Deno.test("tenant.schema.json refuses what TenantSchema refuses in routes and rules", async () => {
  const validate = await validatorOf("tenant.schema.json");
  const route = (extra: object) => ({
    host: "demo.example",
    routes: [{ match: { path: "/" }, respond: { body: "ok" }, ...extra }],
  });
  const rule = (fields: object) => ({
    host: "demo.example",
    policies: { blocklist: { rules: [{ name: "r", ...fields }] } },
  });
  const samples: [unknown, boolean][] = [
    [route({}), true],
    [route({ respond: { headers: { "x-served-by": "edge" } } }), true],
    [route({ respond: { headers: { "Content-Length": "3" } } }), false],
    [route({ respond: { headers: { "X-Request-ID": "1" } } }), false],
    [route({ redirect: { status: 304, location: "/x" } }), false],
    [route({ priority: 11 }), false],
    [{ host: "Demo.Example" }, false],
    [{ host: "demo.example", block_response: "drop" }, true],
    [{ host: "demo.example", block_response: "ignore" }, false],
    [rule({ path: "^/admin" }), true],
    [rule({ header: { name: "user-agent", pattern: "curl" } }), true],
    [rule({ action: "429" }), false],
    [{ host: "demo.example", policies: { waf: { mode: "maybe" } } }, false],
  ];
  for (const [sample, valid] of samples) {
    assert.equal(errorsOf(validate, sample).length === 0, valid, JSON.stringify(sample));
    assertAgree(validate, TenantSchema, sample);
  }
});

Deno.test("globals.schema.json and hub.schema.json agree with their valibot schemas", async () => {
  const globals = await validatorOf("globals.schema.json");
  assertAgree(globals, GlobalsSchema, { policies: { rate_limit: { per_second: 5, burst: 10 } } });
  assertAgree(globals, GlobalsSchema, { policies: { rate_limit: { per_second: 0, burst: 10 } } });
  assertAgree(globals, GlobalsSchema, { policy: {} });

  const hub = await validatorOf("hub.schema.json");
  const hubConfig = {
    role: "hub",
    node_id: "hub-1",
    runtime_dir: "runtime",
    api: { listen: [{ hostname: "127.0.0.1", port: 9443 }], tokens_dir: "tokens" },
    health: { listen: [{ path: "run/hub.sock" }] },
  };
  assert.deepEqual(errorsOf(hub, hubConfig), []);
  assertAgree(hub, HubConfigSchema, hubConfig);
  assertAgree(hub, HubConfigSchema, { ...hubConfig, role: "edge" });
  assertAgree(hub, HubConfigSchema, { ...hubConfig, api: { listen: [] } });
  assertAgree(hub, HubConfigSchema, { ...hubConfig, stream: { hold_ms: 50 } });
});
