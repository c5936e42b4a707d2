/**
 * esbuild's JavaScript client (which talks to esbuild's service process over pipes), run in a
 * child process of its own (esbuild-process.ts), never on the host's thread. The client can throw
 * inside its own pipe handler, where no caller can catch it (an output past V8's longest string),
 * and decoding a huge output takes memory: either ends this process, not the host. V8 aborting
 * out of heap ends it too (a worker thread's heap limit is best effort: Node #47224).
 *
 * SELF-CONTAINED: started as `node -e` with `esbuildClientMain.toString()`, so the same code runs
 * under the test runner (TypeScript sources) and from dist/. Where `node -e` cannot be started
 * (a single executable application, Electron) it runs on a worker thread instead. It loads
 * esbuild by the path the host resolved, one copy of the module per service (see `load`).
 */
import type { BuildOptions, Metafile, TransformOptions } from "esbuild";

/** One esbuild call, as data (functions, such as plugins, cannot cross to the client). */
export type EsbuildOperation =
  | { kind: "transform"; code: string; options: TransformOptions }
  | { kind: "build"; options: Omit<BuildOptions, "plugins"> };

/** What a call answers: only what cordon reads (every string is copied to the host). */
export interface EsbuildAnswers {
  transform: { code: string; map: string };
  build: { metafile?: Metafile };
}

export type ToEsbuildClient =
  /** `service` names one of the client's esbuild services: made on its first call. */
  | { t: "call"; id: number; service: number; operation: EsbuildOperation }
  /** Stop one service (its process): its calls are abandoned. */
  | { t: "stopService"; service: number }
  /** End the client and every service on it. */
  | { t: "stop" };

/** esbuild's failure as data: structured clone keeps an Error's message only, not its `errors`. */
export interface EsbuildFailure {
  message: string;
  errors?: unknown[];
  warnings?: unknown[];
}

export type FromEsbuildClient =
  | { t: "done"; id: number; value?: unknown; failure?: EsbuildFailure }
  /** esbuild started a service process: the host kills it if the client ends by force. */
  | { t: "service"; pid: number }
  /** A service process exited and was reaped. */
  | { t: "reaped"; pid: number }
  /** The client stopped its service processes and waited for them: it ends now. */
  | { t: "ended" }
  /** The client failed outside any call (esbuild's client threw): it ends after this. */
  | { t: "failed"; code?: string; name?: string; message: string };

/** How the client talks to the host: a child's IPC channel, or a worker thread's port. */
export interface ClientPort {
  esbuildPath: string;
  /** `then` runs once the message is on its way (before the client exits after it). */
  post(message: FromEsbuildClient, then?: () => void): void;
  listen(handler: (message: ToEsbuildClient) => void): void;
}

// biome-ignore lint/suspicious/noExplicitAny: packages are loaded by path at run time, untyped.
export function esbuildClientMain(req: (id: string) => any, port: ClientPort): void {
  // biome-ignore lint/suspicious/noExplicitAny: the client loads its packages by path at run time.
  type Any = any;
  // esbuild keeps its service processes to itself; the host needs their pids to kill them if a
  // thread client ends by force, and the client waits for their exit when it ends on its own (a
  // child its loop does not reap stays a zombie).
  const childProcess = req("node:child_process");
  const spawn = childProcess.spawn;
  const children = new Set<Any>();
  childProcess.spawn = (...args: unknown[]) => {
    const child = spawn.apply(childProcess, args);
    children.add(child);
    port.post({ t: "service", pid: child.pid });
    child.once("exit", () => {
      children.delete(child);
      if (!ending) port.post({ t: "reaped", pid: child.pid });
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
    const path = port.esbuildPath;
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
    // Reaped by this loop, the processes are gone for good: the host need not kill them.
    const ended = () => port.post({ t: "ended" }, () => process.exit(0));
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

  // Thrown where no call could catch it: the client's state is lost, so it ends.
  process.on("uncaughtException", (error: Any) => {
    if (!ending) {
      port.post({ t: "failed", code: error?.code, name: error?.name, message: String(error?.message ?? error) });
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

  port.listen((message: ToEsbuildClient) => {
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
      (value) => port.post({ t: "done", id, value }),
      (error: Any) => {
        const failure = { message: String(error?.message ?? error), errors: error?.errors, warnings: error?.warnings };
        try {
          port.post({ t: "done", id, failure });
        } catch {
          // Something in esbuild's messages that cannot be cloned: the text is what is read.
          port.post({ t: "done", id, failure: JSON.parse(JSON.stringify(failure)) });
        }
      },
    );
  });
}
