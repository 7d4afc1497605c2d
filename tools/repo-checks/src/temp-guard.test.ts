import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import setup from "./temp-guard.js";

describe("the temp-folder guard every package's test run uses", () => {
  it("gives the run its own TMPDIR, removes it, and fails the run when a test left something there", () => {
    const outer = os.tmpdir();
    const exitCode = process.exitCode;
    try {
      const clean = setup();
      const root = os.tmpdir();
      expect(root).not.toBe(outer);
      expect(path.dirname(root)).toBe(outer);
      fs.mkdirSync(path.join(root, "tsx-0")); // a tool's cache is not a leftover
      clean();
      expect(os.tmpdir()).toBe(outer);
      expect(fs.existsSync(root)).toBe(false);

      const dirty = setup();
      const leftover = fs.mkdtempSync(path.join(os.tmpdir(), "kq-forgotten-"));
      expect(() => dirty()).toThrow(`the tests left 1 entry in the temp folder: ${path.basename(leftover)}`);
      expect(process.exitCode).toBe(1);
      expect(fs.existsSync(leftover)).toBe(false);
    } finally {
      process.exitCode = exitCode;
    }
  });
});
