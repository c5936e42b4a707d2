/**
 * The esbuild worker thread: esbuild's JavaScript client (which talks to esbuild's service process
 * over pipes) runs here, never on the host's thread. The client can throw inside its own pipe
 * handler, where no caller can catch it (an output past V8's longest string), and decoding a huge
 * output takes memory: here either ends this thread, not the host.
 *
 * SELF-CONTAINED: started with `new Worker(source, { eval: true })` from
 * `esbuildWorkerMain.toString()`, so the same code runs under the test runner (TypeScript
 * sources) and from dist/ (as the QuickJS worker does). It loads esbuild by the path the host
 * resolved, one copy of the module per service (see `load`).
 */
import type { BuildOptions, Metafile, TransformOptions } from "esbuild";

/** One esbuild call, as data (functions, such as plugins, cannot cross to the thread). */
export type EsbuildOperation =
  | { kind: "transform"; code: string; options: TransformOptions }
  | { kind: "build"; options: Omit<BuildOptions, "plugins"> };

/** What a call answers: only what cordon reads (every string is copied between the threads). */
export interface EsbuildAnswers {
  transform: { code: string; map: string };
  build: { metafile?: Metafile };
}

export type ToEsbuildWorker =
  /** `service` names one of the thread's esbuild services: made on its first call. */
  | { t: "call"; id: number; service: number; operation: EsbuildOperation }
  /** Stop one service (its process): its calls are abandoned. */
  | { t: "stopService"; service: number }
  /** End the thread and every service on it. */
  | { t: "stop" };

/** esbuild's failure as data: structured clone keeps an Error's message only, not its `errors`. */
export interface EsbuildFailure {
  message: string;
  errors?: unknown[];
  warnings?: unknown[];
}

export type FromEsbuildWorker =
  | { t: "done"; id: number; value?: unknown; failure?: EsbuildFailure }
  /** esbuild started a service process: the host kills it if the thread ends by force. */
  | { t: "service"; pid: number }
  /** A service process exited and was reaped. */
  | { t: "reaped"; pid: number }
  /** The thread stopped its service process and waited for it: it ends now. */
  | { t: "ended" }
  /** The thread failed outside any call (esbuild's client threw): it ends after this. */
  | { t: "failed"; code?: string; name?: string; message: string };

// biome-ignore lint/suspicious/noExplicitAny: packages are loaded by path at run time, untyped.
export function esbuildWorkerMain(req: (id: string) => any): void {
  // biome-ignore lint/suspicious/noExplicitAny: the worker loads its packages by path at run time.
  type Any = any;
  const { parentPort, workerData } = req("node:worker_threads") as { parentPort: Any; workerData: { esbuildPath: string } };
  // esbuild keeps its service processes to itself; the host needs their pids to kill them if this
  // thread ends by force, and this thread waits for their exit when it ends on its own (a child
  // this thread's loop does not reap stays a zombie of the host process).
  const childProcess = req("node:child_process");
  const spawn = childProcess.spawn;
  const children = new Set<Any>();
  childProcess.spawn = (...args: unknown[]) => {
    const child = spawn.apply(childProcess, args);
    children.add(child);
    parentPort.postMessage({ t: "service", pid: child.pid });
    child.once("exit", () => {
      children.delete(child);
      if (!ending) parentPort.postMessage({ t: "reaped", pid: child.pid });
    });
    return child;
  };

  /**
   * A copy of esbuild's module is a service: the only way to end one transform without ending
   * the others' is to stop the service it runs on. A copy is kept by no cache (Node lists each
   * module `require` loads among its parent's children: a copy per abandoned compile grew the
   * heap for good); a stopped copy starts the next service (its next call spawns a new process).
   */
  const services = new Map<number, Any>();
  const stopped: Any[] = [];
  const load = (): Any => {
    const path = workerData.esbuildPath;
    const cache = (req as Any).cache;
    delete cache[path];
    const esbuild = req(path);
    const loaded = cache[path];
    delete cache[path];
    const siblings = loaded?.parent?.children;
    if (loaded && siblings?.includes(loaded)) siblings.splice(siblings.indexOf(loaded), 1);
    return esbuild;
  };
  const serviceFor = (id: number): Any => {
    let esbuild = services.get(id);
    if (!esbuild) {
      esbuild = stopped.pop() ?? load();
      services.set(id, esbuild);
    }
    return esbuild;
  };

  let ending = false;
  const end = (): void => {
    if (ending) return;
    ending = true;
    for (const esbuild of services.values()) esbuild.stop();
    // Reaped by this thread's loop, the processes are gone for good: the host need not kill them.
    const ended = () => {
      parentPort.postMessage({ t: "ended" });
      process.exit(0);
    };
    const running = [...children].filter((child) => child.exitCode === null && child.signalCode === null);
    if (running.length === 0) {
      ended();
      return;
    }
    let left = running.length;
    for (const child of running) {
      child.ref();
      child.once("exit", () => {
        if (--left === 0) ended();
      });
    }
  };

  // Thrown where no call could catch it: the client's state is lost, so the thread ends.
  process.on("uncaughtException", (error: Any) => {
    if (!ending) {
      parentPort.postMessage({ t: "failed", code: error?.code, name: error?.name, message: String(error?.message ?? error) });
    }
    end();
  });

  const run = async (esbuild: Any, operation: EsbuildOperation): Promise<unknown> => {
    if (operation.kind === "transform") {
      const out = await esbuild.transform(operation.code, operation.options);
      return { code: out.code, map: out.map };
    }
    const out = await esbuild.build(operation.options);
    return { metafile: out.metafile };
  };

  parentPort.on("message", (message: ToEsbuildWorker) => {
    if (message.t === "stop") return end();
    if (ending) return;
    if (message.t === "stopService") {
      const esbuild = services.get(message.service);
      services.delete(message.service);
      if (esbuild) {
        esbuild.stop();
        stopped.push(esbuild);
      }
      return;
    }
    const { id } = message;
    run(serviceFor(message.service), message.operation).then(
      (value) => parentPort.postMessage({ t: "done", id, value }),
      (error: Any) => {
        const failure = { message: String(error?.message ?? error), errors: error?.errors, warnings: error?.warnings };
        try {
          parentPort.postMessage({ t: "done", id, failure });
        } catch {
          // Something in esbuild's messages that cannot be cloned: the text is what is read.
          parentPort.postMessage({ t: "done", id, failure: JSON.parse(JSON.stringify(failure)) });
        }
      },
    );
  });
}
