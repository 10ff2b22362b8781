/**
 * Reads the tenants folder: every `<host>.yaml` (or `.yml`) file, parsed and validated. Hidden
 * files and editor leftovers (`~`, `.swp`, `.tmp`) are skipped so an editor's save never yields a
 * half-read set.
 *
 * @module
 */
import { join } from "node:path";
import { GLOBALS_FILE, type GlobalsDocument, GlobalsSchema } from "./policy_schema.ts";
import type { ConfigProblem } from "./problems.ts";
import { type TenantDocument, TenantSchema } from "./tenant_schema.ts";
import { validateFile } from "./validate.ts";
import { describeIoError, readYaml, type YamlFile } from "./yaml_file.ts";

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
 * Reads `globals.yaml` from the tenants folder; absent means no policy defaults.
 *
 * @returns the globals, or the problems found
 */
export async function readGlobals(
  dir: string,
): Promise<{ globals: GlobalsDocument; problems: ConfigProblem[] }> {
  const file = join(dir, GLOBALS_FILE);
  try {
    await Deno.lstat(file);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return { globals: { policies: {} }, problems: [] };
  }
  const source = await readYaml(file);
  if (Array.isArray(source)) return { globals: { policies: {} }, problems: source };
  const checked = validateFile(GlobalsSchema, source);
  if (!checked.ok) return { globals: { policies: {} }, problems: checked.problems };
  return { globals: checked.value, problems: [] };
}

/**
 * Reads and validates every tenant file in `dir`, in name order.
 *
 * @param dir the tenants folder
 * @returns the valid files and every problem found
 */
export async function readTenantFiles(
  dir: string,
): Promise<{ files: TenantFile[]; problems: ConfigProblem[] }> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(dir)) {
      if ((entry.isFile || entry.isSymlink) && isTenantFileName(entry.name)) names.push(entry.name);
    }
  } catch (error) {
    return {
      files: [],
      problems: [{
        file: dir,
        path: [],
        message: `Cannot read tenants folder: ${describeIoError(error)}`,
      }],
    };
  }
  names.sort();
  const files: TenantFile[] = [];
  const problems: ConfigProblem[] = [];
  for (const name of names) {
    const file = join(dir, name);
    const source = await readYaml(file);
    if (Array.isArray(source)) {
      problems.push(...source);
      continue;
    }
    const checked = validateFile(TenantSchema, source);
    if (!checked.ok) {
      problems.push(...checked.problems);
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
  return { files, problems };
}
