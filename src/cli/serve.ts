import { parseArgs } from "node:util";
import { MAX_TIME_MS } from "../core/limits.js";
import { createExecutor, type Executor } from "../executor/server.js";

export const SERVE_USAGE = `usage: cordon serve [--port 8787] [--host 127.0.0.1] [--max-body-mb 32] [--max-connections 4096] [--max-connections-per-address N] [--max-prefixes 4096] [--max-prefixes-per-address N] [--max-prefix-mb 512] [--grace-ms 10000] [--callback-origin URL]...

  Runs the executor service: POST /run and POST /host (authorization: Bearer <secret>), GET /health.
  --port N          the port to listen on (default 8787; 0 picks a free one)
  --host H          the address to listen on (default 127.0.0.1: this machine only)
  --max-body-mb N   request bodies over this are refused with 413 (default 32)
  --max-connections N  open client connections at most; past it new ones are closed (default 4096)
  --max-connections-per-address N  of those, from one client address (an IPv6 /64) at most
                    (default: half of --max-connections)
  --max-prefixes N  remote hosts' prepared prefixes held at once (default 4096); past it the least
                    recently used idle one ends, and with all in use a prepare fails (ERR_CAPACITY)
  --max-prefixes-per-address N  of those, for one client address (default: half of --max-prefixes);
                    a client (address and instance) cycling through more than this is refused
                    (ERR_CAPACITY), not re-prepared
  --max-prefix-mb N MiB of source the held prefixes keep together (default 512)
  --grace-ms N      on SIGTERM or SIGHUP, in-flight runs get this long before they are aborted (default 10000)
  --callback-origin O  an origin remote hosts may name for their callbacks, besides their own
                    address (and loopback, for one on loopback) (repeatable)
The admission secret is CORDON_EXEC_SECRET (at least 32 bytes), or one generated and printed
for this run. The first line on stdout is the URL. Service logs are JSON lines on stderr.`;

const EXAMPLE_BODY = `'{"code":"export default (i) => i.n * 2","input":{"n":21}}'`;

/** `cordon serve`: resolves with the exit code once the service has shut down (0), or at once on bad configuration (2). */
export async function serve(args: string[]): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(`${SERVE_USAGE}\n`);
    return 0;
  }
  let parsed: ReturnType<typeof parseServeArgs>;
  try {
    parsed = parseServeArgs(args);
  } catch (error) {
    process.stderr.write(`cordon: ${(error as Error).message}\n${SERVE_USAGE}\n`);
    return 2;
  }
  // Read once and removed from the environment: nothing started later inherits it.
  const secret = process.env.CORDON_EXEC_SECRET;
  delete process.env.CORDON_EXEC_SECRET;

  let executor: Executor;
  try {
    executor = await createExecutor({
      // Set but empty is still set: refused as too short rather than silently replaced (fail closed).
      secret,
      port: parsed.port,
      host: parsed.host,
      maxBodyMb: parsed.maxBodyMb,
      maxConnections: parsed.maxConnections,
      maxConnectionsPerAddress: parsed.maxConnectionsPerAddress,
      maxPrefixes: parsed.maxPrefixes,
      maxPrefixesPerAddress: parsed.maxPrefixesPerAddress,
      maxPrefixMb: parsed.maxPrefixMb,
      shutdownGraceMs: parsed.graceMs,
      callbackOrigins: parsed.callbackOrigins,
    });
  } catch (error) {
    const message = (error as Error).message.replace(/^cordon: /, "");
    if (error instanceof TypeError) {
      const name = /secret/.test(message) ? "CORDON_EXEC_SECRET" : "configuration";
      process.stderr.write(`cordon: ${name}: ${message}\n`);
      return 2;
    }
    process.stderr.write(`cordon: cannot start the executor: ${message}\n`);
    return 1;
  }

  // The URL first, on a line of its own: scripts (and tests) read the port from it.
  const curl = `curl -s -H "authorization: Bearer $CORDON_EXEC_SECRET" -H 'content-type: application/json' -d ${EXAMPLE_BODY} ${executor.url}/run`;
  const lines = [`cordon executor listening on ${executor.url}`];
  if (executor.generatedSecret !== undefined) {
    lines.push(
      "",
      "No CORDON_EXEC_SECRET was set, so this admission secret was generated for this run only:",
      "",
      `  export CORDON_EXEC_SECRET=${executor.generatedSecret}`,
      "",
      "Try it:",
      "",
      `  ${curl}`,
    );
  } else {
    lines.push("", "Admission secret: CORDON_EXEC_SECRET. Try it:", "", `  ${curl}`);
  }
  process.stdout.write(`${lines.join("\n")}\n`);

  return new Promise<number>((resolve) => {
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      signals++;
      // A second signal: stop waiting for in-flight runs, abort them now.
      void executor.close({ graceMs: signals > 1 ? 0 : undefined }).then(
        () => {
          process.off("SIGTERM", onSignal);
          process.off("SIGINT", onSignal);
          process.off("SIGHUP", onSignal);
          resolve(0);
        },
        (error: Error) => {
          process.stderr.write(`cordon: shutdown after ${signal} failed: ${error.message}\n`);
          resolve(1);
        },
      );
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    // A closed terminal (or a supervisor's hang-up) drains like SIGTERM: Node's default would exit at once.
    process.on("SIGHUP", onSignal);
  });
}

function parseServeArgs(args: string[]) {
  const { values } = parseArgs({
    args,
    allowPositionals: false,
    options: {
      port: { type: "string" },
      host: { type: "string" },
      "max-body-mb": { type: "string" },
      "max-connections": { type: "string" },
      "max-connections-per-address": { type: "string" },
      "max-prefixes": { type: "string" },
      "max-prefixes-per-address": { type: "string" },
      "max-prefix-mb": { type: "string" },
      "grace-ms": { type: "string" },
      "callback-origin": { type: "string", multiple: true },
    },
  });
  const number = (name: string, text: string | undefined, { zero = false, max = Number.MAX_VALUE } = {}) => {
    if (text === undefined) return undefined;
    const n = Number(text);
    if (text.trim() === "" || !Number.isFinite(n) || n < 0 || (n === 0 && !zero))
      throw new Error(`--${name} must be a ${zero ? "non-negative" : "positive"} number, got ${JSON.stringify(text)}`);
    if (n > max) throw new Error(`--${name} must be at most ${max}, got ${JSON.stringify(text)}`);
    return n;
  };
  const port = number("port", values.port, { zero: true });
  if (port !== undefined && (!Number.isInteger(port) || port > 65_535))
    throw new Error(`--port must be an integer from 0 to 65535, got ${JSON.stringify(values.port)}`);
  if (values.host !== undefined && values.host.trim() === "") throw new Error("--host must not be empty");
  return {
    port,
    host: values.host,
    maxBodyMb: number("max-body-mb", values["max-body-mb"]),
    maxConnections: number("max-connections", values["max-connections"]),
    maxConnectionsPerAddress: number("max-connections-per-address", values["max-connections-per-address"]),
    maxPrefixes: number("max-prefixes", values["max-prefixes"]),
    maxPrefixesPerAddress: number("max-prefixes-per-address", values["max-prefixes-per-address"]),
    maxPrefixMb: number("max-prefix-mb", values["max-prefix-mb"]),
    // Past Node's longest timer the grace would end at once.
    graceMs: number("grace-ms", values["grace-ms"], { zero: true, max: MAX_TIME_MS }),
    callbackOrigins: values["callback-origin"],
  };
}
