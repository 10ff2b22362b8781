/**
 * The hub's `doors:` fragment and its mirror registry: the fragment's problems and grants, every
 * registry problem naming file, field, value and line (a slug's value never shown), and reloads —
 * an invalid change rejected with the last good set kept, a valid one swapped in, by `reload()`
 * and by the watcher.
 *
 * @module
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { formatFlags } from "../src/boot/flags.ts";
import { ConfigError, formatProblem } from "../src/config/problems.ts";
import { validateFile } from "../src/config/validate.ts";
import { parseYaml } from "../src/config/yaml_file.ts";
import { type DoorsConfig, doorsGrants, resolveDoorsConfig } from "../src/hub/mirrors/config.ts";
import { MirrorRegistry } from "../src/hub/mirrors/registry.ts";
import { DoorsSchema } from "../src/hub/mirrors/schema.ts";
import { eventually } from "./fixtures/door.ts";

function fragment(text: string) {
  const source = parseYaml("/etc/portcullis/hub.yaml", text);
  if (Array.isArray(source)) throw new Error(JSON.stringify(source));
  return validateFile(DoorsSchema, source);
}

Deno.test("DoorsSchema: defaults, resolved paths, and the prober's one grant", () => {
  const checked = fragment("mirrors_dir: mirrors\nslugs_file: doors.yaml\n");
  assert.ok(checked.ok);
  const config = resolveDoorsConfig(checked.value, (p) => `/etc/portcullis/${p}`);
  assert.equal(config.mirrorsDir, "/etc/portcullis/mirrors");
  assert.deepEqual(config.prober, {
    enabled: false,
    client: "check_host",
    intervalMs: 900_000,
    regions: [],
    timeoutMs: 60_000,
  });
  assert.equal(
    formatFlags(doorsGrants(config)),
    "--allow-read=/etc/portcullis/mirrors,/etc/portcullis/doors.yaml",
  );
  const probing = fragment(
    "mirrors_dir: m\nslugs_file: s\nprober: { enabled: true, regions: [de1, ir1] }\n",
  );
  assert.ok(probing.ok);
  assert.equal(
    formatFlags(doorsGrants(resolveDoorsConfig(probing.value, (p) => p))),
    "--allow-net=check-host.net:443 --allow-read=m,s,doors-state --allow-write=doors-state",
  );
});

Deno.test("DoorsSchema: problems name the field, the value and the line", () => {
  const checked = fragment(
    "mirrors_dir: m\nslugs_file: s\nnodes: [door/1]\nprober:\n  enabled: true\n" +
      "  interval_ms: 1000\n  regions: [DE]\n  client: other\n",
  );
  assert.ok(!checked.ok);
  assert.deepEqual(checked.problems.map(formatProblem), [
    `/etc/portcullis/hub.yaml:3:9: nodes[0]: Expected 1-63 letters, digits, '.', '_' or '-' (got "door/1")`,
    '/etc/portcullis/hub.yaml:8:11: prober.client: Expected "check_host" (got "other")',
    "/etc/portcullis/hub.yaml:7:13: prober.regions[0]: Expected a check-host.net node name such " +
    'as de1 or de1.node.check-host.net (got "DE")',
  ]);
  const slow = fragment(
    "mirrors_dir: m\nslugs_file: s\nprober: { enabled: true, interval_ms: 1000 }\n",
  );
  assert.ok(!slow.ok);
  assert.deepEqual(slow.problems.map((p) => p.message), [
    "An enabled prober needs at least one region to check from",
    "check-host.net is a shared free service: probe at most once a minute (interval_ms 60000 or more)",
  ]);
});

/** A registry folder with the given mirror files and slugs file text. */
async function registryDir(mirrors: Record<string, string>, slugs: string) {
  const dir = await Deno.makeTempDir({ prefix: "portcullis-mirrors-" });
  await Deno.mkdir(`${dir}/mirrors`);
  for (const [name, text] of Object.entries(mirrors)) {
    await Deno.writeTextFile(`${dir}/mirrors/${name}`, text);
  }
  await Deno.writeTextFile(`${dir}/slugs.yaml`, slugs);
  const config: DoorsConfig = {
    mirrorsDir: `${dir}/mirrors`,
    slugsFile: `${dir}/slugs.yaml`,
    nodes: undefined,
    watch: false,
    debounceMs: 30,
    history: 4,
    prober: {
      enabled: false,
      client: "check_host",
      intervalMs: 900_000,
      regions: [],
      timeoutMs: 1000,
    },
  };
  return { dir, config };
}

const GOOD_MIRRORS = {
  "a.example.yaml": "host: a.example\nregion: DE\n",
  "b.example.yaml": "host: b.example\nenabled: false\n",
  "README.md": "not a mirror file",
  ".c.example.yaml.swp": "editor noise",
};
const GOOD_SLUGS = stringify({ slugs: [{ slug: "secret-slug-1", strategy: "first" }] });

Deno.test("MirrorRegistry.load() names file, field, value and line; never a slug's value", async () => {
  const { dir, config } = await registryDir(
    {
      "a.example.yaml": "host: a.example\nregion: de\n",
      "b.example.yaml": "host: c.example\n",
      "d.example.yaml": "host: d.example\nweight: 3\n",
    },
    [
      "slugs:",
      "  - { slug: secret-slug-1, strategy: first, mirrors: [a.example, zz.example] }",
      "  - { slug: secret-slug-1, strategy: fastest }",
      "  - { slug: short, strategy: first, exclude_regions: [Iran] }",
    ].join("\n"),
  );
  try {
    const error = await new MirrorRegistry(config, { log: () => {} }).load().then(
      () => assert.fail("Expected the registry to be refused"),
      (error) => error,
    );
    assert.ok(error instanceof ConfigError);
    const lines = error.problems.map(formatProblem).map((l: string) => l.replace(dir, "DIR"));
    assert.deepEqual(lines, [
      'DIR/mirrors/a.example.yaml:2:9: region: Expected an ISO 3166-1 alpha-2 code in capitals, such as DE (got "de")',
      'DIR/mirrors/b.example.yaml:1:7: host: Expected the host the file is named for ("b.example") (got "c.example")',
      "DIR/mirrors/d.example.yaml:2:9: weight: Unknown field (a typo? unknown fields are refused, never ignored)",
      'DIR/slugs.yaml:3:38: slugs[1].strategy: Expected "first", "random" or "least_recent" (got "fastest")',
      `DIR/slugs.yaml:4:13: slugs[2].slug: Expected 8-64 letters, digits, '_' or '-' (got "(a slug, 5 characters, not shown)")`,
      'DIR/slugs.yaml:4:55: slugs[2].exclude_regions[0]: Expected an ISO 3166-1 alpha-2 code in capitals, such as DE (got "Iran")',
    ]);
    assert.ok(!lines.join("\n").includes("short"), "a slug's value is never shown");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  const second = await registryDir(
    { "a.example.yaml": "host: a.example\n" },
    [
      "slugs:",
      "  - { slug: secret-slug-1, strategy: first, mirrors: [a.example, zz.example] }",
      "  - { slug: secret-slug-1, strategy: random }",
    ].join("\n"),
  );
  try {
    const error = await new MirrorRegistry(second.config, { log: () => {} }).load().catch((e) => e);
    assert.deepEqual(
      error.problems.map(formatProblem).map((l: string) => l.replaceAll(second.dir, "DIR")),
      [
        'DIR/slugs.yaml:2:66: slugs[0].mirrors[1]: No mirror file "zz.example.yaml" in DIR/mirrors (got "zz.example")',
        'DIR/slugs.yaml:3:13: slugs[1].slug: Repeats the slug of slugs[0] (got "(a slug, 13 characters, not shown)")',
      ],
    );
  } finally {
    await Deno.remove(second.dir, { recursive: true });
  }
});

Deno.test("MirrorRegistry.reload() rejects an invalid change, keeps the last good set, then takes a valid one", async () => {
  const { dir, config } = await registryDir(GOOD_MIRRORS, GOOD_SLUGS);
  const lines: string[] = [];
  const registry = new MirrorRegistry(config, { log: (l) => lines.push(l) });
  try {
    const first = await registry.load();
    assert.deepEqual(first.mirrors, [
      { host: "a.example", region: "DE", enabled: true },
      { host: "b.example", enabled: false },
    ]);
    const changes: number[] = [];
    registry.onChange((set) => changes.push(set.mirrors.length));
    await Deno.writeTextFile(`${dir}/mirrors/e.example.yaml`, "host: e.example\nregion: XYZ\n");
    assert.equal(await registry.reload(), "rejected");
    assert.equal(registry.current, first, "the last good set stays");
    assert.match(lines.join("\n"), /registry change rejected \(1 problem\(s\)\)/);
    assert.match(JSON.stringify(registry.status()), /region: Expected an ISO 3166-1 alpha-2/);
    await Deno.writeTextFile(`${dir}/mirrors/e.example.yaml`, "host: e.example\nregion: NL\n");
    assert.equal(await registry.reload(), "loaded");
    assert.equal(await registry.reload(), "unchanged");
    assert.deepEqual(changes, [3]);
    assert.ok(!lines.join("\n").includes("secret-slug-1"));
  } finally {
    registry.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("MirrorRegistry watches the folder and the slugs file, also when an editor replaces it", async () => {
  const { dir, config } = await registryDir(GOOD_MIRRORS, GOOD_SLUGS);
  const registry = new MirrorRegistry({ ...config, watch: true }, { log: () => {} });
  try {
    await registry.load();
    await Deno.writeTextFile(`${dir}/mirrors/f.example.yaml`, "host: f.example\n");
    await eventually("the new mirror", () => registry.current.mirrors.length === 3);
    for (const count of [2, 3]) {
      const slugs = Array.from(
        { length: count },
        (_, i) => ({ slug: `secret-slug-${i}`, strategy: "first" }),
      );
      await Deno.writeTextFile(`${dir}/slugs.tmp`, stringify({ slugs }));
      await Deno.rename(`${dir}/slugs.tmp`, `${dir}/slugs.yaml`);
      await eventually(`${count} slugs`, () => registry.current.slugs.length === count);
    }
  } finally {
    registry.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
