import type { EngineName, HostName, SandboxOptions } from "../../src/index.js";

/**
 * Every engine × host combination that exists. The conformance, escape and exhaustion suites run
 * against each one; a new engine or host joins by adding one line here.
 */
export interface Combination {
  name: string;
  engine: Exclude<EngineName, "auto">;
  host: Exclude<HostName, "auto">;
  options: SandboxOptions;
}

export const COMBINATIONS: Combination[] = [
  { name: "v8/inprocess", engine: "v8", host: "inprocess", options: { engine: "v8", host: "inprocess" } },
];

/**
 * Behaviours an engine cannot provide, with the reason. The suites assert the documented
 * difference instead of skipping: `differs(combo, key)` names the entry.
 */
export const DIFFERENCES: Record<string, Partial<Record<Combination["name"], string>>> = {};

export function differs(combo: Combination, key: string): string | undefined {
  return DIFFERENCES[key]?.[combo.name];
}
