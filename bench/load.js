// The executor service under load, on loopback: `POST /run` beside the floor it builds on (the same
// service's `GET /health`, and the sandbox's own warm calls without HTTP), then the same benign
// load while hostile guests (endless loops, memory bombs) are kept in flight the whole time.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { createSandbox } from "../dist/index.js";
import { section } from "./measure.js";

const SECRET = "cordon-bench-load-secret-0123456789abcdefghijklm"; // 48 characters, loopback only
const CONNECTIONS = 32;
const TRIVIAL = "export default (i) => i.n * 2";
const BENIGN = JSON.stringify({ code: TRIVIAL, input: { n: 21 } });
const HOSTILE_IN_FLIGHT = 20;
const HOSTILE = [
  { code: "export default () => { for(;;){} }", limits: { cpuTimeMs: 1000, wallTimeMs: 2000 } },
  { code: "export default () => { const a = []; for(;;) a.push(new Array(1e6).fill(1)) }", limits: { memoryMb: 64 } },
];

const fmt = (v) => Math.round(v).toLocaleString("en-US");
// autocannon's latencies are whole milliseconds.
const ms = (v) => `${v} ms`;
/** A completed run's answer: the RunResult as JSON, `"ok":true` when the guest returned. */
const completed = (body) => typeof body === "string" && body.includes('"ok":true');

/** A `verifyBody` that also tallies the answers that are not `"ok":true`, by error code and message. */
function verifier() {
  const failures = new Map();
  const verify = (body) => {
    if (completed(body)) return true;
    let key;
    try {
      const { error } = JSON.parse(body);
      key = `${error?.code ?? "no code"}: ${error?.message ?? "no message"}`;
    } catch {
      key = `not JSON: ${String(body).slice(0, 80)}`;
    }
    failures.set(key, (failures.get(key) ?? 0) + 1);
    return false;
  };
  return { verify, failures };
}

function reportFailures(failures) {
  for (const [key, n] of failures) console.log(`    not ok ${n}x  ${key}`);
}

function cannon(url, options) {
  return new Promise((resolve, reject) => {
    const instance = autocannon({ url, connections: CONNECTIONS, ...options }, (error, result) =>
      error ? reject(error) : resolve(result),
    );
    instance.on("error", reject);
  });
}

/** The benign load: the result, and its answers that were not `"ok":true` by error. */
async function benign(url, duration) {
  const { verify, failures } = verifier();
  const result = await cannon(`${url}/run`, {
    duration,
    method: "POST",
    headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
    body: BENIGN,
    verifyBody: verify,
  });
  return Object.assign(result, { failures });
}

function reportCannon(label, result, floor, { target, vs = "/health" } = {}) {
  const l = result.latency;
  const parts = [
    `${fmt(result.requests.mean)}/s`,
    `p50 ${ms(l.p50)}`,
    `p90 ${ms(l.p90)}`,
    `p99 ${ms(l.p99)}`,
    `non-2xx ${result.non2xx}`,
    `errors ${result.errors + result.timeouts}`,
  ];
  if (result.mismatches !== undefined) parts.push(`not ok ${result.mismatches}`);
  if (floor) parts.push(`ratio ${(result.requests.mean / floor.requests.mean).toFixed(2)}x ${vs}`);
  if (target) parts.push(`target ${target}`);
  console.log(`  ${label.padEnd(34)} ${parts.join("   ")}`);
}

/** Calls per second of `fn`, `inFlight` callers at a time, for `seconds`. */
async function callsPerSecond(seconds, inFlight, fn) {
  let calls = 0;
  let failed = 0;
  await Promise.all(Array.from({ length: inFlight }, () => fn())); // warm-up
  const begin = performance.now();
  const until = begin + seconds * 1000;
  const worker = async () => {
    while (performance.now() < until) {
      const result = await fn();
      calls++;
      if (!result.ok) failed++;
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return { perSecond: calls / ((performance.now() - begin) / 1000), failed };
}

/** Keep `inFlight` hostile runs going until `stop()`; tally their answers by error code. */
function hostileLoad(url, inFlight) {
  const codes = new Map();
  let stopped = false;
  let started = 0;
  const tally = (code) => codes.set(code, (codes.get(code) ?? 0) + 1);
  const one = async (k) => {
    const { code, limits } = HOSTILE[k % HOSTILE.length];
    started++;
    try {
      const response = await fetch(`${url}/run`, {
        method: "POST",
        headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
        body: JSON.stringify({ code, limits }),
        signal: AbortSignal.timeout(30_000),
      });
      const body = await response.json();
      const error = body.error ? `${body.error.code}: ${body.error.message}` : "no error";
      tally(response.ok ? (body.ok ? "completed (!)" : error) : `HTTP ${response.status} ${error}`);
    } catch (error) {
      tally(`fetch ${error.name}`);
    }
  };
  const lane = async (k) => {
    // Bounded: the phase ends them, and no lane runs more than 10 000 hostile requests.
    for (let i = 0; !stopped && i < 10_000; i++) await one(k);
  };
  const lanes = Promise.all(Array.from({ length: inFlight }, (_, k) => lane(k)));
  return {
    async stop() {
      stopped = true;
      await lanes;
      return { started, codes };
    },
  };
}

/**
 * `cordon serve` as a real child process (its own event loop: autocannon's load generation in this
 * process must not take the service's CPU time from the same loop), on a free port, logging its
 * JSON lines to /dev/null as a service would to its collector.
 */
async function serve() {
  const bin = fileURLToPath(new URL("../bin/cordon.js", import.meta.url));
  const child = spawn(process.execPath, [bin, "serve", "--port", "0"], {
    env: { ...process.env, CORDON_EXEC_SECRET: SECRET, CORDON_EXEC_URL: "" },
    stdio: ["ignore", "pipe", "ignore"],
  });
  const url = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
      const match = /listening on (http:\/\/\S+)/.exec(out);
      if (match) resolve(match[1]);
    });
    child.once("exit", (code) => reject(new Error(`cordon serve exited (${code}) before listening: ${out}`)));
  });
  const stopped = new Promise((resolve) => child.once("exit", resolve));
  const close = () => {
    child.kill("SIGTERM");
    return stopped;
  };
  return { url, close };
}

export async function benchLoad({ quick }) {
  const duration = quick ? 3 : 10;
  const executor = await serve();
  const { url } = executor;
  // The floor without HTTP: the same engine and host, called in this process.
  const sandbox = await createSandbox({ host: "process" });
  try {
    // Warm-up: the module prepared, the warm instances up, the connections' first requests behind us.
    for (let i = 0; i < 8; i++) {
      const response = await fetch(`${url}/run`, {
        method: "POST",
        headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
        body: BENIGN,
      });
      const text = await response.text();
      if (!completed(text)) throw new Error(`warm-up run failed: ${response.status} ${text}`);
    }
    await benign(url, 1);

    section(
      `executor service (${sandbox.engineName}, process host): loopback load, ${CONNECTIONS} connections, ${duration} s each`,
    );
    const health = await cannon(`${url}/health`, { duration });
    reportCannon("GET /health (hono + node http)", health);
    const prefix = await sandbox.prepare({ code: TRIVIAL });
    const raw = await callsPerSecond(duration, CONNECTIONS, () => prefix.call({ export: "default", args: [{ n: 21 }] }));
    console.log(
      `  ${"prefix.call, no HTTP".padEnd(34)} ${fmt(raw.perSecond)}/s   ${CONNECTIONS} in flight   not ok ${raw.failed}`,
    );
    await prefix.dispose();
    const a = await benign(url, duration);
    reportCannon("POST /run, trivial warm function", a, health, { target: ">= 3,000 runs/s on 2 cores" });
    reportFailures(a.failures);
    console.log(`  POST /run vs prefix.call: ratio ${(a.requests.mean / raw.perSecond).toFixed(2)}x`);

    section(`executor service: the same load with ${HOSTILE_IN_FLIGHT} hostile runs in flight the whole time`);
    const hostile = hostileLoad(url, HOSTILE_IN_FLIGHT);
    await new Promise((r) => setTimeout(r, 500)); // the hostile runs are in flight
    const b = await benign(url, duration);
    const { started, codes } = await hostile.stop();
    reportCannon("POST /run, trivial warm function", b, a, { vs: "without hostile load" });
    reportFailures(b.failures);
    const healthAfter = await fetch(`${url}/health`);
    await healthAfter.arrayBuffer();
    const byCode = new Map();
    for (const [key, n] of codes) byCode.set(key.split(":")[0], (byCode.get(key.split(":")[0]) ?? 0) + n);
    const tallies = [...byCode].sort((x, y) => y[1] - x[1]).map(([code, n]) => `${code} ${n}`);
    const benignBad = b.non2xx + b.mismatches + b.errors + b.timeouts;
    console.log(`  hostile runs: ${started} sent   ${tallies.join("   ")}`);
    for (const [key, n] of [...codes].sort((x, y) => y[1] - x[1])) console.log(`    ${n}x  ${key}`);
    console.log(`  benign non-OK answers ${benignBad}   GET /health afterwards ${healthAfter.status}`);
    console.log(`  benign runs all succeeded: ${benignBad === 0 && b.requests.total > 0 ? "yes" : "no"}`);
  } finally {
    await sandbox.dispose();
    await executor.close();
  }
}
