import type { EngineName, HostName } from "./types.js";

export const ENGINES: readonly EngineName[] = ["auto", "v8", "quickjs", "deno", "trusted"];
export const HOSTS: readonly HostName[] = ["auto", "inprocess", "process", "remote"];

/**
 * The defaults the environment chooses: CORDON_ENGINE, CORDON_HOST, CORDON_EXEC_URL. An option
 * passed in code wins. An unrecognised value reads as "auto" and warns, naming it: a typo must
 * never silently downgrade isolation (and "auto" picks the strongest host available).
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
    process.emitWarning(`${name}=${JSON.stringify(value)} is not one of ${allowed.join(", ")}; using "auto"`, {
      code: "CORDON_UNKNOWN_SELECTION",
    });
    return "auto" as T;
  };
  const execUrl = env.CORDON_EXEC_URL || undefined;
  const execSecret = env.CORDON_EXEC_SECRET || undefined;
  return { engine: pick("CORDON_ENGINE", ENGINES), host: pick("CORDON_HOST", HOSTS), execUrl, execSecret };
}
