// A process's first QuickJS run, cold: cordon's engine start beside raw quickjs-emscripten's, each in
// a fresh Node process (a start can only be measured once per process).
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { percentile, section } from "./measure.js";

const DIST = new URL("../dist/index.js", import.meta.url).href;
const NODE_MODULES = fileURLToPath(new URL("../node_modules/", import.meta.url));

/** Raw: load the module, then runtime + context + eval + call. */
const RAW = `
const began = performance.now();
const { default: variant } = await import(${JSON.stringify(`${NODE_MODULES}@jitl/quickjs-wasmfile-release-sync/dist/index.mjs`)});
const { newQuickJSWASMModuleFromVariant } = await import(${JSON.stringify(`${NODE_MODULES}quickjs-emscripten-core/dist/index.mjs`)});
const QuickJS = await newQuickJSWASMModuleFromVariant(variant);
const runtime = QuickJS.newRuntime();
const vm = runtime.newContext();
const value = vm.getNumber(vm.unwrapResult(vm.evalCode("(function () { return 1 })()")));
if (value !== 1) throw new Error("raw QuickJS gave " + value);
console.log(JSON.stringify({ ms: performance.now() - began, cpuMs: (process.cpuUsage().user + process.cpuUsage().system) / 1000 }));
`;

/** cordon: createSandbox + the first run, on a host. */
const cordon = (host) => `
const { createSandbox } = await import(${JSON.stringify(DIST)});
const began = performance.now();
const cpu = process.cpuUsage();
const sandbox = await createSandbox({ engine: "quickjs", host: ${JSON.stringify(host)} });
const result = await sandbox.run({ code: "export default () => 1" });
if (!result.ok || result.value !== 1) throw new Error("cordon gave " + JSON.stringify(result));
const used = process.cpuUsage(cpu);
console.log(JSON.stringify({ ms: performance.now() - began, cpuMs: (used.user + used.system) / 1000 }));
await sandbox.dispose();
`;

function once(script) {
  const out = execFileSync(process.execPath, ["--no-node-snapshot", "--input-type=module", "-e", script], { encoding: "utf8" });
  return JSON.parse(out.trim().split("\n").pop());
}

export async function benchQuickJSStart({ quick }) {
  section("quickjs: a process's first run (engine start), each in a fresh process");
  const rounds = quick ? 3 : 7;
  const kinds = [
    ["raw quickjs-emscripten (load + runtime + context + eval)", RAW],
    ["cordon in process: createSandbox + first run", cordon("inprocess")],
    ["cordon process host: createSandbox + first run", cordon("process")],
  ];
  const samples = kinds.map(() => []);
  // Alternated, so the machine's drift hits all three alike.
  for (let round = 0; round < rounds; round++) {
    for (const [k, [, script]] of kinds.entries()) samples[k].push(once(script));
  }
  const rawMs = percentile(
    samples[0].map((s) => s.ms).sort((a, b) => a - b),
    0.5,
  );
  kinds.forEach(([label], k) => {
    const ms = samples[k].map((s) => s.ms).sort((a, b) => a - b);
    const cpu = samples[k].map((s) => s.cpuMs).sort((a, b) => a - b);
    const p50 = percentile(ms, 0.5);
    const against = k === 0 ? "" : `   ratio ${(p50 / rawMs).toFixed(1)}x raw`;
    console.log(
      `  ${label.padEnd(58)} p50 ${p50.toFixed(0)} ms   max ${ms[ms.length - 1].toFixed(0)} ms   this process's CPU p50 ${percentile(cpu, 0.5).toFixed(0)} ms${against}`,
    );
  });
  console.log("  (raw's CPU counts Node's start too; cordon's from createSandbox. The process host's workers' CPU is theirs.)");
}
