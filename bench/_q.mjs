import { newQuickJSWASMModuleFromVariant, newVariant } from "quickjs-emscripten-core";
import variant from "@jitl/quickjs-wasmfile-release-sync";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const wasmModule = await WebAssembly.compile(readFileSync(require.resolve("@jitl/quickjs-wasmfile-release-sync/wasm")));
const mem = new WebAssembly.Memory({ initial: 256, maximum: 256 + 512 });
const Q = await newQuickJSWASMModuleFromVariant(newVariant(variant, { wasmModule, wasmMemory: mem }));
const rt = Q.newRuntime();
rt.setMemoryLimit(32 * 1024 * 1024);
let n = 0;
const t = performance.now();
rt.setInterruptHandler(() => {
  n++;
  return performance.now() - t > 3000;
});
const vm = rt.newContext();
const r = vm.evalCode("for (;;) Promise.resolve().then(() => {})");
console.log("eval done", (performance.now() - t).toFixed(0), n, r.error ? JSON.stringify(vm.dump(r.error)) : "value");
try {
  const j = rt.executePendingJobs(-1);
  console.log("jobs", (performance.now() - t).toFixed(0), n, j.error ? "error" : j.value);
} catch (e) {
  console.log("jobs threw", e.message, (performance.now() - t).toFixed(0));
}
