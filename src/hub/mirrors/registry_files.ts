/**
 * Reading the mirror registry's files: every `<host>.yaml` in the mirrors folder and the slugs
 * file, each validated, then checked together (each file named for its host, each slug once, each
 * slug's mirrors in the folder). Every problem names file, field and value — except a slug's value:
 * the slugs are the one secret the registry holds, and a rejected reload lands in the hub's log, so
 * a problem about a slug says its length instead.
 *
 * Only `*.yaml` files that do not start with a dot are mirror files; anything else in the folder
 * (an editor's backup or swap file, a README) is left alone.
 *
 * @module
 */
import { basename, join } from "node:path";
import type { ConfigProblem } from "../../config/problems.ts";
import { validateFile } from "../../config/validate.ts";
import { describeIoError, readYaml } from "../../config/yaml_file.ts";
import { MirrorFileSchema, SlugsFileSchema, type Strategy } from "./schema.ts";

/** One mirror of the registry. */
export interface Mirror {
  readonly host: string;
  readonly region?: string;
  readonly enabled: boolean;
}

/** One slug of the registry. */
export interface Slug {
  readonly slug: string;
  readonly strategy: Strategy;
  /** The mirrors it may send to, in preference order; undefined for every mirror. */
  readonly mirrors?: readonly string[];
  readonly excludeRegions: readonly string[];
}

/** A whole registry: mirrors sorted by host, slugs in file order. */
export interface RegistrySet {
  readonly mirrors: readonly Mirror[];
  readonly slugs: readonly Slug[];
}

/** What a read found: the set when every file is valid, and every problem otherwise. */
export interface RegistryRead {
  readonly set?: RegistrySet;
  readonly problems: readonly ConfigProblem[];
}

/**
 * Reads and checks the mirrors folder and the slugs file.
 *
 * @returns the set, or every problem found (never both)
 */
export async function readRegistry(
  paths: { readonly mirrorsDir: string; readonly slugsFile: string },
): Promise<RegistryRead> {
  const mirrors = await readMirrors(paths.mirrorsDir);
  const hosts = new Set(mirrors.mirrors.map((m) => m.host));
  const slugs = await readSlugs(paths.slugsFile, hosts, paths.mirrorsDir);
  const problems = [...mirrors.problems, ...slugs.problems];
  if (problems.length > 0) return { problems };
  return { set: { mirrors: mirrors.mirrors, slugs: slugs.slugs }, problems };
}

/** Every mirror file in the folder, in name order, each named for its host. */
async function readMirrors(
  dir: string,
): Promise<{ mirrors: Mirror[]; problems: ConfigProblem[] }> {
  const mirrors: Mirror[] = [];
  const problems: ConfigProblem[] = [];
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(dir)) {
      if (entry.isFile && entry.name.endsWith(".yaml") && !entry.name.startsWith(".")) {
        names.push(entry.name);
      }
    }
  } catch (error) {
    return {
      mirrors,
      problems: [{ file: dir, path: [], message: `Cannot read folder: ${describeIoError(error)}` }],
    };
  }
  for (const name of names.sort()) {
    const file = join(dir, name);
    const source = await readYaml(file);
    if (Array.isArray(source)) {
      problems.push(...source);
      continue;
    }
    const checked = validateFile(MirrorFileSchema, source);
    if (!checked.ok) {
      problems.push(...checked.problems);
      continue;
    }
    const { host, region, enabled } = checked.value;
    const named = basename(name, ".yaml");
    if (host !== named) {
      problems.push({
        file,
        path: ["host"],
        value: host,
        message: `Expected the host the file is named for ("${named}")`,
        at: source.locate(["host"]),
      });
      continue;
    }
    mirrors.push({ host, ...(region === undefined ? {} : { region }), enabled });
  }
  return { mirrors, problems };
}

/** The slugs file: each slug once, each of its mirrors a file in the mirrors folder. */
async function readSlugs(
  file: string,
  hosts: ReadonlySet<string>,
  dir: string,
): Promise<{ slugs: Slug[]; problems: ConfigProblem[] }> {
  const source = await readYaml(file);
  if (Array.isArray(source)) return { slugs: [], problems: source };
  const checked = validateFile(SlugsFileSchema, source);
  if (!checked.ok) return { slugs: [], problems: checked.problems.map(redactSlug) };
  const problems: ConfigProblem[] = [];
  const seen = new Map<string, number>();
  const slugs: Slug[] = [];
  for (const [index, written] of checked.value.slugs.entries()) {
    const first = seen.get(written.slug);
    if (first !== undefined) {
      const path = ["slugs", index, "slug"];
      problems.push(redactSlug({
        file,
        path,
        value: written.slug,
        message: `Repeats the slug of slugs[${first}]`,
        at: source.locate(path),
      }));
    }
    seen.set(written.slug, index);
    for (const [position, host] of (written.mirrors ?? []).entries()) {
      if (hosts.has(host)) continue;
      const path = ["slugs", index, "mirrors", position];
      const message = `No mirror file "${host}.yaml" in ${dir}`;
      problems.push({ file, path, value: host, message, at: source.locate(path) });
    }
    slugs.push({
      slug: written.slug,
      strategy: written.strategy,
      ...(written.mirrors ? { mirrors: written.mirrors } : {}),
      excludeRegions: written.exclude_regions,
    });
  }
  return { slugs, problems };
}

/**
 * A problem whose value may be a slug (`slugs[i].slug`, or a whole `slugs[i]` entry) says the
 * value's length instead of the value.
 */
export function redactSlug(problem: ConfigProblem): ConfigProblem {
  const path = problem.path;
  const aboutSlug = path[0] === "slugs" && (path.length <= 2 || path[2] === "slug");
  if (!aboutSlug || problem.value === undefined) return problem;
  const value = problem.value;
  const shape = typeof value === "string" ? `${value.length} characters` : typeof value;
  return { ...problem, value: `(a slug, ${shape}, not shown)` };
}
