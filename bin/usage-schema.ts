/**
 * Writes `site/usage.schema.json`, the JSON Schema of `/usage.json`, from the zod schema the usage-report
 * function validates with (`npm run usage-schema`). test/unit/http/usage-report-schema.test.ts fails when the
 * published file and the zod schema disagree.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { usageReportJsonSchema } from '#http/schemas/usage-report.ts';

const file = new URL('../site/usage.schema.json', import.meta.url);
writeFileSync(file, `${JSON.stringify(usageReportJsonSchema(), null, 2)}\n`);
console.log(`wrote ${fileURLToPath(file)}`);
