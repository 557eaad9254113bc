import middy from '@middy/core';
import type { ScheduledEvent } from 'aws-lambda';
import { type Container, containerFromEnv } from './container.ts';

/**
 * Scheduled: releases wallet holds whose settlement never arrived (a crash between admission and settlement).
 * A hold expires HOLD_TTL_MS after admission — longer than any call plus the settlement queue's normal delay —
 * so a live call is never swept; a settlement that still arrives later debits from the available amount.
 */
export const createHandler = (container: () => Container) =>
  middy<ScheduledEvent, { released: number }>().handler(async () => {
    const c = container();
    const released = await c.accounting.releaseExpiredHolds(c.clock.now());
    if (released > 0) c.log.info('released expired holds', { released });
    return { released };
  });

export const handler = createHandler(containerFromEnv);
