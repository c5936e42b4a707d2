import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // One executor service for the remote host's conformance runs.
    globalSetup: ["test/remote-executor.setup.ts"],
    // Each test file runs in a child process; isolated-vm asks for --no-node-snapshot on Node >= 20.
    pool: "forks",
    execArgv: ["--no-node-snapshot"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Two cores: limit-timing tests stay honest when files do not fight for the CPU.
    maxWorkers: 2,
  },
});
