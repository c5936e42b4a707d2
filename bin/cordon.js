#!/usr/bin/env node
// isolated-vm asks for --no-node-snapshot on Node >= 20 (see README, "Node flags"): re-run with it.
// The wrapper forwards signals, so `kill -TERM` reaches `cordon serve` and its graceful shutdown.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

if (!process.execArgv.includes("--no-node-snapshot")) {
  const script = fileURLToPath(import.meta.url);
  const child = spawn(process.execPath, [...process.execArgv, "--no-node-snapshot", script, ...process.argv.slice(2)], {
    stdio: "inherit",
  });
  for (const signal of ["SIGTERM", "SIGHUP"]) process.on(signal, () => child.kill(signal));
  // Ctrl-C reaches the whole process group, the child included: forwarding it would deliver it twice.
  process.on("SIGINT", () => {});
  child.on("exit", (code, signal) => {
    if (signal) process.kill(process.pid, signal);
    else process.exit(code ?? 1);
  });
} else {
  const { main } = await import("../dist/cli/main.js");
  process.exitCode = await main(process.argv.slice(2));
}
