import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { basename } from "node:path";
import { checkPositiveNumber, MAX_COUNT, MAX_TIME_MS } from "../core/limits.js";
import { checkModuleName } from "../core/options.js";
import { isValidExportPath } from "../names.js";
import { createSandbox } from "../create-sandbox.js";
import { CHECK_USAGE, check } from "./check.js";
import { SERVE_USAGE, serve } from "./serve.js";

const RUN_USAGE = `usage: cordon run <file> [--input JSON | --call export [--args JSON]] [--timeout ms] [--memory mb]

  Runs an ES module (JS or TS) or a function body in a sandbox and prints the value as JSON.
  --input JSON    passed to the default-exported function
  --call export   call this export instead (a dotted path: handlers.onEvent)
  --args JSON     the call's arguments, a JSON array (default [])
  --timeout ms    wall time limit (default 5000)
  --memory mb     memory limit (default 128)
Guest logs go to stderr. A failure prints its code and message and exits 1.`;

const USAGE = `${RUN_USAGE}\n\n${CHECK_USAGE}\n\n${SERVE_USAGE}`;

/** `cordon run`, `cordon check` and `cordon serve`: the command line. Returns the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === "serve") return serve(rest);
  if (command === "check") return check(rest);
  if (command !== "run") {
    process.stderr.write(`${USAGE}\n`);
    return command === undefined || command === "--help" || command === "help" ? 0 : 2;
  }
  let parsed: ReturnType<typeof parseRunArgs>;
  try {
    parsed = parseRunArgs(rest);
  } catch (error) {
    process.stderr.write(`cordon: ${(error as Error).message}\n${RUN_USAGE}\n`);
    return 2;
  }
  const code = await readFile(parsed.file, "utf8").catch((error: NodeJS.ErrnoException) => {
    process.stderr.write(`cordon: cannot read ${parsed.file}: ${error.code ?? error.message}\n`);
    return undefined;
  });
  if (code === undefined) return 2;
  const sandbox = await createSandbox();
  try {
    let result: Awaited<ReturnType<typeof sandbox.run>>;
    try {
      result = await sandbox.run({
        code,
        filename: parsed.filename,
        ...(parsed.call ? { call: parsed.call } : { input: parsed.input }),
        limits: { wallTimeMs: parsed.timeout, memoryMb: parsed.memory },
      });
    } catch (error) {
      // run() throws only for misconfiguration, which here is the arguments: usage, not a host stack.
      if (!(error instanceof TypeError)) throw error;
      process.stderr.write(`${error.message}\n${RUN_USAGE}\n`);
      return 2;
    }
    for (const entry of result.logs) process.stderr.write(`[${entry.level}] ${entry.message}\n`);
    if (result.ok) {
      process.stdout.write(`${JSON.stringify(result.value, jsonReplacer, 2) ?? "undefined"}\n`);
      return 0;
    }
    process.stderr.write(`${result.error.code}: ${result.error.message}\n`);
    if (result.error.stack && result.error.code === "ERR_USER_CODE") process.stderr.write(`${result.error.stack}\n`);
    return 1;
  } finally {
    await sandbox.dispose();
  }
}

function parseRunArgs(args: string[]) {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      input: { type: "string" },
      call: { type: "string" },
      args: { type: "string" },
      timeout: { type: "string" },
      memory: { type: "string" },
    },
  });
  if (positionals.length !== 1) throw new Error("run takes exactly one file");
  // Checked as the sandbox checks its limits (a --timeout over 2e9 threw a TypeError with a host stack).
  const number = (name: string, text: string | undefined, max: number) => {
    if (text === undefined) return undefined;
    const n = Number(text);
    if (!Number.isFinite(n) || n <= 0 || n > max)
      throw new Error(`--${name} must be a positive number up to ${max}, got ${JSON.stringify(text)}`);
    return checkPositiveNumber(`--${name}`, n, { max });
  };
  // The file's name names the module in stack traces: one the sandbox refuses (control
  // characters, cordon's own names, over 256 characters) is refused here, as a bad argument.
  const filename = basename(positionals[0]);
  try {
    checkModuleName(filename, "the file's name", 256);
  } catch (error) {
    throw new Error(`${(error as Error).message.replace(/^cordon: /, "")}: rename the file`);
  }
  let input: unknown;
  if (values.input !== undefined) {
    try {
      input = JSON.parse(values.input);
    } catch {
      throw new Error(`--input must be JSON, got ${JSON.stringify(values.input)}`);
    }
  }
  let call: { export: string; args: unknown[] } | undefined;
  if (values.args !== undefined && values.call === undefined) throw new Error("--args needs --call");
  if (values.call !== undefined) {
    if (values.input !== undefined) throw new Error("--input and --call are exclusive: a call takes --args");
    if (!isValidExportPath(values.call))
      throw new Error(`--call must be a dotted export path, got ${JSON.stringify(values.call)}`);
    let args: unknown = [];
    if (values.args !== undefined) {
      try {
        args = JSON.parse(values.args);
      } catch {
        args = undefined;
      }
      if (!Array.isArray(args)) throw new Error(`--args must be a JSON array, got ${JSON.stringify(values.args)}`);
    }
    call = { export: values.call, args: args as unknown[] };
  }
  return {
    file: positionals[0],
    filename,
    input,
    call,
    timeout: number("timeout", values.timeout, MAX_TIME_MS),
    memory: number("memory", values.memory, MAX_COUNT),
  };
}

/** JSON has no BigInt, Map or Set: print them readably rather than failing. */
function jsonReplacer(_key: string, value: unknown): unknown {
  if (typeof value === "bigint") return `${value}n`;
  if (value instanceof Map) return Object.fromEntries(value);
  if (value instanceof Set) return [...value];
  if (value === undefined) return null;
  return value;
}
