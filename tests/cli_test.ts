/**
 * The command line as a subprocess: version and usage, `check` summaries and diagnostics, and
 * `flags`. The `serve` verb is covered in `cli_serve_test.ts`.
 *
 * @module
 */
import assert from "node:assert/strict";
import denoJson from "../deno.json" with { type: "json" };
import {
  checkConfig,
  freePorts,
  type LanePorts,
  proofConfig,
  READ_ONLY,
  runCli,
  runMain,
  writeConfig,
} from "./fixtures/gateway.ts";
import type { ConfigObject } from "./fixtures/in_process.ts";
import { diagLines } from "./fixtures/diag_lines.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const EXAMPLE = `${ROOT}deploy/example/config.yaml`;

function lanePorts(): LanePorts {
  const [p, l, h] = freePorts(3);
  return { public: p, local_health: l, provider_health: h };
}

/** Lines of `text`, without the trailing empty one. */
function linesOf(text: string): string[] {
  return text.split("\n").filter((line) => line !== "");
}

Deno.test("cli --version: prints the deno.json version and exits 0", async () => {
  assert.match(denoJson.version, /^\d+\.\d+\.\d+/);
  const result = await runCli([], ["--version"]);
  assert.equal(result.code, 0);
  assert.equal(result.stdout, `portcullis ${denoJson.version}\n`);
  assert.equal(result.stdout, "portcullis 0.1.0\n");
});

Deno.test("cli usage: no arguments, or too many, say what is wrong and exit 2", async () => {
  const none = await runMain([]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /^portcullis: missing verb or config file\nrun `portcullis help`/);
  assert.equal(none.stdout, "");
  const extra = await runMain(["check", "a.yaml", "b.yaml"]);
  assert.equal(extra.code, 2);
  assert.match(extra.stderr, /^portcullis: check takes a config file, not "a\.yaml" "b\.yaml"\n/);
  assert.match(extra.stderr, /^usage:\n {2}portcullis check <config\.yaml \|/m);
  const option = await runMain(["check", "--verbose"]);
  assert.equal(option.code, 2);
  assert.match(option.stderr, /^portcullis: check takes a config file, not "--verbose"/);
});

Deno.test("cli: an unknown verb is named with the verb it looks like, not read as a file", async () => {
  const typo = await runMain(["chek", "x"]);
  assert.equal(typo.code, 2);
  assert.equal(typo.stdout, "");
  assert.match(typo.stderr, /^portcullis: unknown verb chek; did you mean check\?\n/);
  const alone = await runMain(["flgs"]);
  assert.equal(alone.code, 2);
  assert.match(alone.stderr, /^portcullis: unknown verb flgs; did you mean flags\?\n/);
  const far = await runMain(["deploy", "config.yaml"]);
  assert.equal(far.code, 2);
  assert.match(far.stderr, /^portcullis: unknown verb deploy\n/);
  // A path is still the default verb's config file: missing, it is a config problem (exit 1),
  // said as a server says everything on stderr (JSON lines).
  const missing = await runCli(READ_ONLY, ["nowhere/config.yaml"]);
  assert.equal(missing.code, 1);
  const [problem, summary] = diagLines(missing.stderr);
  assert.equal(problem.level, "error");
  assert.match(problem.msg, /^nowhere\/config\.yaml: .*Cannot read file/);
  assert.equal(summary.msg, "1 problem(s); nothing was started");
});

Deno.test("cli help: help, --help and -h print the usage once per verb and exit 0", async () => {
  for (const args of [["help"], ["--help"], ["-h"]]) {
    const result = await runMain(args);
    assert.equal(result.code, 0, args.join(" "));
    assert.equal(result.stderr, "");
    const checks = result.stdout.split("\n").filter((line) => /^ {2}portcullis check /.test(line));
    assert.equal(checks.length, 1, `check is listed once:\n${result.stdout}`);
    for (const verb of ["serve", "flags", "hub", "torpool", "probe", "help"]) {
      assert.match(result.stdout, new RegExp(`portcullis (\\[)?${verb}`), verb);
    }
    assert.match(result.stdout, /^exit status:\n {2}0 {2}done/m);
    assert.match(result.stdout, /^ {2}2 {2}usage/m);
    assert.match(result.stdout, /^ {2}3 {2}stopped because the hub revoked this node/m);
  }
});

Deno.test("cli help: one verb's usage for `<verb> --help` and `help <verb>`", async () => {
  for (const args of [["check", "--help"], ["help", "check"], ["check", "-h", "x.yaml"]]) {
    const result = await runMain(args);
    assert.equal(result.code, 0, args.join(" "));
    assert.match(result.stdout, /^usage:\n {2}portcullis check </);
    assert.doesNotMatch(result.stdout, /portcullis flags /, "only check's usage");
    assert.match(result.stdout, /^exit status:/m);
  }
  const fleet = await runMain(["hub", "--help"]);
  assert.match(fleet.stdout, /portcullis hub add-node <hub\.yaml> <node_id>/);
  const wrong = await runMain(["help", "chek"]);
  assert.equal(wrong.code, 2);
  assert.match(wrong.stderr, /^portcullis: unknown verb chek; did you mean check\?/);
});

Deno.test("cli check: the example config prints a summary of lanes, ledger, tenants, flags", async () => {
  const result = await checkConfig(EXAMPLE);
  assert.equal(result.code, 0, result.stderr);
  const out = result.stdout;
  assert.match(out, new RegExp(`^portcullis: ${EXAMPLE} is valid\n`));
  assert.match(out, /^ {2}node example-edge, mode local, 1 request worker$/m);
  assert.match(out, /^ {2}lane public: 127\.0\.0\.1:8080$/m);
  assert.match(out, /^ {4}routes \/healthz \+ tenants$/m);
  assert.match(out, /^ {2}lane local_health: 127\.0\.0\.1:9901$/m);
  assert.match(out, /^ {2}lane provider_health: 127\.0\.0\.1:9902$/m);
  assert.match(out, /^ {4}reserve 2, .*rate 20\/s burst 40$/m);
  assert.match(out, /^ {2}ledger: 256 slots \(general pool 250\), .* 8 per connection$/m);
  assert.match(out, /^ {2}tenants: 1 \(\d+ routes\) in .*deploy\/example\/tenants \(watched\)$/m);
  assert.match(
    out,
    /^ {2}flags: --allow-net=127\.0\.0\.1:8080,127\.0\.0\.1:9901,127\.0\.0\.1:9902 /m,
  );
});

Deno.test("cli check: a bad config prints every problem with file, field and value", async () => {
  const dir = await writeConfig(
    `node_id: "bad id!"\nmode: cloud\ntenants_dir: tenants\nlanes:\n` +
      `  public: { listen: [{ hostname: localhost, port: 0 }] }\n` +
      `ledger:\n  application_slots: 0\n  inflight_bytes: 1024\n  per_connection: 2\n` +
      `  colour: blue\n`,
  );
  try {
    const result = await checkConfig(dir.config);
    assert.equal(result.code, 1);
    assert.equal(result.stdout, "", "no summary for an invalid config");
    const lines = linesOf(result.stderr);
    for (const line of lines) assert.ok(line.startsWith("portcullis: "), line);
    // Each line: file:line:col: field path: message (got value). An unknown key is named by its
    // path; it has no value of its own to quote.
    const expected: [string, string | undefined][] = [
      ["1:10: node_id:", '(got "bad id!")'],
      ["2:7: mode:", '(got "cloud")'],
      ["5:34: lanes.public.listen[0].hostname:", '(got "localhost")'],
      ["5:51: lanes.public.listen[0].port:", "(got 0)"],
      ["7:22: ledger.application_slots:", "(got 0)"],
      ["10:11: ledger.colour:", undefined],
    ];
    assert.equal(lines.length, expected.length + 1, result.stderr);
    expected.forEach(([where, got], i) => {
      assert.ok(lines[i].startsWith(`portcullis: ${dir.config}:${where} `), lines[i]);
      if (got) assert.ok(lines[i].endsWith(got), lines[i]);
    });
    assert.equal(lines.at(-1), "portcullis: 6 problem(s); nothing was started");
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli check: ledger, listener and tenant-file problems are all reported at once", async () => {
  const ports = lanePorts();
  const config: ConfigObject = proofConfig(ports);
  config.ledger.lanes.public.reserve = 1;
  config.ledger.lanes.provider_health.reserve = 0;
  config.lanes.provider_health.listen = [{ hostname: "0.0.0.0", port: ports.public }];
  const badTenant = {
    host: "bad.test",
    routes: [{ match: { path: "/y" }, redirect: { location: "/z/{nope}" } }],
  };
  const dir = await writeConfig(config, [badTenant]);
  try {
    const result = await checkConfig(dir.config);
    assert.equal(result.code, 1);
    const lines = linesOf(result.stderr);
    const find = (text: string) => lines.find((line) => line.includes(text));
    assert.match(find("ledger.lanes.public.reserve:") ?? "", /no reserve.*\(got 1\)$/);
    assert.match(find("ledger.lanes.provider_health.reserve:") ?? "", /\(got 0\)$/);
    assert.match(
      find("lanes.provider_health.listen[0]:") ?? "",
      new RegExp(`0\\.0\\.0\\.0:${ports.public} overlaps lane "public"`),
    );
    assert.ok(find(`${dir.dir}/tenants/bad.test.yaml:`)?.includes("routes[0].redirect.location"));
    assert.equal(lines.at(-1), `portcullis: ${lines.length - 1} problem(s); nothing was started`);
    for (const line of lines) assert.ok(line.startsWith("portcullis: "), line);
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli check: two lanes aliasing one address are refused, naming both lanes", async () => {
  const ports = lanePorts();
  const dir = await writeConfig(proofConfig({ ...ports, provider_health: ports.public }));
  try {
    const result = await checkConfig(dir.config);
    assert.equal(result.code, 1);
    const alias = linesOf(result.stderr).find((line) => line.includes("overlaps"));
    assert.ok(alias, result.stderr);
    assert.match(alias, /lanes\.provider_health\.listen\[0\]: /);
    assert.match(alias, /lane "provider_health"/);
    assert.match(alias, new RegExp(`lane "public" \\(127\\.0\\.0\\.1:${ports.public}\\)`));
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});

Deno.test("cli flags: prints exactly one line with the grants the config needs", async () => {
  const ports = lanePorts();
  const dir = await writeConfig(proofConfig(ports));
  try {
    const result = await runCli(READ_ONLY, ["flags", dir.config]);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(linesOf(result.stdout).length, 1);
    assert.equal(
      result.stdout,
      `--allow-net=127.0.0.1:${ports.public},127.0.0.1:${ports.local_health},` +
        `127.0.0.1:${ports.provider_health} --allow-read=${dir.config},${dir.dir}/tenants,` +
        // The admin token every test edge gets (fixtures/gateway.ts).
        `${dir.dir}/admin.token,` +
        // The public lane's request worker loads its code from the checkout (run from its root).
        "src,lanes," +
        // What the own-listener check reads of the machine (flags.ts LOCAL_MACHINE_GRANTS).
        "/etc/hosts --allow-sys=hostname,networkInterfaces --ignore-env=LOG_STREAM,LOG_TOKENS\n",
    );
  } finally {
    await Deno.remove(dir.dir, { recursive: true });
  }
});
