/**
 * Types for the two aws-lambda-stream 1.0 modules the settlement consumer uses (the package ships none).
 * Only these subpaths are imported: the package root would load connectors for a dozen AWS services.
 */
declare module 'aws-lambda-stream/utils/faults' {
  /** Runs an async step per unit of work; a rejection is tagged with its unit (`err.uow`) and re-thrown. */
  export function faultyAsyncStream<U, R>(step: (uow: U) => Promise<R>): (uow: U) => Highland.Stream<R>;
}

declare module 'aws-lambda-stream/utils/handler' {
  /** Resolves when the stream ends, rejects on an error the stream did not handle. */
  export function toPromise<T>(stream: Highland.Stream<T>): Promise<'Success'>;
}
