import { randomBytes } from 'node:crypto';

export interface MultipartFile {
  readonly name: string;
  readonly filename: string;
  readonly contentType: string;
  readonly bytes: Uint8Array;
}

/** Quoted-string value for a Content-Disposition parameter: no quotes, no line breaks. */
const quoted = (value: string): string => value.replace(/["\r\n\\]/g, (c) => encodeURIComponent(c));

/**
 * A `multipart/form-data` body (RFC 7578) built in one buffer: the upload is already in memory (Lambda hands
 * us the whole request), so streaming it would only add moving parts.
 */
export const multipartBody = (
  fields: readonly (readonly [string, string])[],
  file: MultipartFile,
): { body: Buffer; contentType: string } => {
  const boundary = `----svc${randomBytes(16).toString('hex')}`;
  const parts: Buffer[] = [];
  for (const [name, value] of fields) {
    parts.push(
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="${quoted(name)}"\r\n\r\n${value}\r\n`,
      ),
    );
  }
  parts.push(
    Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="${quoted(file.name)}"; filename="${quoted(file.filename)}"\r\nContent-Type: ${file.contentType}\r\n\r\n`,
    ),
    Buffer.from(file.bytes.buffer, file.bytes.byteOffset, file.bytes.byteLength),
    Buffer.from(`\r\n--${boundary}--\r\n`),
  );
  return { body: Buffer.concat(parts), contentType: `multipart/form-data; boundary=${boundary}` };
};
