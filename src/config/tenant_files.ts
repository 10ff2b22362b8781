/**
 * Reads the tenants folder: every `<host>.yaml` (or `.yml`) file, parsed and validated. Hidden
 * files and editor leftovers (`~`, `.swp`, `.tmp`) are skipped so an editor's save never yields a
 * half-read set.
 *
 * @module
 */
import { join } from "node:path";
import { GLOBALS_FILE, type GlobalsDocument, GlobalsSchema } from "./policy_schema.ts";
import { type ConfigProblem, excerpt } from "./problems.ts";
import { readRootedText, RootedReadError } from "./rooted_read.ts";
import { type TenantDocument, TenantSchema } from "./tenant_schema.ts";
import { validateFile } from "./validate.ts";
import { describeIoError, parseYaml, type YamlFile } from "./yaml_file.ts";

/** The largest runtime YAML file read, in bytes: far above any tenant, far below memory. */
export const MAX_RUNTIME_FILE_BYTES = 4 * 1024 * 1024;

/** One valid tenant file. */
export interface TenantFile {
  readonly file: string;
  readonly document: TenantDocument;
  readonly source: YamlFile;
}

/** True for a file name the loader reads as a tenant (not `globals.yaml`). */
export function isTenantFileName(name: string): boolean {
  return !name.startsWith(".") && /\.ya?ml$/.test(name) && name !== GLOBALS_FILE;
}

/**
 * Reads the runtime YAML of a folder once — `globals.yaml` and every tenant file — as text, so a
 * generation is built from one consistent read (and hashed from the same bytes). Each file is read
 * rooted in the folder (rooted_read.ts): a file that is, or links to, something outside it is a
 * problem naming the file, and none of its bytes are read.
 *
 * @param dir the tenants folder
 * @returns file name → text, and the problems reading them (an unreadable folder or file)
 */
export async function readRuntimeTexts(
  dir: string,
): Promise<{ texts: Map<string, string>; problems: ConfigProblem[] }> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(dir)) {
      if (!entry.isFile && !entry.isSymlink) continue;
      if (isTenantFileName(entry.name) || entry.name === GLOBALS_FILE) names.push(entry.name);
    }
  } catch (error) {
    const message = `Cannot read tenants folder: ${describeIoError(error)}`;
    return { texts: new Map(), problems: [{ file: dir, path: [], message }] };
  }
  names.sort();
  const texts = new Map<string, string>();
  const problems: ConfigProblem[] = [];
  for (const name of names) {
    try {
      texts.set(name, await readRootedText(dir, name, { maxBytes: MAX_RUNTIME_FILE_BYTES }));
    } catch (error) {
      // Deleted between the listing and the read (an editor's save): the next read sees the truth.
      if (error instanceof RootedReadError && error.reason === "missing") continue;
      const file = join(dir, name);
      const message = error instanceof RootedReadError
        ? error.message
        : `Cannot read file: ${describeIoError(error)}`;
      problems.push({ file, path: [], message });
    }
  }
  return { texts, problems };
}

/**
 * Parses and validates runtime YAML read by {@link readRuntimeTexts} (or received from a hub):
 * `globals.yaml`, then every tenant file in name order, each named after its host. A problem
 * carries a short excerpt of the value at its location, never a whole document.
 *
 * @param dir the folder the files belong to (for diagnostics and `body_file` paths)
 * @param texts file name → text
 * @returns the valid tenant files, the globals, and every problem found
 */
export function parseRuntime(
  dir: string,
  texts: ReadonlyMap<string, string>,
): { files: TenantFile[]; globals: GlobalsDocument; problems: ConfigProblem[] } {
  const problems: ConfigProblem[] = [];
  let globals: GlobalsDocument = { policies: {} };
  const globalsText = texts.get(GLOBALS_FILE);
  if (globalsText !== undefined) {
    const source = parseYaml(join(dir, GLOBALS_FILE), globalsText);
    const checked = Array.isArray(source) ? undefined : validateFile(GlobalsSchema, source);
    if (Array.isArray(source)) problems.push(...source);
    else if (!checked!.ok) problems.push(...checked!.problems.map(excerpt));
    else globals = checked!.value;
  }
  const files: TenantFile[] = [];
  for (const name of [...texts.keys()].filter(isTenantFileName).sort()) {
    const file = join(dir, name);
    const source = parseYaml(file, texts.get(name)!);
    if (Array.isArray(source)) {
      problems.push(...source);
      continue;
    }
    const checked = validateFile(TenantSchema, source);
    if (!checked.ok) {
      problems.push(...checked.problems.map(excerpt));
      continue;
    }
    const stem = name.replace(/\.ya?ml$/, "");
    if (stem !== checked.value.host) {
      problems.push({
        file,
        path: ["host"],
        value: checked.value.host,
        message: `A tenant file is named after its host: expected ${checked.value.host}.yaml`,
        at: source.locate(["host"]),
      });
      continue;
    }
    files.push({ file, document: checked.value, source });
  }
  return { files, globals, problems };
}
