// Raw quickjs-emscripten on a worker thread, the way cordon's in-process host must run QuickJS
// (a spinning guest may not block the caller's loop): a runtime + context made ahead, a run
// posted to the thread, evaluated and called there, its value posted back, the next runtime
// made after the answer. No cordon code: the floor of that architecture on this machine.
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

const THREAD = `
const { parentPort, workerData } = require("node:worker_threads");
const core = require(workerData.corePath);
const variantModule = require(workerData.variantPath);
core.newQuickJSWASMModuleFromVariant(variantModule.default ?? variantModule).then((QuickJS) => {
  const make = () => {
    const runtime = QuickJS.newRuntime();
    return { runtime, vm: runtime.newContext() };
  };
  let spare = make();
  parentPort.on("message", (code) => {
    const { runtime, vm } = spare;
    const fn = vm.unwrapResult(vm.evalCode(code));
    const result = vm.unwrapResult(vm.callFunction(fn, vm.undefined));
    parentPort.postMessage(vm.getNumber(result));
    result.dispose();
    fn.dispose();
    vm.dispose();
    runtime.dispose();
    spare = make();
  });
  parentPort.postMessage("ready");
});
`;

/** Start the thread; `run()` evaluates and calls a trivial function there and resolves with its value. */
export async function startRawQuickJSThread() {
  const require = createRequire(import.meta.url);
  const worker = new Worker(THREAD, {
    eval: true,
    workerData: {
      corePath: require.resolve("quickjs-emscripten-core"),
      variantPath: require.resolve("@jitl/quickjs-wasmfile-release-sync"),
    },
  });
  await new Promise((resolve) => worker.once("message", resolve));
  return {
    run: () =>
      new Promise((resolve) => {
        worker.once("message", resolve);
        worker.postMessage("(function () { return 1 })");
      }),
    close: () => worker.terminate(),
  };
}
