/** Splits an SSE body into its `data` payloads (one per event), in order. */
export const sseEvents = (text: string): string[] =>
  text
    .split('\n\n')
    .filter((event) => event.trim() !== '')
    .map((event) =>
      event
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(line.startsWith('data: ') ? 6 : 5))
        .join('\n'),
    );
