/**
 * Writes JSON Schema files for Portcullis' YAML files to `schema/`, converted from the valibot
 * schemas that validate them, so an editor (yaml-language-server) can complete and check them,
 * e.g. with `# yaml-language-server: $schema=../../schema/config.schema.json` atop a file.
 *
 * `deno task schema` writes the files; `deno task schema --check` writes nothing and exits 1
 * naming the files that differ from what the schemas say now.
 *
 * JSON Schema cannot say everything valibot checks, so a file that passes the JSON schema can still
 * be refused by `portcullis check`. Each `v.check` refinement is dropped (an IP literal, a CIDR, the
 * port range of `host:port`, a regular expression that compiles), except those translated in
 * {@linkcode CHECKS}. The `Listener` (a `v.lazy` in valibot) becomes the `anyOf` of its two shapes.
 *
 * @module
 */
import { type ConversionConfig, type JsonSchema, toJsonSchema } from "@valibot/to-json-schema";
import type * as v from "valibot";
import { BootstrapSchema, Listener } from "../src/config/bootstrap.ts";
import { GlobalsSchema } from "../src/config/policy_schema.ts";
import { FRAMING_HEADERS, TenantSchema } from "../src/config/tenant_schema.ts";
import { HubConfigSchema } from "../src/hub/schema.ts";

type AnySchema = v.GenericSchema;

/** One generated file: the valibot schema, and the title and description of its root. */
interface SchemaFile {
  readonly name: string;
  readonly schema: AnySchema;
  readonly title: string;
  readonly description: string;
  /** Shared parts, emitted once under `$defs`. */
  readonly definitions?: Record<string, AnySchema>;
}

/** The two listener shapes, named so the lazy `Listener` can refer to both. */
const LISTENER_DEFINITIONS: Record<string, AnySchema> = {
  Listener,
  TcpListener: Listener.getter(undefined),
  UnixListener: Listener.getter({ path: "" }),
};

const FILES: readonly SchemaFile[] = [
  {
    name: "config.schema.json",
    schema: BootstrapSchema,
    title: "Portcullis edge bootstrap config (config.yaml)",
    description: "Read once when an edge starts; unknown keys are errors.",
    definitions: LISTENER_DEFINITIONS,
  },
  {
    name: "tenant.schema.json",
    schema: TenantSchema,
    title: "Portcullis tenant file (<host>.yaml in tenants_dir)",
    description: "One file per host: its aliases, routes, policies and passthrough backends.",
  },
  {
    name: "globals.schema.json",
    schema: GlobalsSchema,
    title: "Portcullis globals file (globals.yaml in tenants_dir)",
    description: "Policy defaults for every tenant, and for requests naming no known host.",
  },
  {
    name: "hub.schema.json",
    schema: HubConfigSchema,
    title: "Portcullis hub config (hub.yaml)",
    description:
      "Run with `portcullis hub`; serves the runtime folder to edges. Unknown keys are errors.",
    definitions: LISTENER_DEFINITIONS,
  },
];

/** `text` as a pattern that matches it in any letter case (JSON Schema patterns have no flags). */
function anyCase(text: string): string {
  return [...text].map((c) => {
    const upper = c.toUpperCase();
    const lower = c.toLowerCase();
    return upper === lower ? c.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") : `[${upper}${lower}]`;
  }).join("");
}

/**
 * The `v.check` refinements that JSON Schema can express, by their error message: each returns the
 * keywords to add. Any other check is dropped.
 */
const CHECKS: ReadonlyMap<string, (schema: JsonSchema) => JsonSchema> = new Map<
  string,
  (schema: JsonSchema) => JsonSchema
>([
  [
    "A rule needs a path or a header pattern (it would match every request)",
    (schema: JsonSchema) => ({
      ...schema,
      anyOf: [{ required: ["path"] }, { required: ["header"] }],
    }),
  ],
  [
    "The gateway owns this header (framing, connection or request id)",
    (schema: JsonSchema) => ({
      ...schema,
      not: { pattern: `^(?:${[...FRAMING_HEADERS].map(anyCase).join("|")})$` },
    }),
  ],
  [
    "A socket path cannot hold a comma, NUL or newline",
    (schema: JsonSchema) => ({ ...schema, pattern: "^[^,\\u0000\\n]*$" }),
  ],
]);

/** The converter's options for one file. */
function conversionOf(file: SchemaFile): ConversionConfig {
  return {
    target: "draft-07",
    typeMode: "input",
    errorMode: "throw",
    definitions: file.definitions,
    overrideSchema: function tidySchema({ valibotSchema, jsonSchema }) {
      if (valibotSchema === Listener) {
        return { anyOf: [{ $ref: "#/$defs/TcpListener" }, { $ref: "#/$defs/UnixListener" }] };
      }
      if (jsonSchema.required?.length !== 0) return undefined;
      // An object with no required key: say nothing rather than `"required": []`.
      const { required: _, ...rest } = jsonSchema;
      return rest;
    },
    overrideAction: function checkKeywords({ valibotAction, jsonSchema }) {
      if (valibotAction.type !== "check") return undefined;
      const message = (valibotAction as { message?: unknown }).message;
      const translate = typeof message === "string" ? CHECKS.get(message) : undefined;
      return translate ? translate(jsonSchema) : jsonSchema;
    },
  };
}

/** One file's JSON Schema, with `$schema`, `title` and `description` first. */
function render(file: SchemaFile): string {
  const { $schema, ...rest } = toJsonSchema(file.schema, conversionOf(file));
  const document = { $schema, title: file.title, description: file.description, ...rest };
  return JSON.stringify(document, null, 2) + "\n";
}

/**
 * Renders every schema file, as `deno task schema` writes it.
 *
 * @returns file name (inside `schema/`) → file text
 */
export function renderSchemas(): Map<string, string> {
  return new Map(FILES.map((file) => [file.name, render(file)]));
}

/** The folder the files go to. */
export const SCHEMA_DIR: URL = new URL("../schema/", import.meta.url);

/** The names of the files in `dir` that are missing or differ from `rendered`. */
async function staleFiles(dir: URL, rendered: Map<string, string>): Promise<string[]> {
  const stale: string[] = [];
  for (const [name, text] of rendered) {
    const current = await Deno.readTextFile(new URL(name, dir)).catch(() => undefined);
    if (current !== text) stale.push(name);
  }
  return stale;
}

async function main(args: string[]): Promise<number> {
  const rendered = renderSchemas();
  if (args.includes("--check")) {
    const stale = await staleFiles(SCHEMA_DIR, rendered);
    for (const name of stale) console.error(`Stale: schema/${name} (run \`deno task schema\`)`);
    return stale.length === 0 ? 0 : 1;
  }
  await Deno.mkdir(SCHEMA_DIR, { recursive: true });
  for (const [name, text] of rendered) {
    await Deno.writeTextFile(new URL(name, SCHEMA_DIR), text);
    console.log(`Wrote schema/${name}`);
  }
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
