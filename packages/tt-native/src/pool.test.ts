/**
 * The thread pool's contention guard decides from its own numbers whether the calling thread waited
 * for a descheduled worker (then it runs jobs alone for a while) or only for the last of a job's long
 * tasks. The rule: a stall is a wait far longer than one of the caller's own tasks took (4x its mean
 * task time) and at least 200 us. An earlier rule (a fixed spin count, about 40 us) called every
 * prefill wait a stall and ran prefill on one thread.
 */
import { describe, expect, it } from "vitest";
import { nativeAddon } from "./index.js";

const addon = nativeAddon();
const NO_ADDON = addon ? undefined : "the native addon is not built";
const US = 1000;
const MS = 1000 * US;

describe.skipIf(NO_ADDON !== undefined)(`the pool's contention rule${NO_ADDON ? ` (skipped: ${NO_ADDON})` : ""}`, () => {
  const stall = (waited: number, work: number, tasks: number) => addon!.isContentionStall(waited, work, tasks);

  it("an uneven split of long (prefill) tasks is not a stall", () => {
    // the caller ran 8 tasks of 1.5 ms and waited 3 ms for the last worker's task
    expect(stall(3 * MS, 12 * MS, 8)).toBe(false);
    // one long task each: the other thread's took 3x longer
    expect(stall(2 * MS, 1 * MS, 1)).toBe(false);
  });

  it("a wait of a scheduler slice behind short (decode) tasks is a stall", () => {
    // 8 tasks of 20 us, then 4 ms waiting for a worker the OS descheduled
    expect(stall(4 * MS, 160 * US, 8)).toBe(true);
    // long tasks, but the wait is a multiple of them
    expect(stall(20 * MS, 4 * MS, 4)).toBe(true);
  });

  it("short waits are never stalls, however short the tasks", () => {
    expect(stall(150 * US, 1 * US, 1)).toBe(false);
    expect(stall(199 * US, 0, 0)).toBe(false);
    expect(stall(250 * US, 0, 0)).toBe(true);
  });

  it("the boundary is 4x the caller's mean task time", () => {
    expect(stall(3.9 * MS, 10 * MS, 10)).toBe(false);
    expect(stall(4.1 * MS, 10 * MS, 10)).toBe(true);
  });

  it("refuses arguments that are not numbers", () => {
    expect(() => (addon!.isContentionStall as (...a: unknown[]) => boolean)("1", 2, 3)).toThrow(/three numbers/);
  });
});

/**
 * The pool's claim protocol: every task of a job runs exactly once, and before its job returns, whatever
 * the OS does to the threads. poolStress pauses workers between seeing a job and claiming from it, and the
 * caller between publishing a job's callable and its claim word: the windows a descheduled thread opens.
 * (An earlier protocol handed workers the callable and the task count before the claim: a worker paused
 * there ran a task of the next job against the previous job's claim word and counted it done there, so
 * a job returned with a task still running. On a loaded CI machine that showed as one wrong token in a
 * parity gate. With these pauses it had about 6% of its tasks wrong.)
 */
describe.skipIf(NO_ADDON !== undefined)(`the pool's claim protocol${NO_ADDON ? ` (skipped: ${NO_ADDON})` : ""}`, () => {
  for (const threads of [2, 3]) {
    it(`${threads} threads: each task runs once before its job returns, with threads paused in the claim windows`, () => {
      const before = addon!.getThreads();
      addon!.setThreads(threads);
      try {
        const r = addon!.poolStress(20_000, 7, 50);
        expect(r.jobs).toBe(20_000);
        expect(r.pauses).toBeGreaterThan(100);
        expect(r.wrongTasks).toBe(0);
        expect(r.executions).toBe(r.tasks);
        // and without pauses
        const quiet = addon!.poolStress(20_000, 0, 0);
        expect(quiet.wrongTasks).toBe(0);
        expect(quiet.executions).toBe(quiet.tasks);
      } finally {
        addon!.setThreads(before);
      }
    });
  }

  it("refuses absurd arguments", () => {
    expect(() => addon!.poolStress(0, 1, 1)).toThrow(/poolStress/);
    expect(() => addon!.poolStress(10, 1, 1e6)).toThrow(/poolStress/);
  });
});
