import { spawn } from "node:child_process";
import { execPathRunsScripts } from "../../core/exec-path.js";

/**
 * An exit that may never finish: isolated-vm's teardown (a static destructor that C's `exit()`
 * runs) joins every isolate thread, and a thread waiting inside a synchronous host callback (a host
 * function call, console.*, a timer, a URL parse) waits for this process's main thread to run
 * that callback, which it never will again. Found with gdb: the main thread in
 * `thread_pool_t::~thread_pool_t`, the isolate's thread in `ThreePhaseTask::RunSync`; isolated-vm
 * issue #260 is the same deadlock. Nothing a JavaScript 'exit' listener can do wakes that thread
 * (disposing its isolate does not), and no Node API ends a process without `exit()`.
 *
 * So the exit gets a deadline: a small process that holds the read end of a pipe from this one.
 * When this process ends, its end closes and the watchdog ends too; if this process is still there
 * EXIT_WATCHDOG_MS later, it is killed (SIGKILL: its exit code is lost, where it would otherwise
 * hang forever). The pipe makes a reused process id impossible to hit: while the pipe is open,
 * the id is still this process's.
 */
export const EXIT_WATCHDOG_MS = 3000;

// It says why on the host's stderr: an exit status of 137 alone sends an operator looking for the OOM killer.
const WATCHDOG = `
const [pid, ms, code] = process.argv.slice(1).map(Number);
const timer = setTimeout(() => {
  try {
    process.kill(pid, "SIGKILL");
    process.stderr.write("cordon: process " + pid + " was still exiting (code " + code + ") " + ms + " ms after process.exit: " +
      "a guest's thread was waiting inside a synchronous host callback, which an exiting process never runs " +
      "(isolated-vm issue #260); it was killed with SIGKILL, and its exit code is lost\\n");
  } catch {}
}, ms);
const stop = () => clearTimeout(timer);
process.stdin.on("end", stop).on("close", stop).on("error", stop).resume();
`;

/**
 * Start the watchdog (from an 'exit' listener: spawning is synchronous); `code` is the exit code
 * the process meant to end with, for the message. Never throws.
 */
export function armExitWatchdog(code: number, ms = EXIT_WATCHDOG_MS): void {
  // In a single executable application or Electron the exit goes on without one, as before it existed.
  if (!execPathRunsScripts()) return;
  try {
    const child = spawn(process.execPath, ["-e", WATCHDOG, String(process.pid), String(ms), String(code)], {
      // Nothing of this process's: no NODE_OPTIONS (a --require would run in the watchdog too).
      env: {},
      stdio: ["pipe", "ignore", "inherit"],
      detached: true,
    });
    child.on("error", () => {});
    child.unref();
  } catch {
    // No watchdog (spawn failed): the exit goes on as it would have.
  }
}
