/**
 * Validators for OpenAI's published OpenAPI component schemas, for asserting that responses are
 * wire-compatible with OpenAI.
 *
 * The spec is OpenAPI 3.1 (JSON Schema 2020-12), but some schemas still use the 3.0 `nullable: true`
 * extension, which JSON Schema validators do not understand. The component schemas are therefore cloned
 * and rewritten to plain 2020-12 before compiling:
 *
 * - `{type: T, nullable: true}` becomes `{type: [T, 'null']}` (and `null` joins an `enum`, if any);
 * - `nullable: true` next to `$ref`, `enum` only or a composition becomes `anyOf: [<schema>, {type: 'null'}]`.
 *
 * The spec location defaults to the copy in test/fixtures and can be overridden with the
 * `OPENAI_OPENAPI_PATH` environment variable.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

// A copy of OpenAI's published spec (MIT, see the LICENSE beside it), so tests run from a fresh clone.
const DEFAULT_OPENAPI_PATH = fileURLToPath(
  new URL('../fixtures/openai-openapi/openapi.json', import.meta.url),
);
const SPEC_ID = 'openai-openapi';

// Values under these keys are data or metadata, not sub-schemas, and must not be rewritten.
const NON_SCHEMA_KEYS = new Set(['example', 'examples', 'default', 'const', 'enum', 'x-oaiMeta']);
// Values under these keys map arbitrary names (which may be "default", "format", ...) to sub-schemas.
const SCHEMA_MAP_KEYS = new Set([
  'properties',
  'patternProperties',
  '$defs',
  'definitions',
  'dependentSchemas',
]);

type JsonObject = { [key: string]: unknown };

let shared: Ajv2020 | undefined;
const compiled = new Map<string, ValidateFunction>();

/**
 * Returns a validator for the named component schema (e.g. `CreateChatCompletionResponse`). Validators
 * are cached; the spec is loaded and rewritten once per process.
 */
export function compileOpenAiSchema(name: string): ValidateFunction {
  const cached = compiled.get(name);
  if (cached !== undefined) return cached;
  const ajv = loadAjv();
  const validate = ajv.getSchema(`${SPEC_ID}#/components/schemas/${name}`);
  if (validate === undefined) throw new Error(`No component schema named ${name} in the OpenAI spec.`);
  compiled.set(name, validate);
  return validate;
}

/** Human-readable list of a validator's last errors, or `''` when there were none. */
export function describeSchemaErrors(errors: ErrorObject[] | null | undefined): string {
  if (!errors || errors.length === 0) return '';
  return errors
    .map((e) => `${e.instancePath || '/'} ${e.message ?? e.keyword} ${JSON.stringify(e.params)}`)
    .join('\n');
}

/**
 * Validates `value` against the named component schema and returns the errors as text (`''` if valid), a
 * convenient shape for `expect(schemaErrors(...)).toBe('')`, which prints the errors on failure.
 */
export function schemaErrors(name: string, value: unknown): string {
  const validate = compileOpenAiSchema(name);
  return validate(value) ? '' : describeSchemaErrors(validate.errors);
}

/** Rewrites OpenAPI 3.0 `nullable` into JSON Schema 2020-12, returning a deep copy. */
export function rewriteNullable(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(rewriteNullable);
  if (!isObject(node)) return node;
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (SCHEMA_MAP_KEYS.has(key) && isObject(value)) out[key] = mapValues(value, rewriteNullable);
    else out[key] = NON_SCHEMA_KEYS.has(key) ? structuredClone(value) : rewriteNullable(value);
  }
  if (typeof out.nullable !== 'boolean') return out;
  const nullable = out.nullable;
  delete out.nullable;
  if (!nullable) return out;
  if (typeof out.type === 'string' || Array.isArray(out.type)) {
    const types: unknown[] = Array.isArray(out.type) ? out.type : [out.type];
    out.type = types.includes('null') ? types : [...types, 'null'];
    if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
    return out;
  }
  return { anyOf: [out, { type: 'null' }] };
}

function loadAjv(): Ajv2020 {
  if (shared !== undefined) return shared;
  const path = process.env.OPENAI_OPENAPI_PATH ?? DEFAULT_OPENAPI_PATH;
  const spec = JSON.parse(readFileSync(path, 'utf8')) as { components?: { schemas?: JsonObject } };
  const schemas = spec.components?.schemas;
  if (schemas === undefined) throw new Error(`${path} has no components/schemas.`);

  const ajv = new Ajv2020({ strict: false, allErrors: true, logger: false });
  addFormats.default(ajv);
  // The spec uses a few OpenAPI-only formats (unixtime, int64, ...); accept them rather than warn.
  for (const format of collectFormats(Object.values(schemas))) {
    if (ajv.formats[format] === undefined) ajv.addFormat(format, true);
  }
  ajv.addSchema({ $id: SPEC_ID, components: { schemas: mapValues(schemas, rewriteNullable) } });
  shared = ajv;
  return ajv;
}

function collectFormats(node: unknown, found: Set<string> = new Set()): Set<string> {
  if (Array.isArray(node)) {
    for (const item of node) collectFormats(item, found);
  } else if (isObject(node)) {
    for (const [key, value] of Object.entries(node)) {
      if (SCHEMA_MAP_KEYS.has(key) && isObject(value)) {
        for (const schema of Object.values(value)) collectFormats(schema, found);
      } else if (key === 'format' && typeof value === 'string') found.add(value);
      else if (!NON_SCHEMA_KEYS.has(key)) collectFormats(value, found);
    }
  }
  return found;
}

function mapValues(map: JsonObject, fn: (value: unknown) => unknown): JsonObject {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(map)) out[key] = fn(value);
  return out;
}

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
