/**
 * Which modules an operator run mutates: by default the security-critical ones issue 33 names,
 * kept here in one list so that a module that moves is moved here too (a test checks that every
 * entry still names a file); `--modules` takes folders and globs instead. `--changed <commit>`
 * narrows the mutants to the lines `git diff <commit>` shows as changed (the working tree against
 * that commit; a file git does not track yet counts as changed throughout).
 *
 * @module
 */
import { join, relative, resolve, sep } from "node:path";

/** The security-critical modules, by area; globs (`*`, `**`) and plain paths from the root. */
export const DEFAULT_MODULES: Readonly<Record<string, readonly string[]>> = Object.freeze({
  "request framing and paths": [
    "src/request/head.ts",
    "src/request/canonical_path.ts",
    "src/request/host.ts",
    "src/request/cidr.ts",
    "src/request/client_ip_headers.ts",
  ],
  "hygiene": ["src/proxy/hygiene.ts", "src/proxy/inward.ts"],
  "ledger": ["src/ledger/*.ts"],
  "policies and client keys": ["src/policy/*.ts"],
  "egress destinations": ["src/egress/destinations.ts", "src/egress/own_listener.ts"],
  "trust": ["src/trust/*.ts"],
  "hub auth and enrolment": [
    "src/hub/auth.ts",
    "src/hub/api_auth.ts",
    "src/hub/enrolment.ts",
    "src/hub/fleet_trust.ts",
  ],
  "door and admin gate": ["src/door/matcher.ts", "src/pipeline/admin_gate.ts"],
  "delivery watch": ["src/server/delivery_watch.ts"],
  "parse gate": ["src/server/parse_gate.ts"],
  "owned reads": [
    "src/egress/h1_response.ts",
    "src/egress/h1_body.ts",
    "src/egress/h1_bytes.ts",
    "src/proxy/owned_attempt.ts",
    "src/proxy/owned_body.ts",
  ],
});

/** A glob (`**` any folders, `*` and `?` within a name) as an anchored regular expression. */
export function globPattern(glob: string): RegExp {
  let pattern = "";
  for (let at = 0; at < glob.length; at++) {
    const char = glob[at];
    if (char === "*" && glob[at + 1] === "*") {
      const slash = glob[at + 2] === "/";
      pattern += slash ? "(?:.*/)?" : ".*";
      at += slash ? 2 : 1;
    } else if (char === "*") pattern += "[^/]*";
    else if (char === "?") pattern += "[^/]";
    else pattern += char.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${pattern}$`);
}

/** Every `.ts` module under `folder` (from `root`), tests and declarations left out. */
async function modulesUnder(root: string, folder: string, found: string[]): Promise<void> {
  for await (const entry of Deno.readDir(join(root, folder))) {
    const path = folder === "" ? entry.name : `${folder}/${entry.name}`;
    if (entry.isDirectory && !["node_modules", ".git", "dist"].includes(entry.name)) {
      await modulesUnder(root, path, found);
    } else if (entry.isFile && isModule(path)) found.push(path);
  }
}

const isModule = (path: string) =>
  path.endsWith(".ts") && !path.endsWith("_test.ts") && !path.endsWith(".d.ts");

async function isFolder(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isDirectory;
  } catch {
    return false;
  }
}

/**
 * The modules `patterns` name (folders, globs or paths from `root`), sorted, each once.
 *
 * @throws {Error} when a pattern matches no module, naming it
 */
export async function resolveModules(root: string, patterns: readonly string[]): Promise<string[]> {
  const all: string[] = [];
  await modulesUnder(root, "", all);
  const chosen = new Set<string>();
  for (const raw of patterns) {
    const pattern = relative(root, resolve(root, raw)).split(sep).join("/");
    const folder = await isFolder(join(root, pattern));
    const matches = folder
      ? all.filter((path) => path.startsWith(`${pattern}/`))
      : all.filter((path) => globPattern(pattern).test(path));
    if (matches.length === 0) throw new Error(`Module pattern "${raw}" matches no module`);
    for (const path of matches) chosen.add(path);
  }
  return [...chosen].sort();
}

/** Lines changed per file: a set of 1-based line numbers, or `"all"` for an untracked file. */
export type ChangedLines = Map<string, Set<number> | "all">;

async function git(root: string, args: string[]): Promise<string> {
  const output = await new Deno.Command("git", { args, cwd: root, stdin: "null" }).output();
  if (!output.success) {
    const why = new TextDecoder().decode(output.stderr).trim();
    throw new Error(`git ${args.join(" ")} failed: ${why}`);
  }
  return new TextDecoder().decode(output.stdout);
}

/** Reads `git diff --unified=0` output: the new-side lines of every hunk, per file. */
export function parseDiff(diff: string): ChangedLines {
  const changed: ChangedLines = new Map();
  let lines: Set<number> | undefined;
  for (const line of diff.split("\n")) {
    const file = /^\+\+\+ b\/(.+)$/.exec(line);
    if (file) {
      lines = new Set();
      changed.set(file[1], lines);
      continue;
    }
    const hunk = /^@@ -\S+ \+(\d+)(?:,(\d+))? @@/.exec(line);
    if (hunk && lines) {
      const from = Number(hunk[1]);
      const count = hunk[2] === undefined ? 1 : Number(hunk[2]);
      for (let at = from; at < from + count; at++) lines.add(at);
    }
  }
  return changed;
}

/**
 * The lines of `files` changed since `commit` in the working tree at `root`.
 *
 * @throws {Error} when git fails (not a repository, an unknown commit), with git's words
 */
export async function changedLines(
  root: string,
  commit: string,
  files: readonly string[],
): Promise<ChangedLines> {
  const diff = await git(root, [
    "diff",
    "--unified=0",
    "--no-color",
    "--no-ext-diff",
    "--no-renames",
    commit,
    "--",
    ...files,
  ]);
  const changed = parseDiff(diff);
  const untracked = await git(root, ["ls-files", "--others", "--exclude-standard", "--", ...files]);
  for (const file of untracked.split("\n").filter(Boolean)) changed.set(file, "all");
  return changed;
}

/** True when any line from `first` to `last` is among `changed`'s lines of `file`. */
export function touches(changed: ChangedLines, file: string, first: number, last: number): boolean {
  const lines = changed.get(file);
  if (lines === undefined) return false;
  if (lines === "all") return true;
  for (let line = first; line <= last; line++) if (lines.has(line)) return true;
  return false;
}
