import { InvalidRequestError } from '#core/errors.ts';
import type { AudioFile } from '#core/upstream.ts';

export interface MultipartForm {
  /** Text fields in the order sent (a name may repeat, e.g. `timestamp_granularities[]`). */
  readonly fields: readonly (readonly [name: string, value: string])[];
  readonly files: readonly (readonly [name: string, file: AudioFile])[];
}

/**
 * Parses a `multipart/form-data` body with the platform's own parser (undici's, behind `Response.formData`):
 * the body is already in memory and bounded, and a standard parser beats a hand-written one on edge cases.
 */
export const parseMultipart = async (
  bytes: Buffer,
  contentType: string | undefined,
): Promise<MultipartForm> => {
  if (!contentType || !/^multipart\/form-data\s*;.*\bboundary=/i.test(contentType)) {
    const type = (contentType ?? '').split(';')[0]?.trim() ?? '';
    throw new InvalidRequestError(
      /^multipart\/form-data$/i.test(type)
        ? 'The Content-Type multipart/form-data lacks its boundary parameter; let your HTTP client set the header.'
        : `Unsupported Content-Type "${type}": send the request as multipart/form-data.`,
      'invalid_content_type',
    );
  }
  let form: FormData;
  try {
    form = await new Response(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength), {
      headers: { 'content-type': contentType },
    }).formData();
  } catch {
    throw new InvalidRequestError('The multipart/form-data body could not be parsed.', 'invalid_multipart');
  }
  const fields: [string, string][] = [];
  const files: [string, AudioFile][] = [];
  for (const [name, value] of form) {
    if (typeof value === 'string') fields.push([name, value]);
    else {
      files.push([
        name,
        {
          bytes: new Uint8Array(await value.arrayBuffer()),
          filename: value.name || 'audio',
          contentType: value.type || 'application/octet-stream',
        },
      ]);
    }
  }
  return { fields, files };
};
