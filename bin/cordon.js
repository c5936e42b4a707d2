#!/usr/bin/env node
// isolated-vm asks for --no-node-snapshot on Node >= 20 (see README, "Node flags"): re-run with it.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

if (!process.execArgv.includes("--no-node-snapshot")) {
  const script = fileURLToPath(import.meta.url);
  const child = spawnSync(process.execPath, [...process.execArgv, "--no-node-snapshot", script, ...process.argv.slice(2)], {
    stdio: "inherit",
  });
  process.exit(child.status ?? 1);
}

const { main } = await import("../dist/cli/main.js");
process.exitCode = await main(process.argv.slice(2));
