import fs from "node:fs/promises";
import { setTimeout as delay } from "node:timers/promises";

/** How often a waiting process looks whether the lock holder is done (ms). */
const LOCK_POLL_MS = 100;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Takes the lock file `file` (created exclusively, holding this process id), waiting while another live holder
 * has it; a lock whose process is gone is taken over. Returns the release function. Two processes (or two pulls
 * in one process) never write the same blob at once: the second waits, then finds the blob there.
 */
export async function acquireLock(file: string, signal?: AbortSignal): Promise<() => Promise<void>> {
  const token = `${process.pid}\n${Math.random().toString(36).slice(2)}`;
  for (;;) {
    signal?.throwIfAborted();
    try {
      await fs.writeFile(file, token, { flag: "wx" });
      return async () => {
        // release only our own lock (a holder judged stale and taken over must not remove the new one)
        const content = await fs.readFile(file, "utf8").catch(() => "");
        if (content === token) await fs.rm(file, { force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const holder = Number.parseInt(await fs.readFile(file, "utf8").catch(() => ""), 10);
    if (Number.isInteger(holder) && holder > 0 && !alive(holder)) {
      await fs.rm(file, { force: true });
      continue;
    }
    await delay(LOCK_POLL_MS, undefined, signal ? { signal } : {});
  }
}
