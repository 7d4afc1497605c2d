import path from "node:path";
import { write, type CommandIo } from "./command.js";

/** What the hub's downloads report (structural: the CLI prints, the library only reports). */
export interface ByteProgress {
  file: string;
  downloaded: number;
  total: number;
  resumed: number;
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** `1.5 GiB`: bytes in binary units, one decimal from KiB up. */
export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${UNITS[unit]}`;
}

/** `1h02m`, `3m05s`, `42s`. */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${s}s`;
}

/**
 * One download's progress on stderr: on a terminal a bar redrawn in place (bytes, rate, ETA) at most every
 * `redrawMs`; otherwise quiet lines, one when a file starts (saying a resume) and one when it ends.
 * `now` is injectable so the bar's rate and ETA can be tested without a clock.
 */
export function downloadProgress(io: CommandIo, { now = () => performance.now(), redrawMs = 100 } = {}) {
  let current: { file: string; started: number; startBytes: number; lastDraw: number; total: number; downloaded: number } | undefined;
  let width = 0;
  const finishLine = (): void => {
    if (!current) return;
    const seconds = (now() - current.started) / 1000;
    const moved = current.downloaded - current.startBytes;
    const rate = seconds > 0 ? ` at ${formatBytes(moved / seconds)}/s` : "";
    if (io.interactive) io.stderr.write(`\r${" ".repeat(width)}\r`);
    write(io.stderr, `downloaded ${path.basename(current.file)} (${formatBytes(current.total)}) in ${formatDuration(seconds)}${rate}`);
    current = undefined;
  };
  return {
    onProgress(progress: ByteProgress): void {
      if (current?.file !== progress.file) {
        finishLine();
        current = {
          file: progress.file,
          started: now(),
          startBytes: progress.downloaded,
          lastDraw: -Infinity,
          total: progress.total,
          downloaded: progress.downloaded,
        };
        const resume = progress.resumed > 0 ? `, resuming at ${formatBytes(progress.resumed)}` : "";
        if (!io.interactive) write(io.stderr, `downloading ${progress.file} (${formatBytes(progress.total)}${resume})`);
      }
      current.downloaded = progress.downloaded;
      if (!io.interactive) return;
      const t = now();
      if (t - current.lastDraw < redrawMs && progress.downloaded < progress.total) return;
      current.lastDraw = t;
      const seconds = (t - current.started) / 1000;
      const rate = seconds > 0 ? (progress.downloaded - current.startBytes) / seconds : 0;
      const fraction = progress.total > 0 ? progress.downloaded / progress.total : 1;
      const bar = 24;
      const filled = Math.round(bar * fraction);
      const eta = rate > 0 ? formatDuration((progress.total - progress.downloaded) / rate) : "?";
      const line = `${path.basename(progress.file)} [${"#".repeat(filled)}${".".repeat(bar - filled)}] ${(100 * fraction).toFixed(1)}% ${formatBytes(progress.downloaded)}/${formatBytes(progress.total)} ${formatBytes(rate)}/s ETA ${eta}`;
      io.stderr.write(`\r${line.padEnd(width)}`);
      width = line.length;
    },
    /** Ends the last file's line (call once all files are done). */
    finish: finishLine,
    /** Clears a half-drawn bar (after an error or an interruption). */
    abandon(): void {
      if (io.interactive && current) io.stderr.write(`\r${" ".repeat(width)}\r`);
      current = undefined;
    },
  };
}
