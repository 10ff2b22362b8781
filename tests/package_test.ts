/**
 * The package is ready to publish: `deno publish --dry-run` passes (slow types included) and ships
 * only what a user importing `mod.ts` needs, `deno doc --lint mod.ts` is clean, and the files a
 * published project carries are there, with `deno.json`'s `license` naming the license `LICENSE`
 * holds.
 *
 * The dry run is given `--no-check`: it still checks for slow types and lists the files, and
 * `deno task ok` type-checks `mod.ts` already. Both commands run offline (nothing is uploaded and
 * the npm packages come from Deno's cache).
 *
 * @module
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const ROOT = new URL("../", import.meta.url);
/** Generous for a busy machine; each command takes a few seconds on an idle one. */
const DEADLINE_MS = 120_000;

/** What a published file may be: the entry point, the code behind it, and the project's notices. */
const PUBLISHED_FILES = new Set(["LICENSE", "README.md", "CHANGELOG.md", "deno.json", "mod.ts"]);
const PUBLISHED_FOLDERS = ["src/", "lanes/"];

interface Run {
  readonly code: number;
  readonly output: string;
}

/** Runs this Deno with `args` in the repository, colours off, and collects both streams. */
async function deno(args: readonly string[]): Promise<Run> {
  const command = new Deno.Command(Deno.execPath(), {
    args: [...args],
    cwd: fileURLToPath(ROOT),
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(DEADLINE_MS),
  });
  const { code, stdout, stderr } = await command.output();
  const text = new TextDecoder();
  return { code, output: text.decode(stdout) + text.decode(stderr) };
}

/** The files a dry run lists, relative to the repository root. */
function publishedFiles(output: string): string[] {
  const root = ROOT.href;
  return output.split("\n")
    .map((line) => /^\s+(file:\/\/\S+)\s+\(/.exec(line)?.[1])
    .filter((url) => url !== undefined)
    .map((url) => {
      assert.ok(url.startsWith(root), `Published file outside the repository: ${url}`);
      return decodeURIComponent(url.slice(root.length));
    });
}

/** The SPDX identifier of the license text in `text`, or undefined for one this test does not know. */
function licenseKind(text: string): string | undefined {
  if (/Apache License\s+Version 2\.0, January 2004/.test(text)) return "Apache-2.0";
  if (/^\s*MIT License/.test(text) || /Permission is hereby granted, free of charge/.test(text)) {
    return "MIT";
  }
  return undefined;
}

Deno.test("package: deno publish --dry-run ships mod.ts, src/, lanes/ and the notices, nothing else", async () => {
  const run = await deno(["publish", "--dry-run", "--allow-dirty", "--no-check"]);
  assert.equal(run.code, 0, `deno publish --dry-run failed:\n${run.output}`);
  assert.match(run.output, /Checking for slow types in the public API/);
  const files = publishedFiles(run.output);
  for (const required of ["LICENSE", "mod.ts", "README.md", "CHANGELOG.md"]) {
    assert.ok(files.includes(required), `${required} is not published:\n${files.join("\n")}`);
  }
  assert.ok(
    files.includes("src/edge/worker_entry.ts"),
    "The request workers' entry is not published",
  );
  for (const folder of ["tests/", "proofs/", "bench/", "deploy/", "scripts/", "docs/", ".ci/"]) {
    const leaked = files.filter((file) => file.startsWith(folder));
    assert.deepEqual(leaked, [], `${folder} would be published`);
  }
  const unexpected = files.filter((file) =>
    !PUBLISHED_FILES.has(file) && !PUBLISHED_FOLDERS.some((folder) => file.startsWith(folder))
  );
  assert.deepEqual(unexpected, [], "Files outside the package's list would be published");
});

Deno.test("package: deno doc --lint mod.ts finds nothing to fix", async () => {
  const run = await deno(["doc", "--lint", "mod.ts"]);
  assert.equal(run.code, 0, `deno doc --lint mod.ts failed:\n${run.output}`);
});

Deno.test("package: the notices exist and deno.json's license is the one LICENSE holds", async () => {
  for (const name of ["LICENSE", "CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md"]) {
    const text = await Deno.readTextFile(new URL(name, ROOT));
    assert.ok(text.trim().length > 200, `${name} is empty or a stub`);
  }
  const kind = licenseKind(await Deno.readTextFile(new URL("LICENSE", ROOT)));
  assert.ok(kind, "LICENSE holds neither the Apache-2.0 nor the MIT text");
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
  assert.equal(
    config.license,
    kind,
    `deno.json "license" is "${config.license}", LICENSE is ${kind}`,
  );
  const changelog = await Deno.readTextFile(new URL("CHANGELOG.md", ROOT));
  assert.match(changelog, new RegExp(`^## ${config.version.replaceAll(".", "\\.")} - `, "m"));
});
