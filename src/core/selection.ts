import type { EngineName, HostName } from "./types.js";

export const ENGINES: readonly EngineName[] = ["auto", "v8", "quickjs", "deno", "trusted"];
export const HOSTS: readonly HostName[] = ["auto", "inprocess", "process", "remote"];

/** What the environment may choose: every engine but "trusted" (no sandbox), which code must name. */
const ENVIRONMENT_ENGINES = ENGINES.filter((engine) => engine !== "trusted");

/**
 * The defaults the environment chooses: CORDON_ENGINE, CORDON_HOST, CORDON_EXEC_URL. An option
 * passed in code wins. An unrecognised value reads as "auto" and warns, naming it: a typo must
 * never silently downgrade isolation (and "auto" picks the strongest host available). So does
 * CORDON_ENGINE=trusted: a variable set for a developer's machine (an .env file, a shell profile)
 * turned every createSandbox() and `cordon run` into no sandbox at all, without a word.
 */
export function environmentDefaults(env: NodeJS.ProcessEnv = process.env): {
  engine: EngineName;
  host: HostName;
  execUrl?: string;
  execSecret?: string;
} {
  const pick = <T extends string>(name: string, allowed: readonly T[]): T => {
    const value = env[name];
    if (value === undefined || value === "") return "auto" as T;
    if ((allowed as readonly string[]).includes(value)) return value as T;
    if (name === "CORDON_ENGINE" && value === "trusted") {
      process.emitWarning(
        'CORDON_ENGINE="trusted" is ignored: the trusted engine runs guests in this process with no sandbox, so only code may choose it (engine: "trusted"); using "auto"',
        { code: "CORDON_TRUSTED_FROM_ENVIRONMENT" },
      );
      return "auto" as T;
    }
    process.emitWarning(`${name}=${JSON.stringify(value)} is not one of ${allowed.join(", ")}; using "auto"`, {
      code: "CORDON_UNKNOWN_SELECTION",
    });
    return "auto" as T;
  };
  const execUrl = env.CORDON_EXEC_URL || undefined;
  const execSecret = env.CORDON_EXEC_SECRET || undefined;
  return { engine: pick("CORDON_ENGINE", ENVIRONMENT_ENGINES), host: pick("CORDON_HOST", HOSTS), execUrl, execSecret };
}
