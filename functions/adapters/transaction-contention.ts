/**
 * Whether a cancelled DynamoDB transaction names an item another write got in the way of, or that was throttled: not
 * a condition that refused it — the same write may pass when run again. Shared by every writer that tells a refusal
 * from a retry (accounting, the registry, the admin CLI's exit status).
 */
export const contended = (reasons: readonly { readonly Code?: string | undefined }[] | undefined): boolean =>
  (reasons ?? []).some(
    (r) =>
      r?.Code === 'TransactionConflict' ||
      r?.Code === 'ThrottlingError' ||
      r?.Code === 'ProvisionedThroughputExceeded',
  );
