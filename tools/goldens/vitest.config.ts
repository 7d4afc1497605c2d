import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.test.ts"],
    globalSetup: ["../../tools/repo-checks/src/temp-guard.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
