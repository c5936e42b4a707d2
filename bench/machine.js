// What this machine charges for the things cordon's figures are made of, printed before them: a
// page fault (every fresh isolate, WebAssembly memory and spare pays hundreds), waking a thread
// that sleeps (every paced run and every crossing pays one or more), and the time a virtual
// machine's host took from it. On the development VM a fault cost 12-15 us (bare metal: ~0.1-0.25)
// and its speed moved 2x within minutes; with these lines a reader can tell a slow hour from a
// slow build, and map the figures to their own hardware.
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { Worker } from "node:worker_threads";
import { percentile } from "./measure.js";

const PAGE = 4096;

/**
 * CPU time of one page fault, in us: write one byte into every page of fresh 16 MB WebAssembly
 * memories (each QuickJS instance has one; V8 maps each fresh, so every first write faults).
 * Median of five.
 */
export function pageFaultUs() {
  const rounds = [];
  for (let r = 0; r < 5; r++) {
    const view = new Uint8Array(new WebAssembly.Memory({ initial: 256 }).buffer);
    const started = performance.now();
    for (let at = 0; at < view.length; at += PAGE) view[at] = 1;
    rounds.push(((performance.now() - started) * 1000) / (view.length / PAGE));
  }
  return rounds.sort((a, b) => a - b)[2];
}

/**
 * Round trips to a worker thread over a MessagePort, in us (p50): back to back, and after the
 * thread slept `idleMs` (what a paced run meets: the sleeping thread, often its core too, wakes).
 */
export async function threadWakeUs(idleMs = 20) {
  const worker = new Worker(
    `require("node:worker_threads").parentPort.on("message", (m) => require("node:worker_threads").parentPort.postMessage(m))`,
    {
      eval: true,
    },
  );
  const ping = () =>
    new Promise((resolve) => {
      const started = performance.now();
      worker.once("message", () => resolve(performance.now() - started));
      worker.postMessage(0);
    });
  try {
    await ping();
    const hot = [];
    for (let i = 0; i < 300; i++) hot.push(await ping());
    const idle = [];
    for (let i = 0; i < 30; i++) {
      await new Promise((r) => setTimeout(r, idleMs));
      idle.push(await ping());
    }
    const p50 = (list) => percentile(Float64Array.from(list).sort(), 0.5) * 1000;
    return { backToBackUs: p50(hot), afterIdleUs: p50(idle), idleMs };
  } finally {
    await worker.terminate();
  }
}

/** The cores' time so far from /proc/stat (Linux): all of it, and the share a hypervisor stole. */
export function cpuTimes() {
  try {
    const fields = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1, 9).map(Number);
    return { total: fields.reduce((a, b) => a + b, 0), steal: fields[7] ?? 0 };
  } catch {
    return undefined;
  }
}

/** The steal share between two cpuTimes() readings, as a percentage; undefined off Linux. */
export function stealPercent(before, after) {
  if (!before || !after || after.total <= before.total) return undefined;
  return (100 * (after.steal - before.steal)) / (after.total - before.total);
}

/** One line on this machine's costs, for the top of the bench's output. */
export async function describeMachine() {
  const fault = pageFaultUs();
  const wake = await threadWakeUs();
  const [load1] = loadavg();
  return (
    `machine: a page fault ${fault.toFixed(2)} us of CPU (bare metal ~0.1-0.25); a MessagePort round trip to a worker thread ` +
    `${wake.backToBackUs.toFixed(0)} us back to back, ${wake.afterIdleUs.toFixed(0)} us after ${wake.idleMs} ms asleep; load ${load1.toFixed(2)}`
  );
}
