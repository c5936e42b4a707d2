import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { availableParallelism } from "node:os";

/**
 * This process (every thread, and those it makes later) and a spinning process share core 0:
 * whatever runs here gets about half of one core, however busy the rest of the machine is, and
 * the other cores stay free for other tests. `release` kills the spinner and gives back every core.
 */
export async function shareCoreWithSpinner(): Promise<{ spinner: ChildProcess; release(): void }> {
  const all = `0-${availableParallelism() - 1}`;
  execFileSync("taskset", ["-a", "-p", "-c", "0", String(process.pid)], { stdio: "ignore" });
  const spinner = spawn("taskset", ["-c", "0", process.execPath, "-e", "for (;;) {}"], { stdio: "ignore" });
  await new Promise((resolve) => setTimeout(resolve, 200));
  return {
    spinner,
    release() {
      spinner.kill("SIGKILL");
      execFileSync("taskset", ["-a", "-p", "-c", all, String(process.pid)], { stdio: "ignore" });
    },
  };
}
