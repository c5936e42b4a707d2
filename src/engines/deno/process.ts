import { randomBytes } from "node:crypto";
import { constants, existsSync, openSync, readSync, writeFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { Socket } from "node:net";
import { join } from "node:path";
import { encodeFrame, encodeTextFrame, FrameReader } from "../../core/framing.js";
import { frameProblem } from "./frames.js";
import type { SpawnedChild } from "../../core/spawned-child.js";
import { spawnChild } from "../../core/spawner.js";
import { ProcFile } from "../../core/proc-file.js";
import { PAGE_BYTES, rssOf } from "../../hosts/process/rss.js";
import type { ImportGrant } from "../../egress/import-proxy.js";
import { makeDenoDir, type Seed } from "./deno-dir.js";
import { mkfifoCommand, placeFifos } from "./fifos.js";
import { hostDirectory, killOnExit, processDir, releaseProcessDir } from "./host-dirs.js";
import { bootstrapFile, guestConfig } from "./script.js";

/** Deno's default `--allow-import` hosts: leaving the flag out allows these, so they are denied by name. */
export const DENO_DEFAULT_IMPORT_HOSTS = [
  "deno.land:443",
  "jsr.io:443",
  "esm.sh:443",
  "raw.esm.sh:443",
  "cdn.jsdelivr.net:443",
  "raw.githubusercontent.com:443",
  "gist.githubusercontent.com:443",
];

/** The V8 heap beyond the guest's memory that Deno and the bootstrap need (its Node builtins included). */
export const RUNTIME_HEAP_MB = 24;
const START_TIMEOUT_MS = 20_000;
/** stdin, stdout, stderr of a Deno process: its frames cross FIFOs instead (see DenoProcess's `input`). */
const DENO_STDIO: ("ignore" | "pipe")[] = ["ignore", "pipe", "pipe"];
const CLOCK_TICK_NS = 10_000_000n;
/** At most this much is read from the output FIFO after the process has exited (a pipe holds 64 KiB to 1 MiB). */
const DRAIN_LIMIT_BYTES = 4 << 20;

export interface DenoProcessOptions {
  binary: string;
  memoryMb: number;
  /** Hosts `import` may fetch modules from (`capabilities.import`); none: Deno's defaults denied. */
  importHosts: readonly string[];
  /** Where Deno keeps npm packages and remote modules it downloads (never the guest's to read). */
  cacheDir: string;
  /** The caches the process's own DENO_DIR starts from (deno-dir.ts); none: it compiles everything afresh. */
  seed?: Seed;
  /** A DENO_DIR to use as it is, instead of a fresh one of its own (the seed's maker). */
  denoDir?: string;
  /** The bound on the process's private directory, and at least its DENO_DIR's (disk-watch.ts); default DEFAULT_DISK_MB. */
  diskMb?: number;
  /** `--cached-only`: npm packages and remote modules only from the cache, never fetched by Deno. */
  cachedOnly?: boolean;
  /** The import proxy's grant, whose HTTPS_PROXY and HTTP_PROXY Deno fetches remote modules and npm packages through. */
  importGrant?: ImportGrant;
}

/**
 * The command line of a guest's Deno process: every permission denied but its private directory,
 * reading `streams.input` (the FIFO the host's frames arrive on) and writing `streams.output` (the
 * one the process's frames leave on), which the bootstrap opens and then revokes before any guest
 * code runs.
 */
export function denoArgs(options: DenoProcessOptions, dir: string, main: string, streams: ProtocolStreams): string[] {
  const imports =
    options.importHosts.length > 0
      ? `--allow-import=${options.importHosts.join(",")}`
      : `--deny-import=${DENO_DEFAULT_IMPORT_HOSTS.join(",")}`;
  return [
    "run",
    "--quiet",
    "--no-prompt",
    "--no-config",
    "--no-lock",
    `--allow-read=${dir},${streams.input}`,
    `--allow-write=${dir},${streams.output}`,
    "--deny-net",
    "--deny-env",
    "--deny-run",
    "--deny-sys",
    "--deny-ffi",
    imports,
    ...(options.cachedOnly ? ["--cached-only"] : []),
    `--v8-flags=--max-old-space-size=${options.memoryMb + RUNTIME_HEAP_MB},--expose-gc`,
    main,
    JSON.stringify(guestConfig(options.memoryMb, streams)),
  ];
}

/**
 * One Deno process: spawned with an empty environment in a private temporary directory, spoken
 * to in length-prefixed JSON frames over two FIFOs only the bootstrap holds open (see `input`).
 * A frame it cannot read, or any exit, ends it for good: `onExit` says why.
 */
export class DenoProcess {
  /** The guest's private directory: the only place it may read or write. */
  readonly dir: string;
  /** The directory of everything this process keeps on disk (host-dirs.ts): the private one is in it. */
  readonly root: string;
  /** Its DENO_DIR (deno-dir.ts). */
  readonly denoDir: string;
  /** Started by the spawner process once it runs (core/spawner.ts), else here. */
  readonly child: SpawnedChild;
  /** Its pid once it has started (0 before). */
  private childPid = 0;
  readonly ready: Promise<void>;
  baseRss = 0;
  exited = false;
  /** Why the host ended it (a limit, a protocol error), when it did. */
  endedBy: string | undefined;
  /**
   * The limit the host ended it for, if a limit: known apart from `endedBy`, whose text may quote
   * a frame (a protocol error names an unknown frame's type), so no text can make it a limit's.
   */
  private endedFor: EndCause | undefined;
  private stderrTail = "";
  /**
   * What every frame after "ready" carries as `k`: the bootstrap gets it as the first frame on its
   * input, before any guest code runs, and keeps it in its closure. When the frames left on
   * stdout, a frame the guest wrote there without the key forged the run's outcome (`done` with
   * ERR_MEMORY_LIMIT), its logs, or a second `ready` (which reset baseRss, the base of the RSS
   * watchdog's budget). Kept now that the guest cannot write the output FIFO: a second lock.
   */
  private readonly key = randomBytes(16).toString("hex");
  /**
   * The host's frames go to a FIFO, not the process's stdin (which is /dev/null): any guest code
   * can read fd 0 (Deno.stdin, node:fs read(0), process.stdin), and a read it left pending took
   * the next call's frame, arguments included. The bootstrap opens the FIFO by path and revokes
   * its read permission before guest code runs; Deno's node:fs reaches no descriptor it did not
   * open itself, and /proc/self/fd, /dev/fd need a read permission the guest lacks.
   */
  private readonly input: Socket;
  /**
   * The process's frames, on a FIFO of the same kind (write permission revoked): its stdout is the
   * guest's to write, and a partial frame written there after a call swallowed the next call's.
   * What stdout carries is counted and dropped.
   */
  private readonly output: Socket;
  /** Bytes the host has read from the process's output, stdout and stderr (see writtenBytes). */
  private pipedBytes = 0;
  onMessage: (message: Record<string, unknown>) => void = () => {};
  /** `cause`: the host ended it for a limit it found (the reason's text is not read for that). */
  onExit: (reason: string, outOfMemory: boolean, cause: EndCause | undefined) => void = () => {};

  /** Makes its directories (off the host's thread: a 2 MB copy and a dozen file operations), then starts it. */
  static async start(options: DenoProcessOptions): Promise<DenoProcess> {
    const root = await processDir();
    try {
      const dir = join(root, "fn");
      await mkdir(dir, { mode: 0o700 });
      const denoDir = options.denoDir ?? (await makeDenoDir(root, options.cacheDir, options.seed));
      await placeFifos(mkfifoCommand(), hostDirectory, [join(root, INPUT_FIFO), join(root, OUTPUT_FIFO)]);
      return new DenoProcess(options, root, dir, denoDir);
    } catch (error) {
      releaseProcessDir(root);
      throw error;
    }
  }

  private constructor(
    readonly options: DenoProcessOptions,
    root: string,
    dir: string,
    denoDir: string,
  ) {
    const { main } = bootstrapFile();
    this.root = root;
    this.dir = dir;
    this.denoDir = denoDir;
    const streams = { input: join(root, INPUT_FIFO), output: join(root, OUTPUT_FIFO) };
    // Read-write: the open does not wait for the other end (Linux), and a Deno that never starts
    // leaves no open blocked in the thread pool. The host never reads its input FIFO (its close,
    // or death, is the bootstrap's end of input) and never writes its output one.
    const fifo = (path: string) => openSync(path, constants.O_RDWR | constants.O_NONBLOCK);
    this.input = new Socket({ fd: fifo(streams.input), readable: false });
    const outputFd = fifo(streams.output);
    this.output = new Socket({ fd: outputFd, writable: false });
    this.input.on("error", () => {});
    this.output.on("error", () => {});
    const [command, args] = orphanSafe(options.binary, denoArgs(options, this.dir, main, streams));
    this.child = spawnChild(command, args, {
      cwd: this.dir,
      // Nothing of the host's environment; Deno itself reads where its cache is and the import
      // proxy's address with this process's credentials.
      env: { DENO_DIR: denoDir, DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1", ...options.importGrant?.env },
      // stdin is /dev/null: see `input`.
      stdio: DENO_STDIO,
      // Spawned here, the host's inherited descriptors get /dev/null: Deno cannot close them
      // (core/inherited-fds.ts). The spawner process closed its own.
      coverInherited: true,
      // A group of its own: Ctrl-C and a terminal's hang-up, sent to the host's group, would end
      // it mid-run while the host drains. It still dies with its parent (pdeathsig, or its input's
      // end): the host, or the spawner process, which ends its children when the host goes.
      detached: true,
    });
    let resolveReady!: () => void;
    let rejectReady!: (error: Error) => void;
    this.ready = new Promise<void>((resolve, reject) => {
      resolveReady = resolve;
      rejectReady = reject;
    });
    this.ready.catch(() => {});
    const timer = setTimeout(() => {
      rejectReady(new Error("the Deno process did not start in time"));
      this.kill("start timeout");
    }, START_TIMEOUT_MS);
    let started = false;
    const reader = new FrameReader(
      (message) => {
        if (!started && message.t === "ready") {
          started = true;
          clearTimeout(timer);
          this.baseRss = this.rss() ?? 0;
          // Before anything else is sent: see `key`.
          this.send({ t: "key", key: this.key });
          resolveReady();
          return;
        }
        // Before "ready" only cordon's own warm-up has run: its frames carry no key yet.
        if (started && message.k !== this.key) {
          const problem = frameProblem(message) ?? "a frame without this process's key (written by guest code?)";
          this.kill(`protocol error: ${problem}`);
          return;
        }
        // The frames are the guest's to forge: whatever reading one throws retires the process,
        // never the host (a throw here would be uncaught, in the pipe's data handler).
        try {
          this.onMessage(message);
        } catch (error) {
          this.kill(`protocol error: a frame could not be read (${(error as Error)?.name})`);
        }
      },
      (reason) => this.kill(`protocol error: ${reason}`),
    );
    this.output.on("data", (chunk: Buffer) => {
      this.pipedBytes += chunk.length;
      reader.push(chunk);
    });
    this.child.onStarted((pid, [, stdout, stderr]) => {
      this.childPid = pid;
      // The kernel's OOM killer picks a guest's Deno process before the host.
      try {
        writeFileSync(`/proc/${pid}/oom_score_adj`, "1000");
      } catch {}
      stdout?.on("data", (chunk: Buffer) => {
        this.pipedBytes += chunk.length;
      });
      stderr?.on("data", (chunk: Buffer) => {
        this.pipedBytes += chunk.length;
        this.stderrTail = (this.stderrTail + chunk.toString("utf8")).slice(-4096);
      });
      // Its "ready" frame came through the FIFO before the spawner's answer did: measured now.
      if (started && this.baseRss === 0) this.baseRss = this.rss() ?? 0;
    });
    this.child.onError((error) => {
      clearTimeout(timer);
      rejectReady(error);
      this.finish(`could not start deno: ${error.message}`);
    });
    this.child.onExit((code, signal) => {
      clearTimeout(timer);
      // The exit comes by another channel than the frames: what the process wrote just before it
      // ended may still be in the FIFO (a guest's failure it reported on its way out). Read first,
      // unless the host ended it (a limit): then the host's reason stands, whatever came before.
      if (!this.exited && this.endedBy === undefined) this.drainOutput(outputFd, reader);
      const why = this.endedBy ?? `the Deno process exited (${signal ?? `code ${code}`})`;
      rejectReady(new Error(`${why}${this.stderrTail ? `: ${this.stderrTail.trim().split("\n").slice(-3).join(" | ")}` : ""}`));
      this.finish(why, signal);
    });
    killOnExit(root, () => this.kill("the host process is exiting"));
    this.child.hold(false);
    this.input.unref();
    this.output.unref();
  }

  get pid(): number {
    return this.childPid;
  }

  /**
   * `onWritten`: called once the frame is out of this process (in the FIFO, or the Deno process
   * has it), or dropped. `asText`: `message`'s codec text goes as a text tail (core/framing.ts),
   * not escaped inside its JSON.
   */
  send(message: object, onWritten?: () => void, asText = false): void {
    if (this.exited) {
      onWritten?.();
      return;
    }
    try {
      const frame = asText ? encodeTextFrame(message) : encodeFrame(message);
      if (onWritten) this.input.write(frame, () => onWritten());
      else this.input.write(frame);
    } catch (error) {
      onWritten?.();
      this.kill(`could not write to the Deno process: ${(error as Error).message}`);
    }
  }

  /** /proc files the watchdogs read every few milliseconds, kept open (core/proc-file.ts). */
  private procFiles: Record<"stat" | "io" | "statm", ProcFile> | undefined;

  private get proc(): Record<"stat" | "io" | "statm", ProcFile> | undefined {
    // Not yet started (the spawner's answer is on its way): nothing to read, nothing opened.
    if (!this.childPid) return undefined;
    this.procFiles ??= {
      stat: new ProcFile(`/proc/${this.pid}/stat`),
      io: new ProcFile(`/proc/${this.pid}/io`),
      statm: new ProcFile(`/proc/${this.pid}/statm`),
    };
    return this.procFiles;
  }

  /**
   * CPU time of the whole process, every thread, from /proc: a guest's `node:worker_threads`
   * workers spin on threads of their own (the main thread's alone let four spinning workers run
   * a 300 ms-limited run for 3 s). Deno's own threads (GC, compilers) count too: it can only
   * over-count.
   */
  cpuTimeNs(): bigint {
    return this.usage()?.cpuNs ?? 0n;
  }

  /** CPU time (as cpuTimeNs) and resident size in one read of /proc/<pid>/stat; undefined when unreadable. */
  usage(): { cpuNs: bigint; rssBytes: number } | undefined {
    const stat = this.proc?.stat.read();
    if (stat === undefined) return undefined;
    try {
      // Fields after the command name (which may hold spaces): state is [0], utime [11], stime [12], rss [21] pages.
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      return { cpuNs: (BigInt(fields[11]) + BigInt(fields[12])) * CLOCK_TICK_NS, rssBytes: Number(fields[21]) * PAGE_BYTES };
    } catch {
      return undefined;
    }
  }

  /**
   * Bytes the process has written other than to its pipes: its files (and Deno's own cache
   * writes), from /proc/<pid>/io. An upper bound on what it can have added to its directory
   * (frames still in the pipe count until the host reads them). Undefined when unreadable.
   */
  writtenBytes(): number | undefined {
    const io = this.proc?.io.read();
    const at = io?.indexOf("wchar: ") ?? -1;
    if (io === undefined || at < 0) return undefined;
    return Number.parseInt(io.slice(at + 7, io.indexOf("\n", at)), 10) - this.pipedBytes;
  }

  rss(): number | undefined {
    return rssOf(this.proc?.statm.read());
  }

  /**
   * Reads what is left in the output FIFO, at once (it is non-blocking: an empty one throws
   * EAGAIN). Bounded: a process the guest started could keep writing to it.
   */
  private drainOutput(fd: number, reader: FrameReader): void {
    for (let total = 0; total < DRAIN_LIMIT_BYTES && !this.exited; ) {
      // A new buffer each read: the reader keeps chunks until their frame is whole.
      const chunk = Buffer.allocUnsafe(1 << 16);
      let n = 0;
      try {
        n = readSync(fd, chunk, 0, chunk.length, null);
      } catch {
        return;
      }
      if (n <= 0) return;
      total += n;
      this.pipedBytes += n;
      reader.push(chunk.subarray(0, n));
    }
  }

  kill(reason: string, cause?: EndCause): void {
    if (this.exited) return;
    if (this.endedBy === undefined) {
      this.endedBy = reason;
      this.endedFor = cause;
    }
    this.child.kill();
  }

  /** `signal`: what ended the process, if a signal did (V8 aborts on a heap it cannot grow). */
  private finish(reason: string, signal: NodeJS.Signals | null = null): void {
    if (this.exited) return;
    this.exited = true;
    for (const file of Object.values(this.procFiles ?? {})) file.close();
    this.input.destroy();
    this.output.destroy();
    // The stderr tail is the guest's to write: it names an out-of-memory death only when the
    // process also died of a signal. "out of memory" printed before Deno.exit(3) was reported as
    // ERR_MEMORY_LIMIT.
    const outOfMemory =
      this.endedFor === "memory" ||
      (signal !== null && signal !== "SIGKILL" && /out of memory|heap limit/i.test(this.stderrTail));
    releaseProcessDir(this.root);
    this.onExit(reason, outOfMemory, this.endedFor);
  }
}

/** A limit the host ends a process for: its resident memory, or its disk (instance.ts). */
export type EndCause = "memory" | "disk";

/** The FIFO's name in the process's directory (outside the guest's own). */
const INPUT_FIFO = "frames-in";
const OUTPUT_FIFO = "frames-out";

/** The paths of the two FIFOs the frames cross (see DenoProcess's `input` and `output`). */
export interface ProtocolStreams {
  input: string;
  output: string;
}

/** util-linux's setpriv, where it exists: it can give a process a parent-death signal. */
const SETPRIV = ["/usr/bin/setpriv", "/bin/setpriv"].find((path) => existsSync(path));

/**
 * The command that starts Deno so that it ends with the host process: through `setpriv
 * --pdeathsig KILL` (Linux), the kernel kills it when its parent dies, even while its JavaScript
 * spins and never reads its closed input (found: a guest's timer loop kept an orphaned Deno at
 * 100% CPU after its host was killed). Without setpriv, Deno ends when it reads its input closed.
 */
function orphanSafe(binary: string, args: string[]): [string, string[]] {
  if (process.platform !== "linux" || !SETPRIV) return [binary, args];
  return [SETPRIV, ["--pdeathsig", "KILL", "--", binary, ...args]];
}
