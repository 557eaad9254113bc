import { readFileSync } from 'node:fs';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

/** The JSON Schema the site publishes for `/usage.json`, as a client would read it. */
export const USAGE_SCHEMA_FILE = new URL('../../site/usage.schema.json', import.meta.url);

export const publishedUsageSchema = (): Record<string, unknown> =>
  JSON.parse(readFileSync(USAGE_SCHEMA_FILE, 'utf8')) as Record<string, unknown>;

let validate: ValidateFunction | undefined;

/**
 * Validates a document against the published schema with an independent validator (ajv, strict), so a test
 * proves what a third party would see. Returns ajv's error list, or null when the document is valid.
 */
export const usageSchemaErrors = (document: unknown): string[] | null => {
  if (!validate) {
    const ajv = new Ajv2020({ strict: true, allErrors: true });
    addFormats.default(ajv);
    validate = ajv.compile(publishedUsageSchema());
  }
  return validate(document)
    ? null
    : (validate.errors ?? []).map((e) => `${e.instancePath || '(root)'} ${e.message ?? ''}`.trim());
};
