import { describe, expect, it } from 'vitest';
import { isFirstAttempt } from '../../src/index.js';

describe('isFirstAttempt', () => {
  it.each([['1'], [' 1 '], [['1']]])('reads %j as a first attempt', (value) => {
    expect(isFirstAttempt(value)).toBe(true);
  });

  it.each([
    [undefined],
    [null],
    [''],
    ['2'],
    ['0'],
    ['01'],
    ['1.0'],
    ['+1'],
    ['one'],
    ['1, 1'],
    ['1,2'],
    [['1', '1']],
    [[]],
  ])('reads %j as not known to be a first attempt, without throwing', (value) => {
    expect(isFirstAttempt(value)).toBe(false);
  });
});
