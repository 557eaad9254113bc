import { describe, expect, it } from 'vitest';
import { parseCpuList, storeCpuList } from '#local/emulators.ts';

describe('storeCpuList (the CPUs DynamoDB Local is confined to)', () => {
  it('leaves a single CPU alone', () => {
    expect(storeCpuList([0])).toBeNull();
    expect(storeCpuList([])).toBeNull();
  });

  it('takes the upper half of the allowed CPUs, at least one, never the first', () => {
    expect(storeCpuList([0, 1])).toBe('1');
    expect(storeCpuList([0, 1, 2])).toBe('1,2');
    expect(storeCpuList([0, 1, 2, 3])).toBe('2,3');
    // A cpuset that does not start at 0: only CPUs the process may use.
    expect(storeCpuList([4, 5])).toBe('5');
  });

  it('reads Linux CPU lists', () => {
    expect(parseCpuList('0-1\n')).toEqual([0, 1]);
    expect(parseCpuList('0-3,8,10-11')).toEqual([0, 1, 2, 3, 8, 10, 11]);
    expect(parseCpuList('')).toEqual([]);
  });
});
