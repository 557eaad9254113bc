import { describe, expect, it } from 'vitest';
import { planRoute } from '#core/routing.ts';
import { deployment } from '#test/fixtures.ts';

/** A deterministic uniform sequence (a linear congruential generator). */
const seeded = (seed: number) => () => {
  seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
  return seed / 2 ** 31;
};

describe('planRoute', () => {
  it('orders deployments by ascending priority', () => {
    const plan = planRoute(
      [
        deployment({ id: 'c', priority: 3 }),
        deployment({ id: 'a', priority: 1 }),
        deployment({ id: 'b', priority: 2 }),
      ],
      Math.random,
    ).deployments;
    expect(plan.map((d) => d.id)).toEqual(['a', 'b', 'c']);
  });

  it('spreads first choices by weight within a priority, keeping every deployment in the plan', () => {
    const group = [deployment({ id: 'heavy', weight: 3 }), deployment({ id: 'light', weight: 1 })];
    const random = seeded(42);
    const firsts = { heavy: 0, light: 0 };
    for (let i = 0; i < 4000; i++) {
      const plan = planRoute(group, random).deployments;
      expect(plan).toHaveLength(2);
      firsts[plan[0]?.id as 'heavy' | 'light']++;
    }
    expect(firsts.heavy / 4000).toBeGreaterThan(0.7);
    expect(firsts.heavy / 4000).toBeLessThan(0.8);
  });

  it('drains a zero-weight deployment: never in the plan, whatever its priority, and 503 when none is left', () => {
    const group = [deployment({ id: 'off', weight: 0 }), deployment({ id: 'on', weight: 1 })];
    for (let i = 0; i < 100; i++)
      expect(planRoute(group, Math.random).deployments.map((d) => d.id)).toEqual(['on']);
    // Alone at the first priority: drained all the same, not tried before the next priority's.
    const first = [
      deployment({ id: 'off', weight: 0, priority: 1 }),
      deployment({ id: 'next', priority: 2 }),
    ];
    expect(planRoute(first, Math.random).deployments.map((d) => d.id)).toEqual(['next']);
    expect(() => planRoute([deployment({ id: 'off', weight: 0 })], Math.random)).toThrow(
      expect.objectContaining({ status: 503, code: 'no_eligible_model' }),
    );
  });
});
