/**
 * The `errors:` section, shared by the edge's and the hub's configs: how the gateway's own failure
 * replies read (error_pages.ts says why the default names nothing). Template files are named
 * relative to the config file and read once at boot; every problem names the file, the field and
 * the value.
 *
 * ```yaml
 * errors:
 *   format: minimal          # or json: the failure table's envelope
 *   request_id: false        # true: X-Request-Id, the envelope's field, {request_id}
 *   templates:
 *     "404": { file: errors/404.html }       # Content-Type from the extension
 *     "5xx": { body: "Back soon", content_type: "text/plain; charset=utf-8" }
 * ```
 *
 * @module
 */
import * as v from "valibot";
import { ErrorPages, type ErrorTemplate } from "../request/error_pages.ts";
import { Text } from "./fields.ts";
import { ConfigError, type ConfigProblem } from "./problems.ts";
import { readNamedFile } from "./rooted_read.ts";
import type { YamlFile } from "./yaml_file.ts";

/** A template's body is kept in memory by every isolate: error pages are small. */
export const MAX_TEMPLATE_BYTES = 64 * 1024;

const StatusKey = v.pipe(
  v.string(),
  v.regex(/^(?:[45]\d\d|[45]xx)$/, 'Expected a status from "400" to "599", or "4xx" or "5xx"'),
);

const Template = v.pipe(
  v.strictObject({
    /** A file whose bytes are the body (relative to the config file). */
    file: v.optional(Text),
    /** The body, written here. */
    body: v.optional(v.pipe(v.string("Expected text"), v.maxLength(MAX_TEMPLATE_BYTES))),
    /** Default: from the file's extension (.html, .json), else text/plain. */
    content_type: v.optional(
      v.pipe(Text, v.regex(/^[\x21-\x7e][\x20-\x7e]*$/, "Expected a printable media type")),
    ),
  }),
  v.check(
    (t) => (t.file === undefined) !== (t.body === undefined),
    "Expected exactly one of file or body",
  ),
);

/** The `errors:` section's schema (every field optional: the defaults name nothing). */
export const ErrorsSchema = v.optional(
  v.strictObject({
    format: v.optional(v.picklist(["minimal", "json"], 'Expected "minimal" or "json"'), "minimal"),
    request_id: v.optional(v.boolean("Expected true or false"), false),
    templates: v.optional(v.record(StatusKey, Template, "Expected templates by status"), {}),
  }),
  {},
);

/** The `errors:` section as written. */
export type ErrorsInput = v.InferOutput<typeof ErrorsSchema>;

/** One template as resolved: a file (absolute) or a body, and its Content-Type. */
export interface ErrorTemplateSource {
  /** The status (`"404"`) or class (`"4xx"`) it answers. */
  readonly key: string;
  /** The file its body is read from, absolute. */
  readonly file?: string;
  /** Its body, written in the config. */
  readonly body?: string;
  /** The Content-Type it is sent with. */
  readonly contentType: string;
}

/** The `errors:` section resolved: paths absolute, Content-Types decided. */
export interface ErrorsConfig {
  /** `minimal`: the reason phrase alone; `json`: the structured envelope. */
  readonly format: "minimal" | "json";
  /** True: failures carry the request id (header, envelope field, `{request_id}`). */
  readonly requestId: boolean;
  /** The operator's templates, by status or class. */
  readonly templates: readonly ErrorTemplateSource[];
}

/**
 * Resolves the section: template paths against the config file's folder.
 *
 * @param raw the section as validated
 * @param resolve the config file's path resolver
 */
export function errorsOf(raw: ErrorsInput, resolve: (path: string) => string): ErrorsConfig {
  const templates = Object.entries(raw.templates).map(([key, t]) => ({
    key,
    file: t.file === undefined ? undefined : resolve(t.file),
    body: t.body,
    contentType: t.content_type ?? contentTypeOf(t.file),
  }));
  return { format: raw.format, requestId: raw.request_id, templates };
}

/** The files the section names (for the derived `--allow-read`). */
export function templateFiles(config: ErrorsConfig): string[] {
  return config.templates.flatMap((t) => t.file === undefined ? [] : [t.file]);
}

/**
 * Reads the template files and builds the renderer.
 *
 * @param config the section, resolved
 * @param source the config file (for the problems' file and, when parsed, their line)
 * @throws {ConfigError} for a file that cannot be read, is too large or not UTF-8, and for a
 *   template that shows `{request_id}` while `request_id` is false
 */
export async function loadErrorPages(
  config: ErrorsConfig,
  source: Pick<YamlFile, "file"> & Partial<Pick<YamlFile, "locate">>,
): Promise<ErrorPages> {
  const problems: ConfigProblem[] = [];
  const templates = new Map<string, ErrorTemplate>();
  for (const template of config.templates) {
    const field = template.file === undefined ? "body" : "file";
    const path = ["errors", "templates", template.key, field];
    const problem = (value: unknown, message: string) =>
      problems.push({ file: source.file, path, value, message, at: source.locate?.(path) });
    let body = template.body ?? "";
    if (template.file !== undefined) {
      try {
        body = await readNamedFile(template.file, "Error template", {
          maxBytes: MAX_TEMPLATE_BYTES,
        });
      } catch (error) {
        problem(template.file, (error as Error).message);
        continue;
      }
    }
    if (!config.requestId && body.includes("{request_id}")) {
      problem(
        template.file ?? body,
        "The template shows {request_id}, but errors.request_id is false: set it to true " +
          "to send the request id, or remove the placeholder",
      );
      continue;
    }
    templates.set(template.key, { body, contentType: template.contentType });
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return new ErrorPages({ format: config.format, requestId: config.requestId, templates });
}

/** A template file's Content-Type by its extension. */
function contentTypeOf(file: string | undefined): string {
  if (file?.endsWith(".html") || file?.endsWith(".htm")) return "text/html; charset=utf-8";
  if (file?.endsWith(".json")) return "application/json";
  return "text/plain; charset=utf-8";
}
